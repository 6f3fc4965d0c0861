"""The summary (notebook 14: ratio_utils.stages.summary, its parts in ratio_utils.reporting.summary*) on fixture
tables, timings and the tiny benchmark."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pandas as pd
import pytest

from ratio_utils import dataset
from ratio_utils.config import load_config
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.param_sections import DatasetParams, RetrievalParams
from ratio_utils.pipeline import RUN_DIR_ENV
from ratio_utils.publish.published import RECORD_COLUMNS, read_records, records_frame, write_table
from ratio_utils.reporting import summary, summary_figure, summary_headline, summary_provenance, summary_setting
from ratio_utils.reporting.paper_tables import Expected, assemble_tables
from ratio_utils.retrieval import read_run
from ratio_utils.retrieval.runs import RunInfo, run_path, system_name, write_system_run
from ratio_utils.schema import MOVES, Move, Split
from ratio_utils.stages.retrieval_baselines import run_baselines
from ratio_utils.stages.summary import SummaryStage
from ratio_utils.systems.spec import SystemSpec

TABLE1 = "table1_silver_main"

# notebook 08's rows with bm25_ngrams [1, 2]
BM25_ROWS = (SystemSpec("BM25-unigram", "-", "bm25", "1"), SystemSpec("BM25-bigram", "-", "bm25", "2"))


def _cell(move: str, metric: str, value: float, low: float | None, high: float | None, n: int, *,
          model: str = "BM25-unigram", prefix: str = "-", setup: str = "Baseline", **keys) -> dict:
    return {"table": TABLE1, "move": move, "query_set": "silver", "metric": metric, "subject": model, "model": model,
            "prefix": prefix, "setup": setup, "value": value, "low": low, "high": high, "n": n, **keys}


def _table1_records(address_queries: int = 41) -> pd.DataFrame:
    """Table 1 as its numeric records: two rows, the second without a Broaden run; R@10 of BM25 without an interval."""
    n = address_queries
    return records_frame([
        _cell("address", "R@10", 31.2, None, None, n), _cell("address", "M@10", 19.2, 15.0, 23.5, n),
        _cell("broaden", "R@10", 30.8, 20.0, 40.0, 6), _cell("broaden", "M@10", 30.8, 20.0, 41.0, 6),
        _cell("address", "R@10", 30.3, 25.0, 35.0, n, model="all-MiniLM-L6-v2", prefix="generic", setup="Tuned",
              subject="all-MiniLM-L6-v2 (tuned)"),
        _cell("address", "M@10", 18.2, 14.0, 22.0, n, model="all-MiniLM-L6-v2", prefix="generic", setup="Tuned",
              subject="all-MiniLM-L6-v2 (tuned)"),
        _cell("address", "M@10", -1.0, -3.0, 1.0, n, reference="BM25-unigram", p=0.4),  # a paired difference: no cell
    ])


def _table7_records() -> pd.DataFrame:
    return records_frame([_cell("address", "M@10", 99.0, 98.0, 99.5, 109, table="table7_test_full", query_set="test")])


def _long(records: pd.DataFrame | None = None) -> pd.DataFrame:
    both = pd.concat([_table1_records(), _table7_records()], ignore_index=True)
    return summary_headline.results_long(both if records is None else records, TABLE1)


def test_results_are_the_tables_mean_cells_in_row_order():
    long = _long()
    cell = long[(long.system == "BM25-unigram") & (long.move == "address") & (long.metric == "M@10")]
    assert cell[["value", "low", "high", "queries"]].values.tolist() == [[19.2, 15.0, 23.5, 41]]  # not the difference
    recall = long[(long.system == "BM25-unigram") & (long.move == "address") & (long.metric == "R@10")].iloc[0]
    assert recall.value == 31.2 and pd.isna(recall.low)
    assert long[(long.system == "all-MiniLM-L6-v2") & (long.move == "broaden")].empty  # no run: no cell
    assert 99.0 not in set(long["value"])  # another table's cell
    assert list(dict.fromkeys(long["system"])) == ["BM25-unigram", "all-MiniLM-L6-v2"]


def test_headline_puts_this_run_beside_the_paper():
    queries = pd.DataFrame([{"move": "address", "split": "test", "pairs": 110, "queries": 109}])
    no_counts = _table1_records().drop(columns="n").reindex(columns=list(RECORD_COLUMNS))
    headline = summary_headline.headline_table(_long(no_counts), ("M@10", "R@10"), queries, "test")
    ours = headline[(headline.source == "this run") & (headline.move == "address")]
    assert ours.set_index("system").loc["BM25-unigram", "M@10"] == "19.2 [15.0, 23.5]"
    assert ours.set_index("system").loc["BM25-unigram", "R@10"] == "31.2"  # no interval: the value alone
    assert ours.set_index("system").loc["all-MiniLM-L6-v2 (generic)", "queries"] == 109  # no count: the test split's
    paper = headline[headline.source.str.startswith("paper") & (headline.move == "address")].set_index("setup")
    assert paper.loc["Tuned", "M@10"] == "21.5" and paper.loc["Tuned", "R@10"] == "35.4"
    assert list(headline["move"].drop_duplicates()) == ["address", "broaden", "specify"]
    assert "Tuned + rerank" not in set(paper.index)  # a silver number of the paper never sits in the test block


def test_silver_headline_holds_only_the_papers_silver_numbers():
    headline = summary_headline.headline_table(_long(), ("M@10", "R@10"), None, "silver")
    paper = headline[headline.source.str.startswith("paper") & (headline.move == "address")].set_index("setup")
    assert paper.loc["Tuned + rerank", "M@10"] == "37.7" and paper.loc["Tuned", "R@10"] == "40.0"
    assert paper.loc["Tuned", "M@10"] == ""  # the paper's text states no silver Tuned M@10: left empty, not filled
    assert "21.5" not in set(headline["M@10"]) and "9.7" not in set(headline["M@10"])  # its unfiltered-test numbers


def test_headline_counts_the_queries_of_the_tables_own_query_set():
    """Table 1 on silver: the headline names the query count of the records, not the test split's."""
    queries = pd.DataFrame([{"move": "address", "split": "test", "pairs": 110, "queries": 109}])
    headline = summary_headline.headline_table(_long(_table1_records(41)), ("M@10", "R@10"), queries)
    assert set(headline[(headline.source == "this run") & (headline.move == "address")]["queries"]) == {41}
    few = summary_headline.headline_table(_long(_table1_records(12)), ("M@10", "R@10"), queries)
    # fewer than 30 queries: the headline carries the dagger as the tables do
    assert few[(few.source == "this run") & (few.move == "address")].set_index("system").loc["BM25-unigram", "M@10"] \
        == "19.2 [15.0, 23.5]†"


def _garbled_table1(cfg) -> None:
    """Table 1 written by the writer with its records, its CSV's text columns garbled (the records are the numbers)."""
    garbled = pd.DataFrame({"System": ["??"], "Prefix": ["x"], "Setup": ["y"], "Address M@10": ["19.2 [0, 1]"],
                            "Address M@10 low": ["n/a"]})
    write_table(garbled, TABLE1, cfg, caption="Table 1 (crafted)", records=_table1_records().drop(columns="table"),
                latex=False)
    write_table(garbled, "table7_test_full", cfg, records=_table7_records().drop(columns="table"), latex=False)


def test_collect_reads_the_headline_from_the_records_not_the_csv(tmp_path, monkeypatch):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config()
    _garbled_table1(cfg)
    result = summary.collect(cfg, SummaryStage.from_config(cfg).params)
    ours = result.headline[result.headline.source == "this run"].set_index(["system", "move"])
    assert ours.loc[("BM25-unigram", "address"), "M@10"] == "19.2 [15.0, 23.5]"
    assert (ours.loc[("all-MiniLM-L6-v2 (generic)", "address"), ["setup", "R@10"]].tolist()
            == ["Tuned", "30.3 [25.0, 35.0]"])
    assert ours.loc[("BM25-unigram", "broaden"), "M@10"] == "30.8 [20.0, 41.0]†"
    assert "??" not in set(result.headline["system"]) and result.table1_caption == "Table 1 (crafted)"
    assert result.headline_test.set_index("source").loc["this run", "M@10"] == "99.0 [98.0, 99.5]"  # Table 7's record


def test_headline_cells_are_the_cells_of_the_written_table(cfg, tiny_benchmark):
    """Table 7 as assemble_tables writes it: the records carry each row's model, prefix and setup, and the
    headline shows the CSV's numbers."""
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    bench = load_benchmark(cfg.paths.benchmark)
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=10, splits=["test"]))
    assemble_tables(cfg, bench, expected=Expected(rows=BM25_ROWS), n_resamples=200)
    long = summary_headline.results_long(read_records(cfg), "table7_test_full")
    csv = pd.read_csv(cfg.paths.tables / "table7_test_full.csv").set_index("System")
    assert set(long["system"]) == {"BM25-unigram", "BM25-bigram"} and set(long["prefix"]) == {"-"}
    assert set(long["setup"]) == {"Baseline"} and len(long) == 2 * 3 * 7  # two rows, three moves, seven columns
    for cell in long.itertuples():
        column = f"{cell.move.capitalize()} {cell.metric}"
        assert (cell.value, cell.low, cell.high) == tuple(
            csv.loc[cell.system, [column, f"{column} low", f"{column} high"]])
        assert cell.queries == csv.loc[cell.system, f"{cell.move.capitalize()} queries"]


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
    _provenance(cfg.paths.tables, "table9",
                [f"No human label files in {tmp_path}/data/interim/judge/labels: cannot be computed."])
    table = summary_provenance.reductions(cfg)
    grouped = table[table["why / how"] == offline].iloc[0]
    assert grouped["what"] == "Stella-en-1.5B-v5 (generic, Baseline); ReasonIR-8B (generic, Baseline)"
    assert not table["why / how"].str.contains("Ties").any()  # not a reduction
    assert not table["why / how"].str.contains(str(tmp_path)).any()  # no absolute path of this machine
    assert "data/interim/judge/labels" in table["why / how"].iloc[-1]


def test_split_boundaries_on_a_year_axis():
    years = DatasetParams(split_by="year", splits={"train": {"start": None, "end": 2006},
                                                           "validation": {"start": 2007, "end": 2009},
                                                           "test": {"start": 2010, "end": None}})
    assert dataset.split_boundaries(years) == [2006.5, 2009.5]
    dates = DatasetParams()  # the paper's: train to 2025-09-30, validation to 2025-12-31
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
    _garbled_table1(cfg)
    _provenance(cfg.paths.tables, "table1_silver_main",
                ["Silver split absent for address: the unfiltered test set instead."])
    run_dir = tmp_path / "runs" / "default-1"
    run_dir.mkdir(parents=True)
    (run_dir / "timings.csv").write_text(
        "notebook,seconds\n00_corpus.ipynb,60.0\n08_retrieval_baselines.ipynb,120.5\n")
    monkeypatch.setenv(RUN_DIR_ENV, str(run_dir))

    pd.DataFrame([{"move": "broaden", "split": "test", "config": 1, "beats_baseline_on_validation": False,
                   "queries": 13,
                   "baseline": 0.135, "baseline_low": 0.05, "baseline_high": 0.25, "tuned": 0.135, "tuned_low": 0.05,
                   "tuned_high": 0.25, "difference": 0.0, "difference_low": 0.0, "difference_high": 0.0,
                   "p_value": 1.0,
                   "indicative": True}]).to_csv(cfg.paths.tables / "finetune_tuned_vs_baseline.csv", index=False)
    result = SummaryStage.from_config(cfg).summary
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
    # no comparison the claims rest on was written: every claim says it cannot be tested here, and why
    assert set(result.claims["silver: verdict"]) == {"cannot test here"}
    assert "notebook 09 has not run" in set(result.claims["silver: evidence"])
    # the tiny benchmark's test papers (2010) predate the default encoder (2021)
    assert result.contamination.startswith("Contamination: the test papers were published 2010, not after")
    assert result.claims_family in report and "no p-value is adjusted" in result.claims_family
    assert "temporal split" in report
    differences = result.differences.set_index("what")
    assert differences.loc["test pool", "paper"] == "404,371 sentences"
    assert differences.loc["test pool", "this run"].endswith(" sentences")
    assert "19.2 [15.0, 23.5]" in report and "Total: 180 s" in report
    assert "](../figures/summary_mrr10.png)" in report and (cfg.paths.figures / "summary_mrr10.png").exists()
    assert str(tmp_path) not in report


def _reranked_sample(cfg, bench) -> tuple[list[str], int]:
    """Notebook 10's reranked run on a seeded sample (RunInfo.qids) of the Specify test queries, beside 08's BM25 runs
    and a 'tuned' first stage (a copy of BM25-bigram); Tables 1/7/8 assembled: (the sample, the move's queries)."""
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=10, splits=["test"]))
    first_stage = read_run(run_path(cfg.paths.retrieval_runs, "BM25-bigram", "specify", "test"))
    tuned = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned", "dense", "specify", "test", bench.checksum(),
                    "09_finetune", k=10)
    write_system_run(first_stage, cfg.paths.retrieval_runs, tuned)
    queries = bench.eval_set("specify", "test").queries
    sample = sorted(queries["qid"])[::2]
    info = RunInfo("all-MiniLM-L6-v2", "generic", "Tuned + rerank", "llm-rerank", "specify", "test", bench.checksum(),
                   "10_llm_rerank", k=10, qids=sample, first_stage=system_name("all-MiniLM-L6-v2", "generic", "Tuned"))
    write_system_run(first_stage[first_stage["qid"].isin(sample)], cfg.paths.retrieval_runs, info)
    assemble_tables(cfg, bench, expected=Expected(
        rows=(*BM25_ROWS, SystemSpec("all-MiniLM-L6-v2", "generic", "dense", "all-MiniLM-L6-v2", "Tuned")),
        tuned_moves=("specify",), reranked=("all-MiniLM-L6-v2 (tuned)",)), n_resamples=200)
    return sample, len(queries)


def test_each_bar_of_the_figure_carries_its_own_n(cfg, tiny_benchmark):
    """Issue 39: a reranked bar covers its seeded sample, so it is labelled with the sample's size, not the move's."""
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    sample, n_queries = _reranked_sample(cfg, load_benchmark(cfg.paths.benchmark))
    assert 0 < len(sample) < n_queries
    bars = summary_figure.bar_labels(summary_headline.results_long(read_records(cfg), TABLE1))
    bars = bars[bars["move"] == "specify"].set_index("label")
    assert bars.loc["all-MiniLM-L6-v2 · Tuned + rerank", "queries"] == len(sample)
    assert bars.loc["all-MiniLM-L6-v2 · Tuned + rerank", "text"] == f"n = {len(sample)} †"  # a tiny sample: indicative
    assert bars.loc["BM25-unigram · Baseline", "queries"] == n_queries
    assert bars.loc["all-MiniLM-L6-v2 · Tuned", "queries"] == n_queries  # the sample's first stage: every query
    # the figure draws exactly these texts, one above each bar; the move's tick names no count of its own
    long = summary_headline.results_long(read_records(cfg), TABLE1)
    ax = summary_figure.mrr_figure(long).axes[0]
    drawn = [text.get_text() for text in ax.texts]
    assert sorted(drawn) == sorted(text for text in summary_figure.bar_labels(long)["text"] if text)
    assert f"n = {len(sample)} †" in drawn and f"n = {n_queries} †" in drawn
    assert all("N =" not in tick.get_text() for tick in ax.get_xticklabels())
    # with the paired gains, the reranked bar reads its gain over its first stage on the sample (here 0: the rerank
    # run is its first stage's own ranking), the other bars their n alone
    gains = summary_figure.paired_gains(read_records(cfg))
    assert gains == {("all-MiniLM-L6-v2 (tuned) + rerank", "specify", "test"): 0.0}
    paired = summary_figure.bar_labels(long, gains=gains)
    paired = paired[paired["move"] == "specify"].set_index("label")["text"]
    assert paired["all-MiniLM-L6-v2 · Tuned + rerank"] == f"n = {len(sample)} †, paired +0.0"
    assert paired["BM25-unigram · Baseline"] == f"n = {n_queries} †"


def test_pairs_kept_say_they_are_counted_before_de_duplication(tmp_path, monkeypatch, tiny_benchmark):
    """Issue 39: stage 05's kept pairs beside Table 5's de-duplicated pairs (train + validation + test), each named."""
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config()
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    bench = summary_setting.benchmark_of(cfg)
    queries = summary_setting.queries_per_split(bench)
    # Table 5's pairs of a move: its train, validation and test pairs on disk (the tiny benchmark repeats them)
    splits = (Split.TRAIN, Split.VALIDATION, Split.TEST)
    table5 = {m.value: sum(len(bench.queries(m, s)) for s in splits) for m in MOVES}
    kept = {**table5, "specify": table5["specify"] + 2}  # two duplicate pairs that the split removes
    cfg.paths.mining_report.parent.mkdir(parents=True, exist_ok=True)
    cfg.paths.mining_report.write_text(json.dumps({"lexicon": {"entries": 12}, "pairs": {"kept": kept}}))
    cell = summary_setting.differences(cfg, bench, [], queries).set_index("what").loc["markers and pairs", "this run"]
    assert cell == (f"lexicon of 12 entries; pairs kept by mining (before de-duplication): address {kept['address']}, "
                    f"broaden {kept['broaden']}, specify {kept['specify']}; after de-duplication (Table 5, train + "
                    f"validation + test): address {table5['address']}, broaden {table5['broaden']}, "
                    f"specify {table5['specify']}")
    cfg.paths.mining_report.write_text(json.dumps({"lexicon": {"entries": 12}, "pairs": {"kept": table5}}))
    cell = summary_setting.differences(cfg, bench, [], queries).set_index("what").loc["markers and pairs", "this run"]
    assert "before de-duplication" in cell and "after de-duplication" not in cell  # nothing removed: one count


def _rerank_summary(cfg) -> dict:
    """Notebook 10's rerank_summary as its stage writes it: the counts of each (first stage, move) and the
    gold-promotion cells of `evaluation.rerank_promotion.promotion_cells` (one move with no answered query)."""
    from ratio_utils.evaluation.rerank_promotion import promotion_cells

    cells = {"specify": promotion_cells("specify", [1.0] * 40 + [0.0] * 10, [True] * 38 + [False] * 2, seed=cfg.seed),
             "broaden": promotion_cells("broaden", [0.0] * 6, [], seed=cfg.seed)}
    frame = pd.DataFrame([{"first stage": "all-MiniLM-L6-v2 (tuned)", "move": move, "split": "silver", "queries": 50,
                           "answered": 40 if move == "specify" else 0, **row} for move, row in cells.items()])
    write_table(frame, "rerank_summary", cfg, caption="LLM reranking (notebook 10)", float_format="{:.0f}",
                latex=False)
    return cells


def test_the_reranking_section_shows_gold_promotion_beside_the_papers_rate(tmp_path, monkeypatch, tiny_benchmark):
    """Issue 39: per system and move the gold-promotion rate with n and interval beside the paper's, the first
    stage's R@100, and what they mean, from the table notebook 10 wrote."""
    from ratio_utils.evaluation.rerank_promotion import promotion_columns

    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config()
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    cells = _rerank_summary(cfg)
    names = promotion_columns(100, 10)
    result = SummaryStage.from_config(cfg).summary
    shown = result.promotion.set_index(["system", "move"])
    specify = shown.loc[("all-MiniLM-L6-v2 (tuned) + rerank", "specify")]
    assert specify[names["promoted"]] == cells["specify"][names["promoted"]]
    assert specify[names["promoted"]].startswith("95.0 [")  # 38 of 40
    assert specify[names["n_promoted"]] == "40" and specify[names["paper"]] == "86.6"
    assert specify[names["recall"]] == cells["specify"][names["recall"]] and specify[names["n_first"]] == "50"
    assert specify[summary_headline.PROMOTION_GAP] == "+8.4"  # 95.0 - 86.6
    broaden = shown.loc[("all-MiniLM-L6-v2 (tuned) + rerank", "broaden")]
    assert broaden[names["promoted"]].startswith("— (no answered query")
    assert broaden[summary_headline.PROMOTION_GAP] == ""
    report = cfg.paths.summary_report.read_text(encoding="utf-8")
    section = report.split("## LLM reranking: the reranker's own statistic", 1)[1].split("\n## ", 1)[0]
    assert ("bounded by the first stage's recall@100" in section
            and "says more about the model that answered" in section)
    assert cells["specify"][names["promoted"]] in section and cells["specify"][names["recall"]] in section
    assert "86.6" in section and "71.6" in section and "+8.4" in section


def test_the_pool_size_section_shows_the_tables_rows_its_reading_and_figures(cfg, tiny_benchmark):
    """Issue 39: notebook 11's pool-size table (its numbers, cells as the module shows them), the module's reading
    sentence and the three figures linked."""
    from ratio_utils.retrieval_analysis import pool_size

    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    bench = load_benchmark(cfg.paths.benchmark)
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1, 2], k=100, splits=["test"]))
    written = pool_size.pool_size_analysis(cfg, bench, ["BM25-unigram", "BM25-bigram"], n_resamples=200)
    result = SummaryStage.from_config(cfg).summary
    assert result.pool_size_reading == written.reading and "no value at the paper's pool size" in written.reading
    rows = result.pool_size.set_index(["move", "system", "metric"])
    for point in written.shown.to_dict("records"):
        for metric in ("M@10", "R@10"):
            assert rows.loc[(point["Move"], point["System"], metric), point["Fraction"]] == point[metric]
        sizes = rows.loc[(point["Move"], summary_figure.POOL_CANDIDATES, "")]
        assert sizes[point["Fraction"]] == f"{point['Pool size']:,}"
        shares = rows.loc[(point["Move"], summary_figure.POOL_GOLD_SHARE, "")]
        assert shares[point["Fraction"]] == point["Gold share %"]  # the table's own cell, one decimal
    assert list(dict.fromkeys(result.pool_size["move"])) == [m.value.capitalize() for m in MOVES]
    report = cfg.paths.summary_report.read_text(encoding="utf-8")
    section = report.split("## How scores move with pool size (beyond the paper)", 1)[1].split("\n## ", 1)[0]
    assert written.reading in section and written.shown.iloc[0]["M@10"] in section
    for move in ("specify", "address", "broaden"):
        assert f"](../figures/figure_pool_size_{move}.png)" in section


def test_the_new_sections_say_when_their_tables_are_absent(tmp_path, monkeypatch, tiny_benchmark):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    cfg = load_config()
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    result = SummaryStage.from_config(cfg).summary
    assert result.promotion.empty and result.pool_size.empty
    report = cfg.paths.summary_report.read_text(encoding="utf-8")
    assert "tables/rerank_summary is absent: notebook 10 (LLM reranking) has not run" in report
    assert "tables/analysis_pool_size is absent: notebook 11's pool-size analysis has not run" in report
    assert "figure_pool_size" not in report


def test_a_rerank_summary_without_promotion_columns_says_so(cfg):
    write_table(pd.DataFrame([{"first stage": "BM25-unigram", "move": "address", "split": "test", "queries": 3}]),
                "rerank_summary", cfg, latex=False)
    shown, reading = summary_headline.rerank_promotion(cfg.paths.tables)
    assert shown.empty and "written before its gold-promotion columns existed" in reading


def test_wall_times_are_each_notebooks_latest_execution_with_its_own_time(tmp_path):
    """A notebook rerun alone shows its rerun; the others keep their times (the ML summary read '24 s over 2 notebook
    runs' where the cold run took 8,293 s)."""
    executed = tmp_path / "executed"
    executed.mkdir()
    for name, seconds, end in (("08_retrieval_baselines", 5400.5, "2026-12-01T10:00:00.1+00:00"),
                               ("09_finetune", 2869.0, "2026-12-01T11:00:00+00:00"),
                               ("13_unified_retriever", 24.0, "2026-12-04T19:36:29.98+00:00"),
                               ("14_summary", 3.0, "2026-12-04T19:37:00+00:00")):
        (executed / f"{name}.ipynb").write_text(json.dumps(
            {"metadata": {"papermill": {"duration": seconds, "end_time": end}}, "cells": []}), encoding="utf-8")
    (executed / "10_llm_rerank.ipynb").write_text(json.dumps({"metadata": {}, "cells": []}), encoding="utf-8")
    times = summary_provenance.notebook_times(executed)
    assert times["notebook"].tolist() == ["08_retrieval_baselines", "09_finetune", "10_llm_rerank",
                                          "13_unified_retriever"]  # the summary itself is still running
    assert times["seconds"].iloc[[0, 1, 3]].tolist() == [5400.5, 2869.0, 24.0] and pd.isna(times["seconds"].iloc[2])
    assert times["finished"].iloc[0] == "2026-12-01 10:00:00"
    lines = summary.wall_time_lines(SimpleNamespace(timings=times))
    assert "Total: 8,294 s (2.3 h) over the latest executions of 3 notebooks; 1 without a recorded time." in lines
    (executed / "broken.ipynb").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="broken.ipynb"):
        summary_provenance.notebook_times(executed)


def test_the_setting_reads_models_and_years_as_a_reader_does():
    from ratio_utils.reporting.summary_setting import model_list, year_range

    assert year_range(2025, 2025) == "2025" and year_range(1980, 2025) == "1980–2025"
    assert model_list(["all-mpnet-base-v2", {"model": "EmbeddingGemma-300m", "prefixes": "generic"},
                       {"model": "EmbeddingGemma-300m", "prefixes": ["generic", "recommended"]}]) == (
        "all-mpnet-base-v2, EmbeddingGemma-300m (generic prefix), "
        "EmbeddingGemma-300m (generic and recommended prefixes)")
    assert model_list([]) == "none"


def test_a_reranked_row_is_read_as_a_paired_gain_on_its_sample(cfg, tiny_benchmark):
    """Issue 45, 3: a reranked cell covers its sample, its first stage's cell every query; the summary gives the
    paired difference on the sample (here the reranked run is its first stage's own ranking: gain 0) with the run's
    own note, and never a difference across rows."""
    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    sample, n_queries = _reranked_sample(cfg, load_benchmark(cfg.paths.benchmark))
    records = read_records(cfg)
    lines = summary_headline.reranked_rows(records)
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("all-MiniLM-L6-v2 (tuned) + rerank, Specify (test): paired gain over all-MiniLM-L6-v2 "
                           "(tuned)")
    # the reranked run keeps its first stage's ranking: every query of the sample is a tie, none is effective
    assert f"+ rerank, n {len(sample)}, effective n 0; a seeded sample of {len(sample)} of the {n_queries}" in line
    assert "queries +0.0 [0.0, 0.0]† (" in line


def test_a_silver_set_of_two_judge_waves_shows_acceptance_and_scores_per_wave(cfg, tiny_benchmark):
    """Issue 45, 7a: the ML Specify silver set pools two waves with different acceptance; the summary gives each
    wave's acceptance (exact interval) and each silver run's MRR@10 per wave beside the pooled score."""
    from ratio_utils.dataset.benchmark import write_pairs
    from ratio_utils.evaluation.metrics import per_query_metrics
    from ratio_utils.judge.sampling import pair_ids, sample_for_judging
    from ratio_utils.retrieval.runs import run_path

    shutil.copytree(tiny_benchmark, cfg.paths.benchmark)
    bench = load_benchmark(cfg.paths.benchmark)
    cfg.sections.setdefault("judge", {})["sample_sizes"] = {"specify": [1, 2], "address": None, "broaden": None}
    test = bench.queries("specify", "test")
    sample = sample_for_judging({Move.SPECIFY: test}, cfg.sections["judge"]["sample_sizes"], cfg.seed)[Move.SPECIFY]
    assert sample["wave"].tolist() == [1, 2, 2]
    accepted = [sample.iloc[0]["pair_id"], sample.iloc[2]["pair_id"]]  # wave 1: 1 of 1; wave 2: 1 of 2
    write_pairs(test[pair_ids(test).isin(accepted)], bench.root, "specify", "silver")
    bench = load_benchmark(cfg.paths.benchmark)
    run_baselines(cfg, bench, RetrievalParams(dense_models=[], bm25_ngrams=[1], k=10, splits=["silver"]))
    acceptance, scores, reading = summary_setting.silver_waves(cfg, bench, n_resamples=200)
    assert acceptance[["wave", "sampled", "silver"]].values.tolist() == [[1, 1, 1], [2, 2, 1]]
    assert acceptance["accepted % [95% CI]"].tolist()[1].startswith("50.0 [1.3, 98.7]")  # Clopper–Pearson 1 of 2
    row = scores.set_index(["system", "move"]).loc[("BM25-unigram", "specify")]
    per_query = per_query_metrics(pd.read_parquet(run_path(cfg.paths.retrieval_runs, "BM25-unigram", "specify",
                                                           "silver")),
                                  bench.eval_set("specify", "silver").qrels, ["MRR@10"])["MRR@10"]
    wave_one = test.loc[pair_ids(test) == accepted[0], "query_id"].item()
    assert row["wave 1"].startswith(f"{100 * per_query[wave_one]:.1f}") and row["wave 1"].endswith("(n 1)")
    assert row["pooled"].startswith(f"{100 * per_query.mean():.1f}") and row["pooled"].endswith("(n 2)")
    assert "[1, 2]" in reading and "holds for both waves only where the per-wave scores agree" in reading
    # one wave (a plain number): nothing pooled, nothing said
    cfg.sections["judge"]["sample_sizes"] = {"specify": 3, "address": None, "broaden": None}
    assert summary_setting.silver_waves(cfg, bench)[2] == ""


def test_the_promotion_rate_names_a_judge_and_reranker_answered_by_one_model():
    from ratio_utils.publish.label_sources import LabelSource

    judge = LabelSource(role="judge", configured="gpt-5.4", answered_by=("anthropic-claude-standin",))
    reranker = LabelSource(role="reranker", configured="gpt-5-mini", answered_by=("anthropic-claude-standin",))
    sentence = summary.shared_answerer([judge, reranker])
    assert "same model (anthropic-claude-standin, a stand-in)" in sentence and "inflate the promotion rate" in sentence
    own = LabelSource(role="reranker", configured="gpt-5-mini", answered_by=("gpt-5-mini",))
    assert summary.shared_answerer([judge, own]) == "" and summary.shared_answerer([reranker]) == ""
