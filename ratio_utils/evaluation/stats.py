"""Uncertainty of per-query metrics: bootstrap intervals and paired tests, Holm's multiplicity adjustment of a family
of p-values, and exact (Clopper–Pearson) intervals of proportions.

Serves every stage that reports a metric over queries (tables of notebooks 08–14, the human study, the claims).
Reads and writes nothing: it takes arrays of per-query values (one value per query, e.g. reciprocal
ranks) or counts and returns intervals and p-values. The resampling is vectorised numpy rather than
`scipy.stats.bootstrap` / `scipy.stats.permutation_test`, because the tables call it for hundreds of
cells and scipy's generic path is ~10x slower there; the tests check both against scipy.
"""

from __future__ import annotations

import math

import numpy as np

# Cells computed on fewer queries than this are marked as indicative in the tables.
INDICATIVE_BELOW = 30

# Resamples of every interval and permutations of every test in the tables (one count, so the same
# comparison gets the same p wherever it is printed).
N_RESAMPLES = 10_000

_CHUNK = 1_000  # resamples drawn at a time, so memory stays n_queries x 1,000 floats


def _as_values(values) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if array.size == 0:
        raise ValueError("no per-query values: an interval needs at least one query")
    if not np.isfinite(array).all():
        raise ValueError("per-query values contain NaN or infinity")
    return array


def _paired(a, b) -> np.ndarray:
    first, second = _as_values(a), _as_values(b)
    if first.shape != second.shape:
        raise ValueError(f"paired values need the same queries: {first.size} vs {second.size} values")
    return first - second


def _bootstrap_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, _CHUNK):
        stop = min(start + _CHUNK, n_resamples)
        idx = rng.integers(0, values.size, size=(stop - start, values.size))
        means[start:stop] = values[idx].mean(axis=1)
    return means


def bootstrap_ci(values, *, n_resamples: int = N_RESAMPLES, confidence: float = 0.95,
                 seed: int = 13) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over queries."""
    array = _as_values(values)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    means = _bootstrap_means(array, n_resamples, seed)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


def paired_bootstrap_ci(a, b, *, n_resamples: int = N_RESAMPLES, confidence: float = 0.95,
                        seed: int = 13) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(a - b), resampling queries (a[i] and b[i] belong to query i)."""
    return bootstrap_ci(_paired(a, b), n_resamples=n_resamples, confidence=confidence, seed=seed)


def paired_permutation_test(a, b, *, n_permutations: int = N_RESAMPLES, seed: int = 13) -> float:
    """Two-sided sign-flip permutation p-value of mean(a - b) = 0.

    Each query's difference keeps or flips its sign at random; the p-value counts the observed
    statistic among the permuted ones (add-one rule of Phipson and Smyth, so it is never 0).
    """
    diff = _paired(a, b)
    observed = abs(diff.mean())
    rng = np.random.default_rng(seed)
    as_extreme = 0
    for start in range(0, n_permutations, _CHUNK):
        stop = min(start + _CHUNK, n_permutations)
        signs = rng.choice((-1.0, 1.0), size=(stop - start, diff.size))
        permuted = np.abs((signs * diff).mean(axis=1))
        # A tolerance, so ties with the observed statistic count despite float rounding.
        as_extreme += int((permuted >= observed - 1e-12).sum())
    return (as_extreme + 1) / (n_permutations + 1)


def holm_adjust(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values of one family of tests, in the input order (NaN stays NaN and is not a
    member of the family).

    The i-th smallest of the m p-values is multiplied by m - i + 1, the running maximum taken so the adjusted values
    keep the raw order, and capped at 1; deciding each test at adjusted p < alpha controls the family-wise error
    rate at alpha (Holm 1979), with no assumption on how the tests depend on each other (ours share queries).
    """
    raw = np.asarray(p_values, dtype=float).ravel()
    adjusted = np.full(raw.shape, np.nan)
    present = np.flatnonzero(~np.isnan(raw))
    if present.size == 0:
        return adjusted
    if ((raw[present] < 0) | (raw[present] > 1)).any():
        raise ValueError(f"a p-value lies in [0, 1], got {raw[present].min()} .. {raw[present].max()}")
    order = present[np.argsort(raw[present], kind="stable")]
    m = order.size
    stepped = np.maximum.accumulate((m - np.arange(m)) * raw[order])
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def proportion_ci(successes: int, trials: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper–Pearson) interval of a proportion `successes / trials`, as fractions.

    A bootstrap of a 0/1 sample is degenerate at the ends (5 of 5 resamples to [1, 1]); the exact binomial interval
    is not (5 of 5: [0.478, 1]). Computed by `scipy.stats.binomtest(...).proportion_ci(method="exact")`.
    """
    from scipy.stats import binomtest

    if trials < 1:
        raise ValueError(f"a proportion needs at least one trial, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in [0, trials], got {successes} of {trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    interval = binomtest(int(successes), int(trials)).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)


def is_indicative(n_queries: int) -> bool:
    return n_queries < INDICATIVE_BELOW


DAGGER = "†"  # marks a cell on fewer than INDICATIVE_BELOW queries


def dagger(n_queries: int) -> str:
    """'†' for a cell on fewer than INDICATIVE_BELOW queries, else ''."""
    return DAGGER if is_indicative(n_queries) else ""


def format_ci(value: float, low: float, high: float, *, scale: float = 100, digits: int = 1) -> str:
    """'23.3 [21.4, 25.2]' for a value and its interval (scaled to percent by default); blank if missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    point = f"{value * scale:.{digits}f}"
    if low is None or high is None or any(isinstance(x, float) and math.isnan(x) for x in (low, high)):
        return point
    return f"{point} [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"


def _resolution(n_permutations: int) -> tuple[int, int]:
    """(mantissa, exponent) of the smallest one-digit bound at or above the p floor 1 / (n + 1)."""
    floor = 1 / (n_permutations + 1)
    exponent = math.floor(math.log10(floor))
    mantissa = math.ceil(round(floor / 10**exponent, 9))
    if mantissa == 10:
        mantissa, exponent = 1, exponent + 1
    return mantissa, exponent


def format_p(p, n_permutations: int = N_RESAMPLES) -> str:
    """A permutation p-value as every table prints it; blank if missing.

    The add-one p of `paired_permutation_test` is never below 1 / (n_permutations + 1): a p at that
    floor prints as '< 1e-4' (10,000 permutations), not as a rounded 0. Other values print to the
    decimal of that bound ('0.0002', '0.2524'), so two tables of the same comparison print the same text.
    """
    if p is None or (isinstance(p, (float, np.floating)) and math.isnan(p)):
        return ""
    p = float(p)
    if n_permutations < 1:
        raise ValueError(f"n_permutations must be >= 1, got {n_permutations}")
    if not 0 <= p <= 1:
        raise ValueError(f"a p-value lies in [0, 1], got {p}")
    mantissa, exponent = _resolution(n_permutations)
    if p <= 1 / (n_permutations + 1) + 1e-12:
        return f"< {mantissa}e{exponent}"
    return f"{p:.{max(-exponent, 0)}f}"


def with_p_text(frame, n_permutations: int = N_RESAMPLES, columns=("p",)):
    """The shown form of a table whose `columns` hold numeric p-values (kept numeric in the CSV), via format_p."""
    present = [c for c in columns if c in frame]
    return frame.assign(**{c: frame[c].map(lambda p: format_p(p, n_permutations)) for c in present})
