"""Every notebook executes under papermill on the smoke params (what run_all.sh runs, on a tiny slice), and the
tables it writes have the expected shape and consistent values.

A notebook that breaks fails CI here. Outputs go to a temporary root, never into the repository. The table checks
derive what they expect from the smoke run's own inputs (params/smoke.yaml and the benchmark files notebook 06
wrote), never from numbers of an earlier run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from ratio_utils.config import REPO_ROOT
from ratio_utils.pipeline import discover_notebooks
from ratio_utils.schema import MOVES as SCHEMA_MOVES

pytestmark = [pytest.mark.smoke, pytest.mark.slow]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, shared_dir):
    root = tmp_path_factory.mktemp("smoke")
    env = dict(os.environ, RATIO_OUTPUT_ROOT=str(root), RATIO_SHARED=str(shared_dir), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "ratio_utils.pipeline", "--params", "params/smoke.yaml", "--run-id", "smoke"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )
    return root, proc


def test_every_notebook_runs_on_smoke_params(smoke_run):
    root, proc = smoke_run
    assert proc.returncode == 0, f"smoke run failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    timings = pd.read_csv(root / "runs" / "smoke" / "timings.csv")
    executed = {name.split("__")[0].removesuffix(".ipynb") for name in timings.notebook}
    assert executed == {nb.stem for nb in discover_notebooks()}


def _executed(root):
    import nbformat

    return {path.name: nbformat.read(path, as_version=4) for path in sorted((root / "runs" / "smoke").glob("*.ipynb"))}


def _outputs(notebook, kind):
    return [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type in kind]


def test_tables_1_7_8_are_displayed_once_per_run(smoke_run):
    from ratio_utils.reporting.paper_tables import SHOWN_IN, TABLE_SPECS

    root, _ = smoke_run
    for name, spec in TABLE_SPECS.items():
        caption = "<b>" + spec.caption.split("{")[0]  # the caption PaperTables.show puts above the table
        shown = {nb_name: sum(caption in str(o.get("data", {}).get("text/html", ""))
                              for o in _outputs(nb, ("display_data", "execute_result")))
                 for nb_name, nb in _executed(root).items()}
        assert {k: v for k, v in shown.items() if v} == {f"{SHOWN_IN}.ipynb": 1}, name


def test_stream_outputs_hold_no_terminal_escapes_and_each_notice_once(smoke_run):
    """Nested progress bars leave cursor-up codes (\\x1b[A); a missing LLM price is said once per run."""
    root, _ = smoke_run
    notices = []
    for name, nb in _executed(root).items():
        for output in _outputs(nb, ("stream",)):
            assert "\x1b[" not in output["text"], f"{name}: {output['text'][:300]!r}"
            assert "cost unknown" not in output["text"], name
            notices += [line for line in output["text"].splitlines() if "llm.prices has no price" in line]
    assert len(notices) == len(set(notices))


def test_the_time_table_says_what_was_reused(smoke_run):
    from ratio_utils.publish.run_records import reused_by_notebook

    root, _ = smoke_run
    reused = reused_by_notebook(root / "runs" / "smoke")
    # 09 scores the base model on the pool notebook 08 embedded, and its tables use 08's intervals.
    assert any(name.startswith("09_") and "computed before" in line for name, line in reused.items())
    assert re.search(r"\|\s*seconds\s*\|\s*reused\s*\|", (root / "reports" / "summary.md").read_text())


# --- the smoke tables: shapes and values checked against the smoke run's own inputs --------------------------------

MOVES = [move.value for move in SCHEMA_MOVES]


def _smoke_config(root):
    """The smoke params as the run read them (its outputs under root)."""
    from ratio_utils.config import load_config

    with pytest.MonkeyPatch.context() as env:
        env.setenv("RATIO_OUTPUT_ROOT", str(root))
        return load_config("params/smoke.yaml")


def _table(cfg, name: str) -> pd.DataFrame:
    return pd.read_csv(cfg.paths.tables / f"{name}.csv")


def _pairs_file(cfg, move: str, split: str) -> pd.DataFrame:
    return pd.read_parquet(cfg.paths.benchmark / "data" / move / f"{split}.parquet")


def _scored_queries(cfg, move: str, split: str) -> int:
    """Queries a run of this move and split scores: the file's distinct query sentences, at most
    retrieval.max_queries."""
    n = _pairs_file(cfg, move, split)["querySentence"].nunique()
    cap = cfg.sections["retrieval"].get("max_queries")
    return n if cap is None else min(n, cap)


def _headline_split(cfg, move: str) -> str:
    """Silver where the smoke run's silver file of the move holds a pair, else the unfiltered test set (paper §5.2)."""
    silver = cfg.paths.benchmark / "data" / move / "silver.parquet"
    return "silver" if silver.exists() and len(pd.read_parquet(silver)) else "test"


def _metric_columns(table: pd.DataFrame, move: str) -> list[str]:
    prefix = f"{move.capitalize()} "
    return [c for c in table.columns if c.startswith(prefix) and not c.endswith((" low", " high", " queries"))]


@pytest.mark.parametrize("name, split", [("table1_silver_main", "headline"), ("table7_test_full", "test"),
                                         ("table8_silver_full", "headline")])
def test_paper_tables_hold_a_row_per_system_and_the_query_counts_of_the_smoke_benchmark(smoke_run, name, split):
    from ratio_utils.reporting import paper_tables
    from ratio_utils.systems.spec import bm25_model_name

    root, _ = smoke_run
    cfg = _smoke_config(root)
    table = _table(cfg, name)
    keys = list(zip(table.System, table.Prefix, table.Setup))
    assert len(keys) == len(set(keys)), f"{name}: a system row twice"
    bm25 = [bm25_model_name(n) for n in cfg.sections["retrieval"]["bm25_ngrams"]]
    if paper_tables.TABLE_SPECS[name].main_setups_only:  # Table 1 holds the unigram variant, Table 8 every one
        bm25 = [system for system in bm25 if system == paper_tables.BM25_UNIGRAM]
        assert bm25, "the smoke params rank BM25-unigram"
    rows = table.set_index(["System", "Prefix", "Setup"])
    for system in bm25:  # notebook 08 ranks every move with every BM25 variant of the params
        for move in MOVES:
            query_set = _headline_split(cfg, move) if split == "headline" else split
            assert (rows.loc[(system, "-", "Baseline"), f"{move.capitalize()} queries"]
                    == _scored_queries(cfg, move, query_set))
    filled = table[[f"{m.capitalize()} queries" for m in MOVES]].notna().any(axis=1)
    assert set(table.loc[filled & table.System.str.startswith("BM25"), "System"]) == set(bm25)
    tuned = table[(table.Setup == "Tuned") & filled]  # notebook 09 trains only train.moves: no cell for the others
    for move in MOVES:
        counts = tuned[f"{move.capitalize()} queries"]
        assert (counts.notna() if move in cfg.sections["train"]["moves"] else counts.isna()).all(), (name, move)


@pytest.mark.parametrize("name", ["table1_silver_main", "table7_test_full", "table8_silver_full"])
def test_paper_table_cells_are_percentages_inside_their_intervals_and_ordered_by_k(smoke_run, name):
    root, _ = smoke_run
    table = _table(_smoke_config(root), name)
    n_cells = 0
    for move in MOVES:
        for column in _metric_columns(table, move):
            cells = table[[column, f"{column} low", f"{column} high"]].dropna()
            n_cells += len(cells)
            assert cells.stack().between(0, 100).all(), column
            assert ((cells[f"{column} low"] <= cells[column] + 1e-9)
                    & (cells[column] <= cells[f"{column} high"] + 1e-9)).all(), column
        m = lambda metric: table.get(f"{move.capitalize()} {metric}")  # noqa: E731
        recalls = [m(f"R@{k}") for k in (1, 3, 5, 10, 100) if m(f"R@{k}") is not None]
        for smaller, larger in zip(recalls, recalls[1:]):  # recall cannot fall as the cutoff grows
            both = smaller.notna() & larger.notna()
            assert (smaller[both] <= larger[both] + 1e-9).all(), (name, move)
        both = m("M@10").notna() & m("R@10").notna()  # a reciprocal rank within 10 is at most the hit within 10
        assert (m("M@10")[both] <= m("R@10")[both] + 1e-9).all(), (name, move)
        if m("R@1") is not None:  # ... and at least the hit at rank 1
            both = m("M@10").notna() & m("R@1").notna()
            assert (m("R@1")[both] <= m("M@10")[both] + 1e-9).all(), (name, move)
    assert n_cells > 0


@pytest.mark.parametrize("name", ["table1_silver_main", "table7_test_full", "table8_silver_full"])
def test_numeric_records_repeat_the_table_cells(smoke_run, name):
    """records.csv (what the summary and claims read) holds each filled cell once, with the row's query count as n."""
    root, _ = smoke_run
    cfg = _smoke_config(root)
    table = _table(cfg, name)
    records = pd.read_csv(cfg.paths.tables / f"{name}.records.csv")
    assert set(records.table) == {name}
    from_csv = []
    for _, row in table.iterrows():
        for move in MOVES:
            for column in _metric_columns(table, move):
                if pd.notna(row[column]):
                    metric = column.split(" ", 1)[1]
                    from_csv.append((move, metric, round(row[column], 9), round(row[f"{column} low"], 9),
                                     round(row[f"{column} high"], 9), int(row[f"{move.capitalize()} queries"])))
    from_records = [(r.move, r.metric, round(r.value, 9), round(r.low, 9), round(r.high, 9), int(r.n))
                    for r in records.itertuples()]
    assert sorted(from_records) == sorted(from_csv) and from_csv
    for move in MOVES:
        query_sets = set(records.loc[records.move == move, "query_set"])
        expected = "test" if name == "table7_test_full" else _headline_split(cfg, move)
        assert query_sets == {expected}, (name, move)


def test_table5_counts_are_the_smoke_benchmarks_files(smoke_run):
    root, _ = smoke_run
    cfg = _smoke_config(root)
    table5 = _table(cfg, "table5_split_and_pool").set_index(["section", "item"])
    splits = ("train", "validation", "test")
    for move in MOVES:
        assert ([table5.loc[("pairs", move), s] for s in splits]
                == [len(_pairs_file(cfg, move, s)) for s in splits]), move
    pools = {s: pd.read_parquet(cfg.paths.benchmark / "candidates" / f"{s}.parquet") for s in splits}
    assert [table5.loc[("pool", "all sources"), s] for s in splits] == [len(pools[s]) for s in splits]
    for source in set().union(*(set(p.source) for p in pools.values())):
        assert ([table5.loc[("pool", source), s] for s in splits]
                == [int((pools[s].source == source).sum()) for s in splits])
    # the smoke corpus is corpus.max_papers papers, and each of them lies in one split window
    assert table5.loc[("papers", "in the corpus"), "total"] == cfg.sections["corpus"]["max_papers"]
    assert table5.loc[("papers", "in the corpus"), list(splits)].sum() == cfg.sections["corpus"]["max_papers"]
