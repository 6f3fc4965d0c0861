"""ratio_utils.human_eval: packets (sampling, blinding, assignment) and the statistics of Tables 2, 11, 12
on label files written here, against hand-computed values, scipy and sklearn."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from human_eval_helpers import BASELINE, TUNED, label_row, make_packets
from scipy import stats as scipy_stats

from ratio_utils.dataset.benchmark import load_benchmark, write_pairs
from ratio_utils.human_eval import labels, packets, statistics
from ratio_utils.io import InputError
from ratio_utils.schema import Move, Split

# --- sampling and packets ------------------------------------------------------------------------


def test_sample_by_marker_is_balanced_and_seeded():
    queries = pd.DataFrame({"query_id": [f"q{i}" for i in range(30)],
                            "queryTerm": ["for example"] * 20 + ["in particular"] * 8 + ["e.g."] * 2})
    sample = packets.sample_by_marker(queries, 9, np.random.default_rng(3))
    assert sample["queryTerm"].value_counts().to_dict() == {"for example": 4, "in particular": 3, "e.g.": 2} or \
        sample["queryTerm"].value_counts().to_dict() == {"for example": 3, "in particular": 4, "e.g.": 2}
    again = packets.sample_by_marker(queries, 9, np.random.default_rng(3))
    assert list(sample["query_id"]) == list(again["query_id"])


def test_packets_are_blind_and_the_key_unblinds_them(tmp_path, tiny_benchmark):
    packets_dir, key_path = make_packets(tmp_path, tiny_benchmark)
    packet = packets.load_packet(packets_dir)
    key = packets.load_key(key_path)
    assert set(packet.items) == set(key)
    # 2 labelled per move (Broaden has 2 test queries), each list the top 10
    assert sorted(i.split("/")[0] for i in packet.items) == ["address", "address", "broaden", "broaden", "specify",
                                                             "specify"]
    for item in packet.items.values():
        assert [len(item["lists"][n]) for n in "AB"] == [10, 10]
    # nothing an annotator gets names a system or the gold sentence
    for path in packets_dir.iterdir():
        text = path.read_text()
        assert BASELINE not in text and TUNED not in text and "gold" not in text and "setup" not in text
    # the key says which list is which; the lists match the run files (tuned = pool in reverse id order)
    bench = load_benchmark(tiny_benchmark)
    docids = sorted(bench.pool(Split.TEST)["docid"])
    for item_id, entry in key.items():
        for name in "AB":
            shown = [c["candidate_id"] for c in packet.items[item_id]["lists"][name]]
            expected = docids[::-1][:10] if entry["lists"][name]["setup"] == "tuned" else docids[:10]
            assert shown == expected
        assert {entry["lists"]["A"]["setup"], entry["lists"]["B"]["setup"]} == {"baseline", "tuned"}
    # shuffled per query: both orders occur among the six queries with this seed
    assert {e["lists"]["A"]["setup"] for e in key.values()} == {"baseline", "tuned"}
    # every query assigned; one per move doubly labelled
    assigned = [i for items in packet.assignments.values() for i in items]
    assert set(assigned) == set(packet.items) and len(assigned) == 6 + 3
    report = json.loads((tmp_path / "study" / "report.json").read_text())
    assert any("no silver set" in note for note in report["notes"])
    assert any("lower-cased" in note for note in report["notes"])  # the tiny benchmark has no *_original columns


def test_packets_show_the_sentences_as_the_paper_wrote_them(tmp_path, tiny_benchmark):
    bench = load_benchmark(tiny_benchmark)
    for move in Move:
        pairs = bench.queries(move, Split.TEST)
        pairs["gold_original"] = pairs["goldSentence"].str.capitalize()
        pairs["query_original"] = pairs["querySentence"].str.upper()
        write_pairs(pairs, tiny_benchmark, move, Split.TEST)
    packets_dir, _ = make_packets(tmp_path, tiny_benchmark)
    item = next(iter(packets.load_packet(packets_dir).items.values()))
    assert item["query"].isupper()
    golds = {g.capitalize() for m in Move for g in bench.queries(m, Split.TEST)["goldSentence"]}
    shown = [c["text"] for n in "AB" for c in item["lists"][n]]
    assert any(text in golds for text in shown)


def test_subfield_restriction_and_assignment_by_subfield(tmp_path, tiny_benchmark):
    packets_dir, _ = make_packets(tmp_path, tiny_benchmark, subfield_column="queryTerm_group",
                                  subfield_values=["address"],
                                  annotators={"ann1": ["address"], "ann2": ["specify"]}, moves=["address", "specify"],
                                  double_labelled_per_move=0)
    packet = packets.load_packet(packets_dir)
    assert {i["move"] for i in packet.items.values()} == {"address"}
    assert len(packet.assignments["ann1"]) == 2 and packet.assignments["ann2"] == []


def test_missing_run_file_is_a_clear_error(tmp_path, tiny_benchmark):
    with pytest.raises(FileNotFoundError, match="no run file for 'nope'"):
        make_packets(tmp_path, tiny_benchmark, baseline_system="nope")


def test_packets_with_labels_are_not_replaced_by_other_packets(tmp_path, tiny_benchmark):
    packets_dir, _ = make_packets(tmp_path, tiny_benchmark)
    (packets_dir / "labels").mkdir()
    (packets_dir / "labels" / "ann1.jsonl").write_text("{}\n")
    make_packets(tmp_path, tiny_benchmark)  # same params and seed: the same packets, allowed
    with pytest.raises(RuntimeError, match="already holds other packets"):
        make_packets(tmp_path, tiny_benchmark, labelled_per_move=1)


# --- statistics on hand-written label files ---------------------------------------------------------


def _key_entry(item, a_setup, a, b, query_paper, gold):
    """a, b: [(candidate id, paper)] of List A and List B."""
    setups = {"A": a_setup, "B": "baseline" if a_setup == "tuned" else "tuned"}
    return {"item": item, "move": item.split("/")[0], "query_id": item.split("/")[1], "split": "test", "marker": "m",
            "query_paper": query_paper, "gold_ids": [gold],
            "lists": {n: {"setup": setups[n], "system": setups[n],
                          "candidates": [{"rank": r, "candidate_id": c, "paper": p}
                                         for r, (c, p) in enumerate(cands, 1)]}
                      for n, cands in (("A", a), ("B", b))}}


KEY = {e["item"]: e for e in [
    _key_entry("address/q1", "tuned", [("t1", "P1"), ("x1", "P2"), ("x2", "P1")],
               [("y1", "P3"), ("y2", "P4"), ("t1", "P1")], "P1", "t1"),
    _key_entry("address/q2", "baseline", [("z1", "P5"), ("z2", "P6"), ("z3", "P7")],
               [("g2", "P5"), ("z1", "P5"), ("w1", "P8")], "P5", "g2"),
    _key_entry("broaden/q3", "tuned", [("h1", "P9"), ("h2", "P9"), ("h3", "P10")],
               [("h1", "P9"), ("h4", "P11"), ("h5", "P12")], "P0", "g3"),
]}
U, N = "useful", "not_useful"
LABELS = {  # (annotator, item): (labels of A, labels of B, preference)
    ("ann1", "address/q1"): ([U, U, N], [N, U, U], "A"),
    ("ann2", "address/q1"): ([U, N, N], [N, N, N], "tie"),
    ("ann1", "address/q2"): ([N, N, N], [N, U, U], "B"),
    ("ann2", "broaden/q3"): ([U, N, N], [U, N, N], None),
    ("ann1", "broaden/q3"): ([U, None, None], [None, None, None], "A"),  # incomplete: left out
}


@pytest.fixture
def study(tmp_path):
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    for annotator in ("ann1", "ann2"):
        rows = []
        for (who, item), (a, b, pref) in LABELS.items():
            if who != annotator:
                continue
            for name, values in (("A", a), ("B", b)):
                for rank, value in enumerate(values, start=1):
                    cid = KEY[item]["lists"][name]["candidates"][rank - 1]["candidate_id"]
                    rows.append(label_row(who, item, name, rank, cid, value, pref))
        (labels_dir / f"{annotator}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return labels.load_labels(labels_dir, KEY, k=3)


MOVES = ["address", "broaden", "specify"]


def test_incomplete_annotations_are_left_out(study):
    assert study.incomplete[["annotator", "item"]].values.tolist() == [["ann1", "broaden/q3"]]
    assert set(zip(study.candidates.annotator, study.candidates.item)) == {k for k in LABELS
                                                                           if k != ("ann1", "broaden/q3")}


def test_table2_against_hand_computed_values(study):
    t2 = statistics.table2(study, MOVES, n_permutations=2000).set_index(["move", "setup"])
    address_tuned, address_base = t2.loc[("address", "Tuned")], t2.loc[("address", "Baseline")]
    # q1 averaged over two annotators: tuned HR 1, P (2/3+1/3)/2, MRR 1; baseline HR 1/2, P 1/3, MRR (1/2+0)/2
    # q2: tuned HR 1, P 2/3, MRR 1/2; baseline 0
    assert address_tuned["queries"] == 2
    assert address_tuned[["HR@3", "P@3", "MRR@3"]].tolist() == pytest.approx([100, 100 * (0.5 + 2 / 3) / 2, 75])
    assert address_base[["HR@3", "P@3", "MRR@3"]].tolist() == pytest.approx([25, 100 / 6, 12.5])
    assert (address_tuned["Pref."], address_base["Pref."], address_tuned["Tie"]) == (2, 0, 1)
    # broaden q3 (ann2 only; no preference given)
    assert t2.loc[("broaden", "Tuned"), "MRR@3"] == pytest.approx(100)
    assert t2.loc[("broaden", "Tuned"), "Pref."] + t2.loc[("broaden", "Tuned"), "Tie"] == 0
    assert t2.loc[("all", "Baseline"), "HR@3"] == pytest.approx(100 * (0.5 + 0 + 1) / 3)
    assert "specify" not in t2.index.get_level_values("move")


def test_table2_p_values_match_scipy_permutation_test(study):
    t2 = statistics.table2(study, MOVES).set_index(["move", "setup"])
    per_query = statistics.query_scores(study).pivot(index="item", columns="setup", values="MRR")
    exact = scipy_stats.permutation_test(
        (per_query["tuned"].to_numpy(), per_query["baseline"].to_numpy()), lambda x, y: np.mean(x - y),
        permutation_type="samples", alternative="two-sided", n_resamples=np.inf,
    ).pvalue
    assert t2.loc[("all", "Tuned"), "p MRR@3"] == pytest.approx(exact, abs=0.02)
    assert pd.isna(t2.loc[("all", "Baseline"), "p MRR@3"])


def test_table11_against_hand_computed_values(study):
    t11 = statistics.table11(study, MOVES).set_index(["move", "setup"])
    tuned, base = t11.loc[("address", "Tuned")], t11.loc[("address", "Baseline")]
    assert tuned[["Gold", "Gold useful", "Beyond", "MRR gold"]].tolist() == pytest.approx([100, 50, 75, 100])
    assert tuned["MRR / MRR gold"] == pytest.approx(0.75)
    assert base[["Gold", "Gold useful", "Beyond", "MRR gold"]].tolist() == pytest.approx([50, 25, 25, 100 / 6])
    assert base["MRR / MRR gold"] == pytest.approx(0.125 / (1 / 6))
    assert np.isnan(t11.loc[("broaden", "Tuned"), "MRR / MRR gold"])  # the gold was in neither list


def test_table12_against_hand_computed_values(study):
    t12 = statistics.table12(study, MOVES).set_index(["move", "setup"])
    # tuned, address: useful non-gold x1 (P2), z1 (P5 = query's paper), w1 (P8); shown non-gold x1, x2 (P1 = query's),
    # z1, w1
    assert t12.loc[("address", "Tuned")].tolist() == pytest.approx([3, 200 / 3, 3, 50])
    # baseline, address: useful non-gold y2 (P4); shown non-gold y1, y2, z1 (query's paper), z2, z3
    assert t12.loc[("address", "Baseline")].tolist() == pytest.approx([1, 100, 1, 80])


def test_agreement_matches_hand_computed_kappa_and_sklearn(study):
    from sklearn.metrics import cohen_kappa_score

    agree = statistics.annotator_agreement(study, MOVES).set_index(["move", "judgement"])
    row = agree.loc[("address", "candidate useful")]
    assert (row["queries"], row["pairs"]) == (1, 6)
    assert row["agreement"] == pytest.approx(50)
    assert row["Cohen's kappa"] == pytest.approx(2 / 11)  # p_o = 1/2, p_e = 4/6*1/6 + 2/6*5/6 = 14/36
    one, two = [True, True, False, False, True, True], [True, False, False, False, False, False]
    assert row["Cohen's kappa"] == pytest.approx(cohen_kappa_score(one, two))
    assert agree.loc[("address", "list preference"), "agreement"] == 0


def test_gold_marked_useful(study):
    gold = statistics.gold_marked_useful(study).set_index("setup")
    # tuned: gold t1 shown to ann1 and ann2 (both useful), g2 shown to ann1 (not useful)
    assert gold.loc["tuned"].tolist() == pytest.approx([3, 200 / 3])
    assert gold.loc["baseline"].tolist() == pytest.approx([2, 50])


def test_label_rows_that_do_not_match_the_key_are_errors_naming_the_line(tmp_path):
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    good = label_row("ann1", "address/q1", "A", 1, "t1", U)
    wrong = label_row("ann1", "address/q1", "A", 2, "t1", U)
    (labels_dir / "ann1.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(wrong) + "\n")
    with pytest.raises(InputError, match=r"ann1.jsonl:2: candidate t1 differs"):
        labels.load_labels(labels_dir, KEY, k=3)
    (labels_dir / "ann1.jsonl").write_text(json.dumps(label_row("ann1", "address/q9", "A", 1, "t1", U)) + "\n")
    with pytest.raises(InputError, match="was not shown"):
        labels.load_labels(labels_dir, KEY, k=3)
    (labels_dir / "ann1.jsonl").write_text(json.dumps({**good, "label": "maybe"}) + "\n")
    with pytest.raises(InputError, match="label must be one of"):
        labels.load_labels(labels_dir, KEY, k=3)


def test_subfield_from_papers_table(tmp_path, tiny_benchmark):
    from human_eval_helpers import toy_params, write_toy_runs

    write_toy_runs(tiny_benchmark, tmp_path / "runs")
    bench = load_benchmark(tiny_benchmark)
    paper_ids = [p for m in Move for p in bench.queries(m, Split.TEST)["corpusid"]]
    papers = pd.DataFrame({"paper_id": paper_ids + paper_ids[:1],
                           "venue": ["ACL" if p.startswith("P00") else "EMNLP" for p in paper_ids] + ["ACL"]})
    papers.to_parquet(tmp_path / "papers.parquet")
    params = toy_params(subfield_column="venue", annotators={"acl": ["ACL"], "emnlp": ["EMNLP"]})
    study = packets.build_packets(bench, packets.run_files_in(tmp_path / "runs", params, bench), params,
                                  seed=1, papers_path=tmp_path / "papers.parquet")
    by_item = {i["item"]: i["subfield"] for i in study.items}
    assert set(by_item.values()) == {"ACL", "EMNLP"}
    assert (all(by_item[i] == "ACL" for i in study.assignments["acl"])
            and all(by_item[i] == "EMNLP" for i in study.assignments["emnlp"]))


@pytest.mark.parametrize("change, message", [
    ({"labelled_at": "yesterday"}, "labelled_at must be an ISO 8601 time"),
    ({"labelled_at": "2026-01-01T10:00:00"}, "labelled_at must be an ISO 8601 time with a UTC offset"),
    ({"labelled_at": None}, "labelled_at must be"),
    ({"label": None}, "labelled_at is set but label is null"),  # a cleared label keeps no time
    ({"comment": "", "comment_at": None}, "comment must be null or text"),
    ({"comment_at": "2026-01-01T00:00:00+00:00"}, "comment_at is set but comment is null"),
    ({"preference": "A"}, "preference_at must be"),
    ({"rank": True}, "bad list/rank"),
    ({"item": ["address/q1"]}, "must be text"),
    ({"move": "broaden"}, "is not <move>/<query_id>"),
])
def test_loose_label_rows_are_errors_naming_the_line(tmp_path, change, message):
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    rows = [label_row("ann1", "address/q1", "A", 1, "t1", U),
            {**label_row("ann1", "address/q1", "A", 2, "x1", U), **change}]
    (labels_dir / "ann1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=rf"ann1.jsonl:2: .*{message}"):
        labels.load_labels(labels_dir, KEY, k=3)


def test_a_query_whose_rows_disagree_is_an_error_naming_the_line(tmp_path):
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    rows = [label_row("ann1", "address/q1", "A", r, c, U, preference="A") for r, c in ((1, "t1"), (2, "x1"))]
    rows.append(label_row("ann1", "address/q1", "A", 3, "x2", U, preference="B"))
    rows.append(label_row("ann1", "address/q2", "A", 1, "z1", U, preference="B"))  # another query may differ
    (labels_dir / "ann1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=r"ann1.jsonl:3: preference of item 'address/q1' differ\(s\) from line 1"):
        labels.load_labels(labels_dir, KEY, k=3)
    del rows[2]
    (labels_dir / "ann1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(labels.load_labels(labels_dir, KEY, k=3).incomplete) == 2
