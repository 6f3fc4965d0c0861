"""The params sections: one dataclass per section of a params file, with the paper's defaults.

`ratio_utils.config` registers each in `PARAMS_SECTIONS` and checks a params file against their fields when it
loads it; a stage reads its own with `Config.section(name, Params)`. This module imports only the standard
library, `schema` and `text`, so that loading a config never imports torch, pandas or a stage (the modules that
use a section re-export its dataclass: `ratio_utils.param_sections.MiningParams` is this module's `MiningParams`).
The `llm` section is `ratio_utils.llm.LLMSettings` (the client package depends on nothing else of the library).

Reads and writes nothing.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
import types
import typing
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .schema import DEFAULT_INSTRUCTION_TEMPLATE, GENERIC_DOC_PREFIX, GENERIC_QUERY_PREFIX, MOVES, POOL_SPLITS, Move
from .text import CleaningRules


def reject_unknown_keys(values: dict, cls: type, where: str) -> None:
    """Raise if `values` has a key that is not a field of the dataclass `cls` (a typo in a params file must not
    fall back to a default) or a value of another type than the field's (`check_value_types`). `where` names the
    file and section in the message."""
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{where} has unknown key(s) {unknown}; {cls.__name__} accepts {sorted(known)}")
    check_value_types(values, cls, where)


def check_value_types(values: dict, cls: type, where: str) -> None:
    """Raise ValueError naming `where` (the file and section) and the key if a value in `values` does not fit the type
    annotation of its field in the dataclass `cls`: `k: ten` must fail at load, not as a TypeError deep in a stage.

    The rules are YAML's: an int fits a float field (YAML writes 1.0 as 1), a list fits a tuple field (YAML has no
    tuples), a bool fits only a bool field (True is an int in Python, never a count here); `Any` and types this
    check does not know (no section uses one) are accepted."""
    hints = _field_types(cls)
    for key, value in values.items():
        expected = hints.get(key)
        if expected is not None and not _fits(value, expected):
            raise ValueError(f"{where} key {key!r} must be {_type_text(expected)}, got {value!r} "
                             f"({type(value).__name__})")


def check_seed(value: Any, where: str) -> int:
    """The top-level `seed` of a params file: a whole number (not a bool, not a float, not text); else ValueError
    naming `where` (the file)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: seed must be a whole number, got {value!r} ({type(value).__name__})")
    return value


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    # `from __future__ import annotations` leaves annotations as text; get_type_hints evaluates them in the module
    return typing.get_type_hints(cls)


def _fits(value: Any, expected: Any) -> bool:
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if expected is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if expected is type(None):
        return value is None
    if expected is bool:
        return isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    if origin is list or expected is list:
        return isinstance(value, (list, tuple)) and (not args or all(_fits(item, args[0]) for item in value))
    if origin is tuple or expected is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        if not args or (len(args) == 2 and args[1] is Ellipsis):
            return all(_fits(item, args[0]) for item in value) if args else True
        return len(value) == len(args) and all(_fits(item, arg) for item, arg in zip(value, args))
    if origin is dict or expected is dict:
        if not isinstance(value, dict):
            return False
        return not args or all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    return True  # a type no section uses (a date, a Fraction): left to the dataclass


def _type_text(expected: Any) -> str:
    """A field's type as a params file's author reads it: `int`, `int or null`, `list of str`."""
    origin, args = typing.get_origin(expected), typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(arg) for arg in args)
    if expected is type(None):
        return "null"
    if origin in (list, tuple) and args:
        return f"a list of {_type_text(args[0])}"
    if origin is dict and args:
        return f"a mapping of {_type_text(args[0])} to {_type_text(args[1])}"
    if expected in (list, tuple):
        return "a list"
    if expected is dict:
        return "a mapping"
    return {bool: "true or false", int: "a whole number", float: "a number", str: "text"}.get(expected, str(expected))


# -- corpus: notebook 00 ---------------------------------------------------------------------------------------


# Params that decide where and how fast a stage runs (Dask, sharding, progress bars), never what it computes: left out
# of the keys of corpus parts and mined parts, so changing them reuses what was built.
EXECUTION_SETTINGS = frozenset({"engine", "dask_scheduler", "dask_workers", "dask_processes", "shards", "progress"})

@dataclass
class S2orcParams:
    """Semantic Scholar Datasets API settings (ratio_utils.corpora.s2_api, ratio_utils.corpora.s2orc)."""

    release: str = "2026-05-05"  # pinned release id; "latest" is refused (not reproducible)
    datasets: list[str] = field(default_factory=lambda: ["s2orc", "papers"])
    fields_of_study: list[str] = field(default_factory=lambda: ["Computer Science"])
    # Paper §4: papers whose `publicationdate` is on or after `min_date`; papers without one are dropped.
    # selection "year" keeps papers whose `year` >= min_year instead (papers without a date included).
    selection: str = "publication_date"
    min_date: str = "2015-01-01"
    min_year: int = 2015
    abstract_spans: bool = False  # paper: `paragraph` spans only; true puts the `abstract` spans first
    shard_limit: int | None = None  # download/read at most this many shards per dataset (None = all)
    api_base_url: str = "https://api.semanticscholar.org/datasets/v1"
    download_dir: str | None = None  # default: <output root>/data/raw/downloads/s2orc/<release>
    max_retries: int = 5  # on HTTP 429/5xx and broken connections, with exponential backoff and jitter
    # retry n waits backoff_seconds x 2^(n-1) from the second on, plus up to backoff_seconds of jitter
    backoff_seconds: float = 2.0
    url_max_age_seconds: float = 3000.0  # list the dataset again before pre-signed URLs this old expire

    def __post_init__(self) -> None:
        if self.selection not in ("publication_date", "year"):
            raise ValueError(f"corpus.s2orc.selection must be 'publication_date' or 'year', got {self.selection!r}")
        text = [d for d in self.datasets if d != "papers"]
        if len(text) != 1 or text[0] not in ("s2orc", "s2orc_v2"):
            raise ValueError(f"corpus.s2orc.datasets must be 'papers' and one of s2orc, s2orc_v2; got {self.datasets}")

    @property
    def text_dataset(self) -> str:
        return next(d for d in self.datasets if d != "papers")


@dataclass
class CorpusParams:
    """Stage 00 parameters (params section `corpus`)."""

    sources: list[str] = field(default_factory=lambda: ["acl_scisumm", "aclsum"])
    max_papers: int | None = None  # None = all; else a deterministic sample spread over year bins
    # upper bounds: train / validation / test
    sample_year_bins: list[int] = field(default_factory=lambda: [2006, 2009])
    min_sentence_chars: int = 35  # paper Appendix B.1
    min_alpha_ratio: float = 0.6
    min_words: int = 3
    # The word-share rule (text.CleaningRules.min_word_token_ratio, e.g. 0.35): drops formula / OCR residue
    # such as notebook 05's gold "for any (f, t) e t, f n fs1 -=i-..l". Off (null) by default: it changes the
    # default benchmark (at 0.35: 560 of 338,169 kept sentences, 12 of 7,021 pairs, 6 of 16,649 distractors), hence
    # every downstream number and the judge/rerank request bodies, whose recorded answers replay only on today's
    # benchmark.
    min_word_token_ratio: float | None = None
    strict: bool = False  # raise InputError on the first bad record instead of quarantining it
    jsonl: dict[str, str] = field(default_factory=dict)  # corpus name -> generic JSONL(.gz) path
    licences: dict[str, str] = field(default_factory=dict)  # corpus name -> its licence, for the dataset card
    acl_scisumm_dir: str | None = None  # default: <shared>/corpora/acl_scisumm/raw, else downloaded
    aclsum_dir: str | None = None  # default: <shared>/corpora/aclsum/raw, else downloaded
    download_base_url: str = "https://raw.githubusercontent.com/WING-NUS/scisumm-corpus"
    s2orc: dict[str, Any] = field(default_factory=dict)  # S2orcParams fields
    progress: bool = True
    # None: one papers and one sentences file (the default run). A number: a partitioned build, each input
    # part (this many files, or lines of a JSONL file or records of an S2ORC shard) read, split, cleaned and written
    # as its own parquet part with its own report; a rerun skips parts whose inputs and params are unchanged.
    papers_per_part: int | None = None
    # Where the parts of a partitioned build are built: "local" (one after another, in this process) or
    # "dask" (one task per part on a LocalCluster of dask_workers processes, or on dask_scheduler).
    engine: str = "local"
    dask_scheduler: str | None = None
    dask_workers: int = 2
    dask_processes: bool = True

    def __post_init__(self) -> None:
        if self.engine not in ("local", "dask"):
            raise ValueError(f"corpus.engine must be 'local' or 'dask', got {self.engine!r}")
        if self.engine == "dask" and self.papers_per_part is None:
            raise ValueError("corpus.engine: dask builds parts: set corpus.papers_per_part")
        if self.papers_per_part is not None and self.papers_per_part < 1:
            raise ValueError("corpus.papers_per_part must be >= 1 or null")
        if self.papers_per_part is not None and self.max_papers is not None:
            raise ValueError("corpus.max_papers samples the whole corpus: it cannot be combined with papers_per_part")

    def s2orc_params(self) -> S2orcParams:
        reject_unknown_keys(self.s2orc, S2orcParams, "params corpus.s2orc")
        return S2orcParams(**self.s2orc)

    def cleaning_rules(self) -> CleaningRules:
        return CleaningRules(min_chars=self.min_sentence_chars, min_alpha_ratio=self.min_alpha_ratio,
                             min_words=self.min_words, min_word_token_ratio=self.min_word_token_ratio)


# -- lexicon: notebooks 01-04 ----------------------------------------------------------------------------------


@dataclass
class LexiconParams:
    """Parameters of notebooks 01–04 (params section `lexicon`), with the paper's defaults."""

    released_csv: str = "shared:lexicon/all_query_terms5.csv"  # a params path (Paths.from_params)
    top_spans: int = 400  # spans reviewed in manual curation
    max_span_words: int = 7  # a span before the first comma counts if it has at most this many words
    pairs_per_span: int = 15  # sentence pairs each reviewer reads per span
    reviewers: tuple[str, ...] = ("reviewer_1", "reviewer_2")
    review_decisions_dir: str = "data/lexicon/review_decisions"  # relative to the repo root
    status_top_spans: int = 400  # top spans of our corpus classified against the released decisions
    max_extension_words: int = 5  # words an extendable connective may add before the comma
    extension_examples: int = 3
    # LLM generation (notebook 03)
    generation_models: tuple[str, ...] = ("claude-opus-4-6", "gemini-3-flash", "gpt-5.4")
    labeller_model: str = "gpt-5.4"
    generation_rounds: int = 3
    markers_per_request: int = 30
    seeds_per_request: int = 25
    label_batch_size: int = 40
    generation_moves: tuple[str, ...] = ("address", "broaden")
    # Pattern expansion (notebook 04)
    templates_file: str = "data/lexicon/templates.yaml"
    template_ids: tuple[str, ...] = ()  # empty: every template in the file
    max_slot_terms: int = 0  # 0: every term; smoke runs cap each slot list
    grammar_filter: bool = True  # the LLM grammaticality filter, when an endpoint exists
    grammar_batch_size: int = 50
    table3_examples: int = 3


# -- mining: notebook 05 ---------------------------------------------------------------------------------------


@dataclass
class MiningParams:
    """The `mining:` section of the params files; defaults are the paper's."""

    extension_max_words: int = 5  # App. A: extensions of at most five words up to a comma
    lowercase: bool = True  # App. B.1 "we lowercase the text"
    min_chars: int = 35  # App. B.1 short-sentence removal (query and gold)
    query_prefix_max_words: int = 4  # leading clause of at most four words before a comma
    anaphors: list[str] = field(default_factory=lambda: ["this", "these", "such", "it", "the above"])
    engine: str = "local"  # "local" (one process) or "dask"
    dask_scheduler: str | None = None  # address of a running scheduler; None = LocalCluster
    dask_workers: int = 2
    dask_processes: bool = True  # LocalCluster with worker processes (threads would share the GIL)
    shards: int = 8  # papers are split into this many shards for Dask
    progress: bool = True

    def __post_init__(self) -> None:
        if self.engine not in ("local", "dask"):
            raise ValueError(f"mining.engine must be 'local' or 'dask', got {self.engine!r}")
        if self.extension_max_words < 0 or self.min_chars < 0 or self.query_prefix_max_words < 0:
            raise ValueError("mining: extension_max_words, min_chars and query_prefix_max_words must be >= 0")
        if self.shards < 1:
            raise ValueError("mining.shards must be >= 1")


# -- dataset: notebook 06 (split windows) ----------------------------------------------------------------------


SPLITS = tuple(s.value for s in POOL_SPLITS)


# The paper's windows (App. B.2, Table 5 caption).
PAPER_SPLITS = {
    "train": {"start": "2015-01-01", "end": "2025-09-30"},
    "validation": {"start": "2025-10-01", "end": "2025-12-31"},
    "test": {"start": "2026-01-01", "end": "2026-05-05"},
}


DEFAULT_MAX_IN_MEMORY_BYTES = 4 << 30


@dataclass
class DatasetParams:
    """The `dataset:` section of the params files; defaults are the paper's date windows."""

    split_by: str = "date"  # "date" or "year"
    splits: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(v) for k, v in PAPER_SPLITS.items()})
    year_only: str = "whole_year"  # date windows only: "whole_year" or "exclude"
    hash_seed: int = 13  # seed of the paper-id hash that divides a window shared by splits with a `fraction`
    # Mined rows (pairs + distractors, uncompressed parquet bytes) past which the benchmark is built hash bucket
    # by hash bucket (dataset/bounded: the same rows, bounded memory; docs/scale.md). The default run's ~6 MB
    # stay on the in-memory build.
    max_in_memory_bytes: int = DEFAULT_MAX_IN_MEMORY_BYTES
    # mined bytes per hash bucket of the bounded build: its memory is about one bucket's rows
    bucket_bytes: int = 256 << 20
    # Share of the distractors that enter the pools, drawn per docid by schema.seeded_hash under hash_seed.
    # 1.0 keeps every distractor, as the paper does (§4.2, Table 5); lower values bound a pool built from a
    # large corpus (for a pool of P sentences: about (P - golds) / the distractors notebook 06 reports).
    distractor_fraction: float = 1.0

    def __post_init__(self) -> None:
        if self.split_by not in ("date", "year"):
            raise ValueError(f"dataset.split_by must be 'date' or 'year', got {self.split_by!r}")
        if self.year_only not in ("whole_year", "exclude"):
            raise ValueError(f"dataset.year_only must be 'whole_year' or 'exclude', got {self.year_only!r}")
        if not 0 < self.distractor_fraction <= 1:
            raise ValueError(f"dataset.distractor_fraction must lie in (0, 1], got {self.distractor_fraction}")
        if self.bucket_bytes < 1:
            raise ValueError(f"dataset.bucket_bytes must be positive, got {self.bucket_bytes}")
        unknown = sorted(set(self.splits) - set(SPLITS))
        if unknown:
            raise ValueError(f"dataset.splits has unknown split(s) {unknown}; expected {list(SPLITS)}")

    def windows(self) -> list["SplitWindow"]:
        """Every split's window, earliest first (splits sharing a window by fraction in SPLITS order)."""
        return [window for group in self.window_groups() for window in group]

    def window_groups(self) -> list[tuple["SplitWindow", ...]]:
        """The windows grouped by span, earliest first: one window, or the splits that divide one window
        by fraction. Raises ValueError on overlapping spans or on a group that is not a valid division."""
        windows = [SplitWindow.parse(name, self.splits[name], self.split_by) for name in SPLITS if name in self.splits]
        spans: dict[tuple, list[SplitWindow]] = {}
        for window in windows:
            spans.setdefault((window.start, window.end), []).append(window)
        groups = [tuple(group) for group in spans.values()]
        for group in groups:
            _check_fraction_group(group)
        groups.sort(key=lambda g: g[0].sort_key)
        for before, after in zip(groups, groups[1:]):
            first, second = before[-1], after[0]
            if first.end is None or second.start is None or first.end >= second.start:
                raise ValueError(f"dataset.splits: windows {first.name} and {second.name} overlap or are open-ended "
                                 "towards each other (splits may share a window only when each names the same start "
                                 "and end and a fraction)")
        return groups


def _check_fraction_group(group: tuple["SplitWindow", ...]) -> None:
    names = [w.name for w in group]
    with_fraction = [w for w in group if w.fraction is not None]
    if len(group) > 1 and len(with_fraction) < len(group):
        raise ValueError(f"dataset.splits: windows {' and '.join(names)} overlap: splits that share a window each "
                         "need a fraction")
    total = sum((w.fraction for w in with_fraction), Fraction(0))
    if total > 1:
        raise ValueError(f"dataset.splits: the fractions of {', '.join(names)} sum to {total} (> 1) over their "
                         "shared window")


@dataclass(frozen=True)
class SplitWindow:
    """One split's window, inclusive at both ends; None = open. Dates (date mode) or ints (year mode).
    `fraction`: this split's share of the window's papers, by paper-id hash (None: all of them)."""

    name: str
    start: _dt.date | int | None
    end: _dt.date | int | None
    fraction: Fraction | None = None

    @staticmethod
    def parse(name: str, spec: dict, split_by: str) -> "SplitWindow":
        unknown = sorted(set(spec) - {"start", "end", "fraction"})
        if unknown:
            raise ValueError(f"dataset.splits.{name}: unknown key(s) {unknown}; use start, end and fraction")

        def value(raw):
            if raw is None:
                return None
            if split_by == "year":
                if isinstance(raw, bool) or not isinstance(raw, int):
                    raise ValueError(f"dataset.splits.{name}: split_by=year needs whole years, got {raw!r}")
                return raw
            if isinstance(raw, _dt.datetime):
                return raw.date()
            if isinstance(raw, _dt.date):
                return raw
            if isinstance(raw, int) or len(str(raw)) != 10:
                raise ValueError(f"dataset.splits.{name}: split_by=date needs ISO dates (YYYY-MM-DD), got {raw!r}")
            return _dt.date.fromisoformat(str(raw))

        window = SplitWindow(name, value(spec.get("start")), value(spec.get("end")),
                             _parse_fraction(name, spec.get("fraction")))
        if window.start is not None and window.end is not None and window.start > window.end:
            raise ValueError(f"dataset.splits.{name}: start {window.start} is after end {window.end}")
        return window

    @property
    def sort_key(self):
        return (0, 0) if self.start is None else (1, self.start)

    def contains(self, value) -> bool:
        return (self.start is None or value >= self.start) and (self.end is None or value <= self.end)


def _parse_fraction(name: str, raw) -> Fraction | None:
    """A split's fraction, exact: a number (0.5) or a ratio written as text ("1/3"), in (0, 1]."""
    if raw is None:
        return None
    try:
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise ValueError
        fraction = Fraction(str(raw).strip())  # str: 0.1 is 1/10, not the binary float's value
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"dataset.splits.{name}: fraction must be a number or a ratio like 1/3, "
                         f"got {raw!r}") from None
    if not 0 < fraction <= 1:
        raise ValueError(f"dataset.splits.{name}: fraction must lie in (0, 1], got {raw!r}")
    return fraction


# -- judge: notebook 07 ----------------------------------------------------------------------------------------


@dataclass
class JudgeParams:
    """The `judge` params section; defaults follow the paper."""

    prompts_dir: str = "prompts/judge"  # relative to the repository
    # per move; None = every test pair; a number: a sample stratified by marker, equal allocation; a list of numbers:
    # a nested sample in waves, each wave drawn (same rule, same seed) from the pairs no earlier wave drew
    sample_sizes: dict[str, int | list[int] | None] = field(
        default_factory=lambda: {"specify": 10_000, "address": None, "broaden": None}
    )
    n_calibration: int = 100  # pairs per move labelled by the calibration annotator
    n_panel: int = 60  # held-out pairs per move labelled by the panel
    n_retained: int = 2  # prompts kept per move; a pair must be accepted by all of them
    # move -> prompt names; empty/None = by calibration F1
    retained: dict[str, list[str]] | None = field(default_factory=dict)
    calibration_annotator: str | None = None  # needed only if several annotators labelled calibration pairs
    guideline_prompt: str = "minimal"  # the prompt shown to annotators on the sheets
    labels_dir: str = "output:data/interim/judge/labels"  # params paths (Paths.from_params)
    out_dir: str = "output:data/interim/judge"
    model: str | None = None  # None: llm.model
    reasoning_effort: str | None = "medium"
    verbosity: str | None = "low"
    extra: dict[str, Any] = field(default_factory=dict)  # further request parameters

    def __post_init__(self) -> None:
        if self.retained is None:  # `retained: null` in a params file that extends one fixing them
            self.retained = {}
        moves = {m.value for m in MOVES}
        unknown = sorted((set(self.sample_sizes) | set(self.retained)) - moves)
        if unknown:
            raise ValueError(f"judge params name unknown move(s) {unknown}; moves are {sorted(moves)}")
        for move in self.sample_sizes:
            self.waves(move)  # raises on a size that is not null, a positive whole number or a list of them

    def waves(self, move: str) -> list[int] | None:
        """The judge sample of `move` as wave sizes: None = every test pair; [n] = one wave (a plain number)."""
        size = self.sample_sizes.get(move)
        if size is None:
            return None
        sizes = list(size) if isinstance(size, (list, tuple)) else [size]
        if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
            raise ValueError(f"judge.sample_sizes.{move} must be null, a positive whole number or a non-empty list of "
                             f"them (waves of a nested sample), got {size!r}")
        return sizes


# -- retrieval: notebook 08 ------------------------------------------------------------------------------------

# Pools whose vectors take more are searched from a memory-mapped file (ratio_utils.retrieval.dense). Far
# above any pool of the default run (~6k sentences x 384 float32 = 9 MB), below a paper-size train pool.
DEFAULT_MAX_POOL_BYTES = 16 << 30


@dataclass
class RetrievalParams:
    """The `retrieval:` section of the params files.

    A dense model is a name, folder or hub id (ratio_utils.models.resolve_model); its rows are the setups the three
    flags below ask for, unless `prefix_styles` names its own (the paper ran some setups for some models only).
    An entry of `dense_models` may carry them itself, `{model: EmbeddingGemma-300m, prefixes: generic}` (or a list of
    styles), which is read as the name in `dense_models` and its styles in `prefix_styles`.
    """

    # a name, or {model: NAME, prefixes: STYLE or [STYLES]}; __post_init__ leaves names only
    # add all-mpnet-base-v2 (slow on CPU)
    dense_models: list[str | dict[str, Any]] = field(default_factory=lambda: ["all-MiniLM-L6-v2"])
    # model (as dense_models spells it) -> its setups (one style or a list), a subset of DENSE_PREFIX_STYLES; absent:
    # the flags below
    prefix_styles: dict[str, list[str] | str] = field(default_factory=dict)
    bm25_ngrams: list[int] = field(default_factory=lambda: [1, 2, 3])
    generic_prefix: bool = True  # query: / document:
    recommended_prefix: bool = True  # only for models whose developers recommend prefixes
    move_instructions: bool = True  # Appendix C instruction in front of each query
    colbert_checkpoints: dict[str, str] = field(default_factory=dict)  # row name -> PyLate checkpoint folder
    # Late-interaction baselines by registry name, hub id or folder (PyLate, MaxSim); the row is the model's name.
    colbert_models: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=lambda: ["test", "silver"])
    k: int = 100
    batch_size: int = 64
    fp16_storage: bool = False
    # A pool whose vectors take more is searched from a memory-mapped file, block by block (same ranking).
    max_pool_bytes: int = DEFAULT_MAX_POOL_BYTES
    max_queries: int | None = None  # per (move, split); smoke runs only
    tuned_models: bool = True  # notebook 09 writes run files of its models/<base>__<move>/
    # The "best" system of each role the claims compare (best untuned dense, best BM25, best tuned), fixed a priori by
    # its system name (the tables' row name, e.g. "BM25-unigram", "all-MiniLM-L6-v2 (tuned)"), as the paper fixes its
    # systems; a role left out is chosen on the validation split's run files, never on the queries it is tested on
    # (reporting.claims.choose_best).
    best_systems: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown_roles = sorted(set(self.best_systems) - set(BEST_SYSTEM_ROLES))
        if unknown_roles:
            raise ValueError(f"retrieval.best_systems: unknown role(s) {unknown_roles}; "
                             f"the roles are {list(BEST_SYSTEM_ROLES)}")
        names: list[str] = []
        styles = dict(self.prefix_styles or {})
        for entry in self.dense_models:
            if isinstance(entry, dict):
                unknown = set(entry) - {"model", "prefixes"}
                if "model" not in entry or unknown:
                    raise ValueError(f"retrieval.dense_models: an entry is a model name or {{model: NAME, prefixes: "
                                     f"STYLE or [STYLES]}}, got {entry!r}")
                if "prefixes" in entry:
                    styles[str(entry["model"])] = entry["prefixes"]
                entry = entry["model"]
            names.append(str(entry))
        self.dense_models = names
        self.prefix_styles = {}
        for model, wanted in styles.items():
            wanted = [wanted] if isinstance(wanted, str) else list(wanted or [])
            wrong = [s for s in wanted if s not in DENSE_PREFIX_STYLES]
            if wrong or not wanted:
                raise ValueError(f"retrieval.prefix_styles[{model!r}]: styles are {list(DENSE_PREFIX_STYLES)}, "
                                 f"got {wanted!r}")
            if model not in names:
                raise ValueError(f"retrieval.prefix_styles names {model!r}, which retrieval.dense_models does not")
            self.prefix_styles[model] = wanted

    def dense_styles(self, model: str) -> list[str]:
        """The setups asked for a dense model: its own (prefix_styles), else those of the section's flags
        ("recommended" stands for "where the model has recommended prefixes")."""
        if model in self.prefix_styles:
            return list(self.prefix_styles[model])
        flags = zip(DENSE_PREFIX_STYLES, (self.generic_prefix, self.recommended_prefix, self.move_instructions))
        return [style for style, on in flags if on]


# The setups of a dense baseline (Tables 1, 7, 8): the generic prefixes, its developers' recommended ones, a move
# instruction in front of the query.
DENSE_PREFIX_STYLES = ("generic", "recommended", "per-move")

# The roles of retrieval.best_systems: the untuned dense runs, the BM25 n-gram runs, the fine-tuned runs (notebook 09)
BEST_SYSTEM_ROLES = ("dense", "bm25", "tuned")


# -- train: notebook 09 ----------------------------------------------------------------------------------------

# The authors' ddp_timeout (8 h): rank-0-only passes (baseline scoring, the test evaluation) over a
# paper-size pool outlast torch's and transformers' default of 30 minutes while the other ranks wait.
DEFAULT_DDP_TIMEOUT_SECONDS = 28_800


@dataclass
class TrainParams:
    """The `train:` section of a params file. Defaults follow the paper where it states a value."""

    base_model: str = "all-MiniLM-L6-v2"  # a name resolve_model_path knows, or a local folder
    configs_file: str = "params/finetune/all-MiniLM-L6-v2.yaml"  # Table 6 configurations (repo-relative)
    configs: list[int] | None = None  # configuration ids to try; None = every one in the file
    moves: list[str] = field(default_factory=lambda: [m.value for m in MOVES])
    max_train_pairs: int | None = None  # paper: all pairs; a CPU budget caps them (seeded sample)
    max_seq_length: int = 128
    query_prefix: str = GENERIC_QUERY_PREFIX  # the paper's generic prefixes (Appendix C, Input prefixes)
    doc_prefix: str = GENERIC_DOC_PREFIX
    # "generic" or "recommended": the base model's prefixes from the model registry replace query_prefix /
    # doc_prefix (ratio_utils.train.selection.training_setups); None: the two above as written.
    prefixes: str | None = None
    # Further fine-tuning setups notebook 09 runs after this one, each a mapping of `train:` keys that override this
    # section's (the paper's five: {base_model: ModernBERT-embed-large, prefixes: recommended, bf16: true}, ...).
    # A setup with recommended prefixes is kept in models/<base>-recommended__<move>/.
    setups: list[dict[str, Any]] = field(default_factory=list)
    eval_batch_size: int = 64
    # Tiny moves (Broaden: 32 training pairs) give one optimizer step per epoch at batch 32; a pass over
    # the pairs is then repeated until an epoch has at least this many steps (training_schedule).
    min_steps_per_epoch: int = 10
    logging_steps: int = 10
    keep_unselected_models: bool = False  # delete the weights of configurations that lost
    device: str | None = None  # None: cuda when present, else cpu (the trainer decides under torchrun)
    # Processes `run_all.sh` starts notebook 09 with (torchrun --nproc_per_node; the paper: 4 GPUs for
    # Address and Specify). 1: one process, as before.
    nproc_per_node: int = 1
    # Seconds a rank waits at a collective (barriers included) before giving up: the other ranks wait
    # while rank 0 alone scores the baseline and the test split (the authors set 28,800).
    ddp_timeout: int = DEFAULT_DDP_TIMEOUT_SECONDS
    bf16: bool = False  # bfloat16 mixed precision (the authors needed it for ModernBERT / Stella on GPU)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass: less memory, ~30% slower
    # Tuned late-interaction row (ratio_utils.train.colbert): PyLate ColBERT on top of base_model.
    colbert: bool = True
    colbert_moves: list[str] | None = None  # None: the same moves as the dense retrievers
    colbert_max_train_pairs: int | None = 128
    colbert_epochs: int = 1
    colbert_batch_size: int = 16
    colbert_learning_rate: float = 3e-5
    colbert_embedding_size: int = 128
    # Training pads every query to query_length ([MASK] expansion) and every candidate to
    # document_length, so on CPU both are cut well below the paper's 128/300 (sentences rarely
    # exceed 64 tokens); evaluation uses the same query length (recorded in results.json).
    colbert_query_length: int = 32
    colbert_document_length: int = 64
    colbert_evaluate_test: bool = True  # score the trained ColBERT on the test pool (MaxSim, ~89 docs/s on CPU)

    def __post_init__(self) -> None:
        if self.prefixes not in (None, "generic", "recommended"):
            raise ValueError(f"train.prefixes must be 'generic', 'recommended' or null, got {self.prefixes!r}")
        known = set(self.__dataclass_fields__) - {"setups"}
        for setup in self.setups:
            unknown = set(setup) - known if isinstance(setup, dict) else {"(not a mapping)"}
            if unknown:
                raise ValueError(f"train.setups: unknown keys {sorted(unknown)} in {setup!r}")
        # each setup is checked as a section of its own (its prefixes, its moves)
        for setup in self.setups:
            TrainParams(**{**{k: getattr(self, k) for k in known}, **setup})

    def selected_moves(self, move: str | None = None) -> list[Move]:
        """`all` -> the moves of the params; one move -> that move if the params include it, else none
        (a fanned-out notebook for a move the params leave out does nothing)."""
        moves = [Move.parse(m) for m in self.moves]
        if move is None or str(move).lower() == "all":
            return moves
        return [m for m in moves if m is Move.parse(move)]


# -- rerank: notebook 10 ---------------------------------------------------------------------------------------


@dataclass
class RerankParams:
    """The `rerank` params section (paper: GPT-5-mini, top 100, 10 best, reasoning effort medium)."""

    # first stages
    systems: list[str] = field(default_factory=lambda: ["all-MiniLM-L6-v2", "all-MiniLM-L6-v2 (tuned)"])
    split: str = "silver"  # per move, the unfiltered test split where the silver split is absent
    moves: list[str] = field(default_factory=lambda: [m.value for m in MOVES])
    max_queries: int | None = None  # per (system, move): a seeded sample of this many queries; None: all
    top_n: int = 100  # candidates shown to the model
    k: int = 10  # numbers the model returns
    prompts_dir: str = "prompts/rerank"  # relative to the repository
    prompt: str = "listwise"  # prompts/rerank/<move>/<prompt>.md
    model: str | None = "gpt-5-mini"  # None: llm.model
    reasoning_effort: str | None = "medium"
    extra: dict[str, Any] = field(default_factory=dict)  # further request parameters

    def __post_init__(self) -> None:
        if not 1 <= self.k <= self.top_n:
            raise ValueError(f"rerank.k must be between 1 and rerank.top_n ({self.top_n}), got {self.k}")
        for move in self.moves:
            Move.parse(move)
        if self.max_queries is not None and self.max_queries < 1:
            raise ValueError("rerank.max_queries must be positive or null (every query)")


# -- analysis: notebook 11 (Appendix F) ------------------------------------------------------------------------


# Appendix F: the ranks at which the word overlap is measured, and those of the base-vs-tuned comparisons.
OVERLAP_KS: tuple[int, ...] = (1, 3, 5, 10, 20, 50, 100)
COMPARISON_KS: tuple[int, ...] = (1, 3, 5, 10)


@dataclass
class AnalysisParams:
    """The `analysis:` section of the params files (Appendix F)."""

    base_model: str = "all-MiniLM-L6-v2"  # the untuned retriever: a model name (ratio_utils.models) or a folder
    # move -> folder; empty: notebook 09's models/<base>__<move>/
    tuned_models: dict[str, str] = field(default_factory=dict)
    query_prefix: str = GENERIC_QUERY_PREFIX  # the generic prefixes of §5.1, as notebook 09 trains with
    doc_prefix: str = GENERIC_DOC_PREFIX
    overlap_ks: list[int] = field(default_factory=lambda: list(OVERLAP_KS))
    comparison_ks: list[int] = field(default_factory=lambda: list(COMPARISON_KS))
    k: int = 100
    max_queries: int | None = None  # per move and query set (the first by id); smoke runs only
    batch_size: int = 64
    n_resamples: int = 10_000


# -- human_eval: notebook 12 -----------------------------------------------------------------------------------


ANNOTATOR_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _default_annotators() -> dict[str, list[str] | None]:
    return {f"annotator{i}": None for i in range(1, 6)}  # five annotators in the paper


@dataclass
class HumanEvalParams:
    """The `human_eval:` section of the params files (notebook 12)."""

    baseline_system: str = "all-MiniLM-L6-v2"  # a system of data/retrieval_runs/ (runs.system_name)
    tuned_system: str = "all-MiniLM-L6-v2 (tuned)"  # "{move}" in a name is replaced by the move
    moves: list[str] = field(default_factory=lambda: [m.value for m in MOVES])
    pool_per_move: int = 400  # paper: a pool of 400 silver queries per move, by marker with equal allocation
    labelled_per_move: int = 42  # paper: 125 labelled in all (39 Specify, 40 Address, 46 Broaden)
    k: int = 10
    subfield_column: str | None = None  # a pair column or a papers.parquet column, e.g. "venue"
    subfield_values: list[str] | None = None  # keep only queries whose subfield is one of these
    # name -> subfields (null: any)
    annotators: dict[str, list[str] | None] = field(default_factory=_default_annotators)
    double_labelled_per_move: int = 5  # queries per move given to a second annotator (agreement)
    seed: int | None = None  # null: the params file's seed
    labels_dir: str | None = None  # folder of <annotator>.jsonl label files; null: no labels yet
    n_permutations: int = 10_000

    def system(self, setup: str, move: Move) -> str:
        name = self.baseline_system if setup == "baseline" else self.tuned_system
        return name.replace("{move}", move.value)

    def check(self) -> None:
        bad = [name for name in self.annotators if not ANNOTATOR_NAME.match(name)]
        if bad:
            raise ValueError(f"human_eval.annotators: names must be letters, digits, '_' or '-': {bad}")
        if not self.annotators:
            raise ValueError("human_eval.annotators: at least one annotator is needed")
        if self.labelled_per_move > self.pool_per_move:
            raise ValueError("human_eval.labelled_per_move cannot exceed pool_per_move")
        for move in self.moves:
            Move.parse(move)


# -- unified: notebook 13 --------------------------------------------------------------------------------------


@dataclass
class UnifiedParams:
    """The `unified:` section of a params file (notebook 13)."""

    base_model: str = "all-MiniLM-L6-v2"  # a name resolve_model_path knows, or a local folder
    configs_file: str = "params/finetune/all-MiniLM-L6-v2.yaml"
    configs: list[int] | None = field(default_factory=lambda: [1])  # None: every configuration of the file
    moves: list[str] = field(default_factory=lambda: [m.value for m in MOVES])
    pairs_per_move: int | None = 128  # training pairs drawn from each move; None: as many as the largest move has
    max_repeats: int = 3  # a move with fewer pairs repeats each at most this often to reach its share
    instruction_template: str = DEFAULT_INSTRUCTION_TEMPLATE
    doc_prefix: str = GENERIC_DOC_PREFIX
    max_seq_length: int = 128
    eval_batch_size: int = 64
    logging_steps: int = 10
    device: str | None = None
    sensitivity_split: str = "test"  # the split whose queries are issued under every move

    def selected_moves(self) -> list[Move]:
        return [Move.parse(m) for m in self.moves]


# -- summary: notebook 14 --------------------------------------------------------------------------------------


@dataclass
class SummaryParams:
    """The `summary:` section of a params file."""

    table1: str = "table1_silver_main"  # the headline table's name under cfg.paths.tables
    metrics: tuple[str, ...] = ("M@10", "R@10")  # Table 1 columns shown in the headline (M@10 first: primary)


# -- pipeline: run_all.sh --------------------------------------------------------------------------------------


@dataclass
class PipelineParams:
    """`pipeline:` in a params file: fan-out values per notebook, e.g. {09_finetune: {move: [address, broaden]}}."""

    fanout: dict = field(default_factory=dict)


LLM_MODES = ("sync", "batch", "replay", "dry_run")


@dataclass
class LLMSettings:
    """The `llm` params section. Defaults follow the paper (Batch API, JSON answers)."""

    model: str = "gpt-5.4"
    base_url: str | None = None  # None: $OPENAI_BASE_URL, else the OpenAI API
    api_key_env: str = "OPENAI_API_KEY"  # the NAME of the environment variable holding the key
    api_key_required: bool = True  # False for local servers (vLLM, llama.cpp) that take no key
    mode: str = "batch"  # sync | batch | replay | dry_run
    cache_dir: str = "output:cache/llm"  # params paths (Paths.from_params), as are the two below
    replay_dirs: list[str] = field(default_factory=list)  # read-only caches/batch files to replay
    replay_batch_files: list[str] = field(default_factory=list)  # batch input/output JSONL files
    max_requests: int | None = 100_000  # request budget per client (fresh requests, resubmits included)
    max_retries: int = 6  # per synchronous request, on 408/409/429/5xx and connection errors
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    timeout_s: float = 600.0
    concurrency: int = 4  # parallel synchronous requests
    batch_max_requests: int = 50_000  # Batch API limits per input file
    batch_max_bytes: int = 200 * 1024 * 1024
    batch_completion_window: str = "24h"
    batch_poll_interval_s: float = 30.0
    batch_timeout_s: float = 26 * 3600.0
    batch_max_resubmits: int = 2
    est_output_tokens: int = 400  # per request, for the pre-run estimate (reasoning included)
    prices: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> {input, output} USD / 1M tokens
    batch_discount: float = 0.5  # the Batch API halves the per-token price

    def __post_init__(self) -> None:
        if self.mode not in LLM_MODES:
            raise ValueError(f"llm.mode must be one of {LLM_MODES}, got {self.mode!r}")
        if self.batch_max_requests < 1 or self.batch_max_bytes < 1:
            raise ValueError("llm.batch_max_requests and llm.batch_max_bytes must be positive")
