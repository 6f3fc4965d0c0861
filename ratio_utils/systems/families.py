"""The registry of retriever families: family name -> how its rows are planned from the params and how its
retriever is built. The one place a stage, an analysis or the evaluate command gets a retriever of a system.

A `Family` is data: `plan(params, cfg)` lists the rows the params ask notebook 08 for (`SystemSpec`s, in table
order), `build(spec, move, settings, ref)` makes the retriever of one row for one move, `per_move` says whether that
retriever depends on the move (a query instruction), `resolves_model` whether its rows name a model resolved once
(`resolve_systems`). BM25, dense (sentence-transformers), ColBERT (PyLate) and the LLM reranker are registered here;
a new family is one `register(Family(...))` (docs/architecture.md, "Adding a retriever family").

The LLM reranker plans and builds nothing here: it reranks a first stage's run file, not a pool (notebook 10's jobs,
`retrieval/rerank_jobs`); its rows follow `rerank.systems` (reporting/paper_tables.expected_rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config
from ..models import ModelNotAvailableError, ModelRef, RegistryEntry, model_name, registry_entry, resolve_model
from ..param_sections import RetrievalParams
from ..retrieval.base import Retriever
from ..retrieval.bm25 import BM25Retriever
from ..schema import GENERIC_PREFIXES, Move, instructed_query_prefix
from .spec import SystemSpec, bm25_model_name


@dataclass(frozen=True)
class RetrieverSettings:
    """How a built retriever encodes and searches; None leaves a retriever's own default (so each caller keeps the
    settings it always had: notebook 08 the `retrieval:` section's, `ratio-evaluate` its flags')."""

    batch_size: int = 64  # texts per encoding batch (dense, ColBERT)
    cache_dir: Path | None = None  # the on-disk embedding cache (dense); None: none
    fp16_storage: bool = False  # pool vectors stored as float16 (dense)
    max_pool_bytes: int | None = None  # past this a pool is searched block by block (dense, BM25); None: default
    device: str | None = None  # torch device; None: the library's choice
    name: str | None = None  # the retriever's name (run files of `ratio-evaluate`); None: the retriever's default
    memo: bool | None = None  # the process-wide embedding memo (dense): True for `ratio-evaluate`; None: none

    @classmethod
    def from_params(cls, params: RetrievalParams, cfg: Config, name: str | None = None) -> "RetrieverSettings":
        """The settings of the `retrieval:` section, as notebooks 08, 09 and 12 search."""
        return cls(batch_size=params.batch_size, cache_dir=cfg.paths.embedding_cache, fp16_storage=params.fp16_storage,
                   max_pool_bytes=params.max_pool_bytes, name=name)


def load_retrieval_params(cfg: Config) -> RetrievalParams:
    """The `retrieval:` section: what notebook 08 plans, and how every system run searches."""
    return cfg.section("retrieval", RetrievalParams)


Planner = Callable[[RetrievalParams, "Config | None"], list[SystemSpec]]
Builder = Callable[[SystemSpec, "Move | None", RetrieverSettings, "ModelRef | None"], Retriever]


def _never_per_move(spec: SystemSpec) -> bool:
    return False


@dataclass(frozen=True)
class Family:
    """One retriever family of the registry."""

    name: str  # the family of a SystemSpec and of a run's sidecar ("bm25", "dense", ...)
    plan: Planner  # the rows notebook 08 runs from the params, in table order
    build: Builder | None  # the retriever of a row for a move; None: the family does not search a pool itself
    per_move: Callable[[SystemSpec], bool] = field(default=_never_per_move)  # whether build depends on the move
    resolves_model: bool = False  # its rows name a model that notebook 08 resolves once (resolve_systems)
    # How its retriever orders candidates, recorded in every run's sidecar; a run file ranked by another rule (an
    # older version of the code) is recomputed, never read (systems.runs.reusable). "": the rule has no version.
    ranking: str = ""


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family to the registry (a name is registered once); returns it."""
    if family.name in FAMILIES:
        raise ValueError(f"retriever family {family.name!r} is registered already")
    FAMILIES[family.name] = family
    return family


def unregister(name: str) -> None:
    """Remove a family (a test's toy family); unknown names are an error."""
    if FAMILIES.pop(name, None) is None:
        raise KeyError(f"no retriever family {name!r}")


def get_family(name: str) -> Family:
    """The registered family `name`; an unknown one is an error naming the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown retriever family {name!r}; registered: {', '.join(FAMILIES)}") from None


def ranking_rule(name: str) -> str:
    """The ranking rule a run of family `name` is recorded with (`Family.ranking`); "" for a family not registered
    in this process (a test's toy family after it is removed)."""
    family = FAMILIES.get(name)
    return family.ranking if family else ""


def parse_system(text: str, prefix: str = "generic") -> SystemSpec:
    """`SystemSpec.parse` with every registered family's "<family>:<source>" spelling."""
    return SystemSpec.parse(text, tuple(FAMILIES), prefix=prefix)


def build_retriever(spec: SystemSpec, move: Move | None, settings: RetrieverSettings,
                    ref: ModelRef | None = None) -> Retriever:
    """The retriever of one row for one move (None: a family whose retriever does not depend on it), through its
    family's builder; `ref`: the row's model resolved once by the caller."""
    family = get_family(spec.family)
    if family.build is None:
        raise ValueError(f"retriever family {spec.family!r} builds no retriever of its own ({spec.name}: "
                         "its run files are written by the notebook that plans it)")
    return family.build(spec, move, settings, ref)


def plan_systems(params: RetrievalParams, cfg: Config | None = None) -> list[SystemSpec]:
    """The rows notebook 08 runs (every registered family's plan, in registration order: BM25, dense, ColBERT, then
    any family added later); nothing is resolved here (the registry says which prefixes a model has)."""
    return [spec for family in FAMILIES.values() for spec in family.plan(params, cfg)]


def resolve_systems(systems: list[SystemSpec]) -> tuple[list[SystemSpec], dict[str, ModelRef], list[dict]]:
    """Resolve the model of every row whose family names one, once (downloading from the hub where the user's
    environment allows): the rows whose model resolves, their references by source, and one row per model that does
    not (system, status "not run (<why>)")."""
    refs: dict[str, ModelRef] = {}
    failed: dict[str, str] = {}
    for system in systems:
        if not get_family(system.family).resolves_model or system.source in refs or system.source in failed:
            continue
        try:
            refs[system.source] = resolve_model(system.source)
        except ModelNotAvailableError as exc:
            failed[system.source] = str(exc)
    kept = [s for s in systems if not get_family(s.family).resolves_model or s.source in refs]
    skipped = [{"system": model_name(source), "status": f"not run ({why})"} for source, why in failed.items()]
    return kept, refs, skipped


# -- prefixes of a dense row, from the model registry --------------------------------------------------------------


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


def system_prefixes(system: SystemSpec, move: Move, model: str | ModelRef | None = None) -> tuple[str, str]:
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


# -- the registered families ---------------------------------------------------------------------------------------


def dense_retriever(model, query_prefix: str, doc_prefix: str, settings: RetrieverSettings):
    """A sentence-transformers retriever (a name, folder, `ModelRef` or live model) with these prefixes: the dense
    family's builder, and the one way every other caller (tuned models, analyses, the unified model) gets one."""
    from ..retrieval.dense import DenseRetriever

    optional = {key: value for key, value in (("max_pool_bytes", settings.max_pool_bytes), ("memo", settings.memo))
                if value is not None}
    return DenseRetriever(model, query_prefix, doc_prefix, batch_size=settings.batch_size,
                          cache_dir=settings.cache_dir, fp16_storage=settings.fp16_storage, name=settings.name,
                          device=settings.device, **optional)


def _plan_bm25(params: RetrievalParams, cfg: Config | None) -> list[SystemSpec]:
    return [SystemSpec(bm25_model_name(n), "-", "bm25", str(n)) for n in params.bm25_ngrams]


def _build_bm25(spec: SystemSpec, move: Move | None, settings: RetrieverSettings, ref: ModelRef | None) -> Retriever:
    return BM25Retriever(int(spec.source), name=settings.name, max_pool_bytes=settings.max_pool_bytes)


def _plan_dense(params: RetrievalParams, cfg: Config | None) -> list[SystemSpec]:
    """A dense model's rows are the setups params.dense_styles names ("recommended" only where it has such
    prefixes)."""
    systems = []
    for model in params.dense_models:
        name = model_name(model)
        styles = params.dense_styles(model)
        for style in ("generic", "recommended", "per-move"):
            if style in styles and (style != "recommended" or has_recommended_prefixes(model)):
                systems.append(SystemSpec(name, style, "dense", model))
    return systems


def _build_dense(spec: SystemSpec, move: Move | None, settings: RetrieverSettings, ref: ModelRef | None) -> Retriever:
    model = ref if ref is not None else resolve_model(spec.source)
    return dense_retriever(model, *system_prefixes(spec, move, model), settings)


def _plan_colbert(params: RetrievalParams, cfg: Config | None) -> list[SystemSpec]:
    systems = [SystemSpec(row_name, "-", "colbert", checkpoint)
               for row_name, checkpoint in params.colbert_checkpoints.items()]
    return systems + [SystemSpec(model_name(model), "-", "colbert", model) for model in params.colbert_models]


def _build_colbert(spec: SystemSpec, move: Move | None, settings: RetrieverSettings,
                   ref: ModelRef | None) -> Retriever:
    entry = _entry(ref if ref is not None else spec.source)
    lengths = {"query_length": entry.query_length, "document_length": entry.document_length} \
        if entry is not None and entry.query_length else {}
    # The spec as written, not ref's folder: the run's sidecar records it (no machine path); PyLate loads it
    # through models.resolve_model_path once, when the first text is encoded.
    return colbert_retriever(spec.source, settings, **lengths)


def colbert_retriever(source: str, settings: RetrieverSettings, **lengths: int) -> Retriever:
    """A PyLate late-interaction retriever of a checkpoint (name, folder or hub id): the ColBERT family's builder,
    and `ratio-evaluate --colbert`'s (which passes no `lengths`: PyLate's defaults, as it always had)."""
    from ..retrieval.colbert import ColBERTRetriever

    return ColBERTRetriever(source, batch_size=settings.batch_size, name=settings.name, device=settings.device,
                            **lengths)


def _plan_nothing(params: RetrievalParams, cfg: Config | None) -> list[SystemSpec]:
    return []


BM25 = register(Family("bm25", _plan_bm25, _build_bm25, ranking=BM25Retriever.RANKING))  # retrieval.bm25_ngrams
DENSE = register(Family("dense", _plan_dense, _build_dense, per_move=lambda spec: spec.prefix == "per-move",
                        resolves_model=True))  # retrieval.dense_models
COLBERT = register(Family("colbert", _plan_colbert, _build_colbert,
                          resolves_model=True))  # retrieval.colbert_models, retrieval.colbert_checkpoints
LLM_RERANK = register(Family("llm-rerank", _plan_nothing, None))  # rows: rerank.systems, run files: notebook 10
