"""Interval cells (ratio_utils.evaluation.intervals): the dagger below thirty queries, the cache shared by the
notebooks, and a cache key that changes with the statistics code, so an edit of `stats` never reuses an old
interval."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from ratio_utils.evaluation import intervals, stats
from ratio_utils.evaluation.intervals import IntervalCache, cell, paired_cell
from ratio_utils.evaluation.stats import DAGGER


def test_indicative_marking_starts_below_thirty_queries():
    cache = IntervalCache(None, seed=13, n_resamples=200)
    assert cell(pd.Series(np.linspace(0, 1, 29)), cache).text().endswith(DAGGER)
    assert not cell(pd.Series(np.linspace(0, 1, 30)), cache).text().endswith(DAGGER)


def test_interval_cache_records_how_many_intervals_an_earlier_notebook_computed(tmp_path, monkeypatch):
    from ratio_utils.pipeline import RUN_DIR_ENV
    from ratio_utils.publish import run_records

    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    values = [pd.Series(np.linspace(0, 1, n)) for n in (5, 6, 7)]
    monkeypatch.setenv(run_records.NOTEBOOK_ENV, "08.ipynb")
    first = IntervalCache(tmp_path / "cells.json", seed=13, n_resamples=200)
    for series in values[:2] * 2:  # asked twice in one notebook: computed once, not "reused"
        cell(series, first)
    first.save()
    monkeypatch.setenv(run_records.NOTEBOOK_ENV, "11.ipynb")
    later = IntervalCache(tmp_path / "cells.json", seed=13, n_resamples=200)
    for series in values:
        cell(series, later)
    later.save()
    assert run_records.reused_by_notebook(tmp_path / "run") == {
        "08.ipynb": "", "11.ipynb": f"2 of 3 {IntervalCache.REUSE_RECORD}"}


@pytest.fixture
def computations(monkeypatch) -> list[str]:
    """The names of the stats functions the cache calls, in call order (the real functions still compute)."""
    called: list[str] = []
    for name in ("bootstrap_ci", "paired_bootstrap_ci", "paired_permutation_test"):
        real = getattr(stats, name)
        monkeypatch.setattr(stats, name,
                            lambda *a, _real=real, _name=name, **k: called.append(_name) or _real(*a, **k))
    return called


def _cells(path) -> tuple:
    rng = np.random.default_rng(5)
    qids = [f"q{i:02d}" for i in range(40)]
    a, b = pd.Series(rng.random(40), index=qids), pd.Series(rng.random(40), index=qids)
    cache = IntervalCache(path, seed=13, n_resamples=300)
    mean, (diff, p) = cell(a, cache), paired_cell(cache, a, b)
    cache.save()
    return mean, diff, p


def test_a_cached_cell_is_reused_only_under_the_same_statistics_code(tmp_path, monkeypatch, computations):
    path = tmp_path / "cells.json"
    first = _cells(path)
    computed = list(computations)
    assert {"bootstrap_ci", "paired_bootstrap_ci", "paired_permutation_test"} <= set(computed)
    computations.clear()
    assert _cells(path) == first and computations == []  # same code: looked up
    monkeypatch.setattr(intervals, "STATS_CODE_VERSION", "another version")
    assert _cells(path) == first  # recomputed, with the same seed: the same values
    assert computations == computed


def _load_copy(path, source: str):
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_statistics_code_version_follows_the_source_of_stats(tmp_path):
    source = stats.__loader__.get_source(stats.__name__)
    assert intervals.STATS_CODE_VERSION == intervals.code_version(stats)
    assert intervals.code_version(_load_copy(tmp_path / "same_stats.py", source)) == intervals.STATS_CODE_VERSION
    # another interval rule (a different quantile method) is another version
    edited = source.replace("np.quantile(means, [alpha, 1 - alpha])",
                            "np.quantile(means, [alpha, 1 - alpha], method='lower')")
    assert edited != source
    assert intervals.code_version(_load_copy(tmp_path / "edited_stats.py", edited)) != intervals.STATS_CODE_VERSION


def test_a_paired_cell_counts_only_the_queries_that_can_differ():
    """Queries whose value is the reference's by construction (a kept first-stage order) stay in the mean but not in
    the effective n, which the † and the ≥ 30 rule read."""
    cache = IntervalCache(None, seed=13, n_resamples=200)
    qids = [f"q{i:02d}" for i in range(40)]
    base = pd.Series(np.linspace(0, 0.5, 40), index=qids)
    reranked = base.copy()
    reranked.iloc[:12] += 0.5
    diff, p = paired_cell(cache, reranked, base, fixed=qids[12:])
    assert (diff.n, diff.n_effective, diff.effective_n) == (40, 12, 12)
    assert diff.value == pytest.approx(0.5 * 12 / 40) and diff.indicative and diff.text().endswith(DAGGER)
    assert intervals.cell_record(diff, p)["n_effective"] == 12 and intervals.cell_record(diff, p)["n"] == 40
    every, _ = paired_cell(cache, reranked, base)
    assert every.n_effective == 40 and not every.text().endswith(DAGGER)
    # a fixed qid the two runs do not share changes nothing; a mean has no effective n
    assert paired_cell(cache, reranked, base, fixed=["elsewhere"])[0].n_effective == 40
    assert "n_effective" not in intervals.cell_record(cell(base, cache))
