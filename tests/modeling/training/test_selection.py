import math
import random
from collections import Counter

import pytest

from modeling.training.selection import (
    RULES,
    Candidate,
    Selection,
    ensemble_disagreement,
    judge_disagreement,
    select_by_rule,
    select_disagreement,
    select_generation,
    select_mix,
    select_uncertain,
    select_uniform,
)


def make_pool(
    problems: int = 5, per_problem: int = 8, *, wrong_every: int = 2, seed: int = 1
) -> list[Candidate]:
    """A mixed pool: every `wrong_every`-th solution is wrong, every 7th ungradable."""
    rng = random.Random(seed)
    pool = []
    for problem_id in range(1, problems + 1):
        for j in range(per_problem):
            solution_id = problem_id * 100 + j
            correct: bool | None = j % wrong_every != 0
            if j % 7 == 6:
                correct = None
            pool.append(Candidate(solution_id, problem_id, round(rng.random(), 3), correct))
    return pool


def ids(selection: list[Selection]) -> list[int]:
    return [s.solution_id for s in selection]


def by_id(pool: list[Candidate]) -> dict[int, Candidate]:
    return {c.solution_id: c for c in pool}


def best_first(pool: list[Candidate]) -> list[Candidate]:
    return sorted(pool, key=lambda c: (-c.score, c.solution_id))


# --- the 80/20 rule ----------------------------------------------------------------------------


def test_eighty_twenty_split_counts() -> None:
    selection = select_generation(make_pool(), k=10)
    assert Counter(s.rule for s in selection) == {"convincing_wrong": 8, "convincing": 2}


@pytest.mark.parametrize(
    ("k", "fraction", "wrong"),
    [(10, 0.5, 5), (5, 0.5, 3), (7, 0.8, 6), (3, 0.0, 0), (4, 1.0, 4), (5, 0.7, 4)],
)
def test_wrong_share_is_k_times_fraction_rounded_half_up(
    k: int, fraction: float, wrong: int
) -> None:
    selection = select_generation(make_pool(), k=k, convincing_wrong_fraction=fraction)
    assert len(selection) == k
    assert sum(s.rule == "convincing_wrong" for s in selection) == wrong


def test_convincing_wrong_are_the_highest_scoring_wrong_answers_in_order() -> None:
    pool = make_pool()
    selection = select_generation(pool, k=10)
    wrong_part = [s for s in selection if s.rule == "convincing_wrong"]
    expected = [c.solution_id for c in best_first([c for c in pool if c.correct is False])][:8]
    assert ids(wrong_part) == expected
    assert all(by_id(pool)[s.solution_id].correct is False for s in wrong_part)


def test_convincing_share_is_the_best_of_the_rest_whatever_their_correctness() -> None:
    pool = make_pool()
    selection = select_generation(pool, k=10)
    wrong_ids = {s.solution_id for s in selection if s.rule == "convincing_wrong"}
    rest = best_first([c for c in pool if c.solution_id not in wrong_ids])
    assert ids([s for s in selection if s.rule == "convincing"]) == [
        c.solution_id for c in rest[:2]
    ]


def test_ranks_are_one_based_wrong_share_first() -> None:
    selection = select_generation(make_pool(), k=10)
    assert [s.rank for s in selection] == list(range(1, 11))
    assert [s.rule for s in selection] == ["convincing_wrong"] * 8 + ["convincing"] * 2


def test_selection_carries_problem_and_score() -> None:
    pool = make_pool()
    for s in select_generation(pool, k=6):
        candidate = by_id(pool)[s.solution_id]
        assert (s.problem_id, s.score) == (candidate.problem_id, candidate.score)


def test_ungradable_candidates_only_fill_the_convincing_share() -> None:
    pool = [
        Candidate(1, 1, 0.99, None),
        Candidate(2, 1, 0.98, None),
        Candidate(3, 1, 0.50, False),
        Candidate(4, 1, 0.40, True),
    ]
    selection = select_generation(pool, k=3, convincing_wrong_fraction=2 / 3)
    assert [(s.solution_id, s.rule) for s in selection] == [
        (3, "convincing_wrong"),
        (1, "convincing"),
        (2, "convincing"),
    ]


def test_leftover_wrong_answers_may_fill_the_convincing_share() -> None:
    pool = [Candidate(i, 1, 1 - i / 10, correct=False) for i in range(1, 6)]
    pool.append(Candidate(9, 2, 0.1, correct=True))
    selection = select_generation(pool, k=5, convincing_wrong_fraction=0.6)
    assert [(s.solution_id, s.rule) for s in selection] == [
        (1, "convincing_wrong"),
        (2, "convincing_wrong"),
        (3, "convincing_wrong"),
        (4, "convincing"),
        (5, "convincing"),
    ]


# --- shortage, exclusions, caps ------------------------------------------------------------------


def test_shortage_of_wrong_answers_is_filled_from_the_rest() -> None:
    pool = [Candidate(1, 1, 0.2, False), Candidate(2, 1, 0.1, False)]
    pool += [Candidate(10 + i, 2, 0.9 - i / 100, True) for i in range(10)]
    selection = select_generation(pool, k=10)
    assert len(selection) == 10
    assert ids([s for s in selection if s.rule == "convincing_wrong"]) == [1, 2]
    assert ids([s for s in selection if s.rule == "convincing"]) == list(range(10, 18))


def test_excluded_ids_never_appear() -> None:
    pool = make_pool()
    top_ten = set(ids(select_generation(pool, k=10)))
    selection = select_generation(pool, k=10, exclude_ids=top_ten)
    assert len(selection) == 10
    assert not top_ten & set(ids(selection))
    uniform = select_uniform(pool, k=30, exclude_ids=top_ten)
    assert not top_ten & set(ids(uniform))


def test_excluding_everything_selects_nothing() -> None:
    pool = make_pool(problems=2, per_problem=3)
    assert select_generation(pool, k=5, exclude_ids={c.solution_id for c in pool}) == []


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_per_problem_cap_holds_across_both_shares(cap: int) -> None:
    pool = make_pool(problems=6, per_problem=10)
    selection = select_generation(pool, k=12, per_problem_cap=cap)
    assert len(selection) == min(12, 6 * cap)
    assert max(Counter(s.problem_id for s in selection).values()) <= cap


def test_cap_passes_over_a_problem_to_the_next_best_wrong_answer() -> None:
    pool = [
        Candidate(1, 1, 0.9, False),
        Candidate(2, 1, 0.8, False),
        Candidate(3, 2, 0.7, False),
        Candidate(4, 1, 0.95, True),
        Candidate(5, 3, 0.6, True),
    ]
    selection = select_generation(pool, k=3, convincing_wrong_fraction=2 / 3, per_problem_cap=1)
    # Problem 1's cap is spent on its best wrong answer, so the most convincing
    # remaining solution (4, also problem 1) is skipped for 5.
    assert [(s.solution_id, s.rule) for s in selection] == [
        (1, "convincing_wrong"),
        (3, "convincing_wrong"),
        (5, "convincing"),
    ]


# --- per-problem scope ---------------------------------------------------------------------------


def test_per_problem_scope_applies_the_rule_inside_each_problem() -> None:
    pool = make_pool(problems=4, per_problem=10)
    selection = select_generation(pool, k=100, scope="per_problem", per_problem_k=5)
    assert len(selection) == 20
    for problem_id in range(1, 5):
        mine = [s for s in selection if s.problem_id == problem_id]
        problem_pool = [c for c in pool if c.problem_id == problem_id]
        wrong = best_first([c for c in problem_pool if c.correct is False])
        assert ids([s for s in mine if s.rule == "convincing_wrong"]) == [
            c.solution_id for c in wrong[:4]
        ]
        assert sum(s.rule == "convincing" for s in mine) == 1
    assert [s.rank for s in selection] == list(range(1, 21))


def test_per_problem_scope_spreads_a_small_budget_over_problems() -> None:
    pool = make_pool(problems=4, per_problem=10)
    selection = select_generation(pool, k=6, scope="per_problem", per_problem_k=5)
    counts = Counter(s.problem_id for s in selection)
    assert sorted(counts.values()) == [1, 1, 2, 2]
    first_round = selection[:4]
    assert [s.score for s in first_round] == sorted((s.score for s in first_round), reverse=True)


def test_per_problem_scope_needs_per_problem_k() -> None:
    with pytest.raises(ValueError):
        select_generation(make_pool(), k=5, scope="per_problem")
    with pytest.raises(ValueError):
        select_generation(make_pool(), k=5, per_problem_k=2)
    with pytest.raises(ValueError):
        select_generation(make_pool(), k=5, scope="everything")  # type: ignore[arg-type]


# --- determinism ---------------------------------------------------------------------------------


def test_same_candidates_in_any_order_give_the_same_selection() -> None:
    pool = make_pool()
    shuffled = pool[:]
    random.Random(7).shuffle(shuffled)
    assert select_generation(shuffled, k=12, per_problem_cap=3) == select_generation(
        pool, k=12, per_problem_cap=3
    )
    assert select_generation(pool, k=12, seed=1) == select_generation(pool, k=12, seed=2)


def test_score_ties_go_to_the_lower_solution_id() -> None:
    pool = [Candidate(sid, 1, 0.5, False) for sid in (30, 10, 20)]
    pool += [Candidate(sid, 2, 0.5, True) for sid in (60, 40, 50)]
    selection = select_generation(pool, k=4, convincing_wrong_fraction=0.5)
    assert ids(selection) == [10, 20, 30, 40]


# --- uniform baseline -----------------------------------------------------------------------------


def test_uniform_is_reproducible_for_a_seed_and_varies_across_seeds() -> None:
    pool = make_pool(problems=10, per_problem=10)
    first = select_uniform(pool, k=10, seed=3)
    assert first == select_uniform(list(reversed(pool)), k=10, seed=3)
    assert len({tuple(ids(select_uniform(pool, k=10, seed=s))) for s in range(5)}) == 5
    assert all(s.rule == "uniform" for s in first)
    assert [s.rank for s in first] == list(range(1, 11))


def test_uniform_respects_caps_and_does_not_follow_scores() -> None:
    pool = make_pool(problems=10, per_problem=10)
    selection = select_uniform(pool, k=15, per_problem_cap=2, seed=0)
    assert len(selection) == 15
    assert max(Counter(s.problem_id for s in selection).values()) <= 2
    assert ids(selection) != ids(select_generation(pool, k=15, per_problem_cap=2))


def test_uniform_draws_every_candidate_about_equally_often() -> None:
    pool = make_pool(problems=2, per_problem=5)
    counts = Counter(
        sid for seed in range(2000) for sid in ids(select_uniform(pool, k=3, seed=seed))
    )
    expected = 2000 * 3 / len(pool)
    assert all(abs(n - expected) < 0.15 * expected for n in counts.values())
    assert len(counts) == len(pool)


# --- edge cases ---------------------------------------------------------------------------------


@pytest.mark.parametrize("select", [select_generation, select_uniform])
def test_k_zero_and_empty_pool_select_nothing(select) -> None:  # type: ignore[no-untyped-def]
    assert select(make_pool(), k=0) == []
    assert select([], k=5) == []


@pytest.mark.parametrize("select", [select_generation, select_uniform])
def test_k_larger_than_pool_selects_the_whole_pool_once(select) -> None:  # type: ignore[no-untyped-def]
    pool = make_pool(problems=2, per_problem=4)
    selection = select(pool, k=100)
    assert sorted(ids(selection)) == sorted(c.solution_id for c in pool)


def test_k_larger_than_pool_keeps_wrong_answers_first() -> None:
    pool = make_pool(problems=2, per_problem=4)
    selection = select_generation(pool, k=100)
    wrong = [c for c in pool if c.correct is False]
    assert ids(selection[: len(wrong)]) == [c.solution_id for c in best_first(wrong)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k": -1},
        {"k": 3, "per_problem_cap": 0},
        {"k": 3, "convincing_wrong_fraction": 1.5},
        {"k": 3, "convincing_wrong_fraction": -0.1},
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError):
        select_generation(make_pool(), **kwargs)


def test_duplicate_or_unrankable_candidates_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        select_generation([Candidate(1, 1, 0.5, False), Candidate(1, 1, 0.6, False)], k=1)
    with pytest.raises(ValueError, match="NaN"):
        select_generation([Candidate(1, 1, float("nan"), False)], k=1)


# --- uncertainty: the ensemble's disagreement ------------------------------------------------------


def test_ensemble_disagreement_stops_at_the_first_step_the_ensemble_calls_wrong() -> None:
    # Three heads, four steps. Step 3 (mean 0.7) is the first called wrong; step 4's wide
    # spread comes after it, so it does not count.
    error_probs = [
        [0.1, 0.2, 0.6, 0.0],
        [0.1, 0.6, 0.7, 1.0],
        [0.1, 0.4, 0.8, 0.0],
    ]
    # Population std across heads: step 1 -> 0, step 2 -> std(0.2, 0.6, 0.4), step 3 -> std(.6,.7,.8)
    step_two = ((0.2 - 0.4) ** 2 + (0.6 - 0.4) ** 2 + 0.0) / 3
    assert ensemble_disagreement(error_probs) == pytest.approx(step_two**0.5)


def test_ensemble_disagreement_counts_every_step_when_none_is_called_wrong() -> None:
    # Two heads, split 0/1 at the last step only: the largest possible spread, 0.5.
    assert ensemble_disagreement([[0.0, 0.0, 0.0], [0.0, 0.2, 1.0]]) == pytest.approx(0.5)


def test_ensemble_disagreement_of_agreeing_heads_or_no_steps_is_zero() -> None:
    assert ensemble_disagreement([[0.3, 0.9], [0.3, 0.9]]) == 0.0
    assert ensemble_disagreement([]) == 0.0
    assert ensemble_disagreement([[], []]) == 0.0


def test_ensemble_disagreement_rejects_a_shape_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="heads x steps"):
        ensemble_disagreement([0.1, 0.2])
    with pytest.raises(ValueError, match="NaN"):
        ensemble_disagreement([[0.1, float("nan")]])


def uncertain_pool() -> list[Candidate]:
    return [
        Candidate(1, 1, 0.9, False, uncertainty=0.10),
        Candidate(2, 1, 0.8, True, uncertainty=0.40),
        Candidate(3, 2, 0.7, False, uncertainty=0.40),
        Candidate(4, 2, 0.6, True, uncertainty=0.30),
        Candidate(5, 3, 0.5, None, uncertainty=0.20),
        Candidate(6, 3, 0.4, False),  # never measured
    ]


def test_uncertainty_picks_the_most_disputed_ties_to_the_lower_id() -> None:
    selection = select_uncertain(uncertain_pool(), k=3)
    assert [(s.solution_id, s.rule, s.score) for s in selection] == [
        (2, "uncertainty", 0.40),
        (3, "uncertainty", 0.40),
        (4, "uncertainty", 0.30),
    ]
    assert [s.rank for s in selection] == [1, 2, 3]


def test_uncertainty_skips_unmeasured_candidates_and_exclusions_and_caps() -> None:
    everything = select_uncertain(uncertain_pool(), k=10)
    assert sorted(ids(everything)) == [1, 2, 3, 4, 5]
    assert ids(select_uncertain(uncertain_pool(), k=3, exclude_ids={2})) == [3, 4, 5]
    capped = select_uncertain(uncertain_pool(), k=10, per_problem_cap=1)
    assert ids(capped) == [2, 3, 5]


def test_uncertainty_refuses_nan() -> None:
    with pytest.raises(ValueError, match="NaN"):
        select_uncertain([Candidate(1, 1, 0.5, False, uncertainty=float("nan"))], k=1)


# --- mix --------------------------------------------------------------------------------------------


def test_mix_gives_each_rule_its_share_without_repeats() -> None:
    pool = uncertain_pool()
    selection = select_mix(pool, k=4, shares={"convincing_wrong": 0.5, "uncertainty": 0.5})
    # Wrong answers by score: 1 (0.9), 3 (0.7). Then the most disputed not yet taken: 2, 4.
    assert [(s.solution_id, s.rule) for s in selection] == [
        (1, "convincing_wrong"),
        (3, "convincing_wrong"),
        (2, "uncertainty"),
        (4, "uncertainty"),
    ]
    assert [s.score for s in selection] == [0.9, 0.7, 0.40, 0.30]


def test_mix_share_counts_round_half_up_and_the_first_rule_fills_the_rest() -> None:
    pool = make_pool(problems=6, per_problem=10)
    pool = [
        Candidate(c.solution_id, c.problem_id, c.score, c.correct, uncertainty=c.score / 2)
        for c in pool
    ]
    selection = select_mix(pool, k=5, shares={"uncertainty": 0.3, "uniform": 0.7})
    # 5 * 0.3 = 1.5 -> 2 by uncertainty, 5 * 0.7 = 3.5 -> 4 drawn, cut at k.
    assert Counter(s.rule for s in selection) == {"uncertainty": 2, "uniform": 3}
    assert len(set(ids(selection))) == 5


def test_mix_remainder_is_filled_when_a_share_runs_dry() -> None:
    # Only one candidate has an uncertainty: the uncertainty share gets one, the first rule
    # (convincing_wrong, then its convincing fill-up) takes the rest.
    pool = [Candidate(i, i, 1 - i / 10, i % 2 == 0) for i in range(1, 7)]
    pool[5] = Candidate(6, 6, 0.4, True, uncertainty=0.2)
    selection = select_mix(pool, k=5, shares={"convincing_wrong": 0.4, "uncertainty": 0.6})
    assert [(s.solution_id, s.rule) for s in selection] == [
        (1, "convincing_wrong"),
        (3, "convincing_wrong"),
        (6, "uncertainty"),
        (5, "convincing_wrong"),
        (2, "convincing"),
    ]


def test_mix_respects_exclusions_and_one_cap_across_shares() -> None:
    pool = [
        Candidate(sid, sid // 10, 0.9 - sid / 1000, sid % 2 == 1, uncertainty=sid / 1000)
        for sid in range(10, 50)
    ]
    selection = select_mix(
        pool,
        k=8,
        shares={"convincing_wrong": 0.5, "uncertainty": 0.5},
        per_problem_cap=2,
        exclude_ids={11, 49},
    )
    assert len(selection) == 8
    assert not {11, 49} & set(ids(selection))
    assert max(Counter(s.problem_id for s in selection).values()) <= 2


@pytest.mark.parametrize(
    ("shares", "message"),
    [
        ({}, "at least one"),
        ({"convincing_wrong": 0.5, "mix": 0.5}, "cannot hold 'mix'"),
        ({"bogus": 1.0}, "cannot hold 'bogus'"),
        ({"convincing_wrong": 0.5, "uncertainty": 0.4}, "sum to 1"),
        ({"convincing_wrong": 1.5, "uncertainty": -0.5}, r"\[0, 1\]"),
        ({"uncertainty": float("nan")}, r"\[0, 1\]"),
    ],
)
def test_mix_rejects_bad_shares(shares: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        select_mix(uncertain_pool(), k=2, shares=shares)


# --- choosing a rule by name ------------------------------------------------------------------------


def test_rules_offered_to_a_lab() -> None:
    assert RULES == ("convincing_wrong", "uncertainty", "disagreement", "mix", "uniform")


def test_select_by_rule_dispatches_to_the_named_rule() -> None:
    pool = uncertain_pool()
    assert select_by_rule("convincing_wrong", pool, k=3) == select_generation(pool, k=3)
    assert select_by_rule(
        "convincing_wrong", pool, k=3, convincing_wrong_fraction=1.0
    ) == select_generation(pool, k=3, convincing_wrong_fraction=1.0)
    assert select_by_rule("uncertainty", pool, k=2) == select_uncertain(pool, k=2)
    assert select_by_rule("uniform", pool, k=2, seed=4) == select_uniform(pool, k=2, seed=4)
    shares = {"uncertainty": 0.5, "convincing_wrong": 0.5}
    assert select_by_rule("mix", pool, k=4, shares=shares) == select_mix(pool, k=4, shares=shares)


def test_select_by_rule_names_the_valid_rules_for_an_unknown_one() -> None:
    with pytest.raises(
        ValueError, match="convincing_wrong, uncertainty, disagreement, mix, uniform"
    ):
        select_by_rule("most_confusing", uncertain_pool(), k=2)


def test_select_by_rule_rejects_options_the_rule_does_not_take() -> None:
    with pytest.raises(ValueError, match="needs shares"):
        select_by_rule("mix", uncertain_pool(), k=2)
    with pytest.raises(ValueError, match="shares"):
        select_by_rule("uniform", uncertain_pool(), k=2, shares={"uniform": 1.0})


# --- routing by judge disagreement (issue 47) ----------------------------------------------------


def test_judge_disagreement_hand_computed() -> None:
    # 4 steps; positions 1, 4 ("no error"), 1: pairs 0.5 + 0.5 x 3/4 = 0.875, 0.875 and 0.
    assert judge_disagreement([1, None, 1], 4) == pytest.approx((0.875 + 0.875 + 0) / 3)
    # Both call it right, or name the same step: no disagreement.
    assert judge_disagreement([None, None], 5) == 0.0
    assert judge_disagreement([2, 2, 2], 5) == 0.0
    # "step 0 is wrong" against "nothing is": the most there is.
    assert judge_disagreement([0, None], 3) == 1.0
    # Both call it wrong, two steps apart of 4: half the normalised distance.
    assert judge_disagreement([0, 2], 4) == pytest.approx(0.25)
    # The last step wrong against none wrong: the verdict differs, the position by one step.
    assert judge_disagreement([3, None], 4) == pytest.approx(0.5 + 0.5 / 4)


def test_judge_disagreement_needs_two_voters_and_real_steps() -> None:
    assert judge_disagreement([], 3) is None
    assert judge_disagreement([1], 3) is None
    with pytest.raises(ValueError, match="step index"):
        judge_disagreement([3, None], 3)
    with pytest.raises(ValueError, match="step index"):
        judge_disagreement([-1, None], 3)
    with pytest.raises(ValueError, match="n_steps"):
        judge_disagreement([None, None], 0)


def test_disagreement_routes_the_most_disputed_first_on_fixed_judge_outputs() -> None:
    # Fixed verdicts (prm, llm, mc) per solution of 4 steps; the order is worked out by hand:
    # 11: (0, None, None) -> pairs 1, 1, 0 -> 0.6667
    # 12: (1, None, 1) -> 0.5833;  13: (None, None, None) -> 0;  14: (1, 3, None) -> pairs
    # 0.25, 0.875, 0.625 -> 0.5833 (ties 12: the lower id first);  15: (2,) one voter -> none
    verdicts = {
        11: ([0, None, None], 1),
        12: ([1, None, 1], 1),
        13: ([None, None, None], 2),
        14: ([1, 3, None], 2),
        15: ([2], 3),
    }
    pool = [
        Candidate(sid, problem, 0.5, None, disagreement=judge_disagreement(firsts, 4))
        for sid, (firsts, problem) in verdicts.items()
    ]
    picks = select_disagreement(pool, k=5)
    assert [(p.solution_id, p.rule, round(p.score, 4)) for p in picks] == [
        (11, "disagreement", 0.6667),
        (12, "disagreement", 0.5833),
        (14, "disagreement", 0.5833),
        (13, "disagreement", 0.0),
    ]
    assert [p.rank for p in picks] == [1, 2, 3, 4]
    capped = select_disagreement(pool, k=5, per_problem_cap=1, exclude_ids={11})
    assert [p.solution_id for p in capped] == [12, 14]
    assert select_by_rule("disagreement", pool, k=2) == select_disagreement(pool, k=2)
    with pytest.raises(ValueError, match="no option"):
        select_by_rule("disagreement", pool, k=2, shares={"uniform": 1.0})
    with pytest.raises(ValueError, match="NaN"):
        select_disagreement([Candidate(1, 1, 0.5, None, disagreement=math.nan)], k=1)
