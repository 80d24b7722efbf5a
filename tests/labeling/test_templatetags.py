import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labeling.templatetags.stepwise import math_preview, step_html


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


# --- math_preview: a preview never cuts a formula -------------------------------------------

DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))


def open_math(text: str) -> str | None:
    """What in `text` KaTeX would see as math left open: a delimiter never closed, or a `}`
    without its `{` inside math. None when every span is whole. `\\$` is a dollar."""
    i = 0
    while i < len(text):
        if text.startswith("\\$", i):
            i += 2
            continue
        left, right = next((pair for pair in DELIMITERS if text.startswith(pair[0], i)), ("", ""))
        if not left:
            i += 1
            continue
        j, depth = i + len(left), 0
        while not (depth == 0 and text.startswith(right, j)):
            if j >= len(text):
                return f"{left} at {i} is never closed"
            if text[j] == "\\":  # an escaped character: `\}` and `\$` count for nothing
                j += 2
                continue
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth < 0:
                return f"the }} at {j} closes nothing"
            j += 1
        i = j + len(right)
    return None


def assert_safe_preview(text: str, preview: str) -> None:
    body = preview.removesuffix("…") if preview != text else text
    assert text.startswith(body), (text, preview)
    assert open_math(body) is None, (preview, open_math(body))
    assert preview == text or preview.endswith("…")


def test_open_math_checker_catches_what_it_should():
    assert open_math("a $x$ b $$y$$ \\(z\\) \\[w\\] \\$5") is None
    assert open_math("$\\frac{1}{") is not None
    assert open_math("$$x$") is not None
    assert open_math("$x}$") is not None
    assert open_math("\\(x") is not None


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        # Nested braces: the cut falls before the fraction, never inside it.
        (
            "Simplify $\\frac{\\sqrt{a^{2}+b^{2}}}{c}$ when $c > 0$.",
            20,
            "Simplify…",
        ),
        # Escaped dollars are dollars: `\$5 ... \$` is not a formula.
        (
            "A pen costs \\$5 and a book \\$12, so $x = 17$ dollars.",
            32,
            "A pen costs \\$5 and a book \\$12,…",
        ),
        ("Costs \\$5", 7, "Costs…"),  # an escape pair is never split
        # Display math with $$ and \[ \], inline with \( \).
        ("Evaluate $$\\int_0^1 x^2\\,dx$$ and simplify.", 20, "Evaluate…"),
        ("Evaluate $$\\int_0^1 x^2\\,dx$$ and simplify.", 30, "Evaluate $$\\int_0^1 x^2\\,dx$$…"),
        (
            "Let \\(x = \\frac{1}{2}\\) and \\[y = x^2\\] hold.",
            30,
            "Let \\(x = \\frac{1}{2}\\) and…",
        ),
        # A cut exactly at a delimiter: just after the closing one, or just before the opening one.
        ("ab $x$ cd", 6, "ab $x$…"),
        ("ab $x$ cd", 5, "ab…"),
        ("ab $x$ cd", 3, "ab…"),
        ("ab $$x$$ cd", 4, "ab…"),
        ("ab $$x$$ cd", 7, "ab…"),  # between the two `$` of the closing `$$`
        # Unbalanced input from a user: the preview stops before the broken span, fitting or not.
        ("Pay $5 now", 40, "Pay…"),
        ("Let $x = \\frac{1}{2 be given, and $y$ too", 60, "Let…"),
        ("Let $x}$ be $y$", 60, "Let…"),
        # All math: the first span is kept whole up to 3 × the limit, then only an ellipsis.
        ("$\\frac{123}{456}$", 10, "$\\frac{123}{456}$"),
        ("$\\frac{123}{456}$ and more", 10, "$\\frac{123}{456}$…"),
        ("$\\frac{1234567890}{1234567890}$", 5, "…"),
        # Short and empty texts are left alone.
        ("What is $1+1$?", 90, "What is $1+1$?"),
        ("", 10, ""),
    ],
)
def test_math_preview_never_cuts_a_formula(text, limit, expected):
    preview = math_preview(text, limit)
    assert preview == expected
    assert_safe_preview(text, preview)


def test_math_preview_is_escaped_in_a_template_and_ignores_a_bad_limit():
    from django.template import Context, Template

    html = Template("{% load stepwise %}{{ t|math_preview:12 }}").render(
        Context({"t": "<b>$x<y$</b> and more text"})
    )
    assert html == "&lt;b&gt;$x&lt;y$&lt;/b&gt;…"
    assert math_preview("plain text", "many") == "plain text"


TOKENS = st.sampled_from(
    ["$", "$$", "\\(", "\\)", "\\[", "\\]", "\\$", "\\", "{", "}", "\\frac", "{1}", "{2}", "x",
     " ", "^", "_", "a b", "\n"]
)  # fmt: skip


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(TOKENS, max_size=40).map("".join), st.integers(min_value=1, max_value=60))
def test_any_preview_is_a_prefix_with_every_formula_whole(text, limit):
    preview = math_preview(text, limit)
    assert_safe_preview(text, preview)
    body = preview.removesuffix("…") if preview != text else text
    if len(body) > limit:  # nothing visible fitted: the first formula (or character), whole
        assert len(body) <= 3 * limit
        first = body.lstrip()
        assert len(first) == 1 or first.startswith(("$", "\\(", "\\[", "\\$"))


# Well-formed pieces: a preview ends where a formula ends, or inside plain text.
FORMULAS = ["$x$", "$\\frac{1}{2}$", "$$\\sum_{i=1}^{n} i$$", "\\(a^{2}\\)",
            "\\[\\sqrt{\\frac{a}{b}}\\]", "${\\{}$", "$\\text{\\$5}$"]  # fmt: skip
PLAIN = st.text(alphabet="abc ,.", min_size=1, max_size=8) | st.just("\\$3")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(PLAIN | st.sampled_from(FORMULAS), min_size=1, max_size=12), st.integers(1, 60))
def test_a_preview_of_well_formed_text_ends_between_formulas(pieces, limit):
    text = "".join(pieces)
    preview = math_preview(text, limit)
    assert_safe_preview(text, preview)
    inside_a_formula, start = set(), 0
    for piece in pieces:
        if piece in FORMULAS:
            inside_a_formula.update(range(start + 1, start + len(piece)))
        start += len(piece)
    assert len(preview.removesuffix("…")) not in inside_a_formula


@pytest.mark.parametrize(
    ("text", "body", "answer"),
    [
        ("Exactly.\n\n# Answer\n\n468", "<p>Exactly.</p>", "468"),  # the release's own
        ("# Answer\n\n7200", "", "7200"),
        ("So $x$.\r\n\r\n# Answer\r\n\r\n4", "<p>So $x$.</p>", "4"),
        (
            "I'd write # Answer here and go on.",
            "<p>I&#x27;d write # Answer here and go on.</p>",
            None,
        ),
        ("#Answer\n\n4", "<p>#Answer</p>\n\n<p>4</p>", None),
    ],
)
def test_the_answer_badge_shows_exactly_on_a_final_step(text, body, answer):
    from labeling.prm800k import is_final_step

    html = step_html(text)
    assert is_final_step(text) == (answer is not None)
    badge = f'<p class="answer-line"><span class="answer-label">Answer</span> {answer}</p>'
    assert html == (body + badge if answer is not None else body)
