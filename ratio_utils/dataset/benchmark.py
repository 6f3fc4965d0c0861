"""The benchmark on disk, in the layout of the official Ratio release; read by every stage after 06.

    <root>/data/{address,broaden,specify}/{train,validation,test,silver}.parquet   query–gold pairs
    <root>/candidates/{train,validation,test}.parquet                              shared pools
    <root>/provenance/silver.json                     who judged the silver set (ratio_utils.publish.label_sources)
    <root>/README.md                                  the dataset card, for Hugging Face `datasets`
                                                      (ratio_utils.dataset.card)

Pair files carry the authors' columns (`corpusid`, `year`, `publicationdate`, `queryTerm`,
`queryTerm_group`, `querySentence`, `goldSentence`) and, in our rebuild, `query_id` and `gold_id`.
A directory of the official release may lack our ids or name the candidate columns differently:
`load_benchmark` fills ids from the text (`schema.sentence_id`) and maps the known aliases, so
one loader serves both. `ratio_utils.dataset` writes this layout; nothing else does.

Checked on load, the one validation every command and stage shares (evaluate, export, MTEB, search, the notebooks):
text columns are UTF-8 text (binary columns that decode are decoded); no null query or gold id or text; no query id
with two different query texts (two texts with the same normalised form are one sentence by `schema.sentence_id`'s
rule, hence one query; one query with several golds is several pairs with the same query, by design); every gold of
a split's pairs is in its split's pool (`qrels`, `eval_set`); no docid twice in a pool. A file that breaks a rule
raises `InvalidBenchmarkError` naming the file, the count and the first offending ids. `load_benchmark(...,
allow_invalid=True)` (the commands' `--allow-invalid`) drops those rows instead and records each problem
(`Benchmark.problems`), which the commands write into their result files: never silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..io import InputError, require_columns, sha256_tree, write_parquet_atomic
from ..schema import (
    CANDIDATE_COLUMNS,
    CARD_FILE,
    PAIR_COLUMNS,
    POOL_SPLITS,
    PROVENANCE_DIR,
    Move,
    Split,
    normalize_text_key,
    sentence_id,
)

# Candidate-column aliases seen or plausible in other exports of the same data.
_CANDIDATE_ALIASES = {
    "docid": ("docid", "doc_id", "candidate_id", "sentence_id", "id"),
    "text": ("text", "sentence", "candidate", "candidateSentence"),
    "source": ("source", "group", "queryTerm_group", "origin"),
    "corpusid": ("corpusid", "corpus_id", "paper_id"),
}
_REQUIRED_PAIR_COLUMNS = ("querySentence", "goldSentence")
_PAIR_TEXT_COLUMNS = ("querySentence", "goldSentence")
_CANDIDATE_TEXT_COLUMNS = _CANDIDATE_ALIASES["text"]
EXAMPLES_SHOWN = 3  # offending ids named in a message and kept in a problem record

# What each kind of problem is, in the words of a message: "<count> <what>, e.g. <ids>".
PROBLEM_KINDS = {
    "null_value": "pair(s) with a null query id, gold id or text",
    "query_id_conflict": "query id(s) shared by different query texts",
    "gold_not_in_pool": "pair(s) whose gold id is not in the split's candidate pool",
    "null_candidate": "candidate(s) with a null docid or text",
    "duplicate_docid": "docid(s) listed more than once in the pool",
}


@dataclass(frozen=True)
class BenchmarkProblem:
    """Rows of one benchmark file that break a rule of the layout (module docstring), found on load."""

    file: str  # the file, relative to the benchmark directory
    kind: str  # a key of PROBLEM_KINDS
    count: int  # offending ids (or rows, for nulls)
    # rows left out under allow_invalid: the offending rows; for a shared query id the rows after the id's first text,
    # for a repeated docid every row after its first
    dropped_rows: int
    examples: tuple[str, ...]  # the first offending ids (for nulls: rows, 0-based as pandas counts them)
    context: str = ""  # what else the message needs (the pool a gold was looked for in)

    def describe(self) -> str:
        """One line: what is wrong, how often, the first offenders."""
        where = f" ({self.context})" if self.context else ""
        return f"{self.count} {PROBLEM_KINDS[self.kind]}{where}, e.g. {', '.join(self.examples)}"

    def record(self) -> dict[str, Any]:
        """What a result file records of it (JSON)."""
        return {"file": self.file, "kind": self.kind, "count": self.count, "dropped_rows": self.dropped_rows,
                "examples": list(self.examples), "what": PROBLEM_KINDS[self.kind], "context": self.context}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "BenchmarkProblem":
        """The problem a result file's record describes (`record`'s inverse)."""
        return cls(record["file"], record["kind"], int(record["count"]), int(record["dropped_rows"]),
                   tuple(record["examples"]), record.get("context", ""))


class InvalidBenchmarkError(InputError):
    """A benchmark file breaks a rule of the layout; the message names the file, the count and the first ids."""

    def __init__(self, path: Path, problem: BenchmarkProblem):
        self.problem = problem
        super().__init__(path, f"{problem.describe()}; fix the file, or pass --allow-invalid "
                               "(load_benchmark(..., allow_invalid=True)) to leave them out and report them",
                         reason=problem.kind)


def read_checked_table(path: Path, text_columns: tuple[str, ...]) -> pd.DataFrame:
    """A parquet file of the benchmark as pandas, its `text_columns` (those present) checked to be UTF-8 text: a
    binary column is decoded where every value is UTF-8; a value that is not raises InputError naming the file,
    the column and the row (pandas would raise without naming any file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(path, f"not a readable parquet file ({str(exc).strip().splitlines()[0]})",
                         reason="unreadable") from None
    for name in (c for c in text_columns if c in table.column_names):
        column = table[name]
        try:
            if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
                table = table.set_column(table.column_names.index(name), name, column.cast(pa.string()))
            elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                column.validate(full=True)
        except pa.ArrowInvalid:
            row, reason = _first_non_utf8(column)
            raise InputError(path, f"column {name!r}, row {row}: not UTF-8 text ({reason})",
                             reason="non_utf8") from None
    return table.to_pandas()


def _first_non_utf8(column: Any) -> tuple[int, str]:
    import pyarrow as pa

    for row, value in enumerate(column.cast(pa.binary()).to_pylist() if not pa.types.is_binary(column.type)
                                else column.to_pylist()):
        if value is None:
            continue
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return row, f"{exc.reason} at byte {exc.start}"
    return -1, "invalid UTF-8"


def _examples(values: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in list(dict.fromkeys(values))[:EXAMPLES_SHOWN])


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
    """Read access to one benchmark directory. Frames are returned fresh on every call, checked (module docstring).

    root: the directory (release layout).
    allow_invalid: leave rows that break a rule out and record the problem in `problems` instead of raising
        InvalidBenchmarkError.
    """

    root: Path
    allow_invalid: bool = False
    _found: dict = field(default_factory=dict, compare=False, repr=False)  # (file, kind) -> BenchmarkProblem

    @property
    def problems(self) -> list[BenchmarkProblem]:
        """The problems left out so far under `allow_invalid` (each file and kind once), in the order found."""
        return list(self._found.values())

    def problem_records(self) -> list[dict[str, Any]]:
        """`problems` as JSON records, for a result file."""
        return [p.record() for p in self.problems]

    def _problem(self, path: Path, kind: str, count: int, dropped_rows: int, examples: tuple[str, ...],
                 context: str = "") -> None:
        """Raise for a problem, or under allow_invalid record it (the caller then drops the rows)."""
        try:
            name = str(Path(path).relative_to(self.root))
        except ValueError:
            name = str(path)
        problem = BenchmarkProblem(name, kind, int(count), int(dropped_rows), examples, context)
        if not self.allow_invalid:
            raise InvalidBenchmarkError(path, problem)
        self._found[(name, kind)] = problem

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
        frame = read_checked_table(path, _PAIR_TEXT_COLUMNS)
        require_columns(frame, _REQUIRED_PAIR_COLUMNS, path)
        null = frame[[c for c in ("querySentence", "goldSentence", "query_id", "gold_id")
                      if c in frame]].isna().any(axis=1)
        if null.any():
            self._problem(path, "null_value", null.sum(), null.sum(), _examples(f"row {i}" for i in frame.index[null]))
            frame = frame[~null].reset_index(drop=True)
        if "query_id" not in frame.columns:
            frame["query_id"] = frame["querySentence"].map(sentence_id)
        if "gold_id" not in frame.columns:
            frame["gold_id"] = frame["goldSentence"].map(sentence_id)
        # One id, one sentence: texts that differ only in case or spacing are one sentence (sentence_id's rule).
        keys = frame["querySentence"].map(normalize_text_key)
        first_key = keys.groupby(frame["query_id"]).transform("first")
        conflict = keys != first_key
        if conflict.any():
            ids = frame.loc[conflict, "query_id"]
            self._problem(path, "query_id_conflict", ids.nunique(), conflict.sum(), _examples(ids))
            frame = frame[~conflict].reset_index(drop=True)
        return frame

    def scored_pairs(self, move: Move | str, split: Split | str) -> pd.DataFrame:
        """`queries`, each gold checked against the split's pool: what is scored (qrels, eval_set)."""
        move, split = Move.parse(move), Split.parse(split)
        frame = self.queries(move, split)
        pool = set(self.pool_ids(split).tolist())  # a set: Series.isin on arrow strings scans the pool per call
        missing = ~frame["gold_id"].map(pool.__contains__).astype(bool)
        if missing.any():
            pool_file = candidates_path(self.root, split).relative_to(self.root)
            self._problem(pairs_path(self.root, move, split), "gold_not_in_pool",
                          frame.loc[missing, "gold_id"].nunique(), missing.sum(),
                          _examples(frame.loc[missing, "gold_id"]), str(pool_file))
            frame = frame[~missing].reset_index(drop=True)
        return frame

    def qrels(self, move: Move | str, split: Split | str) -> pd.DataFrame:
        """One relevant candidate per query: columns qid, docid; every docid is in the split's pool."""
        frame = self.scored_pairs(move, split)
        return frame[["query_id", "gold_id"]].rename(columns={"query_id": "qid", "gold_id": "docid"})

    def eval_set(
        self, move: Move | str, split: Split | str, *, max_queries: int | None = None, qids: list[str] | None = None,
    ) -> EvalSet:
        """The queries, qrels and pool of one move and split: the one way every scorer turns pairs into queries.

        A query sentence that occurs in two pairs of the same move is one query with two relevant candidates
        (ids are text hashes). `qids` keeps those queries; `max_queries` keeps the first n by id (ids are
        hashes, so this is a fixed pseudo-random sample, the same in every stage that scores the run).
        """
        pairs = self.scored_pairs(move, split)
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
        qrels = pairs[["query_id", "gold_id"]].rename(columns={"query_id": "qid", "gold_id": "docid"})
        qrels = qrels[qrels["qid"].isin(set(queries["qid"]))].reset_index(drop=True)
        return EvalSet(queries, qrels, self, Split.parse(split))

    def pool(self, split: Split | str) -> pd.DataFrame:
        """The candidate pool shared by the three moves (silver uses the test pool)."""
        path = candidates_path(self.root, Split.parse(split))
        if not path.exists():
            raise FileNotFoundError(f"no candidate pool for split {Split.parse(split).value}: {path}")
        frame = read_checked_table(path, _CANDIDATE_TEXT_COLUMNS)
        frame = frame.rename(columns=_candidate_renames(frame.columns))
        if "text" not in frame.columns:
            raise InputError(path, f"no candidate text column (tried {_CANDIDATE_ALIASES['text']}); "
                             f"found {list(frame.columns)}")
        null = frame[[c for c in ("docid", "text") if c in frame]].isna().any(axis=1)
        if null.any():
            self._problem(path, "null_candidate", null.sum(), null.sum(),
                          _examples(f"row {i}" for i in frame.index[null]))
            frame = frame[~null].reset_index(drop=True)
        if "docid" not in frame.columns:
            frame["docid"] = frame["text"].map(sentence_id)
        repeated = frame["docid"].duplicated()
        if repeated.any():  # even with the same text: one row per candidate, or a scorer would rank it twice
            ids = frame.loc[repeated, "docid"]
            self._problem(path, "duplicate_docid", ids.nunique(), repeated.sum(), _examples(ids))
            frame = frame[~repeated].reset_index(drop=True)
        return frame

    def pool_ids(self, split: Split | str) -> pd.Series:
        """The docids of a split's pool, as `pool` gives them; reads only the id column where the file has a clean
        one."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = candidates_path(self.root, Split.parse(split))
        try:
            names = pq.read_schema(path).names
        except (OSError, pa.ArrowException):
            names = []  # a missing or unreadable file: `pool` raises, naming it
        id_column = "docid" if "docid" in names else next((a for a in _CANDIDATE_ALIASES["docid"] if a in names), None)
        if id_column is None or self.allow_invalid:
            return self.pool(split)["docid"]  # ids from the texts, or the problems recorded
        ids = pq.read_table(path, columns=[id_column]).column(0).to_pandas()
        if ids.isna().any() or ids.duplicated().any():
            return self.pool(split)["docid"]  # raises, naming the file and the ids
        return ids

    def checksum(self) -> str:
        """The data's checksum: pairs and pools; the label provenance records under `provenance/` describe
        who labelled the data (label_sources) and the dataset card describes the directory (dataset.card):
        both are left out, so writing them changes no run key."""
        return sha256_tree(self.root, exclude=(PROVENANCE_DIR, CARD_FILE))


def _candidate_renames(columns: Any) -> dict[str, str]:
    """{column of the file: canonical name} for the candidate columns named by an alias."""
    columns = list(columns)
    renamed = {}
    for canonical, aliases in _CANDIDATE_ALIASES.items():
        if canonical in columns:
            continue
        found = next((a for a in aliases if a in columns), None)
        if found:
            renamed[found] = canonical
    return renamed


def benchmark_dir(benchmark: str | Path | None = None, params_file: str | Path | None = None) -> Path:
    """The benchmark directory a command scores or exports: `benchmark` (a `--benchmark DIR`) when given, else the
    rebuilt one of `params_file` (default params/default.yaml).

    benchmark: the directory named by the user (relative: under the working directory).
    params_file: a `--params` file; when given it is read and checked even beside `benchmark` (a missing or bad
        file is an error, never ignored).
    Without `benchmark` and with no benchmark where the params file puts one, FileNotFoundError says, in one line,
    to pass --benchmark DIR.
    """
    from ..config import load_config

    cfg = load_config(params_file) if params_file is not None or benchmark is None else None
    if benchmark is not None:
        return Path(benchmark).expanduser()
    rebuilt = cfg.paths.benchmark
    if not (rebuilt / "data").is_dir():
        raise FileNotFoundError(f"no benchmark given and none rebuilt at {rebuilt} (the one of {cfg.source.name}): "
                                "pass --benchmark DIR")
    return rebuilt


def load_benchmark(path: str | Path, *, allow_invalid: bool = False) -> Benchmark:
    """Open our rebuilt benchmark or a directory in the official release layout.

    path: the directory.
    allow_invalid: leave out the rows that break a rule of the layout and record them (`Benchmark.problems`)
        instead of raising InvalidBenchmarkError (module docstring).
    """
    root = Path(path)
    if not (root / "data").is_dir() or not (root / "candidates").is_dir():
        raise FileNotFoundError(
            f"{root} is not a Ratio benchmark directory: expected data/<move>/<split>.parquet and "
            "candidates/<split>.parquet (build one with notebook 06, or point at the official release)"
        )
    return Benchmark(root, allow_invalid)


def write_pairs(frame: pd.DataFrame, root: Path, move: Move | str, split: Split | str) -> Path:
    require_columns(frame, PAIR_COLUMNS, f"pairs for {move}/{split}")
    return write_parquet_atomic(frame, pairs_path(root, Move.parse(move), Split.parse(split)))


def write_pool(frame: pd.DataFrame, root: Path, split: Split | str) -> Path:
    split = Split.parse(split)
    if split not in POOL_SPLITS:
        raise ValueError(f"pools exist only for {[s.value for s in POOL_SPLITS]}, not {split.value}")
    require_columns(frame, CANDIDATE_COLUMNS, f"pool {split.value}")
    return write_parquet_atomic(frame, candidates_path(root, split))
