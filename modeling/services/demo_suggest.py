"""The demo's suggest-mode batch and its pre-labels (issue 46).

`setup_demo` hands `SUGGEST_PART` to `labeling.services.demo.demo_setup` after `DEMO_PART`:
the labeling side makes the batch (`load_suggest_batch`), a judge writes its PreLabel rows.

STAND-IN (to switch): the pre-labels should come from the prm judge,
`modeling.services.prelabeling.prelabel_solutions_now(batch=batch, judge="prm", options={})`,
which the judges' branch adds. Until it is on main, `_stand_in_prelabels` writes rows of the
same shape from a cheap deterministic source (the graded answer); replace its call in
`load_suggest_prelabels` with that function and delete it.
"""

from __future__ import annotations

from labeling.models import Batch, PreLabel
from labeling.services.demo import DemoPart, load_suggest_batch

STAND_IN_RUN_ID = 0  # no PreLabelRun: the stand-in's rows name run 0
STAND_IN_JUDGE = "stand-in: graded answer (demo, not a model)"


def _stand_in_prelabels(batch: Batch) -> int:
    """STAND-IN for `prelabel_solutions_now(batch=..., judge="prm", options={})`: +1 for every
    step of a solution whose final answer was graded right; for a wrong one, +1 up to its last
    step and −1 there (the answer is where it is surely wrong), no label after. Idempotent."""
    made = 0
    for solution in batch.solutions.order_by("pk"):
        count = len(solution.steps)
        wrong = solution.answer_correct is False
        labels = [1] * count
        scores = [0.6] * count
        if wrong and count:
            labels[-1], scores[-1] = -1, 0.9
        _, created = PreLabel.objects.get_or_create(
            solution=solution,
            run_id=STAND_IN_RUN_ID,
            defaults={
                "kind": PreLabel.Kind.PRM,
                "judge": STAND_IN_JUDGE,
                "labels": labels,
                "scores": scores,
                "first_error": count - 1 if wrong and count else None,
            },
        )
        made += created
    return made


def load_suggest_prelabels() -> list[str]:
    batch, line = load_suggest_batch()
    made = _stand_in_prelabels(batch)  # STAND-IN: switch to prelabel_solutions_now (above)
    return [line, f"  pre-labels (prm): {f'{made} solutions judged' if made else 'none new'}"]


SUGGEST_PART = DemoPart(setup=load_suggest_prelabels, counts=lambda: {})
