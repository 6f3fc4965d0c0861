"""Notebook 07_silver_filter: the LLM judge and the silver test set (paper §4.3, Appendix E, Table 9).

The work is `ratio_utils.judge.SilverFilter` (reads the benchmark, the prompts, `judge.labels_dir`;
writes the silver pairs, annotation sheets, Table 9); this stage runs its steps in the notebook's
order, rewrites the benchmark's dataset card with the silver configs (ratio_utils.dataset.card) and shows its notes.
"""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from ..config import Config
from ..dataset.card import write_run_card
from ..judge import SilverFilter
from ..publish.display import Stage


class SilverFilterStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.silver = SilverFilter.from_config(cfg)

    def status(self) -> pd.DataFrame:
        return self.silver.status()

    def prompt_table(self) -> pd.DataFrame:
        return self.silver.prompt_table()

    def sample(self) -> pd.DataFrame:
        return self.silver.sample()

    def write_annotation_sheets(self) -> pd.DataFrame:
        return self.silver.write_annotation_sheets()

    def load_labels(self) -> pd.DataFrame:
        return self.silver.load_labels()

    def calibrate(self) -> pd.DataFrame:
        return self.silver.calibrate()

    def filter(self) -> pd.DataFrame:
        return self.silver.filter()

    def table9(self) -> pd.DataFrame:
        return self.silver.table9()

    def anaphora(self) -> pd.DataFrame:
        return self.silver.anaphora()

    def dataset_card(self) -> Markdown:
        """The benchmark directory's dataset card, now with the silver configs."""
        return Markdown(write_run_card(self.cfg))

    def notes(self) -> Markdown:
        """What could not be done here, and why."""
        return Markdown("\n".join(f"- {note}" for note in self.silver.notes))
