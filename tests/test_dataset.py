"""Split and pools (ratio_utils.dataset): dedupe, split windows, shared pools, leakage checks, release layout.

Pairs and distractors are built here from invented sentences (and, for the stage test, mined from
tests/fixtures/mining/).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
import stage_steps
from scipy.stats import binomtest

from ratio_utils import dataset, mining
from ratio_utils.config import REPO_ROOT, load_config
from ratio_utils.dataset import LeakageError, assign_split, build_benchmark
from ratio_utils.dataset.benchmark import load_benchmark
from ratio_utils.param_sections import SPLITS, DatasetParams
from ratio_utils.schema import DISTRACTOR_CATEGORIES, MOVES, PAIR_COLUMNS, SEEDED_HASH_RANGE, seeded_hash, sentence_id

FIXTURES = Path(__file__).parent / "fixtures" / "mining"
YEARS = {"train": {"start": None, "end": 2006}, "validation": {"start": 2007, "end": 2009},
         "test": {"start": 2010, "end": None}}


def pair(paper: str, year: int | None, date: str | None, move: str, query: str, gold: str, sent: int = 0) -> dict:
    return {
        "corpus": "fx", "paper_id": paper, "year": year, "date": date, "para": 0, "sent": sent, "move": move,
        "marker": "for example", "marker_text": "For example", "marker_source": "manual", "marker_has_anaphor": False,
        "query": query, "gold": gold, "query_prefix": "", "query_original": query, "gold_original": gold,
        "query_id": sentence_id(query), "gold_id": sentence_id(gold),
    }  # fmt: skip


def distractor(paper: str, year: int | None, date: str | None, category: str, text: str, sent: int = 5) -> dict:
    return {
        "corpus": "fx", "paper_id": paper, "year": year, "date": date, "para": 0, "sent": sent, "category": category,
        "marker": "however", "marker_text": "However", "marker_source": "manual", "text": text, "text_original": text,
        "docid": sentence_id(text),
    }  # fmt: skip


def frames(pairs: list[dict], distractors: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (
        pd.DataFrame(pairs, columns=list(mining.PAIR_TABLE_COLUMNS)),
        pd.DataFrame(distractors, columns=list(mining.DISTRACTOR_TABLE_COLUMNS)),
    )


@pytest.fixture
def small():
    pairs = [
        pair("A", 2004, None, "specify", "query one about parsing with small treebanks.",
             "gold one about a turkish treebank of ten thousand words."),
        pair("A", 2004, None, "address", "query two about slow manual annotation of entities.",
             "gold two about bootstrapping labels from a gazetteer list.", 1),
        pair("B", 2008, None, "broaden", "query three about noise added to word embeddings.",
             "gold three about perturbing inputs as a general regulariser."),
        pair("C", 2012, None, "specify", "query four about metrics that reward lexical overlap.",
             "gold four about rouge counting shared n-grams with references."),
        # the same (q, g) again in a later paper: dedupe keeps the earliest copy (paper A, train)
        pair("D", 2013, None, "specify", "query one about parsing with small treebanks.",
             "gold one about a turkish treebank of ten thousand words."),
        pair("E", None, None, "address", "query five from a paper without any usable date.",
             "gold five from a paper without any usable date at all."),
    ]
    distractors = [
        distractor("A", 2004, None, "common_irrelevant", "a distractor of the training papers about parsers."),
        distractor("C", 2012, None, "explicit_contrast", "a distractor of the test papers about metrics and judges."),
        # equal to a gold sentence: dropped from the distractors, counted
        distractor("C", 2012, None, "explicit_similarity",
                   "gold four about rouge counting shared n-grams with references.", 6),
        distractor("B", 2008, None, "implicit_similarity", "a distractor of the validation papers about noise."),
    ]
    return frames(pairs, distractors)


# --- split windows -------------------------------------------------------------------------------


def test_date_windows_are_inclusive_at_both_ends():
    params = DatasetParams()  # the paper's windows
    expect = {
        "2014-12-31": (None, "outside_windows"),
        "2015-01-01": ("train", None),
        "2025-09-30": ("train", None),
        "2025-10-01": ("validation", None),
        "2025-12-31": ("validation", None),
        "2026-01-01": ("test", None),
        "2026-05-05": ("test", None),
        "2026-05-06": (None, "outside_windows"),
    }
    for day, decided in expect.items():
        assert assign_split(None, day, params) == decided, day
    # the date decides, not the year
    assert assign_split(2030, pd.Timestamp("2025-09-30 23:59"), params) == ("train", None)


def test_year_only_papers_under_date_windows():
    params = DatasetParams()
    assert assign_split(2020, None, params) == ("train", None)  # the whole year lies in train
    assert assign_split(2025, None, params) == (None, "year_only_ambiguous")  # 2025 straddles train/validation
    assert assign_split(2010, None, params) == (None, "outside_windows")
    assert assign_split(2020, None, DatasetParams(year_only="exclude")) == (None, "year_only_ambiguous")
    assert assign_split(None, None, params) == (None, "no_date")
    assert assign_split(None, "not a date", params) == (None, "no_date")


def test_year_windows_are_inclusive_whole_years():
    params = DatasetParams(split_by="year", splits=YEARS)
    for year, split in {1980: "train", 2006: "train", 2007: "validation", 2009: "validation", 2010: "test",
                        2022: "test"}.items():
        assert assign_split(year, None, params) == (split, None)
    assert assign_split(None, "2009-12-31", params) == ("validation", None)  # no year: the date's year
    assert assign_split(None, None, params) == (None, "no_date")


def test_bad_windows_are_errors():
    with pytest.raises(ValueError, match="overlap"):
        DatasetParams(split_by="year", splits={"train": {"start": None, "end": 2007},
                                               "test": {"start": 2007, "end": None}}).windows()
    with pytest.raises(ValueError, match="whole years"):
        DatasetParams(split_by="year", splits={"train": {"start": None, "end": "2006-12-31"}}).windows()
    with pytest.raises(ValueError, match="ISO dates"):
        DatasetParams(splits={"train": {"start": 2015, "end": "2025-09-30"}}).windows()
    with pytest.raises(ValueError, match="unknown split"):
        DatasetParams(splits={"dev": {"start": None, "end": None}})
    with pytest.raises(ValueError, match="split_by"):
        DatasetParams(split_by="month")


def test_params_files_give_the_intended_windows(tmp_path, monkeypatch):
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path))
    paper = load_config("params/paper.yaml").section("dataset", DatasetParams)
    assert paper.split_by == "date"
    assert [(w.name, w.start, w.end) for w in paper.windows()] == [
        ("train", dt.date(2015, 1, 1), dt.date(2025, 9, 30)),
        ("validation", dt.date(2025, 10, 1), dt.date(2025, 12, 31)),
        ("test", dt.date(2026, 1, 1), dt.date(2026, 5, 5)),
    ]
    default = load_config("params/default.yaml").section("dataset", DatasetParams)
    assert default.split_by == "year" and [(w.name, w.start, w.end) for w in default.windows()] == [
        ("train", None, 2006), ("validation", 2007, 2009), ("test", 2010, None)
    ]
    ml = load_config("params/ml.yaml").section("dataset", DatasetParams)
    assert ml.split_by == "year" and [(w.name, w.start, w.end, w.fraction) for w in ml.windows()] == [
        ("train", None, 2022, None), ("validation", 2025, 2025, Fraction(1, 3)), ("test", 2025, 2025, Fraction(2, 3))
    ]


# --- one window divided by paper-id hash (`fraction`) ---------------------------------------------

HASH_SPLIT = {  # params/ml.yaml's shape: train up to 2022, the 2025 papers divided 1/3 : 2/3
    "train": {"start": None, "end": 2022},
    "validation": {"start": 2025, "end": 2025, "fraction": "1/3"},
    "test": {"start": 2025, "end": 2025, "fraction": "2/3"},
}
PAPER_IDS = [f"neurips2025-{i:05d}" for i in range(3000)]


def _decided(params: DatasetParams, ids, year: int = 2025) -> pd.DataFrame:
    frame = pd.DataFrame({"corpus": "fx", "paper_id": list(ids), "year": year, "date": None})
    return dataset.paper_splits([frame], params).set_index("paper_id")


def test_fractions_divide_one_window_without_a_paper_in_two_splits():
    params = DatasetParams(split_by="year", splits=HASH_SPLIT)
    decided = _decided(params, PAPER_IDS)
    assert decided.index.is_unique and len(decided) == len(PAPER_IDS)  # one row, so one split, per paper
    counts = decided["split"].value_counts()
    assert set(counts.index) == {"validation", "test"} and counts.sum() == len(PAPER_IDS)
    assert binomtest(int(counts["validation"]), len(PAPER_IDS), 1 / 3).pvalue > 1e-3
    # the year window is checked before the hash: other years never reach the 2025 splits
    assert assign_split(2024, None, params, paper_id=PAPER_IDS[0]) == (None, "outside_windows")
    assert assign_split(2022, None, params, paper_id=PAPER_IDS[0]) == ("train", None)
    assert assign_split(None, "2025-06-01", params, paper_id=PAPER_IDS[0])[0] in {"validation", "test"}
    with pytest.raises(ValueError, match="needs the paper_id"):
        assign_split(2025, None, params)


def test_fractions_below_one_leave_papers_out_and_say_why():
    halves = {"validation": {"start": 2025, "end": 2025, "fraction": 0.25},
              "test": {"start": 2025, "end": 2025, "fraction": 0.25}}
    decided = _decided(DatasetParams(split_by="year", splits=halves), PAPER_IDS)
    left_out = decided["excluded_reason"] == "outside_fractions"
    assert decided.loc[left_out, "split"].isna().all() and decided.loc[~left_out, "split"].notna().all()
    assert binomtest(int(left_out.sum()), len(PAPER_IDS), 0.5).pvalue > 1e-3


def test_fraction_split_is_the_same_in_every_process_order_and_machine():
    """The hash must not be Python's salted hash(): other processes (other PYTHONHASHSEED) and another
    order of the papers give the same assignment; another hash_seed gives another one."""
    params = DatasetParams(split_by="year", splits=HASH_SPLIT)
    here = _decided(params, PAPER_IDS[:400])["split"].to_dict()
    assert _decided(params, reversed(PAPER_IDS[:400]))["split"].to_dict() == here
    script = (
        "import json, sys\n"
        "from ratio_utils.dataset import assign_split\nfrom ratio_utils.param_sections import DatasetParams\n"
        "params = DatasetParams(split_by='year', splits=json.loads(sys.argv[1]))\n"
        "print(json.dumps({i: assign_split(2025, None, params, paper_id=i)[0] for i in json.loads(sys.argv[2])}))\n"
    )
    for hash_salt in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_salt, "PYTHONPATH": str(REPO_ROOT)}
        out = subprocess.run([sys.executable, "-c", script, json.dumps(HASH_SPLIT), json.dumps(PAPER_IDS[:400])],
                             capture_output=True, text=True, check=True, env=env).stdout
        assert json.loads(out) == here
    other_seed = _decided(DatasetParams(split_by="year", splits=HASH_SPLIT, hash_seed=14),
                          PAPER_IDS[:400])["split"].to_dict()
    assert other_seed != here


def test_without_a_fraction_the_paper_id_decides_nothing(shared_dir):
    """The default params (year windows, no fraction) assign the shared ACL papers by year alone, as before
    fractions existed: the counts of the committed default run's Table 5 ('papers in the corpus')."""
    records = {}
    for source in ("acl_scisumm", "aclsum"):  # earlier sources win a repeated id, as in stage 00
        with gzip.open(shared_dir / "corpora" / source / "papers.jsonl.gz", "rt", encoding="utf-8") as handle:
            for record in map(json.loads, handle):
                records.setdefault(record["paper_id"], record)
    papers = pd.DataFrame([{"corpus": "acl", "paper_id": k, "year": r["year"], "date": r["date"]}
                           for k, r in records.items()])
    default = load_config("params/default.yaml").section("dataset", DatasetParams)
    decided = dataset.paper_splits([papers], default)
    renamed = dataset.paper_splits([papers.assign(paper_id=[f"other-{i}" for i in range(len(papers))])], default)
    assert decided["split"].tolist() == renamed["split"].tolist()
    table5 = pd.read_csv(REPO_ROOT / "tables" / "table5_split_and_pool.csv").set_index(["section", "item"])
    committed = table5.loc[("papers", "in the corpus"), ["train", "validation", "test"]].astype(int).to_dict()
    assert decided["split"].value_counts().to_dict() == committed


def test_hash_split_in_a_built_benchmark_keeps_each_paper_in_one_split():
    """Pairs and distractors of one 2025 paper follow their paper into one split; the leakage checks pass."""
    rows, others = [], []
    for i, paper_id in enumerate(PAPER_IDS[:60]):
        rows.append(pair(paper_id, 2025, None, "specify", f"query {i} about a method that needs labels.",
                         f"gold {i} about a special case of it."))
        others.append(distractor(paper_id, 2025, None, "common_irrelevant",
                                 f"distractor {i} of a paper from the year 2025."))
    rows.append(pair("acl-old", 2004, None, "address", "an older query about sparse annotations.",
                     "an older gold about active learning."))
    built = build_benchmark(*frames(rows, others), DatasetParams(split_by="year", splits=HASH_SPLIT))
    splits_per_paper = built.pairs.groupby("paper_id")["split"].nunique()
    assert (splits_per_paper == 1).all() and len(splits_per_paper) == 61
    assert (built.pairs.set_index("paper_id")["split"].to_dict()
            == built.papers.set_index("paper_id")["split"].to_dict())
    pool_papers = {split: set(pool["corpusid"]) for split, pool in built.pools.items()}
    assert not pool_papers["validation"] & pool_papers["test"] and pool_papers["train"] == {"acl-old"}
    assert built.counts["papers.assigned.validation"] + built.counts["papers.assigned.test"] == 60


def test_bad_fraction_windows_are_errors():
    def windows(splits, split_by="year"):
        return DatasetParams(split_by=split_by, splits=splits).windows()

    shared = {"start": 2025, "end": 2025}
    with pytest.raises(ValueError, match=r"sum to 4/3"):
        windows({"validation": {**shared, "fraction": "2/3"}, "test": {**shared, "fraction": "2/3"}})
    with pytest.raises(ValueError, match="each need a fraction"):  # sharing a window without fractions is an overlap
        windows({"validation": dict(shared), "test": dict(shared)})
    with pytest.raises(ValueError, match="each need a fraction"):
        windows({"validation": {**shared, "fraction": 0.5}, "test": dict(shared)})
    with pytest.raises(ValueError, match="overlap"):  # fractions divide one window, not overlapping ones
        windows({"validation": {"start": 2024, "end": 2025, "fraction": 0.5}, "test": {**shared, "fraction": 0.5}})
    for bad in (0, 1.5, "a third", True, "1/0"):
        with pytest.raises(ValueError, match="fraction"):
            windows({"test": {**shared, "fraction": bad}})
    with pytest.raises(ValueError, match="whole years"):  # the windows themselves are still checked
        windows({"validation": {"start": "2025-01-01", "end": 2025, "fraction": 0.5},
                 "test": {**shared, "fraction": 0.5}})
    with pytest.raises(ValueError, match="ISO dates"):
        windows({"test": {"start": 2025, "end": "2025-12-31", "fraction": 1}}, split_by="date")
    exact = windows({"validation": {**shared, "fraction": 0.1}, "test": {**shared, "fraction": 0.9}})
    assert sum(w.fraction for w in exact) == 1  # 0.1 read as 1/10, so the fractions sum to exactly 1


def test_a_window_shared_by_fraction_is_one_span_on_the_papers_per_year_figure():
    params = DatasetParams(split_by="year", splits=HASH_SPLIT)
    assert dataset.split_boundaries(params) == [2022.5]  # no line between validation and test: they share 2025
    papers = pd.DataFrame({"corpus": ["acl", "acl", "iclr2022", "neurips2025"], "year": [2004, 2020, 2022, 2025]})
    ax = dataset.papers_per_year_figure(papers, params).axes[0]
    assert [line.get_xdata()[0] for line in ax.get_lines()] == [2022.5]
    assert [t.get_text() for t in ax.texts] == ["train", "validation 1/3 + test 2/3"]


def test_fractions_under_date_windows_take_year_only_papers_of_a_whole_year():
    dates = {"train": {"start": "2015-01-01", "end": "2022-12-31"},
             "validation": {"start": "2025-01-01", "end": "2025-12-31", "fraction": "1/3"},
             "test": {"start": "2025-01-01", "end": "2025-12-31", "fraction": "2/3"}}
    params = DatasetParams(splits=dates)
    assert {assign_split(2025, None, params, paper_id=i)[0] for i in PAPER_IDS[:50]} == {"validation", "test"}
    for paper_id in PAPER_IDS[:50]:  # a date inside the window gives the same split as the whole year
        assert (assign_split(None, "2025-07-01", params, paper_id=paper_id)
                == assign_split(2025, None, params, paper_id=paper_id))
    assert assign_split(2026, None, params, paper_id=PAPER_IDS[0]) == (None, "outside_windows")


# --- dedupe, pools, overlap ------------------------------------------------------------------------


def test_build_dedupes_splits_and_pools(small):
    pairs, distractors = small
    built = build_benchmark(pairs, distractors, DatasetParams(split_by="year", splits=YEARS))
    counts = built.counts
    assert counts["pairs.dropped.duplicate_query_gold"] == 1
    assert counts["pairs.dropped.paper_without_usable_date"] == 1
    assert counts["papers.excluded.no_date"] == 1
    assert counts["distractors.dropped.equal_to_a_gold"] == 1
    kept = built.pairs
    assert len(kept) == 4 and kept.duplicated(["query", "gold"]).sum() == 0
    assert kept.loc[kept["query"].str.startswith("query one"), "paper_id"].tolist() == ["A"]  # the earliest copy
    assert dict(zip(kept.paper_id, kept.split)) == {"A": "train", "B": "validation", "C": "test"}
    train, test = built.pools["train"], built.pools["test"]
    # one pool per split, shared by the moves: golds of every move of that split plus its distractors
    assert set(train.source) == {"specify", "address", "common_irrelevant"}
    assert set(test.source) == {"specify", "explicit_contrast"}
    assert (train.docid == train.text.map(sentence_id)).all() and train.docid.is_unique
    assert list(train.columns) == ["docid", "text", "source", "corpusid"]
    dataset.run_leakage_checks(kept, built.pools)  # already run by build; passes


def test_a_sentence_in_train_and_test_pools_stays_in_test_only():
    shared_text = "a sentence that two papers of different years both contain verbatim."
    pairs, distractors = frames(
        [
            pair("A", 2004, None, "specify", "an older query whose gold is repeated later on.", shared_text),
            pair("C", 2012, None, "specify", "a newer query whose gold is that same sentence.", shared_text),
        ],
        [distractor("A", 2004, None, "common_irrelevant", "another training distractor about parsing models.")],
    )
    built = build_benchmark(pairs, distractors, DatasetParams(split_by="year", splits=YEARS))
    assert sentence_id(shared_text) in set(built.pools["test"].docid)
    assert sentence_id(shared_text) not in set(built.pools["train"].docid)
    assert built.counts["pairs.dropped.train_pair_touching_test"] == 1
    assert set(built.pairs.split) == {"test"}


# --- leakage checks, each on a crafted leak -------------------------------------------------------


def test_leak_pair_in_two_splits(small):
    built = build_benchmark(*small, DatasetParams(split_by="year", splits=YEARS))
    leaked = pd.concat([built.pairs, built.pairs.iloc[[0]].assign(split="test")])
    with pytest.raises(LeakageError, match="more than one split"):
        dataset.check_no_pair_in_two_splits(leaked)


def test_leak_test_sentence_in_train_pool(small):
    built = build_benchmark(*small, DatasetParams(split_by="year", splits=YEARS))
    pools = dict(built.pools)
    pools["train"] = pd.concat([pools["train"], pools["test"].iloc[[0]]])
    with pytest.raises(LeakageError, match="test pool are also in the train pool"):
        dataset.check_test_pool_disjoint_from_train(pools)


def test_a_test_query_in_the_train_data_is_removed_from_train_and_caught():
    query = "a sentence that opens a test pair and closes a training pair as gold."
    pairs, distractors = frames(
        [
            pair("A", 2004, None, "specify", "an older query whose gold is the later test query.", query),
            pair("C", 2012, None, "address", query, "a newer gold sentence that answers the test query well."),
        ],
        [],
    )
    built = build_benchmark(pairs, distractors, DatasetParams(split_by="year", splits=YEARS))
    assert set(built.pairs.split) == {"test"} and built.counts["pairs.dropped.train_pair_touching_test"] == 1
    leaked = pd.concat([built.pairs, built.pairs.assign(split="train", gold="x", gold_id="x")])
    with pytest.raises(LeakageError, match="test query"):
        dataset.check_test_queries_not_in_train(built.pools, leaked)


def test_leak_distractor_equal_to_gold(small):
    built = build_benchmark(*small, DatasetParams(split_by="year", splits=YEARS))
    pools = dict(built.pools)
    gold = built.pairs.iloc[0]
    fake = pd.DataFrame([{"docid": gold.gold_id, "text": gold.gold, "source": DISTRACTOR_CATEGORIES[0],
                          "corpusid": "Z"}])
    pools["validation"] = pd.concat([pools["validation"], fake])
    with pytest.raises(LeakageError, match="equal a gold"):
        dataset.check_no_distractor_equals_gold(pools, built.pairs)


def test_leak_gold_missing_from_its_pool(small):
    built = build_benchmark(*small, DatasetParams(split_by="year", splits=YEARS))
    pools = dict(built.pools)
    pools["train"] = pools["train"][pools["train"].source == "common_irrelevant"]
    with pytest.raises(LeakageError, match="missing from the train pool"):
        dataset.check_golds_in_pool(pools, built.pairs)


# --- release layout, table, stage --------------------------------------------------------------


def test_release_layout_round_trip(small, tmp_path):
    built = build_benchmark(*small, DatasetParams(split_by="year", splits=YEARS))
    dataset.write_release(built, tmp_path / "ratio")
    bench = load_benchmark(tmp_path / "ratio")
    queries = bench.queries("specify", "train")
    assert list(queries.columns[: len(PAIR_COLUMNS)]) == list(PAIR_COLUMNS)
    assert queries.querySentence.tolist() == ["query one about parsing with small treebanks."]
    assert queries.queryTerm_group.tolist() == ["specify"] and queries.corpusid.tolist() == ["A"]
    assert bench.queries("broaden", "train").empty and bench.has("broaden", "test")
    qrels = bench.qrels("specify", "test")
    assert set(qrels.docid) <= set(bench.pool("test").docid)
    assert len(bench.pool("validation")) == len(built.pools["validation"])


def test_loads_a_directory_in_the_official_release_layout(tmp_path):
    """The authors' files carry no ids of ours; the loader derives them from the text."""
    root = tmp_path / "official"
    query, gold = "An official query sentence about parsing.", "an official gold sentence about a treebank."
    frame = pd.DataFrame(
        [{"corpusid": 123, "year": 2026, "publicationdate": "2026-02-01", "queryTerm": "for example,",
          "queryTerm_group": "more_specific", "querySentence": query, "goldSentence": gold}]
    )  # fmt: skip
    (root / "data" / "specify").mkdir(parents=True)
    (root / "candidates").mkdir()
    frame.to_parquet(root / "data" / "specify" / "test.parquet", index=False)
    pd.DataFrame({"sentence": [gold, "another candidate."], "corpus_id": [123, 456]}).to_parquet(
        root / "candidates" / "test.parquet", index=False)
    bench = dataset.load_benchmark(root)
    assert (bench.qrels("specify", "test").to_dict("records")
            == [{"qid": sentence_id(query), "docid": sentence_id(gold)}])
    pool = bench.pool("test")
    assert sentence_id(gold) in set(pool.docid) and {"text", "corpusid"} <= set(pool.columns)


def test_table5_matches_the_built_benchmark(small):
    built = build_benchmark(*small, DatasetParams(split_by="year", splits=YEARS))
    table = dataset.table5(built, {"train": 3, "validation": 1, "test": 2})
    cell = table.set_index(["section", "item"])
    assert cell.loc[("pairs", "specify"), "train"] == 1 and cell.loc[("pairs", "specify"), "test"] == 1
    assert cell.loc[("pairs", "all moves"), "total"] == len(built.pairs)
    assert cell.loc[("pool", "all sources"), "test"] == len(built.pools["test"])
    pool_rows = cell.loc["pool"].drop(index="all sources")
    assert (pool_rows[["train", "validation", "test"]].sum()
            == cell.loc[("pool", "all sources"), ["train", "validation", "test"]]).all()
    assert cell.loc[("pairs", "all moves"), "paper_total"] == 3_017_476
    assert cell.loc[("papers", "in the corpus"), "train"] == 3
    # the paper's figures print as its text writes them; the numbers stay in the frame the CSV is written from
    shown = dataset.table5_shown(table).set_index(["section", "item"])
    assert (shown.loc[("pool", "all sources"), "paper_train"] == "13.8M"
            and cell.loc[("pool", "all sources"), "paper_train"] == 13_800_000)
    assert shown.loc[("pool", "all sources"), "paper_validation"] == "361K"
    assert shown.loc[("pool", "all sources"), "paper_test"] == "404,371"
    assert (shown.loc[("pairs", "all moves"), "paper_total"] == "3,017,476"
            and shown.loc[("pairs", "all moves"), "paper_train"] == "")
    assert shown.loc[("pairs", "all moves"), "total"] == len(built.pairs)  # our own counts are left as they are


def test_stage_on_mined_fixture(cfg):
    sentences = pd.read_csv(FIXTURES / "sentences.csv", keep_default_na=False, na_values=[""])
    lexicon = pd.read_csv(FIXTURES / "lexicon.csv", keep_default_na=False, na_values=[""])
    cfg.paths.interim.mkdir(parents=True, exist_ok=True)
    sentences.to_parquet(cfg.paths.sentences, index=False)
    lexicon.to_parquet(cfg.paths.final_lexicon, index=False)
    stage_steps.mine(cfg)
    built = stage_steps.build(cfg)  # default params: year windows; P1 2004 train, P2 2008 validation, P3/P4 2012 test
    assert built.pairs.groupby("split").size().to_dict() == {"test": 3, "train": 3, "validation": 2}
    bench = load_benchmark(cfg.paths.benchmark)
    assert len(bench.queries("address", "train")) == 1 and len(bench.queries("broaden", "validation")) == 1
    report = json.loads(cfg.paths.split_report.read_text())
    assert report["pool"]["size"]["test"] == len(bench.pool("test"))


# --- the bounded build (dataset/bounded): the same benchmark, bucket by bucket --------------------------------------


def _crowded_mined_rows(seed: int = 5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pairs and distractors drawn from a small set of sentences, so that every rule of the build fires often:
    the same (query, gold) in several papers and years, golds that are distractors, sentences and queries in
    both the train and the test split, papers without a usable date, two corpora, dates beside years."""
    import random

    rng = random.Random(seed)
    sentences = [f"sentence number {i} about a method for parsing tree banks." for i in range(40)]
    papers = [(corpus, f"{corpus}{k:03d}") for corpus in ("fx", "fy") for k in range(30)]
    year_of = {paper: rng.choice([None, 2001, 2004, 2006, 2007, 2008, 2009, 2010, 2012, 2015]) for paper in papers}
    date_of = {paper: (f"{year_of[paper]}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"
                       if year_of[paper] and rng.random() < 0.4 else None)
               for paper in papers}  # fmt: skip
    pairs, distractors = [], []
    for corpus, paper in papers:
        for sent in range(0, rng.randint(2, 16), 2):
            row = pair(paper, year_of[(corpus, paper)], date_of[(corpus, paper)], rng.choice([m.value for m in MOVES]),
                       rng.choice(sentences), rng.choice(sentences), sent)
            pairs.append(row | {"corpus": corpus})
        for sent in range(1, rng.randint(2, 12), 2):
            row = distractor(paper, year_of[(corpus, paper)], date_of[(corpus, paper)],
                             rng.choice(DISTRACTOR_CATEGORIES),
                             rng.choice(sentences + [f"a distractor of its own number {sent} in paper {paper}."]),
                             sent)
            distractors.append(row | {"corpus": corpus})
    return frames(pairs, distractors)


def _write_mined_parts(frame: pd.DataFrame, folder: Path, n_parts: int) -> None:
    """Mined rows as stage 05 writes a partitioned run: papers never cut, parts not in paper order, each part in
    the mined row order and dtypes (mining.combine sorts them)."""
    papers = sorted(set(zip(frame["corpus"], frame["paper_id"])))
    part_of = {paper: index * n_parts // len(papers) for index, paper in enumerate(papers[::-1])}
    is_pairs = "move" in frame.columns
    folder.mkdir(parents=True, exist_ok=True)
    for part in range(n_parts):
        rows = frame[[part_of[p] == part for p in zip(frame["corpus"], frame["paper_id"])]]
        none = pd.DataFrame(columns=list(mining.DISTRACTOR_TABLE_COLUMNS if is_pairs else mining.PAIR_TABLE_COLUMNS))
        mined = mining.combine([mining.MiningResult(rows, none, Counter()) if is_pairs
                                else mining.MiningResult(none, rows, Counter())])
        ordered = mined.pairs if is_pairs else mined.distractors
        ordered.astype({c: "string" for c in ordered.columns if ordered[c].dtype == object}).to_parquet(
            folder / f"part-{part:05d}.parquet", index=False)


def _release_files(root: Path) -> dict[str, pd.DataFrame]:
    return {str(p.relative_to(root)): pd.read_parquet(p) for p in sorted(root.rglob("*.parquet"))}


@pytest.mark.parametrize("buckets", [1, 3, 7])
def test_bounded_build_equals_the_in_memory_build(tmp_path, buckets):
    pairs, distractors = _crowded_mined_rows()
    _write_mined_parts(pairs, tmp_path / "pairs.parquet", 4)
    _write_mined_parts(distractors, tmp_path / "distractors.parquet", 4)
    params = DatasetParams(split_by="year", splits=YEARS)

    in_memory = build_benchmark(mining.read_mined(tmp_path / "pairs.parquet"),
                                mining.read_mined(tmp_path / "distractors.parquet"), params)
    dataset.write_release(in_memory, tmp_path / "in_memory")
    bounded = dataset.build_bounded(tmp_path / "pairs.parquet", tmp_path / "distractors.parquet", params,
                                    tmp_path / "bounded", buckets)

    # the fixture exercises every rule the build has
    for rule in ("pairs.dropped.duplicate_query_gold", "pairs.dropped.paper_without_usable_date",
                 "distractors.dropped.equal_to_a_gold", "pool.dropped_from_train_as_in_test",
                 "pairs.dropped.train_pair_touching_test", "pool.dropped_duplicates.train"):
        assert in_memory.counts[rule] > 0, rule
    assert bounded.report() == in_memory.report()
    expected, got = _release_files(tmp_path / "in_memory"), _release_files(tmp_path / "bounded")
    assert list(got) == list(expected) and len(expected) == 12
    for name, frame in expected.items():
        pd.testing.assert_frame_equal(got[name], frame, check_dtype=len(frame) > 0, obj=name)  # same rows, same order
    assert not list(tmp_path.glob(".dataset-buckets-*")), "the bucket folder is removed"
    by_paper = ["corpus", "paper_id"]
    pd.testing.assert_frame_equal(bounded.papers.sort_values(by_paper).reset_index(drop=True),
                                  in_memory.papers.sort_values(by_paper).reset_index(drop=True),
                                  check_dtype=False)  # polars reads years as float
    # what Table 5 and its notes read is all the bounded result keeps of the rows
    pd.testing.assert_frame_equal(dataset.table5(bounded), dataset.table5(in_memory))
    assert dataset.table5_notes(bounded) == dataset.table5_notes(in_memory)


def test_a_distractor_fraction_draws_the_same_docids_in_both_builds(tmp_path):
    pairs, distractors = _crowded_mined_rows()
    _write_mined_parts(pairs, tmp_path / "pairs.parquet", 3)
    _write_mined_parts(distractors, tmp_path / "distractors.parquet", 3)
    read = lambda name: mining.read_mined(tmp_path / name)  # noqa: E731
    every = build_benchmark(read("pairs.parquet"), read("distractors.parquet"),
                            DatasetParams(split_by="year", splits=YEARS))
    params = DatasetParams(split_by="year", splits=YEARS, distractor_fraction=0.5, hash_seed=3)
    half = build_benchmark(read("pairs.parquet"), read("distractors.parquet"), params)
    dataset.write_release(half, tmp_path / "in_memory")
    bounded = dataset.build_bounded(tmp_path / "pairs.parquet", tmp_path / "distractors.parquet", params,
                                    tmp_path / "bounded", 3)
    assert bounded.report() == half.report()
    expected, got = _release_files(tmp_path / "in_memory"), _release_files(tmp_path / "bounded")
    assert list(got) == list(expected)
    for name, frame in expected.items():
        pd.testing.assert_frame_equal(got[name], frame, check_dtype=len(frame) > 0, obj=name)

    def distractor_ids(built):
        return {d for pool in built.pools.values()
                for d in pool.loc[pool["source"].isin(DISTRACTOR_CATEGORIES), "docid"]}

    kept, offered = distractor_ids(half), distractor_ids(every)
    drawn = {d for d in offered if seeded_hash(3, d) < SEEDED_HASH_RANGE // 2}
    assert kept == drawn and 0 < len(kept) < len(offered)  # the draw is by docid hash, not by row or part
    assert half.counts["distractors.dropped.not_drawn"] > 0 and "distractors.dropped.not_drawn" not in every.counts
    assert set(half.pairs["gold_id"]) == set(every.pairs["gold_id"])  # golds are never drawn out
    assert any("seeded draw" in note for note in dataset.table5_notes(half))
    assert not any("seeded draw" in note for note in dataset.table5_notes(every))
    with pytest.raises(ValueError, match="distractor_fraction"):
        DatasetParams(distractor_fraction=0)


def test_the_stage_builds_bucket_by_bucket_past_its_memory_budget(cfg, monkeypatch):
    pairs, distractors = _crowded_mined_rows(seed=9)
    _write_mined_parts(pairs, cfg.paths.pairs, 2)
    _write_mined_parts(distractors, cfg.paths.distractors, 2)
    monkeypatch.setattr(dataset, "build_from_tables",
                        lambda *a: pytest.fail("the in-memory build ran past the budget"))
    cfg.sections["dataset"] = {"split_by": "year", "splits": YEARS, "max_in_memory_bytes": 1000,
                               "bucket_bytes": 10_000}
    built = stage_steps.build(cfg)
    report = json.loads(cfg.paths.split_report.read_text())
    assert report["pool"]["size"] == {s: len(built.pools[s]) for s in SPLITS} and built.pools["test"].shape[0] > 0
    bench = load_benchmark(cfg.paths.benchmark)
    assert sum(len(bench.queries(m, "train")) for m in ("address", "broaden", "specify")) > 0
