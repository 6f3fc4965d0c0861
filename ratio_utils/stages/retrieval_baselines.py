"""Stage 08 (notebook 08_retrieval_baselines): every offline system on every move and split, as run files.

Also writes the run files of notebook 09's fine-tuned retrievers (`record_tuned_runs`, called at the end
of 09), so that every system reaches Tables 1, 7 and 8 the same way: through a run file with its sidecar,
assembled by `ratio_utils.paper_tables.assemble_tables`.

Reads:  the benchmark (cfg.paths.benchmark); notebook 09's models/<base>__<move>/ (record_tuned_runs).
Writes: data/retrieval_runs/<system>/<move>/<split>.{parquet,trec,run.json}   (run files + sidecars)
        cache/embeddings/...                      pool and query embeddings (a rerun encodes nothing)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import pandas as pd
from tqdm.auto import tqdm

from ..benchmark import Benchmark
from ..config import Config
from ..models import ModelNotAvailableError, model_name, resolve_model_path
from ..retrieval import BM25Retriever, DenseRetriever, instructed_query_prefix, recommended_prefixes
from ..retrieval.dense import DEFAULT_MAX_POOL_BYTES, GENERIC_PREFIXES
from ..retrieval.runs import RunInfo, system_name
from ..retrieval.scoring import record_run
from ..schema import MOVES, Move, Split

STAGE = "08_retrieval_baselines"
TUNED_STAGE = "09_finetune"


@dataclass
class RetrievalParams:
    """The `retrieval:` section of the params files."""

    dense_models: list[str] = field(default_factory=lambda: ["all-MiniLM-L6-v2"])  # add all-mpnet-base-v2 (slow on CPU)
    bm25_ngrams: list[int] = field(default_factory=lambda: [1, 2, 3])
    generic_prefix: bool = True  # query: / document:
    recommended_prefix: bool = True  # only for models whose developers recommend prefixes
    move_instructions: bool = True  # Appendix C instruction in front of each query
    colbert_checkpoints: dict[str, str] = field(default_factory=dict)  # row name -> PyLate checkpoint folder
    splits: list[str] = field(default_factory=lambda: ["test", "silver"])
    k: int = 100
    batch_size: int = 64
    fp16_storage: bool = False
    # A pool whose vectors take more is searched from a memory-mapped file, block by block (same ranking).
    max_pool_bytes: int = DEFAULT_MAX_POOL_BYTES
    max_queries: int | None = None  # per (move, split); smoke runs only
    tuned_models: bool = True  # notebook 09 writes run files of its models/<base>__<move>/


def _tuned_notes(results: dict) -> list[str]:
    """What the tables must say about a tuned model beside its numbers (notebook 09's results.json)."""
    if results.get("beats_baseline_on_validation") is False:
        return ["no fine-tuning configuration beat the untuned model on validation MRR@10; the row shows the best "
                "configuration tried, not an improvement (tables/finetune_tuned_vs_baseline)"]
    return []


def load_retrieval_params(cfg: Config) -> RetrievalParams:
    return cfg.section("retrieval", RetrievalParams)


def bm25_model_name(ngram: int) -> str:
    return f"BM25-{ {1: 'unigram', 2: 'bigram', 3: 'trigram'}.get(int(ngram), f'{ngram}gram') }"


@dataclass(frozen=True)
class System:
    """One row of the result tables that runs here."""

    model: str  # display name, e.g. "BM25-unigram", "all-MiniLM-L6-v2"
    prefix: str  # "-", "generic", "recommended", "per-move"
    family: str  # "bm25", "dense", "colbert"
    source: str  # model name/path, checkpoint, or n-gram order
    setup: str = "Baseline"

    def info(self, move: Move, split: Split, checksum: str, params: RetrievalParams, stage: str = STAGE) -> RunInfo:
        return RunInfo(model=self.model, prefix=self.prefix, setup=self.setup, family=self.family, move=move.value,
                       split=split.value, benchmark_checksum=checksum, stage=stage, k=params.k,
                       max_queries=params.max_queries, source=self.source)


def plan_systems(params: RetrievalParams) -> list[System]:
    """The rows that run here (BM25, dense baselines, ColBERT checkpoints), in table order."""
    systems = [System(bm25_model_name(n), "-", "bm25", str(n)) for n in params.bm25_ngrams]
    for model in params.dense_models:
        name = model_name(model)
        if params.generic_prefix:
            systems.append(System(name, "generic", "dense", model))
        style = recommended_prefixes(model)
        if params.recommended_prefix and style and (style.query_prefix or style.doc_prefix):
            systems.append(System(name, "recommended", "dense", model))
        if params.move_instructions:
            systems.append(System(name, "per-move", "dense", model))
    for row_name, checkpoint in params.colbert_checkpoints.items():
        systems.append(System(row_name, "-", "colbert", checkpoint))
    return systems


def make_retriever(system: System, move: Move, params: RetrievalParams, cfg: Config):
    """The retriever of one row for one move (instructions depend on the move)."""
    cache = cfg.paths.embedding_cache
    if system.family == "bm25":
        return BM25Retriever(int(system.source), name=system.model, max_pool_bytes=params.max_pool_bytes)
    if system.family == "colbert":
        from ..retrieval.colbert import ColBERTRetriever

        return ColBERTRetriever(system.source, batch_size=params.batch_size, name=system.model)
    model = system.source
    if system.prefix == "generic":
        query_prefix, doc_prefix = GENERIC_PREFIXES
    elif system.prefix == "recommended":
        style = recommended_prefixes(model)
        query_prefix, doc_prefix = style.query_prefix, style.doc_prefix
    elif system.prefix == "per-move":
        # The instruction replaces the generic query prefix; candidates keep the generic one, so the
        # pool embeddings of the generic row are reused.
        style = recommended_prefixes(model)
        template = style.instruction_template if style and style.instruction_template else None
        query_prefix = instructed_query_prefix(move, template) if template else instructed_query_prefix(move)
        doc_prefix = GENERIC_PREFIXES[1]
    else:
        raise ValueError(f"unknown prefix kind {system.prefix!r}")
    return DenseRetriever(
        model, query_prefix, doc_prefix, batch_size=params.batch_size, cache_dir=cache,
        fp16_storage=params.fp16_storage, name=system.model, max_pool_bytes=params.max_pool_bytes,
    )


def _runnable(bench: Benchmark, splits: list[Split]) -> list[tuple[Move, Split]]:
    return [(m, s) for m in MOVES for s in splits if bench.has(m, s) and len(bench.queries(m, s)) > 0]


def run_baselines(cfg: Config, bench: Benchmark, params: RetrievalParams | None = None) -> pd.DataFrame:
    """Run every available system on every move and split; write run files. Returns what was written.

    Run files of another benchmark (any stage's) are set aside first (paper_tables.retire_foreign_runs):
    this notebook starts the retrieval stages, so a new benchmark makes them stale."""
    params = params or load_retrieval_params(cfg)
    splits = [Split.parse(s) for s in params.splits]
    systems = plan_systems(params)
    skipped = []
    for model in params.dense_models:
        try:
            resolve_model_path(model)
        except ModelNotAvailableError as exc:
            systems = [s for s in systems if s.source != model]
            skipped.append({"system": model_name(model), "status": f"not run ({exc})"})
    checksum = bench.checksum()
    from ..paper_tables import retire_foreign_runs

    retired = [{"system": path, "status": "set aside under _stale/: computed on another benchmark"}
               for path in retire_foreign_runs(cfg.paths.retrieval_runs, checksum)]
    jobs = [(system, move, split) for system in systems for move, split in _runnable(bench, splits)]
    retrievers: dict[tuple, object] = {}
    done = []
    for system, move, split in tqdm(jobs, desc="retrieval baselines", unit="run"):
        info = system.info(move, split, checksum, params)
        # One retriever per system (per move only when the query prefix depends on it), so that
        # BM25 indexes and dense pool indexes are built once for the three moves that share a pool.
        key = (system, move if system.prefix == "per-move" else None)
        if key not in retrievers:
            retrievers[key] = make_retriever(system, move, params, cfg)
        run = record_run(retrievers[key], bench, info, cfg.paths.retrieval_runs)
        done.append({"system": info.system, "move": move.value, "split": split.value, "status": "written",
                     "queries": int(run["qid"].nunique())})
    return pd.DataFrame(done + skipped + retired)


def record_tuned_runs(cfg: Config, move: str = "all", bench: Benchmark | None = None,
                      params: RetrievalParams | None = None) -> pd.DataFrame:
    """Run files of notebook 09's fine-tuned retrievers (models/<base>__<move>/), each on its own move.

    Searched like notebook 08's baselines (same pools, k, query sample), with the prefixes recorded in
    the model's results.json, on test and silver. Notebook 09 has just scored the same model on the same
    texts, so the embeddings come from the cache (models.model_fingerprint ignores results.json) and
    only the search runs again. Model folders are found through `train.move_model_dir`.
    """
    from ..benchmark import load_benchmark
    from ..models import model_fingerprint
    from ..train import FINAL_RESULTS_FILE, load_train_params, move_model_dir

    params = params or load_retrieval_params(cfg)
    train = load_train_params(cfg)
    bench = bench or load_benchmark(cfg.paths.benchmark)
    rows = []
    if not params.tuned_models:
        return pd.DataFrame([{"status": "retrieval.tuned_models is false: no tuned run files"}])
    if not train.selected_moves(move):
        return pd.DataFrame([{"move": move, "status": "not fine-tuned in this run (train.moves leaves it out)"}])
    checksum = bench.checksum()
    splits = [Split.parse(s) for s in params.splits]
    for target in train.selected_moves(move):
        folder = move_model_dir(cfg, train, target)
        results_file = folder / FINAL_RESULTS_FILE
        if not results_file.exists():
            rows.append({"move": target.value, "status": f"no fine-tuned model under models/{folder.name}/"})
            continue
        results = json.loads(results_file.read_text(encoding="utf-8"))
        prefixes = results.get("prefixes") or {}
        query_prefix = prefixes.get("query", GENERIC_PREFIXES[0])
        doc_prefix = prefixes.get("document", GENERIC_PREFIXES[1])
        system = System(model_name(train.base_model), "generic", "dense", f"models/{folder.name}", setup="Tuned")
        retriever = None
        for split in splits:
            if (target, split) not in _runnable(bench, [split]):
                continue
            info = dataclasses.replace(system.info(target, split, checksum, params, stage=TUNED_STAGE),
                                       model_fingerprint=model_fingerprint(folder), notes=_tuned_notes(results))
            retriever = retriever or DenseRetriever(
                str(folder), query_prefix, doc_prefix, batch_size=params.batch_size,
                cache_dir=cfg.paths.embedding_cache, fp16_storage=params.fp16_storage, name=info.system,
                max_pool_bytes=params.max_pool_bytes)
            run = record_run(retriever, bench, info, cfg.paths.retrieval_runs)
            rows.append({"system": info.system, "move": target.value, "split": split.value, "status": "written",
                         "queries": int(run["qid"].nunique())})
    return pd.DataFrame(rows)


def systems_frame(params: RetrievalParams) -> pd.DataFrame:
    """The systems notebook 08 will run, as a table."""
    return pd.DataFrame([{"system": system_name(s.model, s.prefix, s.setup),
                          "family": s.family, "prefix": s.prefix, "source": s.source} for s in plan_systems(params)])
