"""The one reuse rule for run files (ratio_utils.systems.runs.get_or_compute): a run is ranked once and read back
while its key holds (retriever, benchmark, move, split, queries, k), ranked again when any part of the key changes,
and read from another stage's run file of the same ranking without writing into that stage's folder."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from ratio_utils.retrieval.runs import RunInfo, read_run, read_run_info, run_path, write_system_run
from ratio_utils.systems.runs import get_or_compute

PREFIXES = ("query: ", "document: ")
WANTED = RunInfo("all-MiniLM-L6-v2", "generic", "Baseline", "dense", "address", "test", "c" * 64, "11_analyses", k=10,
                 source="all-MiniLM-L6-v2", model_fingerprint="f" * 64)


def _ranking(tag: str) -> pd.DataFrame:
    return pd.DataFrame({"qid": ["q1", "q1", "q2"], "docid": [f"{tag}-a", f"{tag}-b", f"{tag}-a"], "rank": [1, 2, 1],
                         "score": [0.9, 0.5, 0.7]})


class Counter:
    """A compute callback that records its calls and ranks a recognisable run."""

    def __init__(self, tag: str = "computed", prefixes=PREFIXES):
        self.calls, self.tag, self.prefixes = 0, tag, prefixes

    def __call__(self):
        self.calls += 1
        return _ranking(f"{self.tag}{self.calls}"), {"name": "x", "query_prefix": self.prefixes[0],
                                                     "doc_prefix": self.prefixes[1]}


def test_a_run_is_computed_once_and_read_back_while_its_key_holds(tmp_path):
    compute = Counter()
    first = get_or_compute(tmp_path, WANTED, compute, prefixes=PREFIXES)
    assert compute.calls == 1 and not first.reused
    assert first.path == run_path(tmp_path, WANTED.system, "address", "test")
    assert read_run_info(first.path).retriever["query_prefix"] == "query: "  # the sidecar records what ran
    again = get_or_compute(tmp_path, dataclasses.replace(WANTED, stage="12_human_eval_stats", notes=["other"]),
                           compute, prefixes=PREFIXES)
    assert compute.calls == 1 and again.reused  # the stage and the notes are not part of the key
    pd.testing.assert_frame_equal(again.run, first.run)
    shallower = get_or_compute(tmp_path, dataclasses.replace(WANTED, k=5), compute, prefixes=PREFIXES)
    assert compute.calls == 1 and shallower.reused  # a deeper run stands for a shallower one


@pytest.mark.parametrize("change", [
    {"benchmark_checksum": "d" * 64},
    {"max_queries": 1},
    {"qids": ["q1"]},
    {"model_fingerprint": "e" * 64},
    {"k": 20},
    {"family": "bm25"},
])
def test_any_change_of_the_key_ranks_again(tmp_path, change):
    compute = Counter()
    get_or_compute(tmp_path, WANTED, compute, prefixes=PREFIXES)
    changed = get_or_compute(tmp_path, dataclasses.replace(WANTED, **change), compute, prefixes=PREFIXES)
    assert compute.calls == 2 and not changed.reused
    assert read_run(changed.path)["docid"].str.startswith("computed2").all()


def test_other_prefixes_rank_again(tmp_path):
    get_or_compute(tmp_path, WANTED, Counter(), prefixes=PREFIXES)
    instructed = Counter(prefixes=("Instruct: ...", "document: "))
    assert not get_or_compute(tmp_path, WANTED, instructed, prefixes=instructed.prefixes).reused
    assert instructed.calls == 1


def test_a_model_named_without_a_fingerprint_matches_by_its_source(tmp_path):
    """Notebook 08 records an installed model by name (no fingerprint): the same source stands in, another does not."""
    shared = tmp_path / "retrieval_runs"
    written = write_system_run(_ranking("08"), shared, dataclasses.replace(
        WANTED, model_fingerprint=None, stage="08_retrieval_baselines",
        retriever={"query_prefix": PREFIXES[0], "doc_prefix": PREFIXES[1]}))["parquet"]
    compute = Counter()
    stored = get_or_compute(tmp_path / "own", WANTED, compute, prefixes=PREFIXES, stand_ins=[written])
    assert stored.reused and stored.path == written and compute.calls == 0
    other = get_or_compute(tmp_path / "own", dataclasses.replace(WANTED, source="all-mpnet-base-v2"), compute,
                           prefixes=PREFIXES, stand_ins=[written])
    assert not other.reused and compute.calls == 1


def test_a_stand_in_of_another_stage_is_read_under_its_own_name_and_never_written(tmp_path):
    shared, own = tmp_path / "retrieval_runs", tmp_path / "human_eval_runs"
    tuned = dataclasses.replace(WANTED, model="all-MiniLM-L6-v2__address", setup="Tuned", stage="09_finetune",
                                retriever={"query_prefix": PREFIXES[0], "doc_prefix": PREFIXES[1]})
    stand_in = write_system_run(_ranking("09"), shared,
                                dataclasses.replace(tuned, model="all-MiniLM-L6-v2"))["parquet"]
    before = stand_in.stat().st_mtime_ns
    compute = Counter()
    stored = get_or_compute(own, tuned, compute, prefixes=PREFIXES, stand_ins=[stand_in])
    assert stored.reused and stored.path == stand_in and compute.calls == 0 and not own.exists()
    # the stand-in of another benchmark is not used, and the run computed instead goes to the caller's folder only
    other = get_or_compute(own, dataclasses.replace(tuned, benchmark_checksum="d" * 64), compute, prefixes=PREFIXES,
                           stand_ins=[stand_in])
    assert not other.reused and other.path.is_relative_to(own) and stand_in.stat().st_mtime_ns == before
    assert read_run(stand_in)["docid"].str.startswith("09").all()


def test_a_run_file_without_a_sidecar_is_ranked_again(tmp_path):
    compute = Counter()
    path = get_or_compute(tmp_path, WANTED, compute, prefixes=PREFIXES).path
    path.with_suffix("").with_suffix(".run.json").unlink()
    assert not get_or_compute(tmp_path, WANTED, compute, prefixes=PREFIXES).reused and compute.calls == 2


def test_a_sidecar_names_the_software_that_wrote_it_and_reuse_ignores_it(tmp_path):
    import importlib.metadata
    import json
    import platform

    compute = Counter()
    first = get_or_compute(tmp_path, WANTED, compute, prefixes=PREFIXES)
    software = read_run_info(first.path).software
    assert software["python"] == platform.python_version()
    assert software["torch"] == importlib.metadata.version("torch")
    assert software["sentence-transformers"] == importlib.metadata.version("sentence-transformers")
    sidecar = first.path.with_suffix(".run.json")
    record = json.loads(sidecar.read_text())
    record["software"] = {"python": "3.0", "torch": "0.1"}  # written by another machine
    sidecar.write_text(json.dumps(record))
    assert get_or_compute(tmp_path, WANTED, compute, prefixes=PREFIXES).reused and compute.calls == 1


def test_a_bm25_run_ranked_by_another_rule_is_ranked_again(tmp_path):
    """A sidecar records its family's ranking rule; a BM25 run written before ties were ordered by docid (no rule
    recorded) is recomputed, a dense run (its family has no versioned rule) is still read back."""
    import json

    from ratio_utils.retrieval.bm25 import BM25Retriever

    bm25 = dataclasses.replace(WANTED, model="BM25-unigram", prefix="-", family="bm25", source="1",
                               model_fingerprint=None)
    compute = Counter()
    first = get_or_compute(tmp_path, bm25, compute)
    assert read_run_info(first.path).ranking == BM25Retriever.RANKING
    assert get_or_compute(tmp_path, bm25, compute).reused and compute.calls == 1
    sidecar = first.path.with_suffix(".run.json")
    record = json.loads(sidecar.read_text())
    del record["ranking"]  # as every sidecar written before the rule was recorded
    sidecar.write_text(json.dumps(record))
    assert not get_or_compute(tmp_path, bm25, compute).reused and compute.calls == 2

    dense = get_or_compute(tmp_path / "dense", WANTED, compute, prefixes=PREFIXES)
    sidecar = dense.path.with_suffix(".run.json")
    record = json.loads(sidecar.read_text())
    assert record.pop("ranking") == ""
    sidecar.write_text(json.dumps(record))
    assert get_or_compute(tmp_path / "dense", WANTED, compute, prefixes=PREFIXES).reused
