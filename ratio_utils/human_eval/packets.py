"""Packets of the blinded inspiration study (paper §5.3, Appendix G): what annotators see, and the unblinding key.

Serves notebook 12 (ratio_utils.stages.human_eval_stats, through ratio_utils.human_eval.study) and the annotation
app (ratio_utils.human_eval.annotation_app), which reads packets back with `load_packet` and `load_key`.

Reads:  the benchmark (silver pairs, or unfiltered test where silver is absent), the run files of two
        systems (data/retrieval_runs/<system>/<move>/<split>.parquet) and stage 05's distractors (for the
        sentences as the paper wrote them); prompts/moves.toml (each move's definition and question shown to
        annotators, schema.move_text).
Writes: <packets>/study.json, queries.jsonl, assignments.json   what annotators see (no system names)
        <key folder>/unblinding_key.jsonl                         which list is which system; gold; papers,
                                                                  outside the packets and their parent folder
Label files are read by ratio_utils.human_eval.labels, their statistics by ratio_utils.human_eval.statistics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..dataset.benchmark import Benchmark
from ..io import InputError, iter_jsonl, write_json_atomic, write_text_atomic
from ..param_sections import HumanEvalParams
from ..retrieval.runs import read_run, run_path
from ..schema import MOVES, Move, Split, move_text

PACKET_FORMAT = "ratio-human-eval-packet/1"

LISTS = ("A", "B")

LABELS = ("useful", "not_useful")

PREFERENCES = ("A", "B", "tie")

STUDY_SETUPS = ("baseline", "tuned")

# One row per shown candidate (docs/human_eval.md). No field says which system made a list.
LABEL_FIELDS = (
    "annotator", "item", "move", "query_id", "list", "rank", "candidate_id", "label", "labelled_at",
    "preference", "preference_at", "comment", "comment_at",
)  # fmt: skip

MAX_COMMENT = 5_000  # characters; the app's comment box holds no more

KEY_FILE = "unblinding_key.jsonl"

def sample_by_marker(queries: pd.DataFrame, n: int, rng: np.random.Generator,
                     marker_column: str = "queryTerm") -> pd.DataFrame:
    """`n` queries drawn by marker with equal allocation (paper, Appendix G), in a random order."""
    from ..judge.sampling import stratified_equal_allocation  # the judge's sampler: the same allocation rule

    sample = stratified_equal_allocation(queries, marker_column, n, seed=int(rng.integers(2**32)))
    return sample.iloc[rng.permutation(len(sample))].reset_index(drop=True)


@dataclass
class StudyPackets:
    """Everything notebook 12 writes before annotation: what annotators see, and the key kept apart."""

    items: list[dict]  # queries.jsonl rows (blind)
    assignments: dict[str, list[str]]  # annotator -> item ids, in the order they annotate
    key: list[dict]  # unblinding_key.jsonl rows
    report: dict  # counts and notes (packets_report.json)


def original_texts(bench: Benchmark, split: Split, distractors_path: Path | None) -> dict[str, str]:
    """Candidate id -> the sentence as the paper wrote it (`gold_original`, distractors' `text_original`)."""
    originals: dict[str, str] = {}
    for move in MOVES:
        for pair_split in (Split.TEST, Split.SILVER) if split.pool_split is Split.TEST else (split,):
            if bench.has(move, pair_split):
                pairs = bench.queries(move, pair_split)
                if "gold_original" in pairs.columns:
                    originals.update(zip(pairs["gold_id"], pairs["gold_original"]))
    if distractors_path is not None and Path(distractors_path).exists():
        distractors = pd.read_parquet(distractors_path, columns=["docid", "text_original"])
        for docid, text in zip(distractors["docid"], distractors["text_original"]):
            originals.setdefault(docid, text)
    return {k: v for k, v in originals.items() if isinstance(v, str) and v.strip()}


def _subfield(pairs: pd.DataFrame, column: str | None, papers_path: Path | None) -> pd.Series:
    if column is None:
        return pd.Series([None] * len(pairs), index=pairs.index, dtype=object)
    if column in pairs.columns:
        return pairs[column].astype(object)
    if papers_path is None or not Path(papers_path).exists():
        raise ValueError(f"human_eval.subfield_column {column!r} is not a pair column and papers.parquet is absent")
    papers = pd.read_parquet(papers_path)
    if column not in papers.columns:
        raise ValueError(f"human_eval.subfield_column {column!r} is neither a pair column nor a papers.parquet column")
    lookup = (papers.assign(paper_id=papers["paper_id"].astype(str)).drop_duplicates("paper_id")
              .set_index("paper_id")[column])
    return pairs["corpusid"].astype(str).map(lookup).astype(object)


def _top_k(run: pd.DataFrame, k: int) -> dict[str, list[str]]:
    top = run[run["rank"] <= k].sort_values(["qid", "rank"])
    return {qid: list(group["docid"]) for qid, group in top.groupby("qid", sort=False)}


def assign(items: list[dict], annotators: dict[str, list[str] | None], double_per_move: int,
           rng: np.random.Generator) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Queries to annotators: each to the least-loaded annotator of its subfield; the first
    `double_per_move` of each move also to a second one (for agreement). Returns (assignments, counts)."""
    assignments: dict[str, list[str]] = {name: [] for name in annotators}
    tie_order = {name: i for i, name in enumerate(rng.permutation(list(annotators)).tolist())}
    counts = {"unassigned": 0, "double": 0, "double_wanted_but_no_second_annotator": 0}
    doubled_per_move: dict[str, int] = {}

    def eligible(item: dict, exclude: str | None = None) -> list[str]:
        names = [n for n, fields in annotators.items()
                 if fields is None or str(item["subfield"]) in {str(f) for f in fields}]
        return sorted((n for n in names if n != exclude), key=lambda n: (len(assignments[n]), tie_order[n]))

    for item in items:
        first = eligible(item)
        if not first:
            counts["unassigned"] += 1
            continue
        assignments[first[0]].append(item["item"])
        if doubled_per_move.get(item["move"], 0) < double_per_move:
            second = eligible(item, exclude=first[0])
            if second:
                assignments[second[0]].append(item["item"])
                doubled_per_move[item["move"]] = doubled_per_move.get(item["move"], 0) + 1
                counts["double"] += 1
            else:
                counts["double_wanted_but_no_second_annotator"] += 1
    return assignments, counts


def packet_split(bench: Benchmark, move: Move) -> Split:
    """The query set of a move's packets: silver where the benchmark has it, else the unfiltered test set."""
    return Split.SILVER if bench.has(move, Split.SILVER) else Split.TEST


def run_files_in(runs_dir: Path, params: HumanEvalParams, bench: Benchmark) -> dict[tuple[str, str], Path]:
    """(setup, move) -> runs_dir/<system>/<move>/<split>.parquet of both compared systems of every move."""
    return {(setup, move.value): run_path(runs_dir, params.system(setup, move), move, packet_split(bench, move))
            for move in (Move.parse(m) for m in params.moves) for setup in STUDY_SETUPS}


@dataclass
class _PacketBuild:
    """What the phases of `build_packets` share: its inputs, the one generator every draw takes from (in the
    order the committed packets were drawn), and the rows, notes and counts each move adds, in move order."""

    bench: Benchmark
    params: HumanEvalParams
    rng: np.random.Generator
    distractors_path: Path | None
    items: list[dict] = field(default_factory=list)
    key: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    per_move: list[dict] = field(default_factory=list)


def build_packets(bench: Benchmark, run_files: dict[tuple[str, str], Path], params: HumanEvalParams, seed: int, *,
                  distractors_path: Path | None = None, papers_path: Path | None = None) -> StudyPackets:
    """Sample the queries, take both systems' top k, shuffle List A/B per query, assign annotators.

    `run_files`: (setup, move) -> the run file of that system (`run_files_in` for one folder)."""
    params.check()
    build = _PacketBuild(bench, params, np.random.default_rng(seed), distractors_path)
    for move in (Move.parse(m) for m in params.moves):
        split = packet_split(bench, move)
        if split is Split.TEST:
            build.notes.append(f"{move.value}: no silver set (it needs the LLM judge of notebook 07); queries are "
                               "sampled from the unfiltered test set instead.")
        queries, golds, stats = _queries_of_move(bench, move, split, params, papers_path)
        tops = _top_lists(run_files, params, move, split)
        labelled = _sample_move(queries, tops, params, build.rng, stats)
        build.per_move.append(stats)
        # the A/B draws of a move follow its sampling and precede the next move's: the seeded packets depend on it
        _add_items(build, move, split, labelled, tops, golds)
    assignments, counts = assign(build.items, params.annotators, params.double_labelled_per_move, build.rng)
    if counts["unassigned"]:
        build.notes.append(f"{counts['unassigned']} sampled quer(ies) match no annotator's subfields and are in no "
                           "packet.")
    report = {"seed": seed, "ab_order": "List A is the tuned system's top k with probability 1/2, per query, "
              "drawn from numpy.random.default_rng(seed) after the sampling", "per_move": build.per_move,
              "assignment": counts, "notes": build.notes,
              "systems": {m: {s: params.system(s, Move.parse(m)) for s in STUDY_SETUPS} for m in params.moves}}
    return StudyPackets(build.items, assignments, build.key, report)


def _queries_of_move(bench: Benchmark, move: Move, split: Split, params: HumanEvalParams,
                     papers_path: Path | None) -> tuple[pd.DataFrame, pd.Series, dict]:
    """(one row per query with its subfield, query id -> gold ids, the move's counts so far)."""
    pairs = bench.queries(move, split)
    golds = pairs.groupby("query_id")["gold_id"].agg(list)
    queries = pairs.drop_duplicates("query_id").reset_index(drop=True)
    queries["subfield"] = _subfield(queries, params.subfield_column, papers_path)
    stats = {"move": move.value, "split": split.value, "queries": len(queries)}
    if params.subfield_values is not None:
        keep = queries["subfield"].astype(str).isin([str(v) for v in params.subfield_values])
        stats["outside_subfields"] = int((~keep).sum())
        queries = queries[keep].reset_index(drop=True)
    return queries, golds, stats


def _top_lists(run_files: dict[tuple[str, str], Path], params: HumanEvalParams, move: Move,
               split: Split) -> dict[str, dict[str, list[str]]]:
    """Setup -> query id -> that system's top k."""
    tops = {}
    for setup in STUDY_SETUPS:
        path = run_files.get((setup, move.value))
        if path is None or not path.exists():
            raise FileNotFoundError(f"no run file for {params.system(setup, move)!r} on {move.value}/{split.value}: "
                                    f"{path} (notebooks 08/09 write run files; set human_eval.{setup}_system)")
        tops[setup] = _top_k(read_run(path), params.k)
    return tops


def _sample_move(queries: pd.DataFrame, tops: dict[str, dict[str, list[str]]], params: HumanEvalParams,
                 rng: np.random.Generator, stats: dict) -> pd.DataFrame:
    """The labelled queries of a move, drawn from a pool drawn from the queries both systems ranked."""
    in_both = queries["query_id"].isin(tops["baseline"].keys()) & queries["query_id"].isin(tops["tuned"].keys())
    stats["not_in_both_runs"] = int((~in_both).sum())
    queries = queries[in_both].reset_index(drop=True)
    pool = sample_by_marker(queries, params.pool_per_move, rng)
    labelled = sample_by_marker(pool, params.labelled_per_move, rng)
    stats.update(pool=len(pool), markers_in_pool=int(pool["queryTerm"].nunique()) if len(pool) else 0,
                 labelled=len(labelled))
    return labelled


def _add_items(build: _PacketBuild, move: Move, split: Split, labelled: pd.DataFrame,
               tops: dict[str, dict[str, list[str]]], golds: pd.Series) -> None:
    """A packet row and a key row per labelled query, List A/B drawn per query in the sample's order."""
    params = build.params
    pool_of = build.bench.pool(split).drop_duplicates("docid").set_index("docid")
    originals = original_texts(build.bench, split, build.distractors_path)
    shown_lowercase = 0
    for row in labelled.itertuples(index=False):
        item_id = f"{move.value}/{row.query_id}"
        a_is_tuned = bool(build.rng.integers(2))
        setups = {"A": "tuned" if a_is_tuned else "baseline", "B": "baseline" if a_is_tuned else "tuned"}
        shown, lowercase = _shown_lists({name: tops[setups[name]][row.query_id] for name in LISTS}, originals, pool_of)
        shown_lowercase += lowercase
        query_text = getattr(row, "query_original", None)
        build.items.append({"item": item_id, "move": move.value, "query_id": row.query_id,
                            "query": query_text if isinstance(query_text, str) and query_text.strip()
                            else row.querySentence, "lists": shown, "subfield": row.subfield})
        build.key.append({
            "item": item_id, "move": move.value, "query_id": row.query_id, "split": split.value,
            "marker": row.queryTerm, "query_paper": str(row.corpusid), "gold_ids": golds[row.query_id],
            "lists": {name: {"setup": setups[name], "system": params.system(setups[name], move),
                             "candidates": [{"rank": c["rank"], "candidate_id": c["candidate_id"],
                                             "paper": _paper(pool_of, c["candidate_id"])} for c in shown[name]]}
                      for name in LISTS},
        })
    if shown_lowercase:
        build.notes.append(f"{move.value}: {shown_lowercase} shown candidate(s) have no original-case text in the "
                           "benchmark or stage 05's distractors and are shown as the lower-cased benchmark text.")


def _shown_lists(lists: dict[str, list[str]], originals: dict[str, str],
                 pool_of: pd.DataFrame) -> tuple[dict[str, list[dict]], int]:
    """(list name -> the candidates as shown, how many are shown lower-cased for want of the original text)."""
    shown, lowercase = {}, 0
    for name, docids in lists.items():
        shown[name] = []
        for rank, docid in enumerate(docids, start=1):
            text = originals.get(docid)
            if text is None:
                lowercase += 1
                text = str(pool_of.at[docid, "text"]) if docid in pool_of.index else ""
            shown[name].append({"rank": rank, "candidate_id": docid, "text": text})
    return shown, lowercase


def _paper(pool: pd.DataFrame, docid: str) -> str | None:
    if docid in pool.index and "corpusid" in pool.columns:
        value = pool.at[docid, "corpusid"]
        return None if pd.isna(value) else str(value)
    return None


def _write_jsonl(path: Path, rows: Iterable[dict]) -> Path:
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def write_packets(packets: StudyPackets, packets_dir: Path, key_path: Path, report_path: Path,
                  k: int) -> dict[str, Path]:
    """Write the blind packet folder and, apart from it, the unblinding key and the report.

    Refuses to replace packets whose queries changed while label files exist beside them, so new
    params cannot silently orphan labels people already made; refuses a key inside or beside the
    packets, where whoever is handed the packets' folder (or its parent) could read it.
    """
    packets_dir, key_path = Path(packets_dir), Path(key_path)
    if key_exposed(packets_dir, key_path):
        raise ValueError(f"the unblinding key {key_path} would sit inside or beside the packets {packets_dir}, where "
                         "annotators could open it; write it to a folder of its own (config.Paths.human_eval_key)")
    queries_path = packets_dir / "queries.jsonl"
    labels_here = packets_dir / "labels"
    new_queries = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in packets.items)
    if (queries_path.exists() and any(labels_here.glob("*.jsonl"))
            and queries_path.read_text(encoding="utf-8") != new_queries):
        raise RuntimeError(f"{packets_dir} already holds other packets with labels in {labels_here}; move them away "
                           "(or restore the params that made them) before writing new packets")
    study = {"format": PACKET_FORMAT, "k": k, "lists": list(LISTS),
             # paper §3's definition, shown beside the query; the question follows Appendix G's guidelines
             "moves": {m.value: {"definition": move_text(m, "annotator_definition"),
                                 "question": move_text(m, "annotator_question")} for m in MOVES},
             "annotators": sorted(packets.assignments)}
    written = {
        "study": write_json_atomic(packets_dir / "study.json", study),
        "queries": write_text_atomic(queries_path, new_queries),
        "assignments": write_json_atomic(packets_dir / "assignments.json", packets.assignments),
        "key": _write_jsonl(key_path, packets.key),
        "report": write_json_atomic(report_path, packets.report),
    }
    return written


def key_exposed(packets_dir: Path, key_path: Path) -> bool:
    """Whether `key_path` lies inside `packets_dir` or in the folder that holds it."""
    packets_dir, key_path = Path(packets_dir).resolve(), Path(key_path).resolve()
    return key_path.is_relative_to(packets_dir) or key_path.parent == packets_dir.parent


def _is_key_file(path: Path) -> bool:
    """An unblinding key by its name, or by its first row (a renamed copy)."""
    if path.name.startswith(Path(KEY_FILE).stem):
        return True
    if path.suffix != ".jsonl":
        return False
    try:
        with open(path, "rb") as handle:
            row = json.loads(handle.readline(1 << 20))
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and {"gold_ids", "lists"} <= set(row)


def exposed_keys(packets_dir: str | Path) -> list[Path]:
    """Unblinding keys inside `packets_dir` (at any depth) or beside it (files of its parent folder)."""
    packets_dir = Path(packets_dir).resolve()
    files = [p for p in [*packets_dir.rglob("*"), *packets_dir.parent.glob("*")] if p.is_file()]
    return sorted({p for p in files if _is_key_file(p)})


@dataclass
class Packet:
    """A packet folder as the annotation app reads it, checked."""

    root: Path
    study: dict
    items: dict[str, dict]  # item id -> queries.jsonl row
    assignments: dict[str, list[str]]

    def for_annotator(self, name: str) -> list[dict]:
        if name not in self.assignments:
            raise KeyError(f"unknown annotator {name!r}; this packet has {sorted(self.assignments)}")
        return [self.items[i] for i in self.assignments[name]]

    def candidate_id(self, item: str, list_name: str, rank: int) -> str:
        return self.items[item]["lists"][list_name][rank - 1]["candidate_id"]


def _read_json(path: Path) -> object:
    if not path.exists():
        raise InputError(path, "missing: not a packet folder written by notebook 12 (study.json, queries.jsonl, "
                         "assignments.json)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON: {exc}") from None


def _check_packet_row(row: dict, path: Path, lineno: int) -> None:
    """Raise InputError (file:line) unless the row's lists are what the app shows: ranks 1..n in order."""
    if not all(isinstance(row[f], str) and row[f] for f in ("item", "move", "query_id", "query")):
        raise InputError(path, "`item`, `move`, `query_id` and `query` must be non-empty text", lineno)
    lists = row["lists"]
    ok = isinstance(lists, dict) and set(lists) == set(LISTS) and all(
        isinstance(lists[n], list) and lists[n]
        and all(isinstance(c, dict) and {"rank", "candidate_id", "text"} <= set(c) for c in lists[n])
        for n in LISTS)
    if not ok:
        raise InputError(path, "`lists` must hold non-empty lists 'A' and 'B' of {rank, candidate_id, text}", lineno)
    for name in LISTS:
        ranks = [c["rank"] for c in lists[name]]
        if ranks != list(range(1, len(ranks) + 1)) or any(isinstance(r, bool) for r in ranks):
            raise InputError(path, f"list {name} of item {row['item']!r} has ranks {ranks}; "
                             f"expected 1..{len(ranks)} in order", lineno)
        if not all(isinstance(c["candidate_id"], str) and c["candidate_id"] and isinstance(c["text"], str)
                   for c in lists[name]):
            raise InputError(path, f"list {name} of item {row['item']!r}: every candidate needs a candidate_id "
                             "and a text", lineno)


def load_packet(root: str | Path) -> Packet:
    root = Path(root)
    study = _read_json(root / "study.json")
    if not isinstance(study, dict) or study.get("format") != PACKET_FORMAT:
        raise InputError(root / "study.json", f"not a packet of format {PACKET_FORMAT!r}")
    items: dict[str, dict] = {}
    queries_path = root / "queries.jsonl"
    if not queries_path.exists():
        raise InputError(queries_path, "missing")
    for lineno, row in iter_jsonl(queries_path, required=("item", "move", "query_id", "query", "lists")):
        _check_packet_row(row, queries_path, lineno)
        if row["item"] in items:
            raise InputError(queries_path, f"duplicate item {row['item']!r}", lineno)
        items[row["item"]] = row
    assignments = _read_json(root / "assignments.json")
    if not isinstance(assignments, dict) or not all(isinstance(v, list) for v in assignments.values()):
        raise InputError(root / "assignments.json", "expected {annotator: [item, ...]}")
    for name, assigned in assignments.items():
        unknown = [i for i in assigned if i not in items]
        if unknown:
            raise InputError(root / "assignments.json",
                             f"annotator {name!r} is assigned unknown item(s) {unknown[:3]}")
    return Packet(root, study, items, assignments)


def load_key(path: str | Path) -> dict[str, dict]:
    return {row["item"]: row
            for _, row in iter_jsonl(path, required=("item", "move", "gold_ids", "query_paper", "lists"))}
