"""The summary stage (notebook 14, ratio_utils.stages.summary) on fixture tables, timings and the tiny benchmark."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from ratio_utils import dataset
from ratio_utils.config import load_config
from ratio_utils.pipeline import RUN_DIR_ENV
from ratio_utils.stages import summary

COLUMNS = ["System", "Prefix", "Setup", "Address R@10", "Address M@10", "Broaden R@10", "Broaden M@10"]
ROWS = [["BM25-unigram", "-", "Baseline", 31.2, 19.2, 30.8, 30.8],
        ["all-MiniLM-L6-v2", "generic", "Tuned", 30.3, 18.2, None, None]]


def _with_separate_intervals(suffixes: tuple[str, str]) -> pd.DataFrame:
    frame = pd.DataFrame(ROWS, columns=COLUMNS)
    frame[f"Address M@10{suffixes[0]}"] = [15.0, 14.0]
    frame[f"Address M@10{suffixes[1]}"] = [23.5, 22.0]
    return frame


@pytest.mark.parametrize("suffixes", [("_low", "_high"), (" low", " high"), (" (low)", " (high)"), ("_lo", "_hi")])
def test_table1_reader_finds_interval_columns_whatever_their_separator(tmp_path, suffixes):
    path = tmp_path / "table1.csv"
    _with_separate_intervals(suffixes).to_csv(path, index=False)
    long = summary.read_results_table(path)
    cell = long[(long.system == "BM25-unigram") & (long.move == "address") & (long.metric == "M@10")].iloc[0]
    assert (cell.value, cell.low, cell.high) == (19.2, 15.0, 23.5)
    recall = long[(long.system == "BM25-unigram") & (long.move == "address") & (long.metric == "R@10")].iloc[0]
    assert recall.value == 31.2 and pd.isna(recall.low)  # no interval column for R@10
    assert long[(long.system == "all-MiniLM-L6-v2") & (long.move == "broaden")].empty  # empty cells are left out


def test_table1_reader_reads_cells_written_with_their_interval(tmp_path):
    path = tmp_path / "table1.csv"
    frame = pd.DataFrame(ROWS, columns=COLUMNS).astype({"Address M@10": object})
    frame.loc[0, "Address M@10"] = "19.2 [15.0, 23.5] †"
    frame.to_csv(path, index=False)
    long = summary.read_results_table(path)
    cell = long[(long.system == "BM25-unigram") & (long.move == "address") & (long.metric == "M@10")].iloc[0]
    assert (cell.value, cell.low, cell.high) == (19.2, 15.0, 23.5)


def test_headline_puts_this_run_beside_the_paper(tmp_path):
    path = tmp_path / "table1.csv"
    _with_separate_intervals(("_low", "_high")).to_csv(path, index=False)
    queries = pd.DataFrame([{"move": "address", "split": "test", "pairs": 110, "queries": 109}])
    headline = summary.headline_table(summary.read_results_table(path), ("M@10", "R@10"), queries, "test")
    ours = headline[(headline.source == "this run") & (headline.move == "address")]
    assert ours.set_index("system").loc["BM25-unigram", "M@10"] == "19.2 [15.0, 23.5]"
    assert ours.set_index("system").loc["all-MiniLM-L6-v2 (generic)", "queries"] == 109
    paper = headline[headline.source.str.startswith("paper") & (headline.move == "address")].set_index("setup")
    assert paper.loc["Tuned", "M@10"] == "21.5" and paper.loc["Tuned", "R@10"] == "35.4"
    assert list(headline["move"].drop_duplicates()) == ["address", "broaden", "specify"]
    assert "Tuned + rerank" not in set(paper.index)  # a silver number of the paper never sits in the test block


def test_silver_headline_holds_only_the_papers_silver_numbers(tmp_path):
    path = tmp_path / "table1.csv"
    _with_separate_intervals(("_low", "_high")).to_csv(path, index=False)
    headline = summary.headline_table(summary.read_results_table(path), ("M@10", "R@10"), None, "silver")
    paper = headline[headline.source.str.startswith("paper") & (headline.move == "address")].set_index("setup")
    assert paper.loc["Tuned + rerank", "M@10"] == "37.7" and paper.loc["Tuned", "R@10"] == "40.0"
    assert paper.loc["Tuned", "M@10"] == ""  # the paper's text states no silver Tuned M@10: left empty, not filled
    assert "21.5" not in set(headline["M@10"]) and "9.7" not in set(headline["M@10"])  # its unfiltered-test numbers


def test_headline_counts_the_queries_of_the_tables_own_query_set(tmp_path):
    """Table 1 on silver: the headline names the silver query count the table carries, not the test split's."""
    path = tmp_path / "table1.csv"
    frame = _with_separate_intervals(("_low", "_high"))
    frame["Address queries"] = [41, 41]
    frame.to_csv(path, index=False)
    queries = pd.DataFrame([{"move": "address", "split": "test", "pairs": 110, "queries": 109}])
    headline = summary.headline_table(summary.read_results_table(path), ("M@10", "R@10"), queries)
    ours = headline[(headline.source == "this run") & (headline.move == "address")]
    assert set(ours["queries"]) == {41}
    frame["Address queries"] = [12, 12]  # fewer than 30: the headline carries the dagger as the tables do
    frame.to_csv(path, index=False)
    few = summary.headline_table(summary.read_results_table(path), ("M@10", "R@10"), queries)
    assert few[(few.source == "this run") & (few.move == "address")].set_index("system").loc["BM25-unigram", "M@10"] \
        == "19.2 [15.0, 23.5]†"


def _provenance(tables, name: str, notes: list[str]) -> None:
    (tables / f"{name}.provenance.json").write_text(json.dumps({"notes": notes, "caption": name}), encoding="utf-8")


def test_reductions_are_collected_from_table_notes_and_grouped_by_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config()
    cfg.paths.tables.mkdir(parents=True)
    offline = "not available offline: no PyPI package ships this model and there is no model hub here."
    _provenance(cfg.paths.tables, "table1_silver_main", [f"Stella-en-1.5B-v5 (generic, Baseline): {offline}",
                                                         f"ReasonIR-8B (generic, Baseline): {offline}",
                                                         "Ties in a ranking are broken by candidate id."])
    _provenance(cfg.paths.tables, "table9", [f"No human label files in {tmp_path}/data/interim/judge/labels: cannot be computed."])
    table = summary.reductions(cfg)
    grouped = table[table["why / how"] == offline].iloc[0]
    assert grouped["what"] == "Stella-en-1.5B-v5 (generic, Baseline); ReasonIR-8B (generic, Baseline)"
    assert not table["why / how"].str.contains("Ties").any()  # not a reduction
    assert not table["why / how"].str.contains(str(tmp_path)).any()  # no absolute path of this machine
    assert "data/interim/judge/labels" in table["why / how"].iloc[-1]


def test_split_boundaries_on_a_year_axis():
    years = dataset.DatasetParams(split_by="year", splits={"train": {"start": None, "end": 2006},
                                                           "validation": {"start": 2007, "end": 2009},
                                                           "test": {"start": 2010, "end": None}})
    assert dataset.split_boundaries(years) == [2006.5, 2009.5]
    dates = dataset.DatasetParams()  # the paper's: train to 2025-09-30, validation to 2025-12-31
    first, second = dataset.split_boundaries(dates)
    assert 2025.2 < first < 2025.3 and second == pytest.approx(2025.5)
    papers = pd.DataFrame({"corpus": ["acl"] * 4 + ["aclsum"], "year": [2005, 2006, 2008, 2012, 2012]})
    fig = dataset.papers_per_year_figure(papers, years)
    ax = fig.axes[0]
    assert [line.get_xdata()[0] for line in ax.get_lines()] == [2006.5, 2009.5]
    assert [t.get_text() for t in ax.texts] == ["train", "validation", "test"]


def test_write_summary_end_to_end(tmp_path, monkeypatch, tiny_benchmark):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config()
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    cfg.paths.tables.mkdir(parents=True)
    _with_separate_intervals(("_low", "_high")).to_csv(cfg.paths.tables / "table1_silver_main.csv", index=False)
    _provenance(cfg.paths.tables, "table1_silver_main", ["Silver split absent for address: the unfiltered test set instead."])
    run_dir = tmp_path / "runs" / "default-1"
    run_dir.mkdir(parents=True)
    (run_dir / "timings.csv").write_text("notebook,seconds\n00_corpus.ipynb,60.0\n08_retrieval_baselines.ipynb,120.5\n")
    monkeypatch.setenv(RUN_DIR_ENV, str(run_dir))

    pd.DataFrame([{"move": "broaden", "split": "test", "config": 1, "beats_baseline_on_validation": False, "queries": 13,
                   "baseline": 0.135, "baseline_low": 0.05, "baseline_high": 0.25, "tuned": 0.135, "tuned_low": 0.05,
                   "tuned_high": 0.25, "difference": 0.0, "difference_low": 0.0, "difference_high": 0.0, "p_value": 1.0,
                   "indicative": True}]).to_csv(cfg.paths.tables / "finetune_tuned_vs_baseline.csv", index=False)
    result = summary.write_summary(cfg)
    paired = result.tuned_vs_baseline.iloc[0]
    assert paired["Tuned M@10"] == "13.5 [5.0, 25.0] †" and paired["Beats baseline on val"] == "no"
    assert result.timings["seconds"].tolist() == [60.0, 120.5] and set(result.timings["run"]) == {"default-1"}
    queries = result.queries.set_index(["move", "split"])
    assert queries.loc[("specify", "test"), "queries"] == 3
    assert len(result.provenance["params sha256"]) == 16
    report = cfg.paths.summary_report.read_text(encoding="utf-8")
    for heading in ("## Who produced the labels", "## The paper's claims tested by this run", "## Silver test set",
                    "## Unfiltered test set", "## What differs from the paper", "## Queries per move and split",
                    "## Reduced, replaced", "## Provenance"):
        assert heading in report
    # no records were written: every claim says it cannot be tested here, and why
    assert set(result.claims["silver: verdict"]) == {"cannot test here"}
    assert "notebook 09 has not run" in set(result.claims["silver: evidence"])
    # the tiny benchmark's test papers (2010) predate the default encoder (2021)
    assert result.contamination.startswith("Contamination: the test papers were published 2010–2010")
    assert "temporal split" in report
    differences = result.differences.set_index("what")
    assert differences.loc["test pool", "paper"] == "404,371 sentences"
    assert differences.loc["test pool", "this run"].endswith(" sentences")
    assert "19.2 [15.0, 23.5]" in report and "Total: 180 s" in report
    assert "](../figures/summary_mrr10.png)" in report and (cfg.paths.figures / "summary_mrr10.png").exists()
    assert str(tmp_path) not in report
