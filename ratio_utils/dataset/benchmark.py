"""The benchmark on disk, in the layout of the official Ratio release; read by every stage after 06.

    <root>/data/{address,broaden,specify}/{train,validation,test,silver}.parquet   query–gold pairs
    <root>/candidates/{train,validation,test}.parquet                              shared pools
    <root>/provenance/silver.json                     who judged the silver set (ratio_utils.publish.label_sources)
    <root>/README.md                                  the dataset card, for Hugging Face `datasets` (ratio_utils.dataset.card)

Pair files carry the authors' columns (`corpusid`, `year`, `publicationdate`, `queryTerm`,
`queryTerm_group`, `querySentence`, `goldSentence`) and, in our rebuild, `query_id` and `gold_id`.
A directory of the official release may lack our ids or name the candidate columns differently:
`load_benchmark` fills ids from the text (`schema.sentence_id`) and maps the known aliases, so
one loader serves both. `ratio_utils.dataset` writes this layout; nothing else does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..io import InputError, require_columns, sha256_tree, write_parquet_atomic
from ..schema import CANDIDATE_COLUMNS, CARD_FILE, PAIR_COLUMNS, POOL_SPLITS, PROVENANCE_DIR, Move, Split, sentence_id

# Candidate-column aliases seen or plausible in other exports of the same data.
_CANDIDATE_ALIASES = {
    "docid": ("docid", "doc_id", "candidate_id", "sentence_id", "id"),
    "text": ("text", "sentence", "candidate", "candidateSentence"),
    "source": ("source", "group", "queryTerm_group", "origin"),
    "corpusid": ("corpusid", "corpus_id", "paper_id"),
}
_REQUIRED_PAIR_COLUMNS = ("querySentence", "goldSentence")


def pairs_path(root: Path, move: Move, split: Split) -> Path:
    return Path(root) / "data" / Move.parse(move).value / f"{Split.parse(split).value}.parquet"


def candidates_path(root: Path, split: Split) -> Path:
    return Path(root) / "candidates" / f"{Split.parse(split).pool_split.value}.parquet"


@dataclass(frozen=True)
class EvalSet:
    """What one (move, split) is scored on: its queries (qid, text: each query sentence once), their qrels
    (qid, docid) and the split's shared pool (read on first use: three moves share one pool)."""

    queries: pd.DataFrame
    qrels: pd.DataFrame
    benchmark: "Benchmark"
    split: Split

    @property
    def pool(self) -> pd.DataFrame:
        return self.benchmark.pool(self.split)


@dataclass(frozen=True)
class Benchmark:
    """Read access to one benchmark directory. Frames are returned fresh on every call."""

    root: Path

    def has(self, move: Move | str, split: Split | str) -> bool:
        return pairs_path(self.root, Move.parse(move), Split.parse(split)).exists()

    def query_split(self, move: Move | str) -> Split:
        """The query set of a move's headline numbers: silver where it holds a pair, else the unfiltered test set.

        Every stage that falls back from silver asks here, so an empty silver file means the same everywhere."""
        import pyarrow.parquet as pq

        path = pairs_path(self.root, Move.parse(move), Split.SILVER)
        return Split.SILVER if path.exists() and pq.read_metadata(path).num_rows > 0 else Split.TEST

    def queries(self, move: Move | str, split: Split | str) -> pd.DataFrame:
        """The pairs of one move and split, with `query_id` and `gold_id` always present."""
        path = pairs_path(self.root, Move.parse(move), Split.parse(split))
        if not path.exists():
            raise FileNotFoundError(f"no {Split.parse(split).value} pairs for {Move.parse(move).value}: {path}")
        frame = pd.read_parquet(path)
        require_columns(frame, _REQUIRED_PAIR_COLUMNS, path)
        if "query_id" not in frame.columns:
            frame["query_id"] = frame["querySentence"].map(sentence_id)
        if "gold_id" not in frame.columns:
            frame["gold_id"] = frame["goldSentence"].map(sentence_id)
        return frame

    def qrels(self, move: Move | str, split: Split | str) -> pd.DataFrame:
        """One relevant candidate per query: columns qid, docid."""
        frame = self.queries(move, split)
        return frame[["query_id", "gold_id"]].rename(columns={"query_id": "qid", "gold_id": "docid"})

    def eval_set(
        self, move: Move | str, split: Split | str, *, max_queries: int | None = None, qids: list[str] | None = None,
    ) -> EvalSet:
        """The queries, qrels and pool of one move and split: the one way every scorer turns pairs into queries.

        A query sentence that occurs in two pairs of the same move is one query with two relevant candidates
        (ids are text hashes). `qids` keeps those queries; `max_queries` keeps the first n by id (ids are
        hashes, so this is a fixed pseudo-random sample, the same in every stage that scores the run).
        """
        pairs = self.queries(move, split)
        queries = (
            pairs[["query_id", "querySentence"]]
            .rename(columns={"query_id": "qid", "querySentence": "text"})
            .drop_duplicates("qid")
            .reset_index(drop=True)
        )
        if qids is not None:
            queries = queries[queries["qid"].isin(set(qids))].reset_index(drop=True)
        if max_queries is not None and len(queries) > max_queries:
            queries = queries.sort_values("qid").head(max_queries).reset_index(drop=True)
        qrels = self.qrels(move, split)
        qrels = qrels[qrels["qid"].isin(set(queries["qid"]))].reset_index(drop=True)
        return EvalSet(queries, qrels, self, Split.parse(split))

    def pool(self, split: Split | str) -> pd.DataFrame:
        """The candidate pool shared by the three moves (silver uses the test pool)."""
        path = candidates_path(self.root, Split.parse(split))
        if not path.exists():
            raise FileNotFoundError(f"no candidate pool for split {Split.parse(split).value}: {path}")
        frame = pd.read_parquet(path)
        renamed = {}
        for canonical, aliases in _CANDIDATE_ALIASES.items():
            if canonical in frame.columns:
                continue
            found = next((a for a in aliases if a in frame.columns), None)
            if found:
                renamed[found] = canonical
        frame = frame.rename(columns=renamed)
        if "text" not in frame.columns:
            raise InputError(path, f"no candidate text column (tried {_CANDIDATE_ALIASES['text']}); found {list(frame.columns)}")
        if "docid" not in frame.columns:
            frame["docid"] = frame["text"].map(sentence_id)
        return frame

    def checksum(self) -> str:
        """The data's checksum: pairs and pools; the label provenance records under `provenance/` describe
        who labelled the data (label_sources) and the dataset card describes the directory (dataset.card):
        both are left out, so writing them changes no run key."""
        return sha256_tree(self.root, exclude=(PROVENANCE_DIR, CARD_FILE))


def load_benchmark(path: str | Path) -> Benchmark:
    """Open our rebuilt benchmark or a directory in the official release layout."""
    root = Path(path)
    if not (root / "data").is_dir() or not (root / "candidates").is_dir():
        raise FileNotFoundError(
            f"{root} is not a Ratio benchmark directory: expected data/<move>/<split>.parquet and "
            "candidates/<split>.parquet (build one with notebook 06, or point at the official release)"
        )
    return Benchmark(root)


def write_pairs(frame: pd.DataFrame, root: Path, move: Move | str, split: Split | str) -> Path:
    require_columns(frame, PAIR_COLUMNS, f"pairs for {move}/{split}")
    return write_parquet_atomic(frame, pairs_path(root, Move.parse(move), Split.parse(split)))


def write_pool(frame: pd.DataFrame, root: Path, split: Split | str) -> Path:
    split = Split.parse(split)
    if split not in POOL_SPLITS:
        raise ValueError(f"pools exist only for {[s.value for s in POOL_SPLITS]}, not {split.value}")
    require_columns(frame, CANDIDATE_COLUMNS, f"pool {split.value}")
    return write_parquet_atomic(frame, candidates_path(root, split))
