"""The one normal form of a model name (tests/test_architecture.py lets only this module spell it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def model_name(name_or_path: Any) -> str:
    """The one normal form of a model name: the last path component, as spelled
    ('sentence-transformers/all-MiniLM-L6-v2', '/x/all-MiniLM-L6-v2/' -> 'all-MiniLM-L6-v2').
    Folder names (models/<name>__<move>), table rows and registry look-ups (lower-cased) use it."""
    return Path(str(name_or_path).strip().rstrip("/")).name


def model_key(name: str) -> str:
    """model_name lower-cased: how packaged models and the registry are looked up."""
    return model_name(name).lower()
