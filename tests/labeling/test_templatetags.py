from labeling.templatetags.stepwise import step_html


def test_answer_section_is_shown_as_an_answer_and_text_is_escaped():
    html = step_html("So $x<3$.\n\n# Answer\n\n3")
    assert "$x&lt;3$" in html
    assert '<span class="answer-label">Answer</span> 3' in html


def test_plain_step_keeps_paragraphs():
    assert step_html("a\n\nb") == "<p>a</p>\n\n<p>b</p>"


def test_durations_read_naturally():
    from labeling.templatetags.stepwise import duration_ms

    assert [duration_ms(v) for v in (None, 950, 42_000, 185_000, 7_800_000)] == [
        "—",
        "950 ms",
        "42 s",
        "3 min 5 s",
        "2 h 10 min",
    ]
