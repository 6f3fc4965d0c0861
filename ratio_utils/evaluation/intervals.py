"""Interval cells of every result table: a mean over queries or a paired difference, with its 95% bootstrap
interval (and permutation p), computed by `ratio_utils.evaluation.stats` and cached across notebooks.

Serves the tables of notebooks 08–11 and 13 (`paper_tables`, `stages/analyses`, `stages/unified_retriever`).
A cached interval is keyed by the per-query values, the resamples, the seed, the confidence and the version
of the statistics code (a hash of `stats`' source), so an edit of how intervals or p-values are computed
makes every cell compute again instead of reusing an interval of the old code.

Reads and writes: cfg.paths.bootstrap_cache (cache/bootstrap_cells.json), when a path is given.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

from ..io import write_json_atomic
from ..publish.run_records import count_reused
from . import stats

CONFIDENCE = 0.95


def code_version(module: ModuleType) -> str:
    """sha256 (first 16 hex digits) of a module's source."""
    return hashlib.sha256(inspect.getsource(module).encode("utf-8")).hexdigest()[:16]


# Every interval and p-value is computed in `stats`; the whole module is hashed, not a hand-kept list of its
# functions, so a helper added there later cannot change results under an old key.
STATS_CODE_VERSION = code_version(stats)


class IntervalCache:
    """Bootstrap intervals already computed, keyed by the per-query values, resamples, seed and `STATS_CODE_VERSION`.

    Intervals of 10,000 resamples take ~0.5 s per cell on 2 cores; the tables are assembled after
    every notebook of 08–10, so each interval is computed once and looked up afterwards. `save` also
    records, for the run's time table, how many of the intervals asked for were computed before (run_records).
    """

    REUSE_RECORD = "bootstrap intervals computed before (cache/bootstrap_cells.json)"

    def __init__(self, path: Path | None, seed: int, n_resamples: int = stats.N_RESAMPLES):
        self.path, self.seed, self.n_resamples = path, seed, n_resamples
        self.values: dict[str, list[float]] = {}
        if path is not None and path.exists():
            self.values = json.loads(path.read_text(encoding="utf-8"))
        self._dirty = False
        self._earlier = set(self.values)  # computed by an earlier notebook or run
        self._asked: set[str] = set()

    def _key(self, kind: str, *arrays: np.ndarray) -> str:
        digest = hashlib.sha256(f"{kind}|{self.n_resamples}|{self.seed}|{CONFIDENCE}|{STATS_CODE_VERSION}".encode())
        for array in arrays:
            digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
            digest.update(b"|")
        return digest.hexdigest()

    def _memo(self, key: str, compute) -> list[float]:
        if key not in self.values:
            self.values[key] = [float(x) for x in compute()]
            self._dirty = True
        self._asked.add(key)
        return self.values[key]

    def interval(self, values: np.ndarray) -> tuple[float, float]:
        low, high = self._memo(self._key("ci", values), lambda: stats.bootstrap_ci(
            values, n_resamples=self.n_resamples, confidence=CONFIDENCE, seed=self.seed))
        return low, high

    def paired(self, a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
        def compute():
            low, high = stats.paired_bootstrap_ci(a, b, n_resamples=self.n_resamples, confidence=CONFIDENCE,
                                                  seed=self.seed)
            return low, high, stats.paired_permutation_test(a, b, n_permutations=self.n_resamples, seed=self.seed)

        low, high, p = self._memo(self._key("paired", a, b), compute)
        return low, high, p

    def save(self) -> None:
        if self.path is None:
            return
        count_reused(self.REUSE_RECORD, len(self._asked & self._earlier), len(self._asked))
        self._asked = set()
        if self._dirty:
            write_json_atomic(self.path, self.values)
            self._dirty = False


@dataclass(frozen=True)
class Cell:
    """A mean over queries, or a paired difference over the queries two systems both scored.

    value, low, high: the mean (or mean difference) and its 95% bootstrap interval, as fractions.
    n: the queries it is computed on.
    n_effective: for a paired difference, the queries whose difference can be non-zero (`paired_cell`); None for a
        mean. The ≥ 30 rule and the † read it (a difference over 50 queries of which 47 are fixed at 0 by
        construction rests on 3 queries).
    """

    value: float
    low: float
    high: float
    n: int
    n_effective: int | None = None

    @property
    def effective_n(self) -> int:
        """The queries that decide the cell: `n_effective` where it is known, else `n`."""
        return self.n if self.n_effective is None else self.n_effective

    @property
    def indicative(self) -> bool:
        return stats.is_indicative(self.effective_n)

    def text(self, scale: float = 100, digits: int = 1) -> str:
        return (stats.format_ci(self.value, self.low, self.high, scale=scale, digits=digits)
                + stats.dagger(self.effective_n))


def cell(values, cache: IntervalCache) -> Cell:
    """Mean of per-query values with its bootstrap interval and the number of queries."""
    array = np.asarray(values, dtype=float)
    low, high = cache.interval(array)
    return Cell(float(array.mean()), low, high, int(array.size))


def paired_cell(cache: IntervalCache, a: pd.Series, b: pd.Series, *, fixed=()) -> tuple[Cell, float]:
    """mean(a - b) over the queries both score, its paired bootstrap interval, and the permutation p.

    `fixed`: qids whose value of `a` is `b`'s by construction, e.g. a reranked query that kept its first-stage order
    because its request had no answer (`rerank_promotion.kept_first_stage_order`); they stay in the mean and the
    interval (they are part of the sample) but not in the cell's `n_effective`, the queries that can differ.
    """
    common = a.dropna().index.intersection(b.dropna().index).sort_values()  # qid order, whatever the input order
    first, second = a.loc[common].to_numpy(float), b.loc[common].to_numpy(float)
    low, high, p = cache.paired(first, second)
    can_differ = len(common.difference(pd.Index(list(fixed), dtype=common.dtype)))
    return Cell(float((first - second).mean()), low, high, len(common), can_differ), p


def cell_record(c: Cell, p: float | None = None, *, scale: float = 100, **keys) -> dict:
    """A cell (a mean, or a paired difference with its p) as a long numeric record (report.RECORD_COLUMNS);
    `scale` 100: fractions written as % points; `n_effective` only for a paired difference."""
    record = {**keys, "value": scale * c.value, "low": scale * c.low, "high": scale * c.high, "n": c.n, "p": p}
    return record if c.n_effective is None else {**record, "n_effective": c.n_effective}
