"""The model registry: every retriever of the paper and MiniLM, read from `registry.toml` beside this file.

Why data rather than constants: prefixes, lengths, dtypes, hub ids and release years used to be spelled in several
modules; one table is read by resolution (hub id, packaged source), loading (dtype, trust_remote_code, lengths),
tables (paper names, why a row is empty) and the contamination note (release year, training data).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Literal

from .names import model_key

Kind = Literal["dense", "late-interaction"]
_KINDS = ("dense", "late-interaction")
_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Prefixes:
    """What goes before a query and before a candidate ("" for nothing)."""

    query: str
    document: str


@dataclass(frozen=True)
class RegistryEntry:
    """One retriever as the paper ran it, and where to get it."""

    name: str  # the registry name: the hub id's last component (model_name of the id)
    hub_id: str
    paper_name: str
    kind: Kind
    generic: Prefixes
    pooling: str
    released: int
    training: str
    licence: str
    recommended: Prefixes | None = None
    recommended_prompt_names: tuple[str, str] | None = None
    instruction_template: str | None = None
    takes_move_instruction: bool = False
    fine_tuned_in_paper: bool = False
    max_seq_length: int | None = None
    query_length: int | None = None
    document_length: int | None = None
    dtype: str = "float32"
    trust_remote_code: bool = False
    packaged: str | None = None  # key of PACKAGED_MODELS
    aliases: tuple[str, ...] = field(default=())

    def prefixes(self, style: str = "generic") -> Prefixes:
        """The prefixes of a setup: "generic" (the paper's baselines) or "recommended" (its developers')."""
        if style == "generic":
            return self.generic
        if style == "recommended":
            if self.recommended is None:
                raise ValueError(f"{self.name} has no recommended prefixes; use the generic ones")
            return self.recommended
        raise ValueError(f"prefix style must be 'generic' or 'recommended', got {style!r}")

    def move_query_prefix(self, instruction: str) -> str:
        """The query prefix carrying a move instruction (Appendix C), in the model's own instruction format."""
        if self.instruction_template is None:
            raise ValueError(f"{self.name} takes no instruction")
        return self.instruction_template.replace("{instruction}", instruction)

    def model_kwargs(self) -> dict:
        """Keyword arguments for SentenceTransformer / PyLate that the paper's setup needs (dtype, remote code)."""
        kwargs: dict = {}
        if self.trust_remote_code:
            kwargs["trust_remote_code"] = True
        if self.dtype != "float32":
            kwargs["model_kwargs"] = {"dtype": self.dtype}
        return kwargs


def _pair(value, where: str) -> tuple[str, str]:
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise ValueError(f"{where}: expected [query, document] strings, got {value!r}")
    return value[0], value[1]


def _entry(name: str, raw: dict) -> RegistryEntry:
    """One table of registry.toml, checked: a typo in the data file is an error naming the model and field."""
    where = f"registry.toml [{name}]"
    known = set(RegistryEntry.__dataclass_fields__) - {"name", "generic"} | {"generic_prefixes"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"{where}: unknown fields {sorted(unknown)}")
    if raw.get("kind") not in _KINDS:
        raise ValueError(f"{where}: kind must be one of {_KINDS}, got {raw.get('kind')!r}")
    if raw.get("dtype", "float32") not in _DTYPES:
        raise ValueError(f"{where}: dtype must be one of {_DTYPES}")
    values = dict(raw)
    values["generic"] = Prefixes(*_pair(values.pop("generic_prefixes", None), where + " generic_prefixes"))
    if "recommended" in values:
        values["recommended"] = Prefixes(*_pair(values["recommended"], where + " recommended"))
    if "recommended_prompt_names" in values:
        values["recommended_prompt_names"] = _pair(values["recommended_prompt_names"],
                                                   where + " recommended_prompt_names")
    for length in ("max_seq_length", "query_length", "document_length"):
        if values.get(length) == 0:
            values[length] = None
    values["packaged"] = values.get("packaged") or None
    values["aliases"] = tuple(values.get("aliases", ()))
    try:
        entry = RegistryEntry(name=name, **values)
    except TypeError as exc:  # a required field missing
        raise ValueError(f"{where}: {exc}") from None
    if model_key(entry.hub_id) != model_key(name):
        raise ValueError(f"{where}: the name must be the hub id's last component ({entry.hub_id})")
    return entry


@functools.lru_cache(maxsize=1)
def load_registry() -> dict[str, RegistryEntry]:
    """Registry name -> entry, in the file's order (the paper's order, MiniLM first)."""
    text = resources.files(__package__).joinpath("registry.toml").read_text(encoding="utf-8")
    return {name: _entry(name, raw) for name, raw in tomllib.loads(text).items()}


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, RegistryEntry]:
    index: dict[str, RegistryEntry] = {}
    for entry in load_registry().values():
        for spelling in (entry.name, entry.hub_id, entry.paper_name, *entry.aliases):
            index[spelling.lower()] = entry
    return index


def registry_entry(name_or_id: str) -> RegistryEntry | None:
    """The entry a name, paper name, alias or hub id names (case-insensitive), or None.

    Only whole spellings match ("Qwen/Qwen3-Embedding-0.6B", "qwen3-embedding-0.6b"): "someone/all-MiniLM-L6-v2"
    is someone's model, not this one, and models/all-MiniLM-L6-v2__address is a fine-tuned folder.
    """
    return _index().get(str(name_or_id).strip().rstrip("/").lower())


def registry_names() -> list[str]:
    return list(load_registry())


def encoder_training() -> dict[str, tuple[int, str]]:
    """Registry name -> (release year, training-data note): what ENCODER_TRAINING holds."""
    return {entry.name: (entry.released, entry.training) for entry in load_registry().values()}


def _cell(text: str) -> str:
    # a newline shows as the escape users type; a pipe is escaped, or it would end the table cell (GFM)
    shown = text.replace("\n", "\\n").replace("|", "\\|")
    return "`" + shown + "`" if shown else "(none)"


def registry_markdown() -> str:
    """The registry as the Markdown table docs/models.md shows (tests check the page holds this exact table)."""
    rows = ["| model (paper) | hub id | kind | recommended query / document prefix | move instruction | "
            "lengths, dtype, code | PyPI copy | released | licence |",
            "|---|---|---|---|---|---|---|---|---|"]
    for e in load_registry().values():
        recommended = f"{_cell(e.recommended.query)} / {_cell(e.recommended.document)}" if e.recommended else "(none)"
        instruction = _cell(e.instruction_template) if e.takes_move_instruction else "no"
        setup = [f"max {e.max_seq_length} tokens"] if e.max_seq_length else []
        if e.query_length:
            setup.append(f"query {e.query_length} / document {e.document_length} tokens")
        setup += [e.dtype] + (["trust_remote_code"] if e.trust_remote_code else [])
        tuned = " (fine-tuned in the paper)" if e.fine_tuned_in_paper else ""
        rows.append(f"| {e.paper_name}{tuned} | `{e.hub_id}` | {e.kind} | {recommended} | {instruction} | "
                    f"{', '.join(setup)} | {e.packaged or 'none'} | {e.released} | {e.licence} |")
    return "\n".join(rows)
