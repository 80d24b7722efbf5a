"""`setup_demo` says what the demo holds after every run, and a re-run adds nothing."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from labeling.models import Batch, Completion, GoldLabel, Labeling, Problem, Solution, StepLabel

pytestmark = pytest.mark.django_db

HOLDS = (
    "The demo holds 21 problems, 129 solutions, 3 batches, 63 completed labelings, "
    "18 gold solutions, 63 pool solutions and 6 demo accounts."
)


def _setup_demo() -> str:
    out = io.StringIO()
    call_command("setup_demo", stdout=out)
    return out.getvalue()


def _rows() -> dict[str, int]:
    models = (Problem, Solution, Batch, Labeling, StepLabel, Completion, GoldLabel)
    counts = {model.__name__: model.objects.count() for model in models}
    return {**counts, "users": get_user_model().objects.count()}


def test_setup_demo_reports_what_it_holds_and_a_rerun_adds_nothing():
    first = _setup_demo()
    assert HOLDS in first
    assert (
        "This run added 21 problems, 129 solutions, 3 batches, 63 completed labelings, "
        "18 gold solutions, 63 pool solutions and 6 demo accounts." in first
    )
    rows = _rows()
    # 126 in the two labeled batches, 3 problems to label step by step (alternatives), 63 in the
    # candidate pool (tests/modeling/test_demo.py), 8 in the suggest-mode batch (test_suggest.py)
    assert (rows["Problem"], rows["Solution"], rows["Batch"], rows["Labeling"]) == (21, 200, 4, 63)
    step_by_step = Batch.objects.get(protocol=Batch.Protocol.ALTERNATIVES)
    assert not step_by_step.is_active and step_by_step.solutions.count() == 3
    assert rows["GoldLabel"] == 18

    second = _setup_demo()
    assert HOLDS in second
    assert "This run added nothing: the demo was already set up." in second
    assert " 0 labelings" not in second and "This run added 21" not in second
    assert "created nothing new; 63 already present" in second  # the reference labels
    assert _rows() == rows
