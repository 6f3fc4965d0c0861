"""Run configuration: one params file (params/*.yaml) plus overrides from a notebook or the CLI.

Every notebook's `parameters` cell holds `params_file` and `overrides`; `load_config` turns them
into a `Config` whose `paths` say where each stage reads and writes. Each stage keeps its own
typed parameters (a dataclass with the paper's defaults) and reads them with `Config.section`,
so a params file only lists what differs from the defaults.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PARAMS = REPO_ROOT / "params" / "default.yaml"

T = TypeVar("T")


@dataclass(frozen=True)
class Paths:
    """Where every stage's inputs and outputs live; all derived from two roots."""

    root: Path  # outputs: data/, tables/, figures/, models/, cache/
    shared: Path  # read-only inputs (../shared): corpora, lexicon, paper

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
    def lexicon(self) -> Path:
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

    # -- stage 00, partitioned build (corpus.papers_per_part): one report per part, the resume record --
    @property
    def corpus_parts(self) -> Path:
        return self.interim / "corpus_parts"


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
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"params section {name!r} ({self.source}) has unknown key(s) {unknown}; "
                f"{cls.__name__} accepts {sorted(known)}"
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for provenance records (paths as strings)."""
        return {
            "name": self.name,
            "seed": self.seed,
            "root": str(self.paths.root),
            "shared": str(self.paths.shared),
            "params_file": str(self.source) if self.source else None,
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
    # `extends: other.yaml` lets smoke/paper params state only what differs from a base file.
    parent = data.pop("extends", None)
    if parent:
        data = deep_merge(_load_yaml((path.parent / parent).resolve()), data)
    return data


def _resolve(path_value: str | os.PathLike, base: Path) -> Path:
    path = Path(os.path.expanduser(str(path_value)))
    return path if path.is_absolute() else (base / path).resolve()


def load_config(params_file: str | os.PathLike | None = None, overrides: dict | None = None) -> Config:
    """Load a params file (default params/default.yaml) and apply overrides.

    Relative paths in the file are relative to the repository root. `RATIO_OUTPUT_ROOT` and
    `RATIO_SHARED` in the environment take precedence over the file (tests and CI use them to
    write to a temporary directory and to point at a copy of shared/).
    """
    source = _resolve(params_file, REPO_ROOT) if params_file else DEFAULT_PARAMS
    data = deep_merge(_load_yaml(source), overrides or {})
    name = str(data.pop("name", source.stem))
    seed = int(data.pop("seed", 13))
    root = _resolve(os.environ.get("RATIO_OUTPUT_ROOT") or data.pop("output_root", "."), REPO_ROOT)
    shared = _resolve(os.environ.get("RATIO_SHARED") or data.pop("shared_dir", "../shared"), REPO_ROOT)
    data.pop("output_root", None)
    data.pop("shared_dir", None)
    bad = [key for key, value in data.items() if not isinstance(value, dict)]
    if bad:
        raise ValueError(f"{source}: top-level keys {bad} must be sections (mappings)")
    return Config(name=name, paths=Paths(root=root, shared=shared), seed=seed, sections=data, source=source)
