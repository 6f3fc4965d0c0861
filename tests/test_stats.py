"""ratio_utils.evaluation.stats against scipy's bootstrap and permutation test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from ratio_utils.evaluation import stats


def _reciprocal_ranks(n: int, seed: int) -> np.ndarray:
    """Per-query MRR@10-like values: many zeros, some 1, 1/2, 1/3 …"""
    rng = np.random.default_rng(seed)
    ranks = rng.integers(1, 25, size=n)
    return np.where(ranks <= 10, 1.0 / ranks, 0.0)


def test_bootstrap_ci_matches_scipy_percentile():
    values = _reciprocal_ranks(200, seed=1)
    ours = stats.bootstrap_ci(values, n_resamples=20_000, seed=3)
    ref = sps.bootstrap((values,), np.mean, n_resamples=20_000, method="percentile",
                        random_state=5).confidence_interval
    # Two Monte Carlo estimates of the same quantiles: equal up to resampling noise.
    assert ours[0] == pytest.approx(ref.low, abs=0.01)
    assert ours[1] == pytest.approx(ref.high, abs=0.01)
    assert ours[0] < values.mean() < ours[1]


def test_bootstrap_ci_is_seeded_and_narrows_with_more_queries():
    small, large = _reciprocal_ranks(40, seed=2), _reciprocal_ranks(4_000, seed=2)
    assert stats.bootstrap_ci(small, seed=7) == stats.bootstrap_ci(small, seed=7)
    width = lambda ci: ci[1] - ci[0]  # noqa: E731
    assert width(stats.bootstrap_ci(large)) < width(stats.bootstrap_ci(small)) / 3


def test_paired_bootstrap_ci_matches_scipy_on_differences():
    a, b = _reciprocal_ranks(150, seed=4), _reciprocal_ranks(150, seed=5)
    ours = stats.paired_bootstrap_ci(a, b, n_resamples=20_000)
    ref = sps.bootstrap((a, b), lambda x, y: np.mean(x - y), paired=True, n_resamples=20_000,
                        method="percentile", random_state=0).confidence_interval
    assert ours[0] == pytest.approx(ref.low, abs=0.012)
    assert ours[1] == pytest.approx(ref.high, abs=0.012)


@pytest.mark.parametrize("n,shift", [(9, 0.0), (12, 0.3), (60, 0.05)])
def test_paired_permutation_test_matches_scipy(n, shift):
    rng = np.random.default_rng(n)
    a = _reciprocal_ranks(n, seed=n) + shift * rng.random(n)
    b = _reciprocal_ranks(n, seed=n + 100)
    ours = stats.paired_permutation_test(a, b, n_permutations=20_000)
    # scipy enumerates all 2^n sign flips when that is fewer than n_resamples (exact p for n = 9, 12).
    ref = sps.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
                               permutation_type="samples", n_resamples=20_000, alternative="two-sided",
                               random_state=0).pvalue
    assert ours == pytest.approx(ref, abs=0.015)


def test_permutation_p_value_is_small_for_a_clear_difference_and_never_zero():
    a = np.ones(50)
    b = np.zeros(50)
    p = stats.paired_permutation_test(a, b, n_permutations=2_000)
    assert 0 < p <= 1 / 2_001 * 1.0001


def test_errors_and_formatting():
    with pytest.raises(ValueError, match="no per-query values"):
        stats.bootstrap_ci([])
    with pytest.raises(ValueError, match="same queries"):
        stats.paired_bootstrap_ci([1, 0], [1])
    with pytest.raises(ValueError, match="NaN"):
        stats.bootstrap_ci([0.5, float("nan")])
    assert stats.format_ci(0.2334, 0.2141, 0.2519) == "23.3 [21.4, 25.2]"
    assert stats.format_ci(0.5, float("nan"), 0.6) == "50.0"
    assert stats.format_ci(float("nan"), 0.1, 0.2) == ""
    assert stats.is_indicative(13) and not stats.is_indicative(30)


def test_format_p_prints_the_floor_of_the_permutation_count_never_zero():
    floor = 1 / 10_001
    assert stats.format_p(floor) == "< 1e-4"
    # the value a clear difference gets from the test itself
    assert stats.format_p(stats.paired_permutation_test(np.ones(50), np.zeros(50))) == "< 1e-4"
    assert stats.format_p(2 / 10_001) == "0.0002"  # the next attainable value is a number, not 0
    assert stats.format_p(0.25237476) == "0.2524"
    assert stats.format_p(1.0) == "1.0000"
    # the floor follows the count: 1 / (n + 1), as a one-digit bound at or above it
    assert stats.format_p(1 / 1_000, n_permutations=999) == "< 1e-3"
    assert stats.format_p(1 / 501, n_permutations=500) == "< 2e-3"
    assert stats.format_p(2 / 501, n_permutations=500) == "0.004"
    assert stats.format_p(1 / 1_001, n_permutations=1_000) == "< 1e-3"


def test_format_p_blank_for_missing_and_errors_for_impossible_values():
    assert (stats.format_p(None) == "" and stats.format_p(float("nan")) == ""
            and stats.format_p(np.float64("nan")) == "")
    with pytest.raises(ValueError, match="lies in"):
        stats.format_p(1.2)
    with pytest.raises(ValueError, match="lies in"):
        stats.format_p(-0.01)
    with pytest.raises(ValueError, match="n_permutations"):
        stats.format_p(0.5, n_permutations=0)


# -- a family of tests: Holm's adjustment -------------------------------------------------------------------------


def test_holm_adjustment_matches_statsmodels():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(11)
    p = np.concatenate([rng.uniform(0, 0.01, 8), rng.uniform(0, 1, 40), [1e-4, 1e-4, 0.05, 1.0]])
    rng.shuffle(p)
    reject, expected, _, _ = multipletests(p, alpha=0.05, method="holm")
    ours = stats.holm_adjust(p)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12)
    assert ((ours < 0.05) == reject).all()
    assert (ours >= p).all() and ours.max() <= 1.0
    # a p-value 0.0072 that a family of 40 tests lifts above 0.05, as in the review of the committed claims
    assert stats.holm_adjust([0.0072] + [0.5] * 39)[0] == pytest.approx(0.0072 * 40)


def test_holm_leaves_a_missing_p_out_of_the_family():
    from statsmodels.stats.multitest import multipletests

    p = np.array([0.01, np.nan, 0.02, 0.04])
    ours = stats.holm_adjust(p)
    assert np.isnan(ours[1])
    np.testing.assert_allclose(ours[[0, 2, 3]], multipletests(p[[0, 2, 3]], method="holm")[1])
    assert np.isnan(stats.holm_adjust([np.nan])).all() and stats.holm_adjust([]).size == 0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        stats.holm_adjust([0.2, 1.5])


# -- proportions: exact (Clopper–Pearson) intervals -----------------------------------------------------------------


@pytest.mark.parametrize(("k", "n"), [(5, 5), (0, 4), (38, 40), (1, 3), (107, 185)])
def test_proportion_ci_is_scipys_clopper_pearson(k, n):
    expected = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert stats.proportion_ci(k, n) == pytest.approx((expected.low, expected.high), abs=1e-12)


def test_five_of_five_reads_47_8_to_100_not_a_degenerate_interval():
    low, high = stats.proportion_ci(5, 5)
    assert stats.format_ci(1.0, low, high) == "100.0 [47.8, 100.0]"
    # the percentile bootstrap of the same 0/1 sample collapses to a point
    assert stats.bootstrap_ci(np.ones(5), n_resamples=500) == (1.0, 1.0)
    with pytest.raises(ValueError, match="trial"):
        stats.proportion_ci(0, 0)
    with pytest.raises(ValueError, match="successes"):
        stats.proportion_ci(6, 5)
