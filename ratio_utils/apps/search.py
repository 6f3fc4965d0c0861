"""Inspiration search: sentences that address, broaden or specify a researcher's own statement.

    ratio-search query "your statement" --move broaden --top 10 [--model PATH|NAME|HUB_ID|unified] [--index DIR]
                       [--json] [--rerank]
    ratio-search index [--corpus DIR|SENTENCES.parquet] [--move M | --model PATH|NAME|HUB_ID|unified] [--out DIR]
                       [--papers ID,...] [--index-type flat|hnsw|ivfpq]
    ratio-search "your statement" ...     # short for `ratio-search query "your statement" ...`

(`python -m ratio_utils.apps.search` is the same command.) The same indexes in the browser, three moves side by side:
`ratio-explorer` (apps/explorer).

The statement is embedded with the move's fine-tuned retriever (notebook 09: models/<base>__<move>/),
or with the unified retriever (notebook 13: `--model unified`, the move given as an instruction), or
with any model folder, and searched in a faiss inner-product index over a sentence table
(data/interim/sentences.parquet of notebook 00 with papers.parquet, or any table of that shape): exhaustive by
default, or approximate (`--index-type hnsw|ivfpq`, `IndexSpec`; opened memory-mapped where faiss allows). Each
hit is printed as the paper wrote it (original case) with its paper id, title, year and the sentence
before it.

An index folder holds index.faiss, sentences.parquet (what is shown per hit), papers.parquet (each indexed paper's
title, year, venue, source and number of indexed sentences) and index.json (the
model's fingerprint, the candidate prefix, the source tables' checksums, when it was built, and the sha256 of the other
three files). It is built in a temporary folder beside its target and swapped in whole (`io.replace_folder`), so
an interrupted rebuild leaves the old index or the new one; opening it checks those files against index.json, so a
folder whose vectors and sentences come from two builds is refused instead of printing one's scores beside the other's
sentences. Candidates are embedded the
way the benchmark's pool is (`text_clean`, lower-cased like mining's sentences) through the
embedding cache of `retrieval.dense` (keyed by model fingerprint, prefix and the texts' checksum, plus the process's
in-memory memo), so rebuilding after an interruption or for a second model reuses what was encoded; a query encodes
the statement once. A model is resolved once (`ratio_utils.models.resolve_model`: a folder, a packaged or registry
name, a hub id or a live SentenceTransformer) and its reference handed to the encoder. A model whose fingerprint
differs from the index's is an error (a stale index gives meaningless scores).

Reads:  a model folder, a sentence table (+ papers table). Writes: data/search_index/<model>/ (Paths.search_indexes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..io import InputError, replace_folder, require_columns, sha256_file, write_json_atomic
from ..retrieval.dense import DenseRetriever, build_inner_product_index
from ..schema import GENERIC_DOC_PREFIX, GENERIC_QUERY_PREFIX, MODEL_RESULTS_FILE, Move, sentence_id

PROG = "ratio-search"

INDEX_FILE = "index.faiss"
META_FILE = "index.json"
ROWS_FILE = "sentences.parquet"
PAPERS_FILE = "papers.parquet"  # one row per indexed paper: title, year, venue, source, corpus, sentences indexed
# 2: rows hold the next sentence too (the explorer shows both neighbours); 3: index.json records the sha256 of the
# vectors (index.faiss) and the rows (sentences.parquet), checked on opening
INDEX_FORMAT = 3
CHECKED_FILES = (INDEX_FILE, ROWS_FILE)  # and PAPERS_FILE, checked where index.json lists it
MAX_STATEMENT = 1000  # characters; a statement is one or two sentences
HIT_COLUMNS = ("rank", "score", "docid", "paper_id", "title", "year", "previous", "sentence", "next")


INDEX_TYPES = ("flat", "hnsw", "ivfpq")
# Under this many sentences `flat` (exact) is the default: at 404K sentences an exact search takes 62 ms per query on
# 2 cores (docs/search.md) and the vectors fit in memory; above it, `ivfpq` (a fraction of flat's memory).
FLAT_MAX_VECTORS = 2_000_000
IVFPQ_MIN_VECTORS = 10_000  # k-means of the coarse quantiser and of the 256 PQ centroids needs this many to train


@dataclass(frozen=True)
class IndexSpec:
    """How an index stores and searches its vectors; recorded in index.json under "index_type".

    type: flat (exhaustive inner product), hnsw (graph, float16 vectors) or ivfpq (inverted lists of PQ codes, the
        candidates re-scored on float16 vectors).
    factory: the faiss `index_factory` string.
    build: parameters set before adding (hnsw: efConstruction).
    search: parameters set after loading (hnsw: efSearch; ivfpq: nprobe, k_factor), the tuning of
        benchmarks/index_types.py that kept recall@10 >= 0.95 against flat on 1M near-duplicate sentence vectors, a
        hard case (docs/search.md): a corpus of distinct sentences may do with less (`index_spec`'s overrides).
    """

    type: str
    factory: str
    build: dict = field(default_factory=dict)
    search: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"type": self.type, "factory": self.factory, "build": dict(self.build), "search": dict(self.search)}


def index_spec(index_type: str | None, size: int, dim: int, **overrides: int) -> IndexSpec:
    """The index of `size` vectors of `dim` dimensions for `index_type` (None: flat up to FLAT_MAX_VECTORS, else
    ivfpq); `overrides` replace build or search parameters (the benchmark's tuning grid)."""
    kind = index_type or ("flat" if size <= FLAT_MAX_VECTORS else "ivfpq")
    if kind not in INDEX_TYPES:
        raise SearchError(f"unknown index type {kind!r}; expected one of {list(INDEX_TYPES)}")
    if kind == "flat":
        spec = IndexSpec("flat", "Flat")
    elif kind == "hnsw":
        spec = IndexSpec("hnsw", "HNSW32,SQfp16", {"efConstruction": 40}, {"efSearch": 2048})
    else:
        if size < IVFPQ_MIN_VECTORS:
            raise SearchError(f"an ivfpq index needs at least {IVFPQ_MIN_VECTORS:,} sentences to train its codebooks, "
                              f"this corpus has {size:,}: use --index-type flat (exact, and fast at this size)")
        # ~sqrt(n) lists, a power of two: faiss suggests 4-16 sqrt(n), but the k-means of 4096 lists at 1M vectors
        # takes 90 s on 2 cores against 23 s for 1024, and nprobe buys the recall back (benchmarks/index_types.py)
        nlist = 1 << max(4, min(16, round(np.log2(np.sqrt(size)))))
        nlist = min(nlist, size // 39)  # faiss's minimum of 39 training points per list
        subquantizers = max(d for d in range(1, max(1, dim // 8) + 1) if dim % d == 0)  # ~8 dimensions per code byte
        # np: no polysemous training (codes ordered for Hamming filtering, which this search never uses; it took
        # 90 s of the 93 s of training at 60K vectors)
        spec = IndexSpec("ivfpq", f"IVF{nlist},PQ{subquantizers}x8np,Refine(SQfp16)", {},
                         {"nprobe": 128, "k_factor": 64})
    build = {k: v for k, v in overrides.items() if k in spec.build}
    search = {k: v for k, v in overrides.items() if k in spec.search}
    unknown = sorted(set(overrides) - set(build) - set(search))
    if unknown:
        raise SearchError(f"{kind} takes no parameter {unknown} (it has {sorted(spec.build) + sorted(spec.search)})")
    return IndexSpec(spec.type, spec.factory, spec.build | build, spec.search | search)


TRAIN_PER_LIST = 64  # k-means training points per inverted list (faiss needs 39, and caps its own sample at 256)
PQ_MIN_TRAIN = 10_000  # 256 centroids per PQ sub-quantiser need 39 points each


def make_index(vectors: np.ndarray, spec: IndexSpec, chunk: int = 65536, seed: int = 0):
    """A faiss index of `spec` over L2-normalised `vectors` (inner product), trained on a seeded sample
    (ivfpq: TRAIN_PER_LIST vectors per list, at least PQ_MIN_TRAIN; hnsw's float16 storage needs only a few) and filled
    chunk by chunk (a memory-mapped or float16 array stays small in float32)."""
    import faiss

    if spec.type == "flat":
        return build_inner_product_index(vectors, use_gpu=False)
    index = faiss.index_factory(int(vectors.shape[1]), spec.factory, faiss.METRIC_INNER_PRODUCT)
    if spec.type == "hnsw":
        index.hnsw.efConstruction = int(spec.build["efConstruction"])
    if spec.type == "ivfpq":
        train_sample = max(PQ_MIN_TRAIN, TRAIN_PER_LIST * faiss.extract_index_ivf(index).nlist)
    else:
        train_sample = 1000
    rows = np.random.default_rng(seed).choice(len(vectors), size=min(len(vectors), train_sample), replace=False)
    index.train(np.ascontiguousarray(vectors[np.sort(rows)], dtype=np.float32))
    for start in range(0, vectors.shape[0], chunk):
        index.add(np.ascontiguousarray(vectors[start : start + chunk], dtype=np.float32))
    tune_index(index, spec)
    return index


def tune_index(index: Any, spec: IndexSpec) -> None:
    """Set `spec`'s search parameters on a built or loaded index (faiss does not store them all in the file)."""
    import faiss

    if spec.type == "hnsw":
        index.hnsw.efSearch = int(spec.search["efSearch"])
    elif spec.type == "ivfpq":
        faiss.extract_index_ivf(index).nprobe = int(spec.search["nprobe"])
        faiss.downcast_index(index).k_factor = float(spec.search["k_factor"])


class SearchError(RuntimeError):
    """A request the search cannot answer (unknown move, empty statement, missing or stale index)."""


# ---------------------------------------------------------------------------------------------
# Which model, and how to phrase a query for it
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryModel:
    """A retriever folder and the prefixes it was trained with."""

    path: Path
    kind: str  # "per-move", "unified" or "other"
    query_prefixes: dict[str, str]  # move -> prefix (the same for every move unless unified)
    doc_prefix: str
    name: str = ""  # what the model is called (its index folder's name): the packaged name, else the folder's
    ref: Any = field(default=None, compare=False, repr=False)  # the resolved ratio_utils.models.ModelRef

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.path.name)

    def query_prefix(self, move: Move) -> str:
        return self.query_prefixes[move.value]

    def model_ref(self):
        """The model's reference, resolved once (the folder's, for a fine-tuned or unified retriever)."""
        if self.ref is None:
            from ..models import resolve_model

            object.__setattr__(self, "ref", resolve_model(self.path))
        return self.ref


def query_encoder(model: QueryModel, *, batch_size: int = 64,
                  cache_dir: "Path | None | bool" = None) -> DenseRetriever:
    """The dense encoder of `model`: its resolved reference (never resolved again), its candidate prefix, the
    process's embedding memo and the on-disk cache (default: `retrieval.dense.default_embedding_cache()`)."""
    from ..retrieval.dense import default_embedding_cache

    cache_dir = default_embedding_cache() if cache_dir is None else cache_dir
    from ..systems.families import RetrieverSettings, dense_retriever

    # the query prefix is added per query (search_index), so the encoder's own is empty
    return dense_retriever(model.model_ref(), "", model.doc_prefix,
                           RetrieverSettings(batch_size=batch_size, cache_dir=cache_dir or None, memo=True))


def describe_model(path: Path, name: str = "", ref: Any = None) -> QueryModel:
    """The prefixes of a model folder: unified.json (unified retriever), the stored prompts of a model notebook 09
    published (per-move), else generic.
    `name`: what to call it where the folder's own name says nothing (a packaged model's folder is `model`);
    `ref`: its resolved reference, when the caller has one (a live model has no folder: generic prefixes)."""
    from ..models import stored_prompts
    from ..train.unified import FORMAT_FILE

    if path is None:
        return QueryModel(Path(name), "other", {m.value: GENERIC_QUERY_PREFIX for m in Move}, GENERIC_DOC_PREFIX, name,
                          ref)
    path = Path(path)
    unified = path / FORMAT_FILE
    if unified.exists():
        fmt = json.loads(unified.read_text(encoding="utf-8"))
        return QueryModel(path, "unified", dict(fmt["query_prefixes"]), fmt["doc_prefix"], name, ref)
    # A model notebook 09 published (its results file beside the weights) stores the prefixes it was trained with as
    # its sentence-transformers prompts: the one place a trained model's prefixes are read from
    # (models.stored_prompts).
    prompts = stored_prompts(path) if (path / MODEL_RESULTS_FILE).exists() else {}
    if not {"query", "document"} <= set(prompts):
        return QueryModel(path, "other", {m.value: GENERIC_QUERY_PREFIX for m in Move}, GENERIC_DOC_PREFIX, name, ref)
    return QueryModel(path, "per-move", {m.value: prompts["query"] for m in Move}, prompts["document"], name, ref)


def resolve_query_model(cfg, move: Move | None, model: Any) -> QueryModel:
    """--model PATH|NAME|HUB_ID (or a live SentenceTransformer / ModelRef), --model unified, or (no --model) the
    move's fine-tuned retriever of notebook 09. The model is resolved here, once."""
    from ..models import ModelNotAvailableError, resolve_model
    from ..train import load_train_params, move_model_dir
    from ..train.unified import load_unified_params, unified_model_dir

    if model is not None and not isinstance(model, (str, Path)):
        try:
            ref = resolve_model(model)
        except (ModelNotAvailableError, TypeError) as exc:
            raise SearchError(str(exc)) from None
        return describe_model(ref.path, ref.name, ref)
    if model is not None and str(model).strip().lower() == "unified":
        path = unified_model_dir(cfg, load_unified_params(cfg))
        if not path.exists():
            raise SearchError(f"no unified retriever at {path}: run notebook 13 (ratio_utils.train.unified) first, or "
                              "pass --model PATH")
        return describe_model(path)
    if model is not None:
        try:
            ref = resolve_model(model)
        except ModelNotAvailableError as exc:
            raise SearchError(str(exc)) from None
        return describe_model(ref.path, ref.name, ref)
    if move is None:
        raise SearchError("name a move (--move address|broaden|specify) or a model (--model PATH|unified)")
    path = move_model_dir(cfg, load_train_params(cfg), move)
    if not path.exists():
        raise SearchError(
            f"no fine-tuned {move.value} retriever at {path}: run notebook 09 "
            f"(python -m ratio_utils.train --move {move.value}), or pass --model PATH or --model unified"
        )
    return describe_model(path)


def default_index_dir(cfg, model: QueryModel) -> Path:
    return cfg.paths.search_indexes / model.name


def parse_move(value: str | Move) -> Move:
    try:
        return Move.parse(value)
    except ValueError as exc:
        raise SearchError(str(exc)) from None


def checked_statement(statement: object) -> str:
    """The statement stripped, or SearchError: not text, empty, over MAX_STATEMENT characters, or not UTF-8 (a
    command-line argument of bytes that are not UTF-8 arrives as lone surrogates, which no encoder can read)."""
    if not isinstance(statement, str) or not statement.strip():
        raise SearchError("the statement is empty: give the sentence you want inspiration for")
    if len(statement) > MAX_STATEMENT:
        raise SearchError(f"a statement is at most {MAX_STATEMENT} characters (this one has {len(statement)})")
    try:
        statement.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SearchError(f"the statement is not valid UTF-8 text (character {exc.start + 1}): "
                          "pass it as UTF-8") from None
    return statement.strip()


def load_search_config(params: "str | Path | None"):
    """The run's config, or SearchError in one line naming the params file (missing, not YAML, a bad section)."""
    import yaml

    from ..config import load_config

    try:
        return load_config(params)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        where = params or "params/default.yaml"
        message = " ".join(str(exc).split())
        raise SearchError(message if str(where) in message else f"params {where}: {message}") from None


def index_embedding_cache(cfg) -> Path | None:
    """Where `index` keeps the corpus's encodings: $RATIO_EMBEDDING_CACHE when it is set (`off`: nowhere), as every
    other command (`retrieval.dense.default_embedding_cache`), else the run's cache, where notebook 08 left its own."""
    from ..retrieval.dense import default_embedding_cache

    return default_embedding_cache() if "RATIO_EMBEDDING_CACHE" in os.environ else cfg.paths.embedding_cache


# ---------------------------------------------------------------------------------------------
# Building an index
# ---------------------------------------------------------------------------------------------


def sentence_rows(sentences: pd.DataFrame, papers: pd.DataFrame | None) -> tuple[pd.DataFrame, dict[str, int]]:
    """The searchable sentences with what a hit shows: docid, paper_id, title, year, previous, sentence, next, text.

    Kept sentences only (`drop_reason` empty; dropped ones still give the previous sentence);
    `text` is what gets embedded (`text_clean`, lower-cased as mining does), `sentence` what is shown
    (the corpus's own text). Sentences whose normalised text repeats are indexed once (ids are text
    hashes); the counts say how many were dropped for which reason.
    """
    require_columns(sentences, ("paper_id", "text"), "the sentence table")
    frame = sentences.copy()
    order = [c for c in ("paper_id", "para", "sent") if c in frame.columns]
    frame = frame.sort_values(order, kind="mergesort").reset_index(drop=True)
    frame["previous"] = frame.groupby("paper_id", sort=False)["text"].shift(1).fillna("")
    frame["next"] = frame.groupby("paper_id", sort=False)["text"].shift(-1).fillna("")
    clean = frame["text_clean"] if "text_clean" in frame.columns else frame["text"]
    frame["embed"] = clean.fillna("").astype(str).str.strip().str.lower()
    counts = {"sentences": int(len(frame))}
    kept = frame["drop_reason"].isna() if "drop_reason" in frame.columns else pd.Series(True, index=frame.index)
    counts["dropped by the corpus cleaning rules"] = int((~kept).sum())
    empty = frame["embed"] == ""
    counts["empty after cleaning"] = int((kept & empty).sum())
    frame = frame[kept & ~empty].copy()
    frame["docid"] = frame["embed"].map(sentence_id)
    repeated = frame["docid"].duplicated()
    counts["repeated text (indexed once)"] = int(repeated.sum())
    frame = frame[~repeated]
    if papers is not None and {"paper_id", "title"} <= set(papers.columns):
        info = papers.drop_duplicates("paper_id").set_index("paper_id")
        frame["title"] = frame["paper_id"].map(info["title"])
        if "year" not in frame.columns and "year" in info.columns:
            frame["year"] = frame["paper_id"].map(info["year"])
    for column in ("title", "year"):
        if column not in frame.columns:
            frame[column] = None
    counts["indexed"] = int(len(frame))
    out = frame.rename(columns={"text": "sentence", "embed": "text"})
    out["year"] = pd.to_numeric(out["year"], errors="coerce").astype("Int64")
    return (out[["docid", "paper_id", "title", "year", "previous", "sentence", "next", "text"]].reset_index(drop=True),
            counts)


def paper_table(rows: pd.DataFrame, papers: pd.DataFrame | None) -> pd.DataFrame:
    """One row per paper of the index's `rows`: paper_id, title, year, venue, source, corpus (from `papers` where it
    has them) and `sentences`, the number of its sentences indexed."""
    table = rows.groupby("paper_id", sort=True).agg(title=("title", "first"), year=("year", "first"),
                                                     sentences=("docid", "size")).reset_index()
    info = (papers.drop_duplicates("paper_id").set_index("paper_id") if papers is not None and "paper_id" in papers
            else None)
    for column in ("venue", "source", "corpus"):
        values = table["paper_id"].map(info[column]) if info is not None and column in info.columns else None
        table[column] = (values.astype("string") if values is not None
                         else pd.Series(pd.NA, index=table.index, dtype="string"))
    return table[["paper_id", "title", "year", "venue", "source", "corpus", "sentences"]]


def build_index(rows: pd.DataFrame, encoder: DenseRetriever, out_dir: Path, *, model: QueryModel | None,
                sources: dict[str, str] | None = None, counts: dict[str, int] | None = None,
                papers: pd.DataFrame | None = None, index_type: str | None = None) -> dict[str, Any]:
    """Embed `rows.text` with `encoder` (its doc prefix; cached when it has a cache), write the index folder: built in
    a temporary folder beside `out_dir` and swapped in whole, so that `out_dir` always holds one complete index.
    `papers`: the corpus's paper table (venue, source), for the index's own papers.parquet. `index_type`: flat, hnsw
    or ivfpq (`index_spec`; None: flat up to FLAT_MAX_VECTORS sentences)."""
    if rows.empty:
        raise SearchError("no sentence to index")
    spec = index_spec(index_type, len(rows), encoder.embedding_dimension())
    vectors, cache_key = encoder.embeddings(list(rows["docid"]), list(rows["text"]), encoder.doc_prefix,
                                            "encoding corpus")
    index = make_index(vectors, spec)
    meta = {
        "format": INDEX_FORMAT,
        "model": model.name if model else encoder.model_label,
        "model_kind": model.kind if model else None,
        "model_fingerprint": encoder.fingerprint(),
        "doc_prefix": encoder.doc_prefix,
        "lowercase": True,
        "size": int(index.ntotal),
        "dim": int(vectors.shape[1]),
        "sources_sha256": sources or {},
        "counts": counts or {},
        "embedding_cache": Path(cache_key).name if cache_key else None,
        "built_at": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds"),
        "index_type": spec.to_dict(),
    }
    table = paper_table(rows, papers)
    years = table["year"].dropna()
    meta |= {"papers": int(len(table)), "years": [int(years.min()), int(years.max())] if len(years) else None}
    return write_index_folder(index, rows.drop(columns=["text"]), meta, Path(out_dir), table)


def write_index_folder(index: Any, rows: pd.DataFrame, meta: dict[str, Any], out_dir: Path,
                       papers: pd.DataFrame | None = None) -> dict[str, Any]:
    """Write the faiss `index`, its `rows`, its `papers` table and `meta` (plus the files' sha256 under "checksums")
    into a temporary folder beside `out_dir`, then swap it in (`io.replace_folder`): a kill at any point leaves the
    old index or the new one."""
    import faiss

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".building", dir=out_dir.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        # mkdtemp's folder is the owner's only; an index is as readable as any output
        os.chmod(building, 0o777 & ~umask)
        faiss.write_index(index, str(building / INDEX_FILE))
        rows.to_parquet(building / ROWS_FILE, index=False)
        written = CHECKED_FILES
        if papers is not None:
            papers.to_parquet(building / PAPERS_FILE, index=False)
            written += (PAPERS_FILE,)
        meta = {**meta, "checksums": {name: sha256_file(building / name) for name in written}}
        write_json_atomic(building / META_FILE, meta)
        replace_folder(building, out_dir)
    finally:
        if building.exists():
            shutil.rmtree(building, ignore_errors=True)
    return meta


def read_text_table(path: Path, text_columns: tuple[str, ...]) -> pd.DataFrame:
    """A parquet table whose `text_columns` (those present) hold text; InputError naming the file otherwise (not
    parquet, not UTF-8, a column of bytes or numbers where text belongs), never a column silently turned into
    "b'...'" strings."""
    import pyarrow

    try:
        frame = pd.read_parquet(path)
    except (pyarrow.ArrowException, OSError, ValueError) as exc:
        raise InputError(path, f"is not a readable parquet table ({' '.join(str(exc).split())[:200]})",
                         reason="unreadable") from None
    for column in (c for c in text_columns if c in frame.columns):
        values = frame[column]
        wrong = values[values.notna() & ~values.map(lambda v: isinstance(v, str))]
        if not wrong.empty:
            row, value = wrong.index[0], wrong.iloc[0]
            what = type(value).__name__
            if isinstance(value, bytes):
                try:
                    value.decode("utf-8")
                    what = "bytes (store it as a string column)"
                except UnicodeDecodeError:
                    what = "bytes that are not UTF-8"
            raise InputError(path, f"column {column!r} holds {what}, not text, in {len(wrong)} row(s), the first at "
                             f"row {row}", reason="not_text")
    return frame


def build_index_from_corpus(cfg, corpus: Path | None, model: QueryModel, out_dir: Path | None = None,
                            batch_size: int = 64, paper_ids: list[str] | None = None,
                            index_type: str | None = None) -> tuple[Path, dict[str, Any]]:
    """The CLI's `index` command: a sentence table (folder or file) -> an index folder for `model`
    (only the papers `paper_ids` when given)."""
    corpus = Path(corpus) if corpus is not None else cfg.paths.interim
    sentences_path = corpus / "sentences.parquet" if corpus.is_dir() else corpus
    papers_path = sentences_path.parent / "papers.parquet"
    if not sentences_path.exists():
        raise SearchError(f"no sentence table at {sentences_path}: run notebook 00 or pass --corpus DIR|FILE.parquet")
    papers = read_text_table(papers_path, ("title",)) if papers_path.exists() else None
    sentences = read_text_table(sentences_path, ("paper_id", "text", "text_clean"))
    if paper_ids:
        unknown = sorted(set(paper_ids) - set(sentences["paper_id"]))
        if unknown:
            raise SearchError(f"--papers names paper(s) not in {sentences_path.name}: {unknown}")
        sentences = sentences[sentences["paper_id"].isin(set(paper_ids))]
    rows, counts = sentence_rows(sentences, papers)
    sources = {sentences_path.name: sha256_file(sentences_path)}
    if papers is not None:
        sources[papers_path.name] = sha256_file(papers_path)
    encoder = query_encoder(model, batch_size=batch_size, cache_dir=index_embedding_cache(cfg) or False)
    out_dir = Path(out_dir) if out_dir is not None else default_index_dir(cfg, model)
    return out_dir, build_index(rows, encoder, out_dir, model=model, sources=sources, counts=counts, papers=papers,
                                index_type=index_type)


# ---------------------------------------------------------------------------------------------
# Searching
# ---------------------------------------------------------------------------------------------


@dataclass
class SearchIndex:
    """An opened index folder, checked against the model that will embed the queries."""

    folder: Path
    meta: dict[str, Any]
    index: Any
    rows: pd.DataFrame
    papers: pd.DataFrame | None = None  # papers.parquet: one row per paper (None in an index built without it)

    @classmethod
    def open(cls, folder: Path, fingerprint: str, build_hint: str = "ratio-search index") -> "SearchIndex":
        import faiss

        folder = Path(folder)
        if not (folder / META_FILE).exists() or not (folder / INDEX_FILE).exists():
            raise SearchError(f"no search index at {folder}; build it with: {build_hint}")
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        if meta.get("format") != INDEX_FORMAT:
            raise SearchError(f"index {folder} has format {meta.get('format')}, this code reads format {INDEX_FORMAT} "
                              f"(rows with the sentence before and after each hit); rebuild it: {build_hint}")
        if meta.get("model_fingerprint") != fingerprint:
            raise SearchError(
                f"stale index {folder}: built with model {meta.get('model')} (fingerprint "
                f"{str(meta.get('model_fingerprint'))[:12]}), but the query model's fingerprint is "
                f"{fingerprint[:12]}; scores across two models mean nothing. Rebuild it: {build_hint}"
            )
        recorded = meta.get("checksums") or {}
        for name in CHECKED_FILES + tuple(n for n in recorded if n not in CHECKED_FILES):
            if not (folder / name).exists() or sha256_file(folder / name) != recorded.get(name):
                raise SearchError(
                    f"mixed or damaged index {folder}: {name} is not the file index.json was written with (an "
                    f"interrupted rebuild, or a file copied from another index); rebuild it: {build_hint}")
        # memory-mapped: the vectors (or codes) are paged in from the file as searches touch them, not all read
        index = faiss.read_index(str(folder / INDEX_FILE), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        spec = meta.get("index_type") or {"type": "flat", "factory": "Flat"}
        tune_index(index, IndexSpec(spec["type"], spec["factory"], spec.get("build", {}), spec.get("search", {})))
        rows = pd.read_parquet(folder / ROWS_FILE)
        if index.ntotal != len(rows):
            raise SearchError(f"broken index {folder}: {index.ntotal} vectors but {len(rows)} sentences; rebuild it")
        papers = pd.read_parquet(folder / PAPERS_FILE) if PAPERS_FILE in recorded else None
        return cls(folder, meta, index, rows, papers)


def statement_text(statement: str, index: SearchIndex) -> str:
    """What gets embedded for a statement: stripped, lower-cased as the index's sentences were."""
    return statement.strip().lower() if index.meta.get("lowercase", True) else statement.strip()


def search_index(statement: str, move: Move | str, encoder: DenseRetriever, index: SearchIndex, query_prefix: str,
                 top: int = 10) -> pd.DataFrame:
    """The `top` sentences of the index for `statement` under `move` (the statement itself excluded). The statement
    is encoded through the encoder's memo (when it has one): once per (model, prefix, statement) in a process."""
    parse_move(move)  # the move decides the model/prefix upstream; still refuse an unknown one here
    statement = checked_statement(statement)
    if top < 1:
        raise SearchError(f"--top must be >= 1, got {top}")
    text = statement_text(statement, index)
    vector, _ = encoder.embeddings([sentence_id(text)], [text], query_prefix, "encoding the statement")
    width = min(top + 1, index.index.ntotal)  # one spare slot: the statement may be in the index
    scores, hits = index.index.search(np.ascontiguousarray(vector, dtype=np.float32), width)
    own = sentence_id(text)
    picked = [(i, s) for i, s in zip(hits[0], scores[0]) if i >= 0 and index.rows["docid"].iloc[i] != own][:top]
    frame = index.rows.iloc[[i for i, _ in picked]].copy()
    frame.insert(0, "score", [float(s) for _, s in picked])
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame[list(HIT_COLUMNS)].reset_index(drop=True)


def search_and_rerank(statement: str, move: Move | str, encoder: DenseRetriever, index: SearchIndex, query_prefix: str,
                      top: int, reranker=None) -> tuple[pd.DataFrame, Any]:
    """`search_index`, then (with a `search_rerank.SearchReranker`) the first stage's top `reranker.top_n` reranked by
    the LLM and the first `top` kept: (hits, the reranker's outcome, None without a reranker)."""
    if reranker is None:
        return search_index(statement, move, encoder, index, query_prefix, top), None
    first_stage = search_index(statement, move, encoder, index, query_prefix, max(top, reranker.top_n))
    hits, outcome = reranker.rerank(checked_statement(statement), move, first_stage)
    return hits.head(top).reset_index(drop=True), outcome


def inspire(statement: str, move: str = "specify", *, cfg=None, model: Any = None, index_dir: Path | None = None,
            top: int = 10, rerank: bool = False) -> pd.DataFrame:
    """Notebook form of the command: ranked sentences (original case) with paper id, title, year, previous sentence.
    `model`: a folder, a packaged or registry name, a hub id, 'unified', a ModelRef or a live SentenceTransformer
    (default: the move's fine-tuned retriever). `rerank`: the top 100 reranked by the LLM of the run's `rerank` params
    (`apps.search_rerank`); what the reranker did is in the frame's `attrs["rerank"]`."""
    from ..config import load_config

    cfg = cfg or load_config()
    move = parse_move(move)
    checked_statement(statement)
    qmodel = resolve_query_model(cfg, move, model)
    folder = Path(index_dir) if index_dir is not None else default_index_dir(cfg, qmodel)
    encoder = query_encoder(qmodel, cache_dir=False)  # a statement is one sentence: kept in the memo, not on disk
    hint = f"{PROG} index " + (f"--model {model}" if isinstance(model, str) else f"--move {move.value}")
    index = SearchIndex.open(folder, encoder.fingerprint(), hint + (f" --out {folder}" if index_dir else ""))
    reranker = None
    if rerank:
        from .search_rerank import SearchReranker

        reranker = SearchReranker(cfg)
    hits, outcome = search_and_rerank(statement, move, encoder, index, qmodel.query_prefix(move), top, reranker)
    if outcome is not None:
        hits.attrs["rerank"] = outcome.to_dict()
    return hits


def format_results(statement: str, move: Move | str, results: pd.DataFrame) -> str:
    """Plain-text listing for the terminal."""
    lines = [f"{Move.parse(move).value.capitalize()} — {statement.strip()}", ""]
    if "rerank" in results.attrs:
        lines[1:1] = [f"rerank: {results.attrs['rerank']['message']}"]
    for row in results.itertuples(index=False):
        year = "" if pd.isna(row.year) else f", {row.year}"
        title = row.title if isinstance(row.title, str) and row.title else "(no title)"
        lines.append(f"{row.rank:>2}. [{row.score:.3f}] {row.sentence}")
        lines.append(f"    {row.paper_id}{year} · {title}")
        if row.previous:
            lines.append(f"    before: {row.previous}")
    return "\n".join(lines)


def results_json(statement: str, move: Move | str, results: pd.DataFrame) -> str:
    records = json.loads(results.to_json(orient="records", force_ascii=False))
    payload = {"statement": statement, "move": Move.parse(move).value, "results": records}
    if "rerank" in results.attrs:
        payload["rerank"] = results.attrs["rerank"]
    return json.dumps(payload, ensure_ascii=False, indent=2)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


SUBCOMMANDS = ("query", "index")
EPILOG = """examples:
  ratio-search index --model all-MiniLM-L6-v2                 # once: encode the sentence table
  ratio-search query "we reduce the cost of attention" --model all-MiniLM-L6-v2 --move broaden
  ratio-search "we reduce the cost of attention" --move specify  # short for `query`, with the move's fine-tuned model

The index's sentences are encoded once per (model, candidate prefix) and kept in the embedding cache (keyed by model
fingerprint, prefix and the sentences' checksum); a query encodes the statement once."""


def build_parser() -> argparse.ArgumentParser:
    """`ratio-search query ...` and `ratio-search index ...` (argparse subcommands)."""
    parser = argparse.ArgumentParser(prog=PROG, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Find sentences that address, broaden or specify your statement.")
    verbs = parser.add_subparsers(dest="command", metavar="{query,index}", required=True)
    query = verbs.add_parser("query", help="the sentences of an index for a statement",
                             description="Find sentences that address, broaden or specify your statement "
                                         f"(`{PROG} index --help` builds the index).",
                             epilog=f'example:\n  {PROG} query "we reduce the cost of attention" --move broaden '
                                    "--model all-MiniLM-L6-v2",
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    query.add_argument("statement", help="the sentence you want inspiration for")
    query.add_argument("--move", default="specify", help="address, broaden or specify (default: %(default)s)")
    query.add_argument("--top", type=int, default=10, help="sentences to show (default: %(default)s)")
    query.add_argument("--model", default=None, help="a model folder, a packaged or registry name, a Hugging Face hub "
                                                     "id, or 'unified' (default: the move's fine-tuned retriever)")
    query.add_argument("--index", type=Path, default=None, help="index folder (default: data/search_index/<model>)")
    query.add_argument("--params", default=None,
                       help="params file locating models and indexes (default: params/default.yaml)")
    query.add_argument("--json", action="store_true", help="print JSON instead of text")
    query.add_argument("--rerank", action="store_true",
                       help="rerank the top 100 with notebook 10's listwise LLM prompt through your OpenAI-compatible "
                            "endpoint ($OPENAI_API_KEY, $OPENAI_BASE_URL; answers cached on disk); without a key the "
                            "first-stage order, saying so")
    index = verbs.add_parser("index", help="build a search index over a sentence table for one retriever",
                             description="Build a search index over a sentence table for one retriever.",
                             epilog=f"example:\n  {PROG} index --model all-MiniLM-L6-v2 --papers P1,P2",
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    index.add_argument("--corpus", type=Path, default=None,
                       help="folder with sentences.parquet (+ papers.parquet), or a sentences parquet file "
                            "(default: data/interim of the params)")
    index.add_argument("--move", default=None, help="index for this move's fine-tuned retriever")
    index.add_argument("--model", default=None, help="index for this model (folder, name, hub id), or 'unified'")
    index.add_argument("--out", type=Path, default=None, help="index folder (default: data/search_index/<model>)")
    index.add_argument("--params", default=None, help="params file (default: params/default.yaml)")
    index.add_argument("--papers", default=None, help="comma-separated paper ids: index only these papers")
    index.add_argument("--batch-size", type=int, default=64)
    index.add_argument("--index-type", choices=INDEX_TYPES, default=None,
                       help=f"flat (exact), hnsw (graph, float16) or ivfpq (PQ codes re-scored on float16); default: "
                            f"flat up to {FLAT_MAX_VECTORS:,} sentences, else ivfpq (docs/search.md, index types)")
    return parser


def _with_verb(argv: list[str]) -> list[str]:
    """The short form `ratio-search "statement" ...` is `ratio-search query "statement" ...`: a first argument that is
    neither a subcommand nor an option is a statement."""
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        return ["query", *argv]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(_with_verb(argv))
    try:
        cfg = load_search_config(args.params)
        if args.command == "index":
            move = parse_move(args.move) if args.move else None
            qmodel = resolve_query_model(cfg, move, args.model)
            paper_ids = [p.strip() for p in args.papers.split(",") if p.strip()] if args.papers else None
            folder, meta = build_index_from_corpus(cfg, args.corpus, qmodel, args.out, args.batch_size, paper_ids,
                                                   args.index_type)
            print(f"indexed {meta['size']} sentences with {meta['model']} ({meta['index_type']['factory']}) -> "
                  f"{folder}")
            for reason, count in meta["counts"].items():
                print(f"  {reason}: {count}")
            return 0
        results = inspire(args.statement, args.move, cfg=cfg, model=args.model, index_dir=args.index, top=args.top,
                          rerank=args.rerank)
    except (SearchError, InputError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(results_json(args.statement, args.move, results) if args.json
          else format_results(args.statement, args.move, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
