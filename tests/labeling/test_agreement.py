"""Krippendorff's alpha against textbook values and hand computations; solution agreement."""

import pytest

from labeling.agreement import (
    add_coincidence,
    alpha_from_coincidence,
    coincidence,
    krippendorff_alpha,
    solution_agreement,
)

N = None
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", 4 coders x 12 units.
TEXTBOOK = list(
    zip(
        [1, 2, 3, 3, 2, 1, 4, 1, 2, N, N, N],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, N, 3],
        [N, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, N],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, N],
        strict=True,
    )
)


@pytest.mark.parametrize(
    "metric, expected", [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)]
)
def test_alpha_matches_krippendorffs_published_example(metric, expected):
    assert krippendorff_alpha(TEXTBOOK, metric) == pytest.approx(expected, abs=5e-4)


def test_ordinal_alpha_on_the_step_scale_matches_a_hand_computation():
    # n(-1)=2, n(0)=3, n(+1)=3, n=8; delta2(0,1)=9, delta2(-1,0)=6.25, delta2(-1,1)=30.25
    # D_o sum = 2*9 = 18; sum n_c n_k delta2 = 2*(37.5+181.5+81) = 600; alpha = 1 - 7*18/600
    units = [(-1, -1), (0, 0), (1, 1), (1, 0)]
    assert krippendorff_alpha(units, "ordinal") == pytest.approx(1 - 7 * 18 / 600)


def test_alpha_is_zero_when_disagreement_equals_chance_and_one_when_all_agree():
    assert krippendorff_alpha([(1, 1), (1, 0)], "nominal") == pytest.approx(0.0)
    assert krippendorff_alpha([(1, 1), (1, 0)], "ordinal") == pytest.approx(0.0)
    assert krippendorff_alpha([(1, 1), (0, 0)], "ordinal") == 1.0
    assert krippendorff_alpha([(1, None)], "ordinal") is None  # nothing pairable


def test_coincidence_matrices_add_up_to_the_alpha_of_all_units():
    first, second = TEXTBOOK[:6], TEXTBOOK[6:]
    total = add_coincidence(coincidence(first), coincidence(second))
    assert alpha_from_coincidence(total, "ordinal") == pytest.approx(
        krippendorff_alpha(TEXTBOOK, "ordinal")
    )
    back = add_coincidence(total, coincidence(second), sign=-1)
    assert alpha_from_coincidence(back) == pytest.approx(krippendorff_alpha(first))


def test_solution_agreement_counts_raw_pairs_and_first_error_positions():
    result = solution_agreement({1: [1, 1, -1], 2: [1, 0, 1, 1]}, {1: True, 2: True})
    assert result.steps_compared == 3
    assert result.raw == pytest.approx(1 / 3)
    assert result.first_error_agree is False
    [pair] = result.pairs
    assert (pair.compared, pair.same, pair.first_error_same) == (3, 1, False)


def test_a_give_up_has_no_first_error_to_disagree_with():
    result = solution_agreement({1: [1, 1], 2: [1, 1, -1]}, {1: False, 2: True})
    assert result.first_error_agree is True and result.raw == 1.0
