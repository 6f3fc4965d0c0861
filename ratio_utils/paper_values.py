"""The paper's reference values, read from their one home, `ratio_utils/paper_values.toml` (package data): every
number or phrase of the paper that a table or the summary shows beside this run's, each with `where`, the part of the
paper that states it. Read by lexicon/markers, dataset/tables, judge/silver, evaluation/rerank_promotion and
reporting/ (claims, summary_headline).

Reads:  ratio_utils/paper_values.toml (once per process).
Writes: nothing.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib.resources import files
from typing import Any

VALUES_FILE = "paper_values.toml"


@cache
def _all() -> dict[str, Any]:
    return tomllib.loads(files("ratio_utils").joinpath(VALUES_FILE).read_text(encoding="utf-8"))


def paper_section(name: str) -> dict[str, Any]:
    """One section of the values file (`claims.rerank` names a nested one), with its `where`; a copy, so a caller's
    edit never reaches another's. An unknown name is a KeyError naming the file and the section."""
    node: Any = _all()
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{VALUES_FILE}: no section [{name}]")
        node = node[part]
    return {key: (dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value)
            for key, value in node.items()}


def where(name: str) -> str:
    """The part of the paper that states the values of a section ('§5.2, Appendix D')."""
    return paper_section(name)["where"]
