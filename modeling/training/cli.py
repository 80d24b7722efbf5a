"""Command line: train, evaluate, score, best-of-n, export.

    python -m modeling.training.cli train --parquet phase1.parquet --holdout-fraction 0.1 \\
        --output-dir runs/prm --mode head
    python -m modeling.training.cli train --data trl.parquet --data math_shepherd.jsonl ...
    python -m modeling.training.cli evaluate --model runs/prm --parquet phase1.parquet \\
        --processbench processbench/gsm8k.json
    python -m modeling.training.cli score --model runs/prm --input solutions.jsonl
    python -m modeling.training.cli best-of-n --models runs/prm,runs/orm --input samples.jsonl
    python -m modeling.training.cli export --model runs/prm --format hf --output prm-hf

`--data` takes any shape `inputs.py` reads (PRM800K, stepwise-critic, TRL stepwise supervision,
Math-Shepherd; JSONL, Parquet or a datasets folder), detected from the content; `--prm800k` and
`--parquet` force theirs. Each file's summary goes to stderr; a file that cannot be read is one
line, `train: error: ...`, and exit code 2.

`train` writes split.json (the held-out problems) next to the model; `evaluate` given the
same data files scores only those problems, so nothing it reports was trained on.

`train --objective outcome` trains an outcome model (ORM) on graded solutions: `--data` (and
`--prm800k`) read as `inputs.read_graded` reads them (graded JSONL, ProcessBench, best-of-N
samples, PRM800K lines with ground_truth_answer), answers graded by modeling.grading where the
file gives only answers; its held-out solution AUROC goes to metrics.json ("held_out").
`evaluate` of an outcome model reports solution AUROC on graded data and ProcessBench's
final_answer_correct.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .config import TrainConfig
from .data import (
    GradedSolution,
    LabeledSolution,
    Solution,
    outcome_examples,
    problem_key,
    read_jsonl,
    shuffle_key,
    split_by_problem,
    subsample_problems,
)
from .external import ADAPTER_TASKS
from .inputs import CRITIC, PRM800K, DataFormatError, read_graded_many, read_many


def load_examples(
    prm800k: Sequence[str], parquet: Sequence[str], data: Sequence[str] = (), *, quiet: bool = False
) -> list[LabeledSolution]:
    """Every file's solutions (--prm800k, --parquet, then --data); each file's summary line to
    stderr unless `quiet`. A file that cannot be read raises DataFormatError."""

    def report(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr)

    return [
        *read_many(prm800k, PRM800K, report),
        *read_many(parquet, CRITIC, report),
        *read_many(data, None, report),
    ]


def grade_answer(steps: Sequence[str], answer: str | None, ground_truth: str) -> bool:
    """The answer checker graded data files need (inputs.Grade): the given answer, else the one
    modeling.grading extracts from the steps, against the ground truth. Imported here, only
    when an answer is graded: a GPU machine without math_verify trains on graded files."""
    from modeling.grading import extract_answer, is_equivalent

    found = answer if answer is not None else extract_answer(list(steps))
    return found is not None and is_equivalent(found, ground_truth)


def load_graded(
    prm800k: Sequence[str], data: Sequence[str], *, quiet: bool = False
) -> list[GradedSolution]:
    """An outcome model's data: every file's graded solutions (inputs.read_graded), each
    file's summary line to stderr unless `quiet`. A file that cannot be read raises
    DataFormatError."""

    def report(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr)

    return read_graded_many([*prm800k, *data], grade_answer, report)


def held_out_only(items: Sequence[Any], model_dir: str) -> list[Any]:
    """The items whose problem the model's split.json held out (all of them without one). A
    split.json written before problem_key normalised whitespace lists the older key."""
    split_file = Path(model_dir) / "split.json"
    if not split_file.exists():
        return list(items)
    held_out = set(json.loads(split_file.read_text())["test_problems"])
    return [
        e for e in items if problem_key(e.problem) in held_out or shuffle_key(e.problem) in held_out
    ]


def model_objective(model_dir: str) -> str:
    """A saved model's objective (prm.json; a model saved before objectives, or an imported
    one: process)."""
    meta = Path(model_dir) / "prm.json"
    if not meta.is_file():
        return "process"
    try:
        return str(json.loads(meta.read_text()).get("objective", "process"))
    except (ValueError, AttributeError):
        return "process"


def files_sha256(paths: Sequence[str]) -> str:
    """One digest of the files' bytes, in order; a folder (datasets' save_to_disk) counts as
    its files in sorted order."""
    digest = hashlib.sha256()
    for path in paths:
        files = (
            sorted(p for p in Path(path).rglob("*") if p.is_file())
            if os.path.isdir(path)
            else [Path(path)]
        )
        for file in files:
            with open(file, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def config_parser() -> argparse.ArgumentParser:
    """TrainConfig's fields as --flags, each with its help and default, built by transformers'
    dataclass parser. A parent parser: pass it as `parents=[config_parser()]`."""
    from transformers import HfArgumentParser
    from transformers.hf_argparser import DataClassType

    parser = HfArgumentParser(DataClassType(TrainConfig), add_help=False)
    for action in parser._actions:
        # HfArgumentParser adds --field_name before --field-name; show the dashed one first.
        action.option_strings = sorted(action.option_strings, key=lambda flag: "_" in flag)
        flag = action.option_strings[0]
        if flag.startswith("--no-"):  # the complement HfArgumentParser adds to a True bool
            action.help = f"Same as --{flag.removeprefix('--no-')} false."
        else:
            default = action.default
            if isinstance(default, str) and not default.isprintable():
                default = json.dumps(default)  # "\n\n", not two blank lines
            action.help = f"{action.help} (default: {default})"
    return parser


def config_flags(config: TrainConfig) -> list[str]:
    """The command-line flags that make `train` build exactly this config (for a launcher
    that runs the CLI under torchrun)."""
    flags: list[str] = []
    for f in dataclasses.fields(TrainConfig):
        value = getattr(config, f.name)
        if value is not None:
            flags += [f"--{f.name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return flags


def file_progress(path: str) -> Callable[[Any], None]:
    """Progress as JSON lines appended to a file: how a supervising process (the Celery GPU
    task) follows a run it launched under torchrun."""

    def report(p: Any) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(dataclasses.asdict(p)) + "\n")

    return report


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {value}")
    return value


def tqdm_progress() -> Callable[[Any], None]:
    bars: dict[str, tqdm] = {}

    def report(p: Any) -> None:
        bar = bars.get(p.phase)
        if bar is None:
            bar = bars[p.phase] = tqdm(total=p.total, desc=p.phase, unit="step")
        bar.n = p.step
        if p.loss is not None:
            bar.set_postfix(loss=f"{p.loss:.4f}", lr=f"{p.lr:.2e}", refresh=False)
        bar.refresh()
        if p.step >= p.total:
            bar.close()

    return report


def stop_file(path: str | None) -> Callable[[], bool] | None:
    return (lambda: os.path.exists(path)) if path else None


def tqdm_counter(desc: str) -> Callable[[int, int], None]:
    bar: list[tqdm] = []

    def report(done: int, total: int) -> None:
        if not bar:
            bar.append(tqdm(total=total, desc=desc, unit="batch"))
        bar[0].n = done
        bar[0].refresh()
        if done >= total:
            bar[0].close()

    return report


def cmd_train(args: argparse.Namespace) -> int:
    """Train in this process, or as one of torchrun's (every rank runs this same command)."""
    from .distributed import process_group

    try:
        config = TrainConfig(
            **{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)}
        )
    except ValueError as exc:
        print(f"train: error: {exc}", file=sys.stderr)
        return 2
    try:
        with process_group(config.device) as world:
            return train_command(args, config, main=world.main)
    except DataFormatError as exc:  # bad input: one line, no traceback
        print(f"train: error: {exc}", file=sys.stderr)
        return 2


def train_command(args: argparse.Namespace, config: TrainConfig, *, main: bool) -> int:
    from .train import train

    outcome = config.objective == "outcome"
    if outcome and args.parquet:
        raise DataFormatError(
            "--parquet: stepwise-critic rows rate steps and grade no final answer; objective "
            "outcome reads graded solutions (--data)"
        )
    graded: list[GradedSolution] = []
    examples: list[LabeledSolution] = []
    if outcome:
        graded = load_graded(args.prm800k, args.data, quiet=not main)
    else:
        examples = load_examples(args.prm800k, args.parquet, args.data, quiet=not main)
    if not config.dataset_version:  # after reading: a missing file is a DataFormatError
        paths = [*args.prm800k, *args.parquet, *args.data]
        config = config.replace(dataset_version=files_sha256(paths))
    if args.max_problems:
        examples = subsample_problems(examples, args.max_problems, config.seed)
        graded = subsample_problems(graded, args.max_problems, config.seed)
    train_graded, test_graded = split_by_problem(graded, args.holdout_fraction, config.seed)
    train_set, test_set = split_by_problem(examples, args.holdout_fraction, config.seed)
    if outcome:
        train_set, test_set = outcome_examples(train_graded), outcome_examples(test_graded)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not main:  # rank 0 writes the split and talks; the others only train
        train(config, train_set, should_stop=stop_file(args.stop_file))
        return 0
    split = {
        "seed": config.seed,
        "holdout_fraction": args.holdout_fraction,
        "max_problems": args.max_problems,
        "train_problems": len({problem_key(e.problem) for e in train_set}),
        "test_problems": sorted({problem_key(e.problem) for e in test_set}),
    }
    (out / "split.json").write_text(json.dumps(split, indent=1) + "\n")
    print(
        f"{len(train_set)} training solutions ({split['train_problems']} problems), "
        f"{len(test_set)} held out ({len(split['test_problems'])} problems)",
        file=sys.stderr,
    )
    reporters = [tqdm_progress()]
    if args.progress_file:
        reporters.append(file_progress(args.progress_file))

    def progress(p: Any) -> None:
        for report in reporters:
            report(p)

    result = train(config, train_set, progress=progress, should_stop=stop_file(args.stop_file))
    summary: dict[str, Any] = {
        "output_dir": result.output_dir,
        "stopped": result.stopped,
        **result.metrics,
    }
    if outcome and test_graded and not result.stopped:
        summary["held_out"] = outcome_held_out(out, test_graded)
    print(json.dumps(summary, indent=2))
    return 0


def outcome_held_out(out: Path, held_out: Sequence[GradedSolution]) -> dict[str, Any]:
    """The trained outcome model's solution AUROC on the held-out problems, also kept in
    metrics.json under "held_out" (the export's model card shows it)."""
    from .evaluate import evaluate_outcome, finite
    from .model import ProcessRewardModel

    model = ProcessRewardModel.load(out, device="cpu")
    figures = finite(evaluate_outcome(model, held_out))
    metrics_file = out / "metrics.json"
    metrics = json.loads(metrics_file.read_text())
    metrics["held_out"] = figures
    metrics_file.write_text(json.dumps(metrics, indent=2) + "\n")
    return figures


def cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluate import (
        dropped_labels_note,
        evaluate_outcome,
        evaluate_processbench,
        evaluate_steps,
        report_json,
    )
    from .external import load_prm
    from .inputs import read_graded

    started = time.perf_counter()
    outcome = model_objective(args.model) == "outcome"
    try:  # before the model loads: a bad file fails at once
        if outcome:
            if args.parquet:
                raise DataFormatError("--parquet: an outcome model is evaluated on graded data")
            graded = load_graded(args.prm800k, args.data)
            benches = [read_graded(path) for path in args.processbench]
        else:
            examples = load_examples(args.prm800k, args.parquet, args.data)
    except DataFormatError as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        return 2
    model = load_prm(args.model, device=args.device)
    report: dict[str, Any] = {"model": args.model}
    if outcome:
        # Solution level: final-answer correctness against P(correct) at the last step.
        report["objective"] = "outcome"
        if args.prm800k or args.data:
            held = graded if args.all else held_out_only(graded, args.model)
            report["solutions"] = evaluate_outcome(model, held, progress=tqdm_counter("solutions"))
        report["processbench"] = [
            {"subset": Path(path).stem, **evaluate_outcome(model, items)}
            for path, items in zip(args.processbench, benches, strict=True)
        ]
    else:
        if args.prm800k or args.parquet or args.data:
            if not args.all:
                examples = held_out_only(examples, args.model)
            report["steps"] = evaluate_steps(
                model,
                examples,
                batch_tokens=args.batch_tokens,
                max_length=args.max_length,
                progress=tqdm_counter("steps"),
            )
            report["steps"]["solutions"] = len(examples)
            print(dropped_labels_note(report["steps"]), file=sys.stderr)
        report["processbench"] = [
            evaluate_processbench(
                model, path, args.threshold, progress=tqdm_counter(Path(path).stem)
            )
            for path in args.processbench
        ]
    report["seconds"] = round(time.perf_counter() - started, 1)
    text = report_json(report)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from .external import load_prm
    from .score import RULES, score_solutions, solution_score

    model = load_prm(args.model, device=args.device)
    records = list(read_jsonl(args.input))
    solutions = [Solution(r["problem"], list(r["steps"])) for r in records]
    step_probs = score_solutions(model, solutions, progress=tqdm_counter("score"))
    out = open(args.output, "w") if args.output else sys.stdout
    for record, probs in zip(records, step_probs, strict=True):
        scores = {rule: solution_score(probs, rule) for rule in RULES}
        line = {**record, "step_probs": probs.tolist(), "scores": scores}
        out.write(json.dumps(line) + "\n")
    if out is not sys.stdout:
        out.close()
    return 0


def model_names(paths: Sequence[str]) -> list[str]:
    """Each model's name in a comparison: its folder's name, or the path as given where two
    folders share a name."""
    names = [Path(path).name or path for path in paths]
    return [
        name if names.count(name) == 1 else path for name, path in zip(names, paths, strict=True)
    ]


def model_record(folder: str) -> dict[str, Any]:
    """A saved model's record: ours its prm.json, an imported one its manifest (which has no
    training record). A folder that is neither raises ValueError."""
    from .external import MANIFEST, is_external

    path = Path(folder)
    record_file = path / (MANIFEST if is_external(path) else "prm.json")
    try:
        record = json.loads(record_file.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{folder} is not a saved model ({record_file.name}: {exc})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{record_file} holds no JSON object")
    return record


def cmd_best_of_n(args: argparse.Namespace) -> int:
    """Best-of-N of several models side by side on one samples file (evaluate.compare_best_of_n),
    refused when the models are not on equal footing unless --allow-mismatch."""
    from .evaluate import (
        compare_best_of_n,
        comparison_summary,
        comparison_table,
        fill_answers,
        footing,
        overlap,
        plot_best_of_n,
        read_best_of_n,
        report_json,
    )
    from .external import load_prm
    from .score import score_solutions

    def fail(reason: str) -> int:
        print(f"best-of-n: error: {reason}", file=sys.stderr)
        return 2

    paths = [path.strip() for path in args.models.split(",") if path.strip()]
    if not paths:
        return fail("--models names no model")
    names = model_names(paths)
    try:
        records = {name: model_record(path) for name, path in zip(names, paths, strict=True)}
        problems = read_best_of_n(args.input)
    except (OSError, ValueError) as exc:
        return fail(str(exc))
    if not problems:
        return fail(f"{args.input} has no problems")
    smallest = min(args.n or [1])
    if max(len(p.samples) for p in problems) < smallest:  # before a model loads
        return fail(f"no problem of {args.input} has {smallest} samples or more")
    objectives = {name: record.get("objective", "process") for name, record in records.items()}
    evaluation_problems = {problem_key(p.problem) for p in problems}
    differences = footing(records) + [
        f"{name} trained on {count} of the {len(evaluation_problems)} evaluation problems"
        for name, count in overlap(records, evaluation_problems).items()
        if count
    ]
    if differences and not args.allow_mismatch:
        return fail(
            f"not on equal footing: {'; '.join(differences)} (--allow-mismatch compares anyway)"
        )
    if differences:
        print(f"comparing despite: {'; '.join(differences)}")

    from modeling import grading  # the one answer checker, here only: a GPU box may lack it

    problems = fill_answers(problems, grading.extract_answer)
    solutions = [Solution(p.problem, steps) for p in problems for steps, _ in p.samples]
    scores = {}
    for name, path in zip(names, paths, strict=True):
        try:
            model = load_prm(path, device=args.device)
        except (OSError, ValueError) as exc:  # ExternalModelError is a ValueError
            return fail(f"{path} cannot be loaded: {exc}")
        step_probs = iter(score_solutions(model, solutions, progress=tqdm_counter(name)))
        scores[name] = [[next(step_probs) for _ in p.samples] for p in problems]
        del model  # one model in memory at a time
    try:
        report = compare_best_of_n(
            problems,
            scores,
            objectives,
            equivalent=grading.is_equivalent,
            key=grading.normalise_answer,
            ns=args.n,
            repeats=args.repeats,
            intervals=args.intervals,
            seed=args.seed,
        )
    except ValueError as exc:
        return fail(str(exc))
    report = {
        "file": str(args.input),
        "models": {
            name: {
                "path": path,
                "objective": objectives[name],
                "backbone": records[name].get("backbone"),
            }
            for name, path in zip(names, paths, strict=True)
        },
        "footing": differences,
        "allowed_mismatch": bool(args.allow_mismatch),
        "repeats": args.repeats,
        "intervals": args.intervals,
        "seed": args.seed,
        **report,
    }
    try:
        if args.json:
            Path(args.json).write_text(report_json(report) + "\n")
        if args.png:
            plot_best_of_n(report, args.png)
    except OSError as exc:
        return fail(str(exc))
    print(comparison_table(report))
    print(comparison_summary(report, objectives))
    return 0


def cmd_merge_adapter(args: argparse.Namespace) -> int:
    """A LoRA adapter merged into its base, saved as a whole model folder: the import's merge,
    run in a process of its own so that the web process that checked the adapter never loads a
    model (modeling.services.importing)."""
    from .external import Adapter, merge_adapter

    adapter = Adapter(
        folder=Path(args.adapter),
        base_model=str(args.base),
        base=Path(args.base),
        task_type=args.task,
        labels=args.labels,
    )
    merge_adapter(adapter, args.output)
    return 0


def phase_progress(path: str | None) -> Callable[[str], None]:
    """Each phase on stderr, and as a JSON line appended to `path` (for a supervising process:
    the export task follows a `cli export` it launched)."""

    def report(phase: str) -> None:
        print(f"export: {phase}", file=sys.stderr)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps({"phase": phase}) + "\n")

    return report


def cmd_export(args: argparse.Namespace) -> int:
    """A Hugging Face checkpoint (see export.py) of a model trained here or imported; a bad
    model folder is exit code 2."""
    from .export import ExportError, export_hf

    try:
        metrics = json.loads(Path(args.metrics).read_text()) if args.metrics else None
        if metrics is not None and not isinstance(metrics, dict):
            raise ExportError(f"{args.metrics} must hold a JSON object")
        out = export_hf(
            args.model, args.output, metrics=metrics, progress=phase_progress(args.progress_file)
        )
    except (ExportError, OSError, json.JSONDecodeError) as exc:
        print(f"export: error: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


DATA_HELP = (
    "training data of any shape, detected from its content: PRM800K, stepwise-critic, TRL "
    "stepwise supervision or Math-Shepherd, as JSONL, Parquet or a datasets save_to_disk "
    "folder (repeat; docs/training.md 'Training data shapes'); with --objective outcome: "
    "graded solutions (graded JSONL, ProcessBench, best-of-N samples, PRM800K lines with "
    "ground_truth_answer; docs/training.md 'Outcome supervision (ORM)')"
)


def build_parser(train_defaults: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    """The CLI; `train_defaults` (TrainConfig fields: a --trl-config file's) replace train's
    defaults, so that flags given explicitly still win."""
    parser = argparse.ArgumentParser(prog="python -m modeling.training.cli")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser(
        "train", help="train a PRM (or, --objective outcome, an ORM)", parents=[config_parser()]
    )
    train.add_argument(
        "--trl-config",
        metavar="FILE",
        help="a TRL PRMTrainer config (JSON or YAML, PRMConfig's field names) read as these "
        "flags; fields it leaves out take TRL's defaults, flags given here win, and a field "
        "Stepwise does not support is refused by name (docs/training.md lists them)",
    )
    train.add_argument("--data", action="append", default=[], help=DATA_HELP, metavar="PATH")
    train.add_argument(
        "--prm800k", action="append", default=[], help="PRM800K JSONL, that shape only (repeat)"
    )
    train.add_argument(
        "--parquet",
        action="append",
        default=[],
        help="stepwise-critic parquet, that shape only (repeat)",
    )
    train.add_argument(
        "--holdout-fraction",
        type=float,
        default=0.0,
        help="share of problems held out (listed in split.json)",
    )
    train.add_argument(
        "--max-problems",
        type=int,
        default=None,
        help="use a seeded random subset of this many problems",
    )
    train.add_argument(
        "--progress-file", help="also append progress as JSON lines here (for a supervisor)"
    )
    train.add_argument(
        "--stop-file",
        help="stop at the next step, with a checkpoint, once this file exists (resume later)",
    )
    train.set_defaults(func=cmd_train, **(train_defaults or {}))

    evaluate = sub.add_parser(
        "evaluate",
        help="step metrics on held-out data, ProcessBench (an outcome model: solution AUROC)",
    )
    evaluate.add_argument("--model", required=True)
    evaluate.add_argument("--data", action="append", default=[], help=DATA_HELP, metavar="PATH")
    evaluate.add_argument("--prm800k", action="append", default=[])
    evaluate.add_argument("--parquet", action="append", default=[])
    evaluate.add_argument(
        "--all", action="store_true", help="use every problem, not only the model's held-out ones"
    )
    evaluate.add_argument(
        "--processbench", action="append", default=[], help="ProcessBench subset JSON (repeat)"
    )
    evaluate.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        help="first error = first step with P(+1)+P(0) under this",
    )
    evaluate.add_argument("--batch-tokens", type=int, default=None)
    evaluate.add_argument(
        "--max-length",
        type=positive_int,
        default=None,
        help="tokens per packed row; labels past it are dropped (default: the model's max_length)",
    )
    evaluate.add_argument("--device", default="auto")
    evaluate.add_argument("--output", help="also write the report here")
    evaluate.set_defaults(func=cmd_evaluate)

    score = sub.add_parser("score", help="score solutions: JSONL of {problem, steps}")
    score.add_argument("--model", required=True)
    score.add_argument("--input", required=True)
    score.add_argument("--output", help="JSONL out (default stdout)")
    score.add_argument("--device", default="auto")
    score.set_defaults(func=cmd_score)

    best = sub.add_parser(
        "best-of-n",
        help="best-of-N of process and outcome models, majority and pass@N side by side",
    )
    best.add_argument(
        "--models",
        required=True,
        metavar="PATH[,PATH...]",
        help="saved model folders, comma-separated (ours or imported); the first process and "
        "the first outcome model are the last line's prm and orm",
    )
    best.add_argument(
        "--input",
        required=True,
        metavar="FILE",
        help="best-of-N samples (JSONL, docs/training.md 'Best of N')",
    )
    best.add_argument(
        "--n",
        type=positive_int,
        action="append",
        default=None,
        help="an N to measure (repeat; default 1, 2, 4, ... up to the most samples a problem has)",
    )
    best.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare models trained on different problems, backbones or step counts, or on "
        "evaluation problems (and say so) instead of refusing",
    )
    best.add_argument("--json", metavar="OUT", help="write the report here")
    best.add_argument("--png", metavar="OUT", help="write the curves here")
    best.add_argument(
        "--repeats",
        type=positive_int,
        default=100,
        metavar="R",
        help="N-subsets per problem: all when there are at most this many, else this many random",
    )
    best.add_argument(
        "--intervals",
        type=non_negative_int,
        default=1000,
        metavar="B",
        help="bootstrap replicates of the 95%% intervals (0: none)",
    )
    best.add_argument("--seed", type=int, default=0, help="seed of the subsets and the intervals")
    best.add_argument("--device", default="auto")
    best.set_defaults(func=cmd_best_of_n)

    merge = sub.add_parser(
        "merge-adapter", help="merge a LoRA adapter into its base (the import's merge)"
    )
    merge.add_argument("--adapter", required=True, help="the adapter's folder")
    merge.add_argument("--base", required=True, help="the base model's folder")
    merge.add_argument("--task", required=True, choices=sorted(ADAPTER_TASKS))
    merge.add_argument("--labels", type=positive_int, default=None, help="TOKEN_CLS: head rows")
    merge.add_argument("--output", required=True, help="a new folder for the merged model")
    merge.set_defaults(func=cmd_merge_adapter)

    export = sub.add_parser(
        "export",
        help="write a Hugging Face token-classification checkpoint (an outcome model: a "
        "sequence classifier; model card included)",
    )
    export.add_argument(
        "--model", required=True, help="a model folder saved by train, or an imported one"
    )
    export.add_argument("--format", choices=["hf"], default="hf")
    export.add_argument("--output", required=True, help="a new (or empty) folder")
    export.add_argument(
        "--metrics",
        help="JSON of held-out figures for the model card (an evaluate --output report); "
        "default: the model folder's metrics.json",
    )
    export.add_argument(
        "--progress-file", help="also append each phase as a JSON line here (for a supervisor)"
    )
    export.set_defaults(func=cmd_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # load reports about the unused lm_head are noise here
    args = parse_args(argv)
    return args.func(args)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; `train --trl-config FILE` reads the file's fields as train's defaults
    and parses again, so that flags given explicitly win. A file we cannot take is one line on
    stderr and exit code 2."""
    args = build_parser().parse_args(argv)
    if not getattr(args, "trl_config", None):
        return args
    from .trl_config import TrlConfigError, train_config_fields

    try:
        fields = train_config_fields(args.trl_config)
    except TrlConfigError as exc:
        print(f"train: error: --trl-config {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(fields.items()))
    print(f"--trl-config {args.trl_config}: {shown}", file=sys.stderr)
    return build_parser(train_defaults=fields).parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(main())
