"""Exports: the selector's filters, the CLI, streaming, and the training formats."""

import io
import json
from datetime import UTC, datetime

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labeling.models import Labeler, Labeling, Snapshot, Solution
from labeling.serializers import ExportRequestSerializer
from labeling.services import exporting
from labeling.services.exporting import (
    ExportFilters,
    StepwiseOptions,
    iter_prm800k_lines,
    select_labelings,
    split_of,
    write_export_file,
)
from tests.factories import make_batch, make_solution

pytestmark = pytest.mark.django_db

FIRST_LABELER = "e90a38f3-3135-4465-87af-3e6322e3d772"


def _lines(filters: ExportFilters) -> list[dict]:
    return [json.loads(line) for line in iter_prm800k_lines(select_labelings(filters))]


def _request(**data) -> ExportRequestSerializer:
    request = ExportRequestSerializer(data=data)
    assert request.is_valid(), request.errors
    return request


def test_cli_round_trip_is_byte_exact_and_shows_progress(samples, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    call_command("export_prm800k", "--output", str(tmp_path / "out.jsonl"), stdout=out, stderr=err)
    assert (tmp_path / "out.jsonl").read_bytes() == samples.read_bytes()
    assert "6 rows from 6 labelings, 46 step labels" in out.getvalue()
    assert list((tmp_path).iterdir()) == [tmp_path / "out.jsonl"]  # the temp file was renamed


def test_cli_progress_bar_writes_to_stderr(samples, tmp_path, capsys):
    call_command("export_prm800k", "--output", str(tmp_path / "out.jsonl"))
    assert "6/6" in capsys.readouterr().err


def test_cli_parquet_output_without_format_writes_stepwise_parquet(samples, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "train.parquet"
    call_command("export_prm800k", "-o", str(out), "--no-progress", stdout=io.StringIO())
    table = pq.read_table(out)
    assert table.num_rows == 36 and {"prompt", "completions", "labels"} <= set(table.column_names)


@pytest.mark.parametrize(
    "fmt,name",
    [("prm800k", "x.parquet"), ("stepwise_jsonl", "x.PARQUET"), ("stepwise_parquet", "x.jsonl")],
)
@pytest.mark.parametrize("snapshot", [[], ["--snapshot"]])
def test_cli_refuses_a_format_its_output_extension_contradicts_and_writes_nothing(
    samples, tmp_path, media_root, fmt, name, snapshot
):
    out = tmp_path / name
    with pytest.raises(
        CommandError, match=rf"--format {fmt} does not fit --output .*{name}: .*nothing was written"
    ):
        call_command("export_prm800k", "--format", fmt, "-o", str(out), "--no-progress", *snapshot)
    assert list(tmp_path.iterdir()) == [] and not Snapshot.objects.exists()


@pytest.mark.parametrize("snapshot", [[], ["--snapshot"]])
def test_stepwise_export_summary_counts_the_labels_written_not_the_source_steps(
    samples, tmp_path, media_root, snapshot
):
    out, summary = tmp_path / "train.jsonl", io.StringIO()
    call_command(
        "export_prm800k",
        "--format",
        "stepwise_jsonl",
        "-o",
        str(out),
        "--no-progress",
        *snapshot,
        stdout=summary,
    )
    written = sum(len(json.loads(line)["labels"]) for line in out.read_text().splitlines())
    assert written != 46  # the PRM800K steps of the six labelings: not what the file holds
    assert (
        f"36 rows{'' if snapshot else ' from 6 labelings'}, {written} step labels"
        in summary.getvalue()
    )
    if snapshot:
        assert Snapshot.objects.get().step_label_count == written


def test_cli_rejects_bad_filters_by_name(samples, tmp_path):
    with pytest.raises(CommandError, match=r"labeler: Unknown labeler\(s\): nobody"):
        call_command("export_prm800k", "-o", str(tmp_path / "x"), "--labeler", "nobody")
    with pytest.raises(CommandError, match=r"batch: Unknown batch id\(s\): 999"):
        call_command("export_prm800k", "-o", str(tmp_path / "x"), "--batch", "999")
    with pytest.raises(CommandError, match="finished_before: Must be later"):
        call_command(
            "export_prm800k",
            "-o",
            str(tmp_path / "x"),
            "--finished-after",
            "2023-01-01",
            "--finished-before",
            "2022-01-01",
        )
    assert not (tmp_path / "x").exists()


def test_filter_by_generation_batch_and_finish_reason(samples):
    assert [line["generation"] for line in _lines(ExportFilters(generations=[6]))] == [6]
    batch_id = Solution.objects.get(generation=6).batch_id
    assert len(_lines(ExportFilters(batches=[batch_id]))) == 1
    reasons = [
        line["label"]["finish_reason"]
        for line in _lines(ExportFilters(finish_reasons=["give_up", "found_error"]))
    ]
    assert sorted(reasons) == ["found_error", "give_up"]


def test_filter_quality_control_and_screening(samples):
    assert len(_lines(ExportFilters(screening="exclude"))) == 5
    only = _lines(ExportFilters(screening="only"))
    assert len(only) == 1 and only[0]["is_initial_screening_question"] is True
    Solution.objects.filter(generation=6).update(is_quality_control=True)
    assert len(_lines(ExportFilters(quality_control="exclude"))) == 5
    assert [line["generation"] for line in _lines(ExportFilters(quality_control="only"))] == [6]


def test_filter_by_date_range_is_inclusive_then_exclusive(samples):
    times = sorted(Labeling.objects.values_list("finished_at", flat=True))
    middle = times[3]
    after = _lines(ExportFilters(finished_after=middle))
    before = _lines(ExportFilters(finished_before=middle))
    assert len(after) == 3 and len(before) == 3
    assert {line["timestamp"] for line in after}.isdisjoint({line["timestamp"] for line in before})


def test_filter_by_labeler_public_id_or_username(samples):
    request = _request(labeler=[FIRST_LABELER.upper()])
    by_public_id = _lines(request.export_filters())
    assert by_public_id and {line["labeler"] for line in by_public_id} == {FIRST_LABELER}
    username = Labeler.objects.get(public_id=FIRST_LABELER).user.username
    assert _lines(_request(labeler=[username]).export_filters()) == by_public_id


def test_only_complete_labelings_by_default(samples, labeler):
    solution = make_solution(make_batch())
    open_pass = Labeling.objects.create(
        solution=solution, labeler=labeler, lease_expires_at=timezone.now()
    )
    assert len(_lines(ExportFilters())) == 6
    everything = _lines(ExportFilters(complete_only=False))
    assert len(everything) == 7
    # an unfinished pass is exported as it stands: no steps yet, finish reason give_up
    assert everything[-1]["label"] == {"steps": [], "total_time": 0, "finish_reason": "give_up"}
    assert open_pass.status == Labeling.Status.IN_PROGRESS


def test_since_snapshot_gives_only_labelings_changed_after_it(samples, media_root):
    cutoff = timezone.now()
    snapshot = Snapshot.objects.create(status=Snapshot.Status.DONE, cutoff_at=cutoff)
    assert _lines(_request(since_snapshot=snapshot.pk).export_filters()) == []
    changed = Labeling.objects.order_by("pk")[2]
    changed.save(update_fields=["updated_at"])
    delta = _lines(_request(since_snapshot=snapshot.pk).export_filters())
    assert len(delta) == 1 and delta[0]["question"]["problem"] == changed.solution.problem.text


def test_since_snapshot_must_be_a_done_snapshot(db):
    pending = Snapshot.objects.create()
    for value, message in ((pending.pk, "is pending, not done"), (12345, "No snapshot 12345")):
        request = ExportRequestSerializer(data={"since_snapshot": value})
        assert not request.is_valid()
        assert message in str(request.errors["since_snapshot"])


def test_queries_do_not_grow_with_labelings(samples, monkeypatch):
    monkeypatch.setattr(exporting, "CHUNK", 2)  # 6 labelings: 3 chunks
    with CaptureQueriesContext(connection) as queries:
        assert len(list(iter_prm800k_lines())) == 6
    # stored release lines: one cursor over one column, nothing per chunk or per labeling
    assert len(queries) == 1
    Labeling.objects.update(release_line=None)
    with CaptureQueriesContext(connection) as queries:
        assert "".join(line + "\n" for line in iter_prm800k_lines()) == samples.read_text()
    # lines written around the services: rendered per chunk (labelings, steps, completions)
    assert len(queries) == 1 + 3 * 3


def test_store_release_lines_fills_the_missing_lines_with_the_release_bytes(samples):
    Labeling.objects.filter(pk__in=Labeling.objects.order_by("pk")[:4]).update(release_line=None)
    assert exporting.store_release_lines() == 4
    assert not Labeling.objects.filter(release_line__isnull=True).exists()
    stored = Labeling.objects.order_by("pk").values_list("release_line", flat=True)
    assert "".join(line + "\n" for line in stored) == samples.read_text()
    assert exporting.store_release_lines() == 0  # nothing left: a second run does nothing


def test_stored_release_lines_export_verbatim_with_their_step_count(samples):
    labeling = Labeling.objects.order_by("pk").first()
    line = (
        '{"kept": "as is", "text": "say \\"chosen_completion\\": 3", "label": {"steps": '
        '[{"chosen_completion": 0}, {"chosen_completion": null}]}}'
    )
    Labeling.objects.filter(pk=labeling.pk).update(release_line=line)
    first = next(exporting.iter_export_items())
    assert first.as_line() == line and first.step_count == 2
    assert first.as_dict()["kept"] == "as is"


# --- training formats -------------------------------------------------------------------------


def _write(tmp_path, fmt, **options):
    path = tmp_path / f"out.{'parquet' if fmt.endswith('parquet') else 'jsonl'}"
    result = write_export_file(
        path, fmt, select_labelings(ExportFilters()), options=StepwiseOptions(**options)
    )
    return path, result


@pytest.mark.parametrize(
    "fmt,builder", [("stepwise_jsonl", "json"), ("stepwise_parquet", "parquet")]
)
def test_stepwise_files_load_with_datasets(samples, tmp_path, fmt, builder):
    import datasets

    path, result = _write(tmp_path, fmt)
    dataset = datasets.load_dataset(
        builder, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert len(dataset) == result.rows == 36
    assert {"prompt", "completions", "labels", "split"} <= set(dataset.column_names)
    row = dataset[0]
    assert isinstance(row["completions"], list) and isinstance(row["labels"][0], bool)
    assert len(row["completions"]) == len(row["labels"])
    assert result.labelings == 6 and result.step_labels == sum(
        len(labels) for labels in dataset["labels"]
    )


def test_jsonl_and_parquet_hold_the_same_rows(samples, tmp_path):
    import pyarrow.parquet as pq

    jsonl, _ = _write(tmp_path, "stepwise_jsonl", neutral="negative", test_fraction=0.5, seed=3)
    parquet, _ = _write(tmp_path, "stepwise_parquet", neutral="negative", test_fraction=0.5, seed=3)
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == pq.read_table(
        parquet
    ).to_pylist()


def test_split_is_by_problem_seeded_and_never_leaks(samples, tmp_path):
    path, _ = _write(tmp_path, "stepwise_jsonl", test_fraction=0.5, seed=7)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    splits_of_problem: dict[str, set[str]] = {}
    for row in rows:
        splits_of_problem.setdefault(row["problem_sha256"], set()).add(row["split"])
    assert all(len(splits) == 1 for splits in splits_of_problem.values())
    assert {row["split"] for row in rows} == {"train", "test"}
    # seeded: same seed, same split; the fraction is honoured over many problems
    assert split_of("abc", 0.5, 7) == split_of("abc", 0.5, 7)
    share = sum(split_of(f"p{i}", 0.2, 1) == "test" for i in range(5000)) / 5000
    assert 0.17 < share < 0.23
    assert {split_of(f"p{i}", 0.0, 1) for i in range(100)} == {"train"}


def test_drop_neutral_and_no_alternatives_change_the_rows(samples, tmp_path):
    _, everything = _write(tmp_path, "stepwise_jsonl")
    _, main_only = _write(tmp_path, "stepwise_jsonl", alternatives=False)
    assert main_only.rows == 6 < everything.rows


def test_export_file_never_leaves_half_a_file(samples, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        yield from ()
        raise RuntimeError("database went away")

    monkeypatch.setattr(exporting, "iter_export_items", boom)
    with pytest.raises(RuntimeError):
        _write(tmp_path, "prm800k")
    assert list(tmp_path.iterdir()) == []


def test_timestamps_are_naive_utc_like_the_release(labeler, db):
    from labeling.models import StepLabel

    solution = make_solution(make_batch(generation=None))
    Solution.objects.filter(pk=solution.pk).update(format=Solution.Format.PHASE1)
    labeling = Labeling.objects.create(
        solution=solution,
        labeler=labeler,
        status=Labeling.Status.COMPLETED,
        finish_reason="solution",
        finished_at=datetime(2024, 5, 1, 12, 0, 0, 5, tzinfo=UTC),
        total_time_ms=10,
    )
    StepLabel.objects.create(
        labeling=labeling, index=0, chosen_completion=None, has_completions=False
    )
    (line,) = _lines(ExportFilters())
    assert line["timestamp"] == "2024-05-01T12:00:00.000005"
    assert line["labeler"] == str(labeler.pk)  # no Labeler identity yet: the user id
    assert line["label"]["steps"] == [
        {"completions": None, "human_completion": None, "chosen_completion": None}
    ]
    assert list(line["question"]) == ["problem", "ground_truth_answer"]


def test_escaping_matches_json_dumps(labeler, db):
    """Control characters, quotes, backslashes, DEL, non-ASCII and astral text, as json.dumps."""
    from labeling.models import Completion, StepLabel

    tricky = 'a "quote" \\ back\tslash\n\x01\x1f\x7f é ∑ 𝔼 \u2028 </script>'
    solution = make_solution(make_batch(), steps=[tricky])
    labeling = Labeling.objects.create(
        solution=solution,
        labeler=labeler,
        status=Labeling.Status.COMPLETED,
        finish_reason="solution",
        finished_at=timezone.now(),
    )
    step = StepLabel.objects.create(labeling=labeling, index=0, chosen_completion=0)
    Completion.objects.create(step=step, index=0, text=tricky, rating=0, flagged=True)
    Completion.objects.create(
        step=step, index=-1, text=tricky, rating=None, is_human=True, source=""
    )
    (line,) = iter_prm800k_lines()
    obj = json.loads(line)
    assert obj["label"]["steps"][0]["completions"][0]["text"] == tricky
    assert line == json.dumps(obj)  # same bytes as the encoder the release used


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_final_labels_give_a_multiply_labeled_solution_one_row(labeler, labeler2, lead, tmp_path):
    from labeling.services import adjudication
    from tests.factories import make_solutions
    from tests.labeling.helpers import claim_and_label

    batch = make_batch(overlap=2, gold_rate=0)
    (solution,) = make_solutions(batch, 1)
    solution.steps = solution.steps[:3]
    solution.save(update_fields=["steps"])
    claim_and_label(labeler, [1, 1, 1])
    claim_and_label(labeler2, [1, 0, 1])

    every_path, every = _write(tmp_path, "stepwise_jsonl", labels="every", neutral="negative")
    assert every.rows == 2 and sorted(r["labels"] for r in _rows(every_path)) == [
        [True, False, True],
        [True, True, True],
    ]
    final_path, final = _write(
        tmp_path, "stepwise_jsonl", neutral="negative"
    )  # "final" is the default
    (row,) = _rows(final_path)
    assert row["labels"] == [True, False, True]  # a tied step takes the lower rating
    assert row["completions"] == solution.steps and final.labelings == 2

    adjudication.adjudication_save(solution=solution, lead=lead, ratings=[1, -1])
    (row,) = _rows(_write(tmp_path, "stepwise_jsonl")[0])
    assert row["completions"] == solution.steps[:2] and row["labels"] == [
        True,
        False,
    ]  # the lead's verdict
    parquet_path, parquet = _write(tmp_path, "stepwise_parquet")
    assert parquet.rows == 1
    prm800k_lines = _write(tmp_path, "prm800k")[1]
    assert prm800k_lines.rows == 2  # the release format is one line per labeling, always


def test_labels_choice_is_validated_and_reaches_the_cli(samples, tmp_path):
    bad = ExportRequestSerializer(data={"format": "stepwise_jsonl", "labels": "some"})
    assert not bad.is_valid() and "labels" in bad.errors
    out = tmp_path / "every.jsonl"
    call_command(
        "export_prm800k",
        "--format",
        "stepwise_jsonl",
        "--labels",
        "every",
        "--output",
        str(out),
        "--no-progress",
    )
    assert len(out.read_text().splitlines()) == 36  # the six sample lines, one labeling each


# --- file names -----------------------------------------------------------------------------------

ON = datetime(2026, 11, 23).date()


def test_an_export_is_named_for_its_batch_format_and_date():
    one = make_batch('Gén 7 "hard" / retry')
    greek = make_batch("Παρτίδα")  # no ASCII letters at all
    long = make_batch("x" * 200)
    assert exporting.export_filename(fmt="prm800k", on=ON, batches=[one.pk]) == (
        "gen-7-hard-retry-prm800k-2026-11-23.jsonl"
    )
    assert exporting.export_filename(fmt="stepwise_parquet", on=ON, batches=[greek.pk]) == (
        f"batch-{greek.pk}-stepwise_parquet-2026-11-23.parquet"
    )
    assert exporting.export_filename(fmt="stepwise_jsonl", on=ON, batches=[long.pk]) == (
        f"{'x' * exporting.NAME_MAX}-stepwise_jsonl-2026-11-23.jsonl"
    )
    assert exporting.export_filename(fmt="prm800k", on=ON, batches=[7, 3]) == (
        "batches-3-7-prm800k-2026-11-23.jsonl"
    )
    assert exporting.export_filename(fmt="prm800k", on=ON, batches=list(range(1, 10))) == (
        "batches-1-2-3-4-and-5-more-prm800k-2026-11-23.jsonl"
    )
    assert exporting.export_filename(fmt="prm800k", on=ON) == "stepwise-prm800k-2026-11-23.jsonl"


def test_a_snapshot_is_named_for_its_id_format_and_creation_date():
    snapshot = Snapshot.objects.create(
        format="stepwise_parquet", created_at=datetime(2026, 3, 1, 23, 30, tzinfo=UTC)
    )
    assert exporting.snapshot_filename(snapshot) == (
        f"snapshot-{snapshot.pk}-stepwise_parquet-2026-03-01.parquet"
    )
