"""Upgrading to projects loses nothing: a database as it was before them (labeling 0018,
modeling 0015: rows written with the historical models, as the demo and a deployment have
them) migrated to the newest has every row in the project "Default", every member of the
labeler, lead and researcher groups holding that role there, and the admin still global. On
both databases; the schema is left at its newest for the rest of the run."""

import pytest
from django.contrib.auth.models import Group, User
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from labeling.models import Batch, Guidelines, Membership, Project, Snapshot, Solution
from labeling.roles import user_roles
from modeling.models import (
    EvaluationSet,
    GenerationRun,
    ModelVersion,
    PreLabelRun,
    TrainingRun,
)

BEFORE = [("labeling", "0019_machine_labels"), ("modeling", "0017_routing")]


def _to_newest() -> None:
    executor = MigrationExecutor(connections["default"])
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_an_upgrade_puts_everything_into_default_and_keeps_every_role():
    executor = MigrationExecutor(connections["default"])
    executor.migrate(BEFORE)
    try:
        apps = executor.loader.project_state(BEFORE).apps
        old = {
            name: apps.get_model("labeling", name)
            for name in ("Problem", "Batch", "Solution", "Guidelines", "Snapshot", "Labeling")
        }
        users = {}
        for name, group in [
            ("lena", "labeler"),
            ("lea", "lead"),
            ("rhea", "researcher"),
            ("ada", "admin"),
            ("lou", "lead"),
        ]:
            users[name] = User.objects.create_user(name, password=f"{name}-pw")
            users[name].groups.add(Group.objects.get_or_create(name=group)[0])
        users["lou"].groups.add(Group.objects.get(name="labeler"))  # a lead who labels
        problem = old["Problem"].objects.create(text="1+1?", text_sha256="p" * 64)
        batches = [old["Batch"].objects.create(name=f"batch {i}", generation=i) for i in (1, 2)]
        solutions = [
            old["Solution"].objects.create(
                problem=problem, batch=batch, steps=["2"], content_sha256=f"{i}" * 64
            )
            for i, batch in enumerate([*batches, None])  # the last: a pool solution
        ]
        old["Labeling"].objects.create(
            solution=solutions[0], labeler_id=users["lena"].pk, status="completed"
        )
        old["Guidelines"].objects.create(version=1, text="# Rate")
        old["Guidelines"].objects.create(version=2, text="# Rate carefully")
        old["Snapshot"].objects.create(format="prm800k")
        run = apps.get_model("modeling", "TrainingRun").objects.create(name="run")
        apps.get_model("modeling", "ModelVersion").objects.create(
            run=run,
            name="v1",
            backbone="tiny",
            artifact_path="x",
            passed_evaluation=True,
            is_active=True,
        )
        apps.get_model("modeling", "EvaluationSet").objects.create(
            version=1, file_path="e.jsonl", sha256="0" * 64, is_current=True
        )
        apps.get_model("modeling", "GenerationRun").objects.create(generation=3)
        prelabel_runs = apps.get_model("modeling", "PreLabelRun").objects
        prelabel_runs.create(batch=batches[0], kind="prm", solution_ids=[solutions[0].pk])
        prelabel_runs.create(batch=None, kind="llm", solution_ids=[solutions[2].pk])  # the pool's
    finally:
        _to_newest()

    default = Project.objects.get(slug="default")
    assert default.name == "Default" and Project.objects.count() == 1
    for model, count in [
        (Batch, 2),
        (Solution, 3),
        (Guidelines, 2),
        (Snapshot, 1),
        (TrainingRun, 1),
        (ModelVersion, 1),
        (EvaluationSet, 1),
        (GenerationRun, 1),
        (PreLabelRun, 2),
    ]:
        assert model.objects.count() == count, model
        assert set(model.objects.values_list("project_id", flat=True)) == {default.pk}, model
    assert ModelVersion.active(default.pk).name == "v1"
    assert EvaluationSet.current(default.pk).version == 1
    assert set(Membership.objects.values_list("user__username", "role")) == {
        ("lena", "labeler"),
        ("lea", "lead"),
        ("rhea", "researcher"),
        ("lou", "lead"),
        ("lou", "labeler"),
    }
    roles = {
        name: user_roles(User.objects.get(username=name), default)
        for name in ("lena", "lea", "rhea", "ada", "lou")
    }
    assert roles == {
        "lena": {"labeler"},
        "lea": {"lead"},
        "rhea": {"researcher"},
        "ada": {"labeler", "lead", "researcher", "admin"},
        "lou": {"lead", "labeler"},
    }
    # What was unique in the database is unique per project now: a second project may reuse it.
    other = Project.objects.create(name="Phase 2", slug="phase-2")
    Batch.objects.create(project=other, name="batch 1")
    Guidelines.objects.create(project=other, version=1, text="# Other")


BEFORE_RECORDS = [("labeling", "0023_line_hash_per_project")]


@pytest.mark.django_db(transaction=True)
def test_the_labelers_record_moves_into_each_project_they_label_in():
    """0024: a labeler's state, screening, gold and agreement values are copied into a record for
    the Default project and for each project where they hold the labeler role; a user with no
    Labeler row gets none."""
    from labeling.models import LabelerRecord

    executor = MigrationExecutor(connections["default"])
    executor.migrate(BEFORE_RECORDS)
    try:
        apps = executor.loader.project_state(BEFORE_RECORDS).apps
        Labeler = apps.get_model("labeling", "Labeler")
        OldProject = apps.get_model("labeling", "Project")
        OldMembership = apps.get_model("labeling", "Membership")
        default, _ = OldProject.objects.get_or_create(slug="default", defaults={"name": "Default"})
        phase2 = OldProject.objects.create(name="Phase 2", slug="phase-2")
        OldProject.objects.create(name="Other", slug="other")
        lena, lars, lea, otto = (
            User.objects.create_user(name) for name in ("lena", "lars", "lea", "otto")
        )
        for user, project, role in [
            (lena, default, "labeler"),
            (lena, phase2, "labeler"),
            (lars, phase2, "labeler"),
            (lea, phase2, "lead"),
        ]:
            OldMembership.objects.create(user_id=user.pk, project=project, role=role)
        Labeler.objects.create(
            user_id=lena.pk,
            state="paused",
            state_reason="gold 40%",
            state_changed_by_id=lea.pk,
            screening_score=0.9,
            screening_passed=True,
            claims_since_gold=3,
            gold_labelings=5,
            gold_steps=20,
            gold_steps_exact=8,
            gold_steps_binary=15,
            gold_first_error_total=4,
            gold_first_error_match=2,
            agree_steps_compared=30,
            agree_steps_same=24,
        )
        Labeler.objects.create(user_id=lars.pk, state="active")
        Labeler.objects.create(user_id=lea.pk)  # opened a labeler's page once: screening
    finally:
        _to_newest()

    rows = LabelerRecord.objects.values_list("user__username", "project__slug", "state")
    assert sorted(rows) == [
        ("lars", "default", "active"),
        ("lars", "phase-2", "active"),
        ("lea", "default", "screening"),
        ("lena", "default", "paused"),
        ("lena", "phase-2", "paused"),
    ]
    for record in LabelerRecord.objects.filter(user=lena):
        assert (record.state_reason, record.state_changed_by_id) == ("gold 40%", lea.pk)
        assert (record.screening_score, record.screening_passed) == (0.9, True)
        assert record.claims_since_gold == 3
        assert (record.gold_labelings, record.gold_steps, record.gold_steps_exact) == (5, 20, 8)
        assert (record.gold_steps_binary, record.gold_first_error_total) == (15, 4)
        assert record.gold_first_error_match == 2
        assert (record.agree_steps_compared, record.agree_steps_same) == (30, 24)
        assert record.gold_accuracy == 0.4 and record.paused_by_gold is False
    assert not LabelerRecord.objects.filter(user=otto).exists()
