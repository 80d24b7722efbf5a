import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from labeling import prm800k
from labeling.models import Batch, Completion, Labeler, Labeling, Problem, Solution, StepLabel
from labeling.selectors import release_record
from labeling.services.exporting import iter_prm800k_lines, store_release_lines
from labeling.services.importing import LineError, import_math, import_prm800k, import_samples

pytestmark = pytest.mark.django_db


def samples_path(shared_data) -> Path:
    return shared_data / "prm800k" / "samples.jsonl"


def test_prm800k_samples_import_field_by_field(shared_data):
    report = import_prm800k(samples_path(shared_data))
    assert report.created["labelings"] == 6 and not report.errors
    first = Labeling.objects.get(solution__problem__text__startswith="Three pencils")
    assert (
        str(Labeler.objects.get(user=first.labeler).public_id)
        == "e90a38f3-3135-4465-87af-3e6322e3d772"
    )
    assert first.finished_at.isoformat() == "2022-07-30T23:23:32.118856+00:00"
    assert first.total_time_ms == 293250 and first.finish_reason == "solution"
    assert first.solution.format == Solution.Format.PHASE1 and first.solution.generation is None
    steps = list(first.step_labels.order_by("index"))
    assert len(steps) == 6
    second = steps[1]
    assert second.chosen_completion is None
    rated = list(second.completions.filter(is_human=False).order_by("index"))
    assert [c.rating for c in rated] == [-1] * 5 and rated[0].flagged is False
    human = second.completions.get(is_human=True)
    assert (human.text, human.rating, human.source, human.flagged) == (
        "We have $3p+e=1.24$ and $5p+e=1.82$.",
        None,
        "human",
        False,
    )
    # The phase-1 solution is the path the labeler walked, human step included.
    assert first.solution.steps[1] == human.text

    phase2 = Labeling.objects.get(solution__generation=6)
    solution = phase2.solution
    assert solution.format == Solution.Format.PHASE2 and len(solution.steps) == 13
    assert solution.final_answer == "7200"
    assert solution.verifier_score == pytest.approx(0.0011546110201324836)
    assert solution.problem.ground_truth_answer == "28800"
    assert phase2.finish_reason == "found_error" and phase2.total_time_ms == 164458
    assert (
        Completion.objects.filter(step__labeling=phase2, index=0, step__index=0).get().flagged
        is None
    )

    gave_up = Labeling.objects.get(finish_reason="give_up")
    last = gave_up.step_labels.order_by("-index").first()
    assert last.has_completions is False and last.completions.count() == 0

    screening = Solution.objects.get(is_screening=True)
    assert screening.generation == -1 and screening.question_override == {
        "ground_truth_answer": None,
        "ground_truth_solution": None,
    }
    assert Batch.objects.filter(name="PRM800K generation 6", is_active=False).exists()


def test_prm800k_round_trip_is_byte_exact(shared_data):
    import_prm800k(samples_path(shared_data))
    assert not Labeling.objects.filter(release_line__isnull=True).exists()
    lines = list(iter_prm800k_lines())
    assert len(lines) == 6
    assert "".join(f"{line}\n" for line in lines) == samples_path(shared_data).read_text()


def test_reimport_adds_nothing(shared_data):
    import_prm800k(samples_path(shared_data))
    counts = (
        Problem.objects.count(),
        Solution.objects.count(),
        Labeling.objects.count(),
        StepLabel.objects.count(),
    )
    report = import_prm800k(samples_path(shared_data))
    assert report.duplicates == 6 and sum(report.created.values()) == 0
    assert counts == (
        Problem.objects.count(),
        Solution.objects.count(),
        Labeling.objects.count(),
        StepLabel.objects.count(),
    )


def test_solution_counters_follow_imported_labelings(shared_data):
    import_prm800k(samples_path(shared_data))
    for solution in Solution.objects.all():
        assert solution.completed_count == solution.labelings.count()


PHASE2_LINE = 2  # the first line of samples.jsonl with pre_generated_* fields


def _broken_copy(shared_data, tmp_path, line_number: int, mutate) -> Path:
    lines = samples_path(shared_data).read_text().splitlines()
    lines[line_number - 1] = mutate(lines[line_number - 1])
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_malformed_line_names_file_line_and_field_and_writes_nothing(shared_data, tmp_path):
    def bad_rating(line):
        obj = json.loads(line)
        obj["label"]["steps"][2]["completions"][0]["rating"] = 5
        return json.dumps(obj)

    path = _broken_copy(shared_data, tmp_path, 4, bad_rating)
    with pytest.raises(LineError) as caught:
        import_prm800k(path)
    error = caught.value
    assert (error.path, error.line, error.field) == (
        str(path),
        4,
        "label.steps[2].completions[0].rating",
    )
    assert Labeling.objects.count() == 0 and Problem.objects.count() == 0


def test_invalid_json_is_reported_and_skip_invalid_keeps_the_rest(shared_data, tmp_path):
    path = _broken_copy(shared_data, tmp_path, 2, lambda line: line[:-5])
    report = import_prm800k(path, skip_invalid=True)
    assert [(e.line, e.field) for e in report.errors] == [(2, "line")]
    assert "not valid JSON" in report.errors[0].message
    assert Labeling.objects.count() == 5


def _math_lines(tmp_path, *lines: str):
    path = tmp_path / "math.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_invalid_json_line_is_named_with_its_line_and_column(tmp_path):
    good = json.dumps({"problem": "1+1?"})
    path = _math_lines(tmp_path, good, good, '{"problem": "2+2?, "answer": "4"}')
    with pytest.raises(CommandError) as caught:
        call_command("import_math", str(path))
    assert str(caught.value) == (
        f"{path}, line 3: not valid JSON: Expecting ',' delimiter at column 21 (nothing from {path} was written)"
    )
    report = import_math(_math_lines(tmp_path, good, '{"problem": "2+2?'), skip_invalid=True)
    assert [(e.line, e.field, e.message) for e in report.errors] == [
        (2, "line", "not valid JSON: Unterminated string starting at column 13")
    ]
    assert Problem.objects.count() == 1


def test_pretty_printed_json_file_is_named_as_such(tmp_path):
    path = _math_lines(tmp_path, "{", '  "problem": "1+1?"', "}")
    with pytest.raises(
        CommandError,
        match=r"line 1: not valid JSON: the file starts with a lone '\{' line, "
        r"so it looks pretty-printed; one JSON object per line \(JSONL\) is expected",
    ):
        call_command("import_math", str(path))
    assert not Problem.objects.exists()


def test_import_command_fails_clearly(shared_data, tmp_path):
    path = _broken_copy(
        shared_data,
        tmp_path,
        3,
        lambda line: line.replace('"finish_reason": "solution"', '"finish_reason": "nope"'),
    )
    with pytest.raises(
        CommandError, match=r"line 3: label.finish_reason: .*nothing from .* was written"
    ):
        call_command("import_prm800k", str(path))
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_prm800k", str(tmp_path / "missing.jsonl"))


@pytest.mark.parametrize(
    "command,options",
    [("import_prm800k", []), ("import_math", []), ("import_samples", ["--batch", "gen 1"])],
)
@pytest.mark.parametrize(
    "content,message",
    [
        ("", "is empty; nothing was imported."),
        ("\n  \n\r\n", "has no records (only blank lines); nothing was imported."),
    ],
)
def test_import_commands_fail_on_an_empty_or_blank_file_and_write_nothing(
    tmp_path, command, options, content, message
):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(CommandError) as caught:
        call_command(command, str(path), *options)
    assert str(caught.value) == f"{path} {message}"
    assert (
        not Batch.objects.exists()
        and not Problem.objects.exists()
        and not Solution.objects.exists()
    )


def test_import_samples_skip_invalid_of_a_blank_file_fails_and_creates_no_batch(tmp_path):
    path = tmp_path / "blank.jsonl"
    path.write_text("\n\n")
    with pytest.raises(CommandError, match="has no records"):
        call_command("import_samples", str(path), "--batch", "gen 1", "--skip-invalid")
    assert not Batch.objects.exists()


def test_math500_import_field_by_field(shared_data):
    path = shared_data / "math" / "math500.jsonl"
    report = import_math(path)
    assert report.created["problems"] == 500 and report.lines == 500
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows[::25]:
        problem = Problem.objects.get(unique_id=row["unique_id"])
        assert (
            problem.text,
            problem.ground_truth_answer,
            problem.ground_truth_solution,
            problem.subject,
            problem.level,
        ) == (row["problem"], row["answer"], row["solution"], row["subject"], row["level"])
    again = import_math(path)
    assert again.created["problems"] == 0 and again.duplicates == 500


def test_math_import_fills_gaps_left_by_a_label_import(shared_data):
    import_prm800k(samples_path(shared_data))
    line = json.loads(samples_path(shared_data).read_text().splitlines()[2])
    problem = Problem.objects.get(text=line["question"]["problem"])
    assert problem.unique_id is None
    math = shared_data / "math"
    import_math(math / "train.jsonl")
    import_math(math / "test.jsonl")
    problem.refresh_from_db()
    assert problem.unique_id is not None and problem.subject
    # The export still shows exactly what the labelers saw.
    assert (
        "".join(f"{line}\n" for line in iter_prm800k_lines())
        == samples_path(shared_data).read_text()
    )


def test_import_samples_into_a_batch(tmp_path):
    problem_path = tmp_path / "problems.jsonl"
    problem_path.write_text(
        json.dumps(
            {
                "problem": "2+2?",
                "solution": "4",
                "answer": "4",
                "subject": "Prealgebra",
                "level": 1,
                "unique_id": "t/1.json",
            }
        )
        + "\n"
    )
    import_math(problem_path)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        json.dumps(
            {
                "unique_id": "t/1.json",
                "steps": ["2+2=4.", "# Answer\n\n4"],
                "answer": "4",
                "generator": "g",
            }
        )
        + "\n"
        + json.dumps(
            {"problem": "3+3?", "ground_truth_answer": "6", "steps": ["It is 6."], "answer": "6"}
        )
        + "\n"
    )
    report = import_samples(samples, batch_name="gen 1", overlap=3, generation=1)
    assert report.created["solutions"] == 2 and report.created["problems"] == 1
    batch = Batch.objects.get(name="gen 1")
    assert batch.overlap == 3 and batch.solutions.count() == 2
    assert set(batch.solutions.values_list("generation", flat=True)) == {1}
    assert import_samples(samples, batch_name="gen 1").created["solutions"] == 0


def test_import_samples_unknown_problem_id_is_an_error(tmp_path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"unique_id": "nope/1.json", "steps": ["x"]}) + "\n")
    with pytest.raises(LineError, match=r"line 1: unique_id: no problem 'nope/1.json'"):
        import_samples(samples, batch_name="b")
    assert not Batch.objects.filter(name="b").exists()


def test_import_samples_rejects_empty_steps(tmp_path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"problem": "p", "steps": ["ok", ""]}) + "\n")
    with pytest.raises(LineError, match=r"steps\[1\]: expected a non-empty string"):
        import_samples(samples, batch_name="b")


def test_columns_alone_reproduce_every_line(shared_data):
    """The stored line is a cache: stored again from the relational rows, the export is the
    same."""
    import_prm800k(samples_path(shared_data))
    Labeling.objects.update(release_line=None)
    store_release_lines()
    assert (
        "".join(f"{line}\n" for line in iter_prm800k_lines())
        == samples_path(shared_data).read_text()
    )


def test_one_labeling_rendered_through_the_format_module_matches_every_line(shared_data):
    """What a submit stores (selectors.release_record → prm800k.render_record) is the line
    the release holds, on every database."""
    import_prm800k(samples_path(shared_data))
    lines = samples_path(shared_data).read_text().splitlines()
    ids = list(Labeling.objects.order_by("pk").values_list("pk", flat=True))
    assert [prm800k.render_record(release_record(pk)) for pk in ids] == lines


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e400", str(10**400)])
def test_a_non_finite_sample_score_is_refused_with_line_and_field(tmp_path, raw):
    samples = tmp_path / "samples.jsonl"
    good = json.dumps({"problem": "1+1?", "steps": ["2"], "score": 0.5})
    samples.write_text(good + "\n" + '{"problem": "2+2?", "steps": ["4"], "score": ' + raw + "}\n")
    # 10**400 is an integer: refused as one no column holds, before it could become inf.
    why = "integer beyond the 64-bit range" if raw.isdigit() else "expected a finite number"
    with pytest.raises(LineError, match=rf"line 2: score: {why}") as caught:
        import_samples(samples, batch_name="b")
    assert caught.value.field == "score"
    assert not Batch.objects.exists() and not Solution.objects.exists()


@pytest.mark.parametrize("raw", ["NaN", "1e400"])
def test_a_non_finite_verifier_score_in_a_prm800k_line_is_refused(shared_data, tmp_path, raw):
    def bad_score(line):
        obj = json.loads(line)
        obj["question"]["pre_generated_verifier_score"] = "SCORE"
        return json.dumps(obj).replace('"SCORE"', raw)

    path = _broken_copy(shared_data, tmp_path, PHASE2_LINE, bad_score)
    with pytest.raises(LineError) as caught:
        import_prm800k(path)
    assert (caught.value.line, caught.value.field) == (
        PHASE2_LINE,
        "question.pre_generated_verifier_score",
    )
    assert Labeling.objects.count() == 0 and Solution.objects.count() == 0


# --- parsing in worker processes -----------------------------------------------------------


@pytest.fixture
def started_pools(monkeypatch):
    """The worker pools an import starts (real processes, only recorded)."""
    from labeling.services.importing import runner

    started = []

    class Recorded(runner.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(runner, "ProcessPoolExecutor", Recorded)
    return started


def _left_behind() -> dict[str, list]:
    """What imports left in the database, ids aside."""
    queries = {
        "problems": Problem.objects.values_list(
            "text_sha256", "text", "ground_truth_answer", "ground_truth_solution"
        ),
        "solutions": Solution.objects.values_list(
            "content_sha256",
            "problem__text_sha256",
            "batch__name",
            "steps",
            "final_answer",
            "verifier_score",
            "generator",
            "format",
            "generation",
            "is_quality_control",
            "is_screening",
            "question_override",
            "completed_count",
            "active_count",
        ),
        "labelings": Labeling.objects.values_list(
            "source_sha256",
            "solution__content_sha256",
            "labeler__username",
            "status",
            "finish_reason",
            "total_time_ms",
            "started_at",
            "finished_at",
            "release_line",
            "is_surplus",
            "lease_expires_at",
        ),
        "steps": StepLabel.objects.values_list(
            "labeling__source_sha256", "index", "chosen_completion", "has_completions", "time_ms"
        ),
        "completions": Completion.objects.values_list(
            "step__labeling__source_sha256",
            "step__index",
            "index",
            "text",
            "rating",
            "flagged",
            "is_human",
            "source",
        ),
    }
    return {name: sorted(query, key=repr) for name, query in queries.items()}


def test_worker_processes_leave_the_same_rows_as_parsing_in_process(
    shared_data, settings, started_pools
):
    settings.STEPWISE_IMPORT_CHUNK = 2  # six lines, three chunks: workers start
    import_prm800k(samples_path(shared_data), workers=0)
    assert not started_pools
    in_process = _left_behind()
    Problem.objects.all().delete()  # solutions, labelings, steps and completions go with them
    Batch.objects.all().delete()

    report = import_prm800k(samples_path(shared_data), workers=2)
    assert len(started_pools) == 1
    assert report.created["labelings"] == 6 and report.created["step labels"] == sum(
        len(json.loads(line)["label"]["steps"])
        for line in samples_path(shared_data).read_text().splitlines()
    )
    assert _left_behind() == in_process
    assert (
        "".join(f"{line}\n" for line in iter_prm800k_lines())
        == samples_path(shared_data).read_text()
    )


def _with_blank_line_after(path: Path, line_number: int) -> None:
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:line_number], "", *lines[line_number:]]) + "\n")


def _bad_finish_reason(line: str) -> str:
    obj = json.loads(line)
    obj["label"]["finish_reason"] = "nope"
    return json.dumps(obj)


def test_a_bad_line_parsed_by_a_worker_is_named_by_its_line_and_nothing_is_written(
    shared_data, tmp_path, settings, started_pools
):
    settings.STEPWISE_IMPORT_CHUNK = 2
    path = _broken_copy(shared_data, tmp_path, 5, _bad_finish_reason)
    _with_blank_line_after(path, 1)  # blank lines count: the bad line is now line 6
    with pytest.raises(LineError) as caught:
        import_prm800k(path, workers=2)
    assert len(started_pools) == 1
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), 6, "label.finish_reason")
    assert "must be one of" in error.message
    assert not Labeling.objects.exists() and not Problem.objects.exists()
    assert not Solution.objects.exists() and not Batch.objects.exists()


def test_skip_invalid_with_workers_reports_every_bad_line_in_order_and_keeps_the_rest(
    shared_data, tmp_path, settings, started_pools
):
    settings.STEPWISE_IMPORT_CHUNK = 2
    path = _broken_copy(shared_data, tmp_path, 6, _bad_finish_reason)
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:-5]  # line 2: not JSON
    path.write_text("\n".join(lines) + "\n")
    report = import_prm800k(path, skip_invalid=True, workers=2)
    assert len(started_pools) == 1
    assert [(e.line, e.field) for e in report.errors] == [(2, "line"), (6, "label.finish_reason")]
    assert report.lines == 6 and report.created["labelings"] == 4
    assert Labeling.objects.count() == 4


def _same_solution_other_labeler(shared_data, tmp_path) -> Path:
    line = samples_path(shared_data).read_text().splitlines()[PHASE2_LINE - 1]
    other = json.loads(line)
    other["labeler"] = "00000000-0000-4000-8000-000000000042"
    path = tmp_path / "two.jsonl"
    path.write_text(line + "\n" + json.dumps(other) + "\n")
    return path


@pytest.mark.parametrize("chunk", [1, 2])
def test_a_solution_labeled_twice_counts_both_labelings_within_a_chunk_or_across(
    shared_data, tmp_path, settings, chunk
):
    settings.STEPWISE_IMPORT_CHUNK = chunk
    report = import_prm800k(_same_solution_other_labeler(shared_data, tmp_path), workers=0)
    assert report.created["labelings"] == 2 and report.created["solutions"] == 1
    (solution,) = Solution.objects.all()
    assert solution.completed_count == 2 == solution.labelings.count()


def _minimal_line(problem: str = "1+1?", **dumps) -> str:
    return json.dumps(
        {
            "labeler": "e90a38f3-3135-4465-87af-3e6322e3d772",
            "timestamp": "2022-07-30T23:23:32.118856",
            "generation": None,
            "is_quality_control_question": False,
            "is_initial_screening_question": False,
            "question": {"problem": problem, "ground_truth_answer": "2"},
            "label": {
                "steps": [
                    {
                        "completions": [{"text": "2", "rating": 1, "flagged": False}],
                        "human_completion": None,
                        "chosen_completion": 0,
                    }
                ],
                "total_time": 1000,
                "finish_reason": "solution",
            },
        },
        **dumps,
    )


def test_a_line_our_columns_cannot_reproduce_is_counted_and_exported_as_it_came(tmp_path):
    """The byte-exact check: a line that parses but renders back differently (here compact
    separators) is counted as kept verbatim, and the export gives it back byte for byte."""
    line = _minimal_line(separators=(",", ":"))
    path = tmp_path / "compact.jsonl"
    path.write_text(line + "\n")
    report = import_prm800k(path)
    assert report.created["lines kept verbatim"] == 1 and report.created["labelings"] == 1
    assert "".join(f"{line}\n" for line in iter_prm800k_lines()) == line + "\n"


def test_a_lone_low_surrogate_is_named_by_line_and_field(tmp_path):
    """\\udc00-\\udfff escapes were not screened (only \\ud800-\\udbff): such a line reached
    the database driver and failed with a UnicodeEncodeError naming no line."""
    line = _minimal_line(problem="1+1? \udc00")
    path = tmp_path / "surrogate.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(LineError) as caught:
        import_prm800k(path)
    assert (caught.value.line, caught.value.field) == (1, "question.problem")
    assert "lone surrogate" in caught.value.message
    assert not Problem.objects.exists() and not Labeling.objects.exists()


@pytest.mark.postgres
def test_stored_lines_are_compressed_with_lz4_where_the_server_has_it(shared_data):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        (has_lz4,) = cursor.fetchone()
        if not has_lz4:
            pytest.skip("this PostgreSQL was built without lz4")
        import_prm800k(samples_path(shared_data))
        cursor.execute(
            "SELECT DISTINCT pg_column_compression(release_line) FROM labeling_labeling"
            " WHERE length(release_line) > 2100"  # shorter values are stored uncompressed
        )
        assert cursor.fetchall() == [("lz4",)]


def test_insert_rows_fills_every_other_field_as_bulk_create_would():
    from django.contrib.auth import get_user_model

    from labeling.services.importing.bulk_copy import insert_rows

    users = [get_user_model().objects.create(username=f"u{i}") for i in range(2)]
    ids = insert_rows(Labeler, ["user_id"], [(user.pk,) for user in users])
    labelers = [Labeler.objects.get(pk=pk) for pk in ids]
    assert [labeler.user_id for labeler in labelers] == [user.pk for user in users]
    # A callable default (uuid4) per row, the field defaults, a time for the timestamp.
    assert labelers[0].public_id != labelers[1].public_id
    assert all(labeler.created_at is not None for labeler in labelers)
