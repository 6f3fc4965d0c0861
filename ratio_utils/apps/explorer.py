"""The inspiration explorer: one statement, three moves side by side, in the browser.

    ratio-explorer [--build-missing [--from-year 2019]] [--model PATH|NAME|HUB_ID] [--top 10] [--port 8770]

(`python -m ratio_utils.apps.explorer` is the same command.) A local page over the indexes that `ratio-search index`
builds: a text box for a problem
statement and three columns (Address, Broaden, Specify), each the top k sentences of that move's retriever, with
score, paper title, year and id, and the sentences before and after it in its paper (expandable). Above the
columns a selector chooses the retrievers: the fine-tuned one per move (notebook 09), the unified one with the move
as instruction (notebook 13), or one model for all three moves (`--model`, e.g. an untuned baseline). A column whose
model is not trained yet, or whose index is missing or was built from another model or corpus, says so instead of
answering. Each model is resolved once and loaded once, each index folder opened once, and a statement is encoded
once per (model, query prefix): the three columns of `--model` (one model, one prefix, one index) are one search.

A hit can be marked useful / not useful; the marks go to a JSONL file of the user's (`--judgments`, default
`data/explorer/judgments.jsonl` under the output root; nothing is sent anywhere), one line per (statement, move,
sentence), rewritten atomically after every mark, so the page doubles as a way to collect inspiration judgments.

The server is `ratio_utils.local_server` (standard library): the page has three JSON endpoints, and the annotation
app's server already brings the safety the explorer needs (loopback only unless asked, Host check, writes only as
JSON from the page's own Origin with its token). Gradio, the usual choice for model demos, would add a large
dependency tree for what one static page does here (docs/search.md, "Explorer").

Reads: model folders, index folders (index.json, index.faiss, sentences.parquet), the run's sentence table (its
checksum, to refuse an index of another corpus). Writes: the judgments file; with `--build-missing`, the missing
index folders (data/search_index/<model>/).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from ..io import InputError, atomic_path, iter_jsonl, sha256_file
from ..local_server import LocalServer, NotFound, RequestError, add_host_arguments
from ..retrieval.dense import DenseRetriever
from ..schema import MOVES, Move
from .search import (
    MAX_STATEMENT,
    META_FILE,
    QueryModel,
    SearchError,
    SearchIndex,
    build_index_from_corpus,
    checked_statement,
    default_index_dir,
    load_search_config,
    query_encoder,
    resolve_query_model,
    search_and_rerank,
)

PROG = "ratio-explorer"

EXPLORER_STATIC = Path(__file__).parent / "explorer_static"
MAX_TOP = 50
MARK_LABELS = ("useful", "not_useful")
PER_MOVE, UNIFIED = "per-move", "unified"


@dataclass
class Column:
    """One move under one choice of retrievers: what answers it, or why nothing can."""

    move: Move
    retrievers: str
    model: str | None = None  # the model folder's name
    index: str | None = None  # the index folder's name
    size: int = 0  # sentences in the index
    problem: str | None = None
    encoder: DenseRetriever | None = field(default=None, repr=False)
    search: SearchIndex | None = field(default=None, repr=False)
    query_prefix: str = ""

    def describe(self) -> dict:
        return {"move": self.move.value, "model": self.model, "index": self.index, "size": self.size,
                "problem": self.problem}


def corpus_problem(meta: dict, expected: dict[str, str] | None) -> str | None:
    """Why an index's source tables are not the corpus the page expects (None: they are, or nothing to compare)."""
    built = meta.get("sources_sha256") or {}
    for name, digest in (expected or {}).items():
        if name in built and built[name] != digest:
            return (f"its index was built from another {name} (sha256 {built[name][:12]}, "
                    f"the run's is {digest[:12]}): rebuild it with ratio-search index")
    return None


def open_column(move: Move, retrievers: str, model: QueryModel, folder: Path, encoders: dict[str, DenseRetriever],
                expected_sources: dict[str, str] | None, build_hint: str,
                opened: dict[tuple[str, str], SearchIndex] | None = None) -> Column:
    """The column of `move` answered by `model` over the index in `folder`; a column with a problem if it cannot.
    `encoders` (one per model) and `opened` (one per index folder and model fingerprint) are shared by the columns."""
    column = Column(move, retrievers, model=model.name, index=folder.name, query_prefix=model.query_prefix(move))
    key = str(model.path)
    if key not in encoders:
        encoders[key] = query_encoder(model, cache_dir=False)
    opened = {} if opened is None else opened
    fingerprint = encoders[key].fingerprint()
    where = (str(Path(folder).resolve()), fingerprint)
    try:
        if where not in opened:
            opened[where] = SearchIndex.open(folder, fingerprint, build_hint)
        column.search = opened[where]
    except SearchError as exc:
        column.problem = str(exc)
        return column
    column.problem = corpus_problem(column.search.meta, expected_sources)
    column.encoder, column.size = encoders[key], int(column.search.index.ntotal)
    return column


class Explorer:
    """Every column the page can show, loaded once at start-up, and the answer to one statement."""

    def __init__(self, columns: dict[str, dict[Move, Column]], top: int = 10,
                 reranker: Callable[[], object] | None = None):
        """columns: {retrievers: {move: Column}}. top: hits per column by default. reranker: builds the
        `search_rerank.SearchReranker` of the "rerank with LLM" switch, on its first use (None: the switch answers
        that reranking is not set up)."""
        self.columns, self.top = columns, top
        self._make_reranker, self._reranker = reranker, None
        self._rerank_lock = threading.Lock()

    def reranker(self):
        with self._rerank_lock:
            if self._reranker is None:
                if self._make_reranker is None:
                    raise RequestError("reranking is not set up in this explorer")
                self._reranker = self._make_reranker()
            return self._reranker

    @classmethod
    def load(cls, cfg, *, model: str | None = None, indexes: Path | None = None, top: int = 10,
             build_missing: bool = False, from_year: int | None = None,
             progress: Callable[[str], None] = print) -> "Explorer":
        """Per-move and unified retrievers of the run `cfg` (and `model` for all moves, when given), each with its
        index under `indexes` (default: the run's data/search_index/<model folder>). `build_missing`: build the index
        of a trained model that has none, over the run's sentence table (papers from `from_year` on, when given)."""
        expected = ({cfg.paths.sentences.name: sha256_file(cfg.paths.sentences)} if cfg.paths.sentences.exists()
                    else None)
        encoders: dict[str, DenseRetriever] = {}
        opened: dict[tuple[str, str], SearchIndex] = {}
        label = model if isinstance(model, str) or model is None else getattr(model, "name", type(model).__name__)
        choices = {PER_MOVE: None, UNIFIED: "unified"} | ({str(label): model} if model is not None else {})
        columns: dict[str, dict[Move, Column]] = {}
        for retrievers, model_arg in choices.items():
            columns[retrievers] = {}
            resolved: QueryModel | SearchError | None = None  # a move-independent choice is resolved once
            for move in MOVES:
                try:
                    if model_arg is None:
                        qmodel = resolve_query_model(cfg, move, None)
                    else:
                        if resolved is None:
                            try:
                                resolved = resolve_query_model(cfg, move, model_arg)
                            except SearchError as exc:
                                resolved = exc
                        if isinstance(resolved, SearchError):
                            raise resolved
                        qmodel = resolved
                except SearchError as exc:
                    columns[retrievers][move] = Column(move, retrievers, problem=str(exc))
                    continue
                folder = (Path(indexes) / qmodel.name) if indexes else default_index_dir(cfg, qmodel)
                hint = "ratio-search index " + (
                    f"--model {model_arg}" if isinstance(model_arg, str) else f"--move {move.value}")
                if build_missing and not (folder / META_FILE).exists():
                    progress(f"building the index {folder.name} for {qmodel.name} (once) ...")
                    build_index_from_corpus(cfg, None, qmodel, folder, paper_ids=papers_from(cfg, from_year))
                progress(f"loading {retrievers} / {move.value}: model {qmodel.name}, index {folder.name} ...")
                columns[retrievers][move] = open_column(move, retrievers, qmodel, folder, encoders, expected, hint,
                                                        opened)
        # Models load lazily; load each one a column answers with now, so that the first statement is as fast as any.
        ready = {id(c.encoder): (c.model, c.encoder) for cols in columns.values() for c in cols.values() if c.encoder}
        for name, encoder in ready.values():
            progress(f"loading the model {name} ...")
            encoder.encode(["warm-up"], "")
        def reranker():
            from .search_rerank import SearchReranker

            return SearchReranker(cfg)

        return cls(columns, top, reranker)

    def info(self) -> dict:
        endpoint = "your LLM endpoint (llm.base_url, else $OPENAI_BASE_URL, else the OpenAI API)"
        return {"top": self.top, "max_top": MAX_TOP, "max_statement": MAX_STATEMENT, "rerank_endpoint": endpoint,
                "retrievers": {name: [c.describe() for c in cols.values()] for name, cols in self.columns.items()}}

    def column(self, retrievers: object, move: object) -> Column:
        if not isinstance(retrievers, str) or retrievers not in self.columns:
            raise RequestError(f"unknown retrievers {retrievers!r} ({', '.join(self.columns)})")
        try:
            return self.columns[retrievers][Move.parse(str(move))]
        except ValueError as exc:
            raise RequestError(str(exc)) from None

    def ask(self, statement: object, retrievers: object, top: object = None, rerank: object = False) -> dict:
        """The top hits of each move's column for `statement`, with the seconds each column took; `rerank`: each
        column's top 100 reranked by the LLM (`search.search_and_rerank`), with what the reranker did."""
        statement = page_statement(statement)
        if not isinstance(rerank, bool):
            raise RequestError(f"rerank is true or false, got {rerank!r}")
        reranker = self.reranker() if rerank else None
        top = self.top if top is None else top
        if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= MAX_TOP:
            raise RequestError(f"top is a whole number from 1 to {MAX_TOP}, got {top!r}")
        answers = []
        # columns with one model, index and prefix: one search (a reranked column is the move's own: its prompt)
        searched: dict[tuple, tuple[list, dict | None]] = {}
        for move in MOVES:
            column = self.column(retrievers, move.value)
            answer = column.describe() | {"hits": [], "seconds": 0.0, "rerank": None}
            if column.problem is None:
                key = (id(column.encoder), id(column.search), column.query_prefix, move if rerank else None)
                started = time.perf_counter()
                if key not in searched:
                    hits, outcome = search_and_rerank(statement, move, column.encoder, column.search,
                                                      column.query_prefix, top, reranker)
                    searched[key] = (json.loads(hits.to_json(orient="records", force_ascii=False)),
                                     outcome.to_dict() if outcome is not None else None)
                answer["seconds"] = round(time.perf_counter() - started, 4)
                answer["hits"], answer["rerank"] = searched[key]
            answers.append(answer)
        return {"statement": statement, "retrievers": retrievers, "columns": answers}


def papers_from(cfg, year: int | None) -> list[str] | None:
    """The ids of the run's papers from `year` on (None: every paper)."""
    if year is None:
        return None
    papers = pd.read_parquet(cfg.paths.papers, columns=["paper_id", "year"])
    ids = sorted(papers.loc[pd.to_numeric(papers["year"], errors="coerce") >= year, "paper_id"])
    if not ids:
        raise SearchError(f"no paper of the run is from {year} or later")
    return ids


def page_statement(statement: object) -> str:
    """The page's statement, checked as the search checks it (`search.checked_statement`), refused as a bad request."""
    try:
        return checked_statement(statement)
    except SearchError as exc:
        raise RequestError(str(exc)) from None


class JudgmentLog:
    """The user's marks: one JSON line per (statement, move, sentence), the latest mark kept, the file rewritten
    atomically after each mark. A mark names the hit by its docid; its paper and text come from the index."""

    KEY = ("statement", "move", "docid")

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.rows: dict[tuple, dict] = {}
        if self.path.exists():
            for _, row in iter_jsonl(self.path, required=(*self.KEY, "label")):
                self.rows[tuple(row[k] for k in self.KEY)] = row

    def marks(self, statement: str) -> dict[str, dict[str, str]]:
        """{move: {docid: label}} of one statement."""
        out: dict[str, dict[str, str]] = {m.value: {} for m in MOVES}
        for (said, move, docid), row in self.rows.items():
            if said == statement:
                out.setdefault(move, {})[docid] = row["label"]
        return out

    def mark(self, column: Column, statement: str, docid: object, label: object) -> dict:
        """Record (label None: take back) one mark; the hit must be in the column's index."""
        if label is not None and label not in MARK_LABELS:
            raise RequestError(f"label is one of {MARK_LABELS} or null, got {label!r}")
        if column.problem is not None:
            raise RequestError(f"the {column.move.value} column is not available: {column.problem}")
        rows = column.search.rows
        found = rows[rows["docid"] == docid] if isinstance(docid, str) else rows.iloc[0:0]
        if found.empty:
            raise NotFound(f"no sentence {docid!r} in the index {column.index}")
        hit = found.iloc[0]
        key = (statement, column.move.value, docid)
        with self._lock:
            if label is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = {"statement": statement, "move": column.move.value, "docid": docid, "label": label,
                                  "retrievers": column.retrievers, "model": column.model, "index": column.index,
                                  "paper_id": hit["paper_id"], "sentence": hit["sentence"],
                                  "time": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")}
            self._save()
        return self.marks(statement)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp:
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.rows.values()),
                           encoding="utf-8")


class ExplorerServer(LocalServer):
    app_name = "inspiration explorer"
    token_header = "X-Explorer-Token"
    max_body = 16 * 1024  # a statement of MAX_STATEMENT characters and a mark fit

    def __init__(self, explorer: Explorer, judgments: JudgmentLog, port: int = 8770, host: str = "127.0.0.1",
                 verbose: bool = False):
        super().__init__(EXPLORER_STATIC, port, host=host, verbose=verbose)
        self.explorer, self.judgments = explorer, judgments

    def get(self, path: str, request) -> dict:
        if path != "/api/info":
            raise NotFound(f"no such endpoint: {path}")
        return self.explorer.info() | {"judgments": self.judgments.path.name}

    def post(self, path: str, body: object) -> dict:
        if not isinstance(body, dict):
            raise RequestError("a request is a JSON object")
        if path == "/api/ask":
            answer = self.explorer.ask(body.get("statement"), body.get("retrievers"), body.get("top"),
                                       body.get("rerank", False))
            return answer | {"marks": self.judgments.marks(answer["statement"])}
        if path == "/api/mark":
            statement = page_statement(body.get("statement"))
            column = self.explorer.column(body.get("retrievers"), body.get("move"))
            return {"marks": self.judgments.mark(column, statement, body.get("docid"), body.get("label"))}
        raise NotFound(f"no such endpoint: {path}")


def listen_address(host: str) -> str:
    """127.0.0.1 by default; another address only when it is one address of this machine, named."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise SearchError(f"--host takes an IP address of this machine, got {host!r}") from None
    if address.is_unspecified:
        raise SearchError("--host 0.0.0.0 would answer on every network: name the one address to listen on")
    return str(address)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"examples:\n  {PROG} --model all-MiniLM-L6-v2 --build-missing --from-year 2019\n"
               f"  {PROG} --port 8771\n\n"
               "Each model is loaded once and each index opened once; a statement is encoded once per "
               "(model, prefix).")
    parser.add_argument("--model", default=None,
                        help="also offer this model for all three moves (a folder, a packaged or registry name or a "
                             "Hugging Face hub id; generic prefix)")
    parser.add_argument("--indexes", type=Path, default=None,
                        help="folder of index folders, one per model folder name (default: data/search_index)")
    parser.add_argument("--build-missing", action="store_true",
                        help="build the index of every trained model that has none "
                             "(one encode of the sentence table each)")
    parser.add_argument("--from-year", type=int, default=None,
                        help="with --build-missing: index only the papers from this year on (a smaller, faster index)")
    parser.add_argument("--top", type=int, default=10, help="hits per column (default: %(default)s)")
    parser.add_argument("--judgments", type=Path, default=None,
                        help="your marks, JSONL (default: data/explorer/judgments.jsonl under the output root)")
    parser.add_argument("--port", type=int, default=8770)
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s, this machine only)")
    add_host_arguments(parser)
    parser.add_argument("--params", default=None,
                        help="params file locating models and indexes (default: params/default.yaml)")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    try:
        host = listen_address(args.host)
        if not 1 <= args.top <= MAX_TOP:
            raise SearchError(f"--top is from 1 to {MAX_TOP}")
        cfg = load_search_config(args.params)
        judgments = JudgmentLog(args.judgments or cfg.paths.explorer_judgments)
        started = time.perf_counter()
        explorer = Explorer.load(cfg, model=args.model, indexes=args.indexes, top=args.top,
                                 build_missing=args.build_missing, from_year=args.from_year,
                                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (SearchError, InputError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    for name, columns in explorer.columns.items():
        for column in columns.values():
            state = f"{column.size:,} sentences" if column.problem is None else f"not available: {column.problem}"
            print(f"  {name:>10} / {column.move.value:<8} {state}", file=sys.stderr)
    try:
        server = ExplorerServer(explorer, judgments, args.port, host, args.verbose)
        server.allow_hosts(args.allow_host)
    except OSError as exc:
        print(f"{PROG}: error: cannot listen on {host}:{args.port} ({exc}); try another --port", file=sys.stderr)
        return 2
    print(f"Loaded in {time.perf_counter() - started:.1f} s. Open {server.url} in your browser; marks are saved to "
          f"{judgments.path}. Ctrl+C stops.", flush=True)
    server.serve_until_interrupted()
    return 0


if __name__ == "__main__":
    sys.exit(main())
