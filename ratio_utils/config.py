"""Run configuration: one params file (params/*.yaml) plus overrides from a notebook or the CLI.

Every notebook's `parameters` cell holds `params_file` and `overrides`; `load_config` turns them
into a `Config` whose `paths` say where each stage reads and writes. Each stage keeps its own
typed parameters (a dataclass with the paper's defaults) and reads them with `Config.section`,
so a params file only lists what differs from the defaults.

Checked once, at load: every section of a params file must be registered in `PARAMS_SECTIONS`
(section name -> its dataclass in `ratio_utils.param_sections`) and every key must be a field of that dataclass,
so a typo in `train:` fails in `load_config` (notebook 00), naming the file and the key. A new stage
defines its dataclass in `ratio_utils.param_sections` and registers it with one line in `PARAMS_SECTIONS`
(`ratio_utils.param_sections` is light: loading a config imports no stage, no torch).

Paths in a params file follow one rule (`Paths.from_params`): relative to the checkout (outside one: the working
directory; a file the package ships, such as `params/finetune/*.yaml` or `prompts/judge`, falls back to the package's
copy), except `shared:<path>` (under the shared folder, e.g. `lexicon.released_csv`) and `output:<path>` (under the
output root, e.g. `llm.cache_dir`, what a run writes); an absolute path stays as it is.

The package and a checkout: the files a command reads (params/, prompts/, data/lexicon/, the corpus manifest) ship
inside the package under `ratio_utils/resources/`, in the checkout's own layout, read with importlib.resources
(`packaged`); in a checkout those entries are links to the one copy at the top of the checkout. A checkout
(notebooks/, results/, data/) is found only where a command needs one, by `find_checkout` (`--root`, else the working
directory, else the source tree of an editable install), never from where a regular install put the package.

Output root: `params/default.yaml` says `output_root: .` (the top-level data/, tables/, figures/);
every other params file writes under `outputs/<name>/` unless it sets `output_root` itself.
`output_root` and `name` are never inherited through `extends`, so two runs never mix files.
"""

from __future__ import annotations

import copy
import importlib.resources
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .param_sections import (
    AnalysisParams,
    CorpusParams,
    DatasetParams,
    HumanEvalParams,
    JudgeParams,
    LexiconParams,
    LLMSettings,
    MiningParams,
    PipelineParams,
    RerankParams,
    RetrievalParams,
    SummaryParams,
    TrainParams,
    UnifiedParams,
    check_seed,
    reject_unknown_keys,
)

# The folder above the package: this source tree when the package is imported from a checkout (tests, an editable
# install), site-packages once installed. Read only by `find_checkout`, as its last candidate; never a base for paths.
REPO_ROOT = Path(__file__).resolve().parents[1]
# the params file used when none is given (a checkout's, else the package's)
DEFAULT_PARAMS_NAME = "params/default.yaml"
# under the checkout (or the working directory): output roots of every params file but default.yaml
OUTPUTS_DIR_NAME = "outputs"

# Prefixes of params paths (Paths.from_params): under the shared folder, under the output root.
SHARED_PREFIX, OUTPUT_PREFIX = "shared:", "output:"

# Params section -> the dataclass that reads it (ratio_utils.param_sections). Registering a new stage's section is one
# line here.
PARAMS_SECTIONS: dict[str, type] = {
    "corpus": CorpusParams,
    "lexicon": LexiconParams,
    "mining": MiningParams,
    "dataset": DatasetParams,
    "llm": LLMSettings,
    "judge": JudgeParams,
    "retrieval": RetrievalParams,
    "train": TrainParams,
    "analysis": AnalysisParams,
    "rerank": RerankParams,
    "human_eval": HumanEvalParams,
    "unified": UnifiedParams,
    "summary": SummaryParams,
    "pipeline": PipelineParams,
}

T = TypeVar("T")

# What marks a folder as a ratio checkout: the notebooks, the params and the library's sources side by side.
CHECKOUT_MARKERS = ("notebooks", "params/default.yaml", "ratio_utils/__init__.py")


class NotACheckoutError(RuntimeError):
    """A command needs a ratio checkout (notebooks/, results/, data/) and none was found; the message is one line."""


def _is_checkout(folder: Path) -> bool:
    return all((folder / marker).exists() for marker in CHECKOUT_MARKERS)


def find_checkout(root: "str | os.PathLike | None" = None, *, required: bool = True) -> Path | None:
    """The ratio checkout a command works in: `root` (a `--root DIR`) when given, else the working directory or the
    nearest folder above it that is one, else the source tree the package is imported from (an editable install).

    root: the folder named by the user; it must be a checkout itself.
    required: raise `NotACheckoutError` (one line: "not in a ratio checkout: pass --root DIR") when none is found;
        False returns None instead (a caller with a fallback outside a checkout).
    """
    if root is not None:
        folder = Path(root).expanduser().resolve()
        if _is_checkout(folder):
            return folder
        if not required:
            return None
        raise NotACheckoutError(f"not a ratio checkout: {folder} (it has no {', '.join(CHECKOUT_MARKERS)})")
    here = Path.cwd().resolve()
    for folder in (here, *here.parents, REPO_ROOT):
        if _is_checkout(folder):
            return folder
    if not required:
        return None
    raise NotACheckoutError(f"not in a ratio checkout ({here}): pass --root DIR")


def packaged(relative: "str | os.PathLike") -> Path:
    """The package's copy of a checkout file (`params/paper.yaml`, `prompts/judge`, `data/lexicon/templates.yaml`):
    ratio_utils/resources/<relative>, read through importlib.resources so it is found wherever the package is
    installed. The path may not exist: the package ships only what pyproject's package-data names."""
    return Path(str(importlib.resources.files("ratio_utils").joinpath("resources", *Path(relative).parts)))


def packaged_params() -> list[str]:
    """The params files the package ships, by name (`default`, `paper`, ...), for error messages and `--help`."""
    return sorted(path.stem for path in packaged("params").glob("*.yaml"))


def locate(path: "str | os.PathLike", checkout: Path | None = None, *, what: str = "file") -> Path:
    """A user's path: absolute as it is; relative: under the working directory, else under `checkout` (default: the
    checkout found from the working directory), else the package's copy (`packaged`). A file found nowhere raises
    FileNotFoundError naming the places looked in."""
    path = Path(path).expanduser()
    if path.is_absolute():
        if not path.exists():
            raise FileNotFoundError(f"{what} not found: {path}")
        return path
    checkout = checkout if checkout is not None else find_checkout(required=False)
    candidates = [Path.cwd() / path, *([checkout / path] if checkout is not None else []), packaged(path)]
    for candidate in candidates:
        if candidate.exists():
            return Path(os.path.abspath(candidate))  # abspath, not resolve: a packaged link keeps its checkout name
    raise FileNotFoundError(f"{what} not found: {path} (looked in {', '.join(str(c.parent) for c in candidates)})")


@dataclass(frozen=True)
class Paths:
    """Where every stage's inputs and outputs live; all derived from two roots."""

    root: Path  # outputs: data/, tables/, figures/, models/, cache/
    shared: Path  # read-only inputs (../shared): corpora, lexicon, paper
    # what relative params paths resolve against: the checkout, or outside one the working directory (load_config)
    base: Path | None = None

    @property
    def params_base(self) -> Path:
        """The folder relative params paths are under: `base`, else the checkout, else the working directory."""
        return self.base or find_checkout(required=False) or Path.cwd()

    @property
    def raw(self) -> Path:
        return self.root / "data" / "raw"

    @property
    def interim(self) -> Path:
        return self.root / "data" / "interim"

    @property
    def processed(self) -> Path:
        return self.root / "data" / "processed"

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def retrieval_runs(self) -> Path:
        """Run files of retrievers: retrieval_runs/<system>/<move>/<split>.parquet (+ .trec)."""
        return self.root / "data" / "retrieval_runs"

    # -- files that cross stage boundaries (docs/architecture.md) --
    @property
    def papers(self) -> Path:
        return self.interim / "papers.parquet"

    @property
    def sentences(self) -> Path:
        return self.interim / "sentences.parquet"

    @property
    def corpus_report(self) -> Path:
        return self.interim / "corpus_report.json"

    @property
    def curated_lexicon(self) -> Path:
        """The released lexicon validated and curated (stage 01 writes it, nothing else does): what 02 and 03
        read and 04 extends, so rerunning 02 or 03 after 04 reads the same lexicon as in the first run."""
        return self.interim / "lexicon_curated.parquet"

    @property
    def final_lexicon(self) -> Path:
        """The curated lexicon with 04's pattern markers (stage 04 writes it): what mining (05) reads."""
        return self.interim / "lexicon.parquet"

    @property
    def pairs(self) -> Path:
        return self.interim / "pairs.parquet"

    @property
    def distractors(self) -> Path:
        return self.interim / "distractors.parquet"

    @property
    def mining_report(self) -> Path:
        return self.interim / "mining_report.json"

    @property
    def benchmark(self) -> Path:
        """The benchmark in the official release layout (ratio_utils.dataset)."""
        return self.processed / "ratio"

    # -- 10_llm_rerank (ratio_utils.stages.llm_rerank) --
    @property
    def rerank(self) -> Path:
        """Notebook 10's own outputs (the report); its run files go under retrieval_runs."""
        return self.interim / "rerank"

    @property
    def rerank_report(self) -> Path:
        """Counts of the reranking: sent, not sent, repairs, misses, the answering model."""
        return self.rerank / "report.json"
    # -- notebook 13 (unified retriever), inspiration search and exports (ratio_utils.apps.search, .export) --
    def unified_runs_dir(self, base: str) -> Path:
        """Every configuration tried for notebook 13's unified retriever: models/unified/_runs/<base>/, notebook 13's
        own folder, apart from the models/_runs/ that notebook 09 reads (its published model stays
        models/<base>__unified/)."""
        from .models import model_name  # imported on use: loading a config stays light (no model code)

        return self.models / "unified" / "_runs" / model_name(base)

    @property
    def search_indexes(self) -> Path:
        """Inspiration-search indexes: search_index/<model folder name>/ (ratio_utils.apps.search)."""
        return self.root / "data" / "search_index"

    @property
    def explorer_judgments(self) -> Path:
        """The inspiration explorer's marks, useful / not useful per hit (ratio_utils.apps.explorer)."""
        return self.root / "data" / "explorer" / "judgments.jsonl"

    @property
    def exports(self) -> Path:
        """The benchmark in BEIR / TREC formats (ratio_utils.dataset.export): exports/<format>/<move>/."""
        return self.processed / "exports"

    # -- human inspiration study (notebook 12, ratio_utils.human_eval) --
    @property
    def human_eval(self) -> Path:
        return self.root / "data" / "human_eval"

    @property
    def human_eval_packets(self) -> Path:
        """What annotators get: study.json, queries.jsonl, assignments.json (no system names)."""
        return self.human_eval / "packets"

    @property
    def human_eval_key(self) -> Path:
        """Which list is which system, per query: data/human_eval_key/, outside the packets' parent, so that
        handing annotators data/human_eval/ (or a checkout's copy of it) cannot unblind them."""
        return self.root / "data" / "human_eval_key" / "unblinding_key.jsonl"

    @property
    def human_eval_report(self) -> Path:
        return self.human_eval / "packets_report.json"

    @property
    def human_eval_runs(self) -> Path:
        """Run files notebook 12 ranks itself where no run of notebook 08 or 09 has the same key
        (retrieval.runs.get_or_compute): human_eval_runs/<system>/<move>/<split>.parquet (+ sidecar)."""
        return self.root / "data" / "human_eval_runs"
    # -- files of one stage (each read or written only through these) --
    @property
    def downloads(self) -> Path:
        """Corpora and lexicon fetched when ../shared lacks them: data/raw/downloads/<source>/."""
        return self.raw / "downloads"

    @property
    def quarantine(self) -> Path:
        """Bad corpus records, one JSONL per reason (stage 00)."""
        return self.interim / "quarantine"

    @property
    def lexicon_review(self) -> Path:
        """Reviewers' sheets, decisions and span_status.csv (stage 01)."""
        return self.interim / "lexicon_review"

    @property
    def span_status(self) -> Path:
        return self.lexicon_review / "span_status.csv"

    @property
    def marker_extensions(self) -> Path:
        """Extensions of the extendable connectives found in the corpus (stage 02)."""
        return self.interim / "marker_extensions.parquet"

    def llm_markers(self, name: str) -> Path:
        """LLM-generated markers (stage 03): name is 'proposed' or 'labels'."""
        return self.interim / f"llm_markers_{name}.parquet"

    @property
    def lexicon_conflicts(self) -> Path:
        """What the matcher had to decide about the lexicon (stage 05)."""
        return self.interim / "lexicon_conflicts.csv"

    @property
    def split_report(self) -> Path:
        """Split, pool and leakage counts of the benchmark build (stage 06)."""
        return self.processed / "split_report.json"

    @property
    def llm_cache(self) -> Path:
        """Recorded LLM responses shipped in the shared folder (replayed without a key)."""
        return self.shared / "llm_cache"

    @property
    def embedding_cache(self) -> Path:
        """Pool embeddings by (model fingerprint, prefix, pool checksum) (stages 08, 09)."""
        return self.cache / "embeddings"

    @property
    def bootstrap_cache(self) -> Path:
        """Bootstrap intervals already computed, keyed by their per-query values (stages 08-11)."""
        return self.cache / "bootstrap_cells.json"

    @property
    def s2orc_selected_papers(self) -> Path:
        """Metadata of the S2ORC papers the corpus rule selects, streamed to parquet (stage 00)."""
        return self.interim / "s2orc_papers_selected.parquet"

    def tuned_model_dir(self, base: str, move: Any, kind: str = "dense") -> Path:
        """A fine-tuned retriever of notebook 09: models/<base>__<move>/ (dense) or
        models/<base>-colbert__<move>/ (colbert); its results.json is written last."""
        from .models import model_name  # imported on use: loading a config stays light (no model code)

        if kind not in ("dense", "colbert"):
            raise ValueError(f"kind must be 'dense' or 'colbert', not {kind!r}")
        suffix = "-colbert" if kind == "colbert" else ""
        return self.models / f"{model_name(base)}{suffix}__{getattr(move, 'value', move)}"

    def tuned_runs_dir(self, base: str, move: Any) -> Path:
        """Every configuration tried while fine-tuning one move (Table 6): models/_runs/<base>__<move>/."""
        return self.models / "_runs" / self.tuned_model_dir(base, move).name

    @property
    def runs(self) -> Path:
        """Executed notebooks of each pipeline run: runs/<run-id>/."""
        return self.root / "runs"

    @property
    def executed_notebooks(self) -> Path:
        """Executed notebooks without machine paths; for params/default.yaml (root: the repository) the
        notebooks/executed/ kept in git, for any other params file under its own output root."""
        return self.root / "notebooks" / "executed"

    def from_params(self, value: "str | os.PathLike") -> Path:
        """A path written in a params file, by one rule: relative to `params_base` (the checkout, or the working
        directory), falling back to the package's copy of a file it ships (`prompts/judge` outside a checkout),
        except `shared:<path>` (under the shared folder) and `output:<path>` (under the output root);
        an absolute path stays as it is."""
        text = os.fspath(value)
        for prefix, base in ((SHARED_PREFIX, self.shared), (OUTPUT_PREFIX, self.root)):
            if text.startswith(prefix):
                return base / text[len(prefix):]
        path = Path(text).expanduser()
        if path.is_absolute():
            return path
        here = self.params_base / path
        return here if here.exists() or not packaged(path).exists() else packaged(path)

    def relative(self, path: "str | os.PathLike") -> str:
        """A path as committed outputs record it: relative to the output root, else to the checkout (or working
        directory), else to the package's files, else `shared:<path>` under the shared folder; never an absolute
        path of this machine."""
        path = Path(path)
        if not path.is_absolute():
            return str(path)
        for base, prefix in ((self.root, ""), (self.params_base, ""), (packaged("."), ""), (self.shared, "shared:")):
            try:
                return prefix + str(path.resolve().relative_to(base.resolve()))
            except ValueError:
                continue
        return path.name  # outside every known root: the name only

    # -- stage 11 (ratio_utils.stages.analyses) --
    @property
    def analysis_runs(self) -> Path:
        """Runs of the Appendix F analyses: analysis_runs/<pool>/<system>/<move>/<split>.parquet (+ sidecar)."""
        return self.root / "data" / "analysis_runs"
    # -- stage 14 (summary) --
    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def summary_report(self) -> Path:
        """The Markdown export of notebook 14 (ratio_utils.stages.summary)."""
        return self.reports / "summary.md"

    # -- stage 00, partitioned build (corpus.papers_per_part): one report per part, the resume record --
    @property
    def corpus_parts(self) -> Path:
        return self.interim / "corpus_parts"

    # -- stage 05 over sentence parts: one report per mined part (its key and counts), the resume record --
    @property
    def mining_parts(self) -> Path:
        return self.interim / "mining_parts"


@dataclass
class Config:
    name: str
    paths: Paths
    seed: int = 13
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: Path | None = None

    def section(self, name: str, cls: type[T] | None = None) -> Any:
        """The settings of one stage: a dict, or an instance of `cls` (a dataclass) built from it.

        Unknown keys are an error, so a typo in a params file cannot silently fall back to a default.
        """
        values = copy.deepcopy(self.sections.get(name, {}))
        if cls is None:
            return values
        reject_unknown_keys(values, cls, f"params section {name!r} ({self.source})")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for provenance records (paths relative to the repository: no machine paths)."""
        return {
            "name": self.name,
            "seed": self.seed,
            "root": _base_relative(self.paths.root, self.paths.params_base),
            "shared": _base_relative(self.paths.shared, self.paths.params_base),
            "params_file": _base_relative(self.source, self.paths.params_base) if self.source else None,
            "sections": copy.deepcopy(self.sections),
        }


def deep_merge(base: dict, update: dict) -> dict:
    """Merge `update` into a copy of `base`; a dotted key 'a.b' sets base['a']['b']."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        if "." in key:
            head, rest = key.split(".", 1)
            value, key = {rest: value}, head
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _load_yaml(path: Path) -> dict:
    if not path.exists():
        raise FileNotFoundError(f"params file not found: {path}")
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a params file must be a mapping, got {type(data).__name__}")
    # `extends: other.yaml` lets smoke/paper params state only what differs from a base file; the
    # name and the output root stay the file's own, so two params files never share an output root.
    parent = data.pop("extends", None)
    if parent:
        inherited = _load_yaml((path.parent / parent).resolve())
        inherited.pop("name", None)
        inherited.pop("output_root", None)
        data = deep_merge(inherited, data)
    return data


def _base_relative(path: Path, base: Path) -> str:
    """Relative to the checkout (`.`, `outputs/smoke`, `../shared`); a packaged params file as `params/<name>`; a
    folder elsewhere by its name only."""
    try:
        return str(Path(path).relative_to(packaged(".")))
    except ValueError:
        relative = os.path.relpath(path, base)
    return Path(path).name if relative.startswith(os.path.join(os.pardir, os.pardir)) else relative


def validate_sections(sections: dict[str, Any], source: Path | None) -> None:
    """Every section registered, every key a field of its dataclass; the error names file and key."""
    unknown = sorted(set(sections) - set(PARAMS_SECTIONS))
    if unknown:
        raise ValueError(
            f"{source}: unknown params section(s) {unknown}; known: {sorted(PARAMS_SECTIONS)} "
            "(a new stage registers its section in ratio_utils.config.PARAMS_SECTIONS)"
        )
    for name, values in sections.items():
        reject_unknown_keys(values, PARAMS_SECTIONS[name], f"{source}: params section {name!r}")


def _resolve(path_value: str | os.PathLike, base: Path) -> Path:
    path = Path(os.path.expanduser(str(path_value)))
    return path if path.is_absolute() else (base / path).resolve()


def load_config(params_file: str | os.PathLike | None = None, overrides: dict | str | None = None, *,
                root: str | os.PathLike | None = None) -> Config:
    """Load a params file and apply overrides.

    params_file: a path (relative: under the working directory, else the checkout, else the package's copy:
        `locate`), or the name of a params file the package ships (`paper` for params/paper.yaml); default: the
        checkout's params/default.yaml, outside a checkout the package's.
    overrides: a dict of sections, or its JSON/YAML text (what `papermill -p overrides '{...}'` passes).
    root: the checkout (`--root DIR`); default: the one `find_checkout` finds, if any.

    Relative paths in the file are relative to the checkout, or outside one to the working directory (`Paths.base`).
    Without `output_root`, outputs go to outputs/<name>/ there. `RATIO_OUTPUT_ROOT` and `RATIO_SHARED` in the
    environment take precedence over the file (tests and CI use them to write to a temporary directory and to point
    at a copy of shared/). Every section is validated here (`validate_sections`).
    """
    checkout = find_checkout(root, required=root is not None)
    base = checkout or Path.cwd().resolve()
    if (params_file and not Path(params_file).suffix and Path(params_file).name == os.fspath(params_file)
            and not Path(params_file).exists()):
        params_file = f"params/{params_file}.yaml"  # a shipped params file by name: `ratio-train --params paper`
    if params_file:
        source = locate(params_file, checkout, what="params file")
    else:
        source = checkout / DEFAULT_PARAMS_NAME if checkout else packaged(DEFAULT_PARAMS_NAME)
    if isinstance(overrides, str):
        overrides = yaml.safe_load(overrides)
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError(f"overrides must be a mapping of params sections, got {overrides!r}")
    data = deep_merge(_load_yaml(source), overrides or {})
    name = str(data.pop("name", source.stem))
    seed = check_seed(data.pop("seed", 13), str(source))  # `seed: abc` names the file
    root_dir = _resolve(
        os.environ.get("RATIO_OUTPUT_ROOT") or data.pop("output_root", None) or Path(OUTPUTS_DIR_NAME) / name, base
    )
    shared = _resolve(os.environ.get("RATIO_SHARED") or data.pop("shared_dir", "../shared"), base)
    data.pop("output_root", None)
    data.pop("shared_dir", None)
    bad = [key for key, value in data.items() if not isinstance(value, dict)]
    if bad:
        raise ValueError(f"{source}: top-level keys {bad} must be sections (mappings)")
    validate_sections(data, source)
    return Config(name=name, paths=Paths(root=root_dir, shared=shared, base=base), seed=seed, sections=data,
                  source=source)


def __getattr__(name: str) -> Path:
    """`OUTPUTS_DIR` and `DEFAULT_PARAMS`, computed when read (where they are depends on the working directory)."""
    if name == "OUTPUTS_DIR":
        return (find_checkout(required=False) or Path.cwd().resolve()) / OUTPUTS_DIR_NAME
    if name == "DEFAULT_PARAMS":
        checkout = find_checkout(required=False)
        return checkout / DEFAULT_PARAMS_NAME if checkout else packaged(DEFAULT_PARAMS_NAME)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
