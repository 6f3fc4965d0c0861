"""Notebook 07_silver_filter: the LLM judge and the silver test set (paper §4.3, Appendix E, Table 9).

The work is `ratio_utils.judge.SilverFilter` (reads the benchmark, the prompts, `judge.labels_dir`;
writes the silver pairs, annotation sheets, Table 9); this module builds it from the notebook's
parameters and shows its notes.
"""

from __future__ import annotations

from IPython.display import Markdown

from ..config import load_config
from ..judge import SilverFilter


def silver_filter(params_file: str, overrides: dict | None = None) -> SilverFilter:
    return SilverFilter.from_config(load_config(params_file, overrides))


def notes(silver: SilverFilter) -> Markdown:
    """What could not be done here, and why."""
    return Markdown("\n".join(f"- {note}" for note in silver.notes))
