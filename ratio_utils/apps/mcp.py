"""`ratio-mcp`: move-typed inspiration retrieval for research agents, as an MCP server (the official `mcp` SDK).

    ratio-mcp [--model NAME|PATH|unified] [--indexes DIR] [--params FILE]          # stdio (an agent starts it)
    ratio-mcp --http [--host 127.0.0.1] [--port 8771] [--allow-host NAME[:PORT]] ...  # streamable HTTP, bearer token

(`python -m ratio_utils.apps.mcp` is the same command; docs/agents.md registers it with a client.) The server answers
from the indexes `ratio-search index` builds (data/search_index/<model>/ of the run, or `--indexes DIR`), loaded
lazily: nothing is read at start; the first call that needs a model loads it and opens its index, once per process,
for every later call. Four tools, each with an input and an output schema (structured content):

- `find_inspirations`: for a statement and one to three moves, the k sentences of each move's retriever (optionally the
  top 100 reranked by notebook 10's listwise LLM prompt, `apps.search_rerank`), each with its paper and neighbours;
- `describe_moves`: each move's relation (from notebook 10's prompt files), a few of its markers, and the instruction
  text the unified retriever reads;
- `get_paper`: a paper of an index (title, year, venue, source, sentences indexed) and the sentences around one;
- `list_indexes`: every index folder: model and fingerprint, corpus checksums, papers, sentences, years, when built.

Bad input (an empty or over-long statement, an unknown move, k out of range, no index built) is a tool error with one
sentence (`ToolError`: the agent reads it; the server goes on). Over HTTP the server listens on 127.0.0.1 unless told
otherwise, requires `Authorization: Bearer <token>` on every request (the token from $RATIO_MCP_TOKEN, else a random
one printed on stderr at start), and answers only requests whose Host is its own address or one named with
`--allow-host` (the explorer's rule, `local_server`; DNS rebinding protection of the SDK's transport security).

Reads: index folders, model folders, the run's lexicon or mined pairs (markers), the rerank prompt files, the LLM
answer cache. Writes: the LLM answer cache (with `rerank`).
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
from pydantic import BaseModel, Field, WithJsonSchema

from ..local_server import add_host_arguments
from ..schema import MOVES, Move, move_text
from .search import (
    INDEX_FORMAT,
    MAX_STATEMENT,
    META_FILE,
    QueryModel,
    SearchError,
    SearchIndex,
    checked_statement,
    load_search_config,
    query_encoder,
    resolve_query_model,
    search_index,
)

PROG = "ratio-mcp"
TOKEN_ENV = "RATIO_MCP_TOKEN"
DEFAULT_PORT = 8771
MAX_K = 50
MAX_WINDOW = 20  # sentences either side in get_paper
MARKERS_SHOWN = 5


# ---------------------------------------------------------------------------------------------
# What the tools answer (their output schemas)
# ---------------------------------------------------------------------------------------------


class Inspiration(BaseModel):
    """One retrieved sentence."""

    rank: int = Field(description="1 = best, after reranking when the move was reranked")
    score: float = Field(description="the first-stage retriever's inner product (higher = closer)")
    sentence: str = Field(description="the sentence as the paper wrote it")
    docid: str = Field(description="the sentence's id (a hash of its normalised text); get_paper's `docid`")
    paper_id: str
    title: str | None
    year: int | None
    venue: str | None
    previous: str = Field(description="the sentence before it in the paper ('' at the start)")
    next: str = Field(description="the sentence after it in the paper ('' at the end)")
    retriever: str = Field(description="the model that ranked it (its index's name)")
    reranker: str | None = Field(description="the LLM that reranked it, or null")
    first_stage_rank: int | None = Field(description="its rank before reranking, or null when not reranked")


class RerankReport(BaseModel):
    """What the LLM reranker did for one move."""

    status: str = Field(description="reranked, unavailable (no key), failed (no answer) or unusable_answer")
    message: str = Field(description="one sentence; says so when the order is the first stage's")
    reranker: str
    repairs: list[str] = Field(description="notebook 10's repair rules applied to the answer")
    cached: bool = Field(description="the answer came from the on-disk cache (no cost)")


class MoveInspirations(BaseModel):
    move: str
    retriever: str = Field(description="the model that embedded the statement and the sentences")
    retriever_fingerprint: str = Field(description="a checksum of the model's files (first 16 hex digits)")
    index: str = Field(description="the index folder's name")
    index_sentences: int
    seconds: float = Field(description="time this move took in the server")
    rerank: RerankReport | None = Field(description="null unless rerank was asked for")
    inspirations: list[Inspiration]


class FindInspirationsAnswer(BaseModel):
    statement: str
    k: int
    from_year: int | None
    moves: list[MoveInspirations]


class MoveDescription(BaseModel):
    move: str
    relation: str = Field(description="what a sentence must do to the statement (notebook 10's prompt)")
    markers: list[str] = Field(description="a few discourse markers that introduce such a sentence in papers")
    markers_from: str = Field(description="where the markers come from (mined pairs, the lexicon, or none)")
    instruction: str = Field(description="the instruction the unified retriever reads before the statement")


class MovesAnswer(BaseModel):
    moves: list[MoveDescription]


class PaperSentence(BaseModel):
    position: int = Field(description="0-based position among the paper's indexed sentences, in reading order")
    docid: str
    sentence: str
    is_requested: bool = Field(description="true for the sentence named by `docid`")


class PaperAnswer(BaseModel):
    paper_id: str
    title: str | None
    year: int | None
    venue: str | None
    source: str | None
    corpus: str | None
    sentences_indexed: int = Field(description="the paper's sentences in the index (the corpus cleaning drops some)")
    index: str
    sentences: list[PaperSentence] = Field(description="the window of indexed sentences around `docid` (or the start)")


class IndexDescription(BaseModel):
    name: str = Field(description="the index folder's name; find_inspirations' `model` takes it")
    model: str | None
    model_kind: str | None = Field(description="per-move (notebook 09), unified (notebook 13) or other")
    model_fingerprint: str | None
    corpus: dict[str, str] = Field(description="source table -> its sha256 (first 12 hex digits)")
    papers: int | None
    sentences: int | None
    years: list[int] | None = Field(description="[first, last] publication year, or null")
    built_at: str | None
    index_type: str | None
    usable: bool
    problem: str | None = Field(description="why the index cannot be used as it is, or null")


class IndexesAnswer(BaseModel):
    folder: str
    indexes: list[IndexDescription]


# ---------------------------------------------------------------------------------------------
# The indexes and models behind the tools
# ---------------------------------------------------------------------------------------------


def _optional(value: Any) -> Any:
    return None if value is None or (not isinstance(value, (list, dict, str)) and pd.isna(value)) else value


class InspirationLibrary:
    """The indexes one server answers from, each model resolved and loaded once, each index opened once, on first use.

    cfg: the run's config (models, indexes, lexicon, the LLM and rerank params).
    indexes: the folder of index folders (default: the run's data/search_index).
    default_model: what answers when a call names no model: a model name, folder or 'unified' (default: each move's
        fine-tuned retriever of notebook 09).
    reranker: a `search_rerank.SearchReranker` to use (default: the run's, built on the first rerank).
    """

    def __init__(self, cfg, *, indexes: Path | None = None, default_model: str | None = None, reranker: Any = None):
        self.cfg = cfg
        self.indexes = Path(indexes) if indexes is not None else cfg.paths.search_indexes
        self.default_model = default_model
        self._reranker = reranker
        self._lock = threading.RLock()  # tools run in worker threads; one load or search at a time
        self._models: dict[tuple, QueryModel] = {}
        self._encoders: dict[str, Any] = {}
        self._opened: dict[tuple[str, str], SearchIndex] = {}

    # -- loading -----------------------------------------------------------------------------
    def column(self, move: Move, model: str | None):
        """(query model, encoder, opened index) answering `move` with `model` (None: the server's default)."""
        key = (move.value if (model or self.default_model) is None else None, model or self.default_model)
        with self._lock:
            if key not in self._models:
                self._models[key] = resolve_query_model(self.cfg, move, self._model_argument(model))
            qmodel = self._models[key]
            folder = self.indexes / qmodel.name
            named = model or self.default_model
            hint = f"ratio-search index --model {named}" if named else f"ratio-search index --move {move.value}"
            if not (folder / META_FILE).exists():
                raise SearchError(f"no index for {qmodel.name} in {self.indexes}: build it with `{hint}` "
                                  "(list_indexes shows what is built)")
            if str(qmodel.path) not in self._encoders:
                self._encoders[str(qmodel.path)] = query_encoder(qmodel, cache_dir=False)
            encoder = self._encoders[str(qmodel.path)]
            where = (str(folder.resolve()), encoder.fingerprint())
            if where not in self._opened:
                self._opened[where] = SearchIndex.open(folder, encoder.fingerprint(), hint)
            return qmodel, encoder, self._opened[where]

    def _model_argument(self, model: str | None) -> str | Path | None:
        """What `search.resolve_query_model` gets for a call's `model`: the server's default for None; 'unified';
        else only the name of a built index (a call never makes the server load an arbitrary hub id or folder): the
        run's model folder of that name when there is one (notebook 09's), else the name (a packaged or registry
        model)."""
        if model is None:
            return self.default_model
        if model.strip().lower() == "unified" or model == self.default_model:
            return model
        built = (sorted(p.name for p in self.indexes.iterdir() if (p / META_FILE).is_file())
                 if self.indexes.is_dir() else [])
        if model not in built:
            raise SearchError(f"no index named {model!r} in {self.indexes} (built: {', '.join(built) or 'none'}); "
                              f"build it with `ratio-search index --model {model}`")
        folder = self.cfg.paths.models / model
        return folder if folder.is_dir() else model

    def reranker(self):
        with self._lock:
            if self._reranker is None:
                from .search_rerank import SearchReranker

                self._reranker = SearchReranker(self.cfg)
            return self._reranker

    # -- the tools ---------------------------------------------------------------------------
    def find(self, statement: object, moves: object, k: object, from_year: object, model: object,
             rerank: object) -> FindInspirationsAnswer:
        statement = checked_statement(statement)
        moves = _checked_moves(moves)
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
            raise SearchError(f"k is a whole number from 1 to {MAX_K}, got {k!r}")
        if from_year is not None and (not isinstance(from_year, int) or isinstance(from_year, bool)):
            raise SearchError(f"from_year is a year such as 2019, or null; got {from_year!r}")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise SearchError(f"model is an index name from list_indexes, 'unified', or null; got {model!r}")
        answers = []
        for move in moves:
            started = time.perf_counter()
            with self._lock:
                qmodel, encoder, index = self.column(move, model)
                reranker = self.reranker() if rerank else None
                width = max(k, reranker.top_n) if reranker is not None else k
                first = _first_stage(statement, move, encoder, index, qmodel.query_prefix(move), width, from_year)
                outcome = None
                if reranker is not None:
                    hits, outcome = reranker.rerank(statement, move, first)
                    hits = hits.head(k)
                else:
                    hits = first.head(k)
            answers.append(MoveInspirations(
                move=move.value, retriever=qmodel.name, retriever_fingerprint=encoder.fingerprint()[:16],
                index=index.folder.name, index_sentences=int(index.index.ntotal),
                seconds=round(time.perf_counter() - started, 4),
                rerank=RerankReport(**outcome.to_dict()) if outcome is not None else None,
                inspirations=_inspirations(hits, index, qmodel.name,
                                           outcome.reranker if outcome is not None and outcome.status == "reranked"
                                           else None)))
        return FindInspirationsAnswer(statement=statement, k=k, from_year=from_year, moves=answers)

    def describe_moves(self) -> MovesAnswer:
        from ..llm.prompts import read_prompt
        from ..param_sections import RerankParams

        params = self.cfg.section("rerank", RerankParams)
        prompts = self.cfg.paths.from_params(params.prompts_dir)
        markers, source = self._markers()
        described = []
        for move in MOVES:
            try:
                text = read_prompt(prompts / move.value / f"{params.prompt}.md").text
                relation = " ".join(line.strip() for line in text.splitlines()
                                    if line.startswith(("The move is", "Relation:")))
            except (OSError, ValueError):
                relation = ""
            instruction = move_text(move, "instruction")
            described.append(MoveDescription(move=move.value, relation=relation or instruction,
                                             markers=markers.get(move.value, []), markers_from=source,
                                             instruction=instruction))
        return MovesAnswer(moves=described)

    def _markers(self) -> tuple[dict[str, list[str]], str]:
        """The most frequent markers of each move in the run's mined pairs, else the lexicon's first ones."""
        paths = self.cfg.paths
        if paths.pairs.exists():
            pairs = pd.read_parquet(paths.pairs, columns=["move", "marker"])
            top = {m: list(g["marker"].value_counts().index[:MARKERS_SHOWN]) for m, g in pairs.groupby("move")}
            return top, f"the most frequent markers of the mined pairs ({paths.pairs.name})"
        if paths.final_lexicon.exists():
            lexicon = pd.read_parquet(paths.final_lexicon, columns=["marker", "move", "kind"])
            lexicon = lexicon[lexicon["kind"] == "move"]
            return ({m: list(g["marker"].drop_duplicates()[:MARKERS_SHOWN]) for m, g in lexicon.groupby("move")},
                    f"the lexicon ({paths.final_lexicon.name})")
        return {}, "none: no mined pairs or lexicon in this run (notebooks 04-05)"

    def get_paper(self, paper_id: object, docid: object, window: object, model: object) -> PaperAnswer:
        if not isinstance(paper_id, str) or not paper_id.strip():
            raise SearchError("paper_id is a paper's id as find_inspirations returns it, e.g. 'P19-1269'")
        if docid is not None and not isinstance(docid, str):
            raise SearchError(f"docid is a sentence id as find_inspirations returns it, or null; got {docid!r}")
        if not isinstance(window, int) or isinstance(window, bool) or not 0 <= window <= MAX_WINDOW:
            raise SearchError(f"window is a whole number from 0 to {MAX_WINDOW}, got {window!r}")
        index = self._any_index(model)
        rows = index.rows[index.rows["paper_id"] == paper_id.strip()].reset_index(drop=True)
        if rows.empty:
            raise SearchError(f"no paper {paper_id!r} in the index {index.folder.name}")
        if docid is None:
            centre = 0
        else:
            found = rows.index[rows["docid"] == docid]
            if not len(found):
                raise SearchError(f"no sentence {docid!r} in paper {paper_id!r} of the index {index.folder.name}")
            centre = int(found[0])
        info = {}
        if index.papers is not None:
            match = index.papers[index.papers["paper_id"] == paper_id.strip()]
            info = match.iloc[0].to_dict() if len(match) else {}
        start = max(0, centre - window)
        shown = rows.iloc[start: centre + window + 1]
        year = _optional(info.get("year", rows["year"].iloc[0]))
        return PaperAnswer(
            paper_id=paper_id.strip(), title=_optional(info.get("title", rows["title"].iloc[0])),
            year=None if year is None else int(year), venue=_optional(info.get("venue")),
            source=_optional(info.get("source")), corpus=_optional(info.get("corpus")), sentences_indexed=len(rows),
            index=index.folder.name,
            sentences=[PaperSentence(position=int(i), docid=r.docid, sentence=r.sentence,
                                     is_requested=docid is not None and r.docid == docid)
                       for i, r in zip(shown.index, shown.itertuples(index=False))])

    def _any_index(self, model: object) -> SearchIndex:
        """The index of `model`, else the first the server's default retrievers have (address, broaden, specify)."""
        if model is not None and not isinstance(model, str):
            raise SearchError(f"model is an index name from list_indexes, 'unified', or null; got {model!r}")
        problems = []
        for move in MOVES:
            try:
                return self.column(move, model)[2]
            except SearchError as exc:
                problems.append(str(exc))
        raise SearchError(problems[0])

    def list_indexes(self) -> IndexesAnswer:
        described = []
        folders = (sorted(p for p in self.indexes.iterdir() if (p / META_FILE).is_file())
                   if self.indexes.is_dir() else [])
        for folder in folders:
            try:
                meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                described.append(IndexDescription(
                    name=folder.name, model=None, model_kind=None, model_fingerprint=None, corpus={}, papers=None,
                    sentences=None, years=None, built_at=None, index_type=None, usable=False,
                    problem=f"{META_FILE} cannot be read ({exc}): rebuild it with ratio-search index"))
                continue
            problem = None
            if meta.get("format") != INDEX_FORMAT:
                problem = f"format {meta.get('format')}, this code reads format {INDEX_FORMAT}: rebuild it"
            described.append(IndexDescription(
                name=folder.name, model=meta.get("model"), model_kind=meta.get("model_kind"),
                model_fingerprint=meta.get("model_fingerprint"),
                corpus={name: str(digest)[:12] for name, digest in (meta.get("sources_sha256") or {}).items()},
                papers=meta.get("papers"), sentences=meta.get("size"), years=meta.get("years"),
                built_at=meta.get("built_at"), index_type=(meta.get("index_type") or {}).get("type", "flat"),
                usable=problem is None, problem=problem))
        return IndexesAnswer(folder=str(self.indexes), indexes=described)


def _checked_moves(moves: object) -> list[Move]:
    if moves is None:
        return list(MOVES)
    if isinstance(moves, str) or not isinstance(moves, list) or not moves:
        raise SearchError(f"moves is a list of one to three of {[m.value for m in MOVES]}, got {moves!r}")
    parsed = []
    for value in moves:
        try:
            move = Move.parse(value)
        except ValueError as exc:
            raise SearchError(str(exc)) from None
        if move in parsed:
            raise SearchError(f"move {move.value!r} is named twice")
        parsed.append(move)
    return parsed


def _first_stage(statement: str, move: Move, encoder, index: SearchIndex, prefix: str, n: int,
                 from_year: int | None) -> pd.DataFrame:
    """The `n` best sentences of the move's retriever, those of papers from `from_year` on when given: the search
    widens (x4) until `n` pass the filter or the whole index is ranked."""
    total = int(index.index.ntotal)
    width = n if from_year is None else min(total, max(4 * n, 64))
    while True:
        hits = search_index(statement, move, encoder, index, prefix, width)
        if from_year is not None:
            hits = hits[hits["year"].notna() & (hits["year"] >= from_year)]
        if len(hits) >= n or width >= total:
            break
        width = min(total, width * 4)
    hits = hits.head(n).reset_index(drop=True)
    hits["rank"] = range(1, len(hits) + 1)
    return hits


def _inspirations(hits: pd.DataFrame, index: SearchIndex, retriever: str, reranker: str | None) -> list[Inspiration]:
    venues = {}
    if index.papers is not None and "venue" in index.papers:
        venues = dict(zip(index.papers["paper_id"], index.papers["venue"]))
    out = []
    for row in hits.to_dict("records"):
        year = _optional(row.get("year"))
        out.append(Inspiration(
            rank=int(row["rank"]), score=float(row["score"]), sentence=row["sentence"], docid=row["docid"],
            paper_id=row["paper_id"], title=_optional(row.get("title")), year=None if year is None else int(year),
            venue=_optional(venues.get(row["paper_id"])), previous=row.get("previous") or "",
            next=row.get("next") or "", retriever=retriever, reranker=reranker,
            first_stage_rank=int(row["first_stage_rank"]) if reranker and "first_stage_rank" in row else None))
    return out


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------


FIND_DESCRIPTION = (
    "Find sentences in the scientific literature that make an ideation move on your statement: 'address' returns "
    "sentences that solve or mitigate the problem it states, 'broaden' sentences that state it more generally, "
    "'specify' sentences that give a concrete instance or detail. Give one or two sentences as `statement` (at most "
    "1,000 characters) and the moves you want; each move answers with its k best sentences (1-50, default 10) as "
    "the paper wrote them, with score, rank, paper id, title, year, venue, the sentence before and after, and the "
    "retriever that ranked them. `from_year` keeps papers from that year on. `model` names an index from "
    "list_indexes (default: the server's retriever for each move). `rerank=true` asks an LLM (notebook 10's listwise "
    "prompt, the user's endpoint and key) to reorder the top 100: slower and it costs tokens; without a key the "
    "answer says reranking is unavailable and keeps the retriever's order. Pass a hit's paper_id and docid to "
    "get_paper to read around it.")
MOVES_DESCRIPTION = (
    "Describe the three ideation moves this server retrieves for (address, broaden, specify): for each, the relation "
    "a retrieved sentence must have to your statement, a few discourse markers that introduce such sentences in "
    "papers (the benchmark was mined from them), and the instruction text the unified retriever reads. Call it once "
    "to choose which moves to ask find_inspirations for; it costs nothing and loads no model.")
PAPER_DESCRIPTION = (
    "Read a paper of the index around one sentence: its title, year, venue, source and number of indexed sentences, "
    "and the `window` sentences (0-20, default 3) before and after the sentence `docid` in reading order (the start "
    "of the paper without a docid). Use the paper_id and docid of a find_inspirations hit to see its context. "
    "`model` names the index to read (default: the server's first retriever with an index).")
INDEXES_DESCRIPTION = (
    "List the search indexes this server can answer from: for each, its name (find_inspirations' `model`), the model "
    "and its fingerprint, the checksums of the corpus tables it was built from, the number of papers and sentences, "
    "the years covered, when it was built, its faiss index type, and whether it is usable or why not. Loads nothing; "
    "an index missing here is built with `ratio-search index --model NAME` (or `--move M`).")


def _arg(schema: dict, description: str) -> Any:
    """A tool argument whose input schema is `schema` but which pydantic passes through as given, so that a wrong
    value gets the tool's own one-sentence error (k out of range, an unknown move) instead of a validation dump."""
    return Annotated[Any, WithJsonSchema({**schema, "description": description})]


def build_server(library: InspirationLibrary):
    """The MCP server (mcp.server.mcpserver.MCPServer) with the four tools over `library`."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(PROG, log_level="WARNING",
                       instructions="Move-typed inspiration retrieval over full-text scientific papers: call "
                       "describe_moves once, then find_inspirations; get_paper reads around a hit.")

    def answering(call):
        try:
            return call()
        except SearchError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(name="find_inspirations", description=FIND_DESCRIPTION)
    def find_inspirations(
        statement: _arg({"type": "string", "minLength": 1, "maxLength": MAX_STATEMENT},
                        "your problem statement or claim, one or two sentences"),
        moves: _arg({"anyOf": [{"type": "array", "items": {"enum": [m.value for m in MOVES]}, "minItems": 1,
                                "maxItems": 3, "uniqueItems": True}, {"type": "null"}]},
                    "any of address, broaden, specify (default: all three)") = None,
        k: _arg({"type": "integer", "minimum": 1, "maximum": MAX_K}, "sentences per move") = 10,
        from_year: _arg({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "only papers from this year on") = None,
        model: _arg({"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "an index name from list_indexes, or 'unified' (default: the server's retriever per move)") = None,
        rerank: _arg({"type": "boolean"}, "rerank the top 100 with an LLM (slower; costs tokens)") = False,
    ) -> FindInspirationsAnswer:
        return answering(lambda: library.find(statement, moves, k, from_year, model, rerank))

    @server.tool(name="describe_moves", description=MOVES_DESCRIPTION)
    def describe_moves() -> MovesAnswer:
        return answering(library.describe_moves)

    @server.tool(name="get_paper", description=PAPER_DESCRIPTION)
    def get_paper(
        paper_id: _arg({"type": "string", "minLength": 1}, "a paper id as find_inspirations returns it"),
        docid: _arg({"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "a sentence id of that paper (a hit's docid)") = None,
        window: _arg({"type": "integer", "minimum": 0, "maximum": MAX_WINDOW}, "sentences either side") = 3,
        model: _arg({"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "the index to read (default: the server's first with an index)") = None,
    ) -> PaperAnswer:
        return answering(lambda: library.get_paper(paper_id, docid, window, model))

    @server.tool(name="list_indexes", description=INDEXES_DESCRIPTION)
    def list_indexes() -> IndexesAnswer:
        return answering(library.list_indexes)

    return server


class BearerTokenGate:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>` (compared in constant time);
    anything else is answered 401 before the MCP transport sees it."""

    def __init__(self, app, token: str):
        """app: the MCP streamable-HTTP Starlette app. token: the one accepted bearer token."""
        self.app, self._expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                from starlette.responses import JSONResponse

                response = JSONResponse({"error": "missing or wrong bearer token (Authorization: Bearer <token>)"},
                                        status_code=401, headers={"WWW-Authenticate": f'Bearer realm="{PROG}"'})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def allowed_hosts(host: str, port: int, extra: list[str]) -> list[str]:
    """Host header values the HTTP server answers: its own address and localhost on its port, and each
    `--allow-host NAME[:PORT]` (a bare NAME: on any port, and without one, as a proxy on 80/443 sends it)."""
    hosts = [f"{host}:{port}", f"localhost:{port}"]
    for name in extra:
        hosts += [name] if ":" in name.rsplit("]", 1)[-1] else [name, f"{name}:*"]
    return hosts


def http_app(server, token: str, host: str, port: int, extra_hosts: list[str]):
    """The streamable-HTTP app at /mcp, behind the bearer token and the Host check."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = allowed_hosts(host, port, extra_hosts)
    origins = [f"{scheme}://{name.removesuffix(':*')}" for name in hosts for scheme in ("http", "https")]
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    return BearerTokenGate(server.streamable_http_app(transport_security=security, host=host), token)


EPILOG = f"""examples:
  {PROG} --model all-MiniLM-L6-v2                        # stdio, for an MCP client that starts it (docs/agents.md)
  {TOKEN_ENV}=$(openssl rand -hex 24) {PROG} --http --port {DEFAULT_PORT}   # http://127.0.0.1:{DEFAULT_PORT}/mcp

Build the indexes first (ratio-search index --model NAME, or --move M for notebook 09's retrievers)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="the retriever when a call names none: a model name, folder or "
                                                      "'unified' (default: each move's fine-tuned retriever)")
    parser.add_argument("--indexes", type=Path, default=None,
                        help="folder of index folders (default: data/search_index)")
    parser.add_argument("--params", default=None, help="params file (default: params/default.yaml)")
    parser.add_argument("--http", action="store_true",
                        help=f"serve streamable HTTP at /mcp (bearer token from ${TOKEN_ENV})")
    parser.add_argument("--host", default="127.0.0.1",
                        help="with --http: the address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="with --http (default: %(default)s)")
    add_host_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .explorer import listen_address

    args = build_parser().parse_args(argv)
    try:
        cfg = load_search_config(args.params)
        host = listen_address(args.host) if args.http else args.host
    except SearchError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    library = InspirationLibrary(cfg, indexes=args.indexes, default_model=args.model)
    server = build_server(library)
    if not args.http:
        server.run("stdio")
        return 0
    import uvicorn

    token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    if not os.environ.get(TOKEN_ENV):
        print(f"{PROG}: no ${TOKEN_ENV}: this run's bearer token is {token}", file=sys.stderr, flush=True)
    app = http_app(server, token, host, args.port, args.allow_host)
    print(f"{PROG}: serving http://{host}:{args.port}/mcp (Authorization: Bearer <token>); Ctrl+C stops",
          file=sys.stderr, flush=True)
    try:
        uvicorn.run(app, host=host, port=args.port, log_level="warning")
    except OSError as exc:
        print(f"{PROG}: error: cannot listen on {host}:{args.port} ({exc})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
