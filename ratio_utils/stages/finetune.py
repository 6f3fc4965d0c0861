"""Notebook 09_finetune: one retriever per move fine-tuned (paper §5.1, Appendix C), Table 6 and the
tuned-vs-baseline table with paired intervals and permutation p-values.

Reads what `ratio_utils.train` writes: models/_runs/<base>__<move>/<config>-<key>/result.json (every
configuration tried) and models/<base>__<move>/results.json (the selected model, its per-query scores);
writes tables/table6_finetune_configs and tables/finetune_tuned_vs_baseline (`ratio_utils.train.tables`),
then this move's tuned run files (`ratio_utils.train.tuned_runs.record_tuned_runs`).
"""

from __future__ import annotations

import pandas as pd

from .. import train
from ..config import Config
from ..publish.display import Stage
from ..publish.run_records import record_reused
from ..train import colbert as train_colbert
from ..train.tables import write_table6, write_tuned_vs_baseline
from ..train.tuned_runs import record_tuned_runs


class FinetuneStage(Stage):
    """What notebook 09 shows, one call per cell: the plan, the training, its tables."""

    def __init__(self, cfg: Config, move: str = "all"):
        super().__init__(cfg)
        self.params = train.load_train_params(self.cfg)
        self.move = move

    def plan(self) -> pd.DataFrame:
        return train.finetune_plan(self.cfg, self.move, self.params)

    def train(self) -> pd.DataFrame:
        """Fine-tune the move(s); one row per move saying what was trained now and what was reused.

        Configurations finished by an earlier run with the same run key are read from disk, not trained again;
        what was reused is recorded for the summary's time table (ratio_utils.publish.run_records)."""
        results = train.finetune(self.cfg, self.move, self.params)
        for result in results:
            for line in result.reused():
                record_reused(line)
        return train.finetune_summary(results)

    def table6(self) -> pd.DataFrame:
        return write_table6(self.cfg, self.params)

    def tuned_vs_baseline(self) -> pd.DataFrame:
        return write_tuned_vs_baseline(self.cfg, self.params)

    def colbert(self) -> pd.DataFrame | str:
        """The tuned late-interaction model (its own table, with its caveats), or why this move has none."""
        results = train_colbert.train_colbert(self.cfg, self.move, self.params)
        if not results:
            return train_colbert.skipped_reason(self.params, self.move)
        for result in results:
            if not result.trained_now:
                record_reused(f"{result.move}: the tuned ColBERT and its test scores "
                              f"({self.cfg.paths.relative(result.model_dir)})")
        train_colbert.write_colbert_table(self.cfg, self.params)
        return train_colbert.colbert_summary(results)

    def paper_tables(self):
        """This move's tuned run files, then Tables 1, 7, 8 re-assembled from the run files of 08's and 09's
        systems and written; a pointer to them is shown (notebook 10 shows the tables, once every row can be
        filled)."""
        from ..reporting import paper_tables

        record_tuned_runs(self.cfg, self.move)
        tables = paper_tables.assemble_tables(self.cfg, through=paper_tables.TUNED_STAGE)  # 08's rows and 09's
        return tables.pointer(self.cfg, f"with the tuned rows of {self.move}")


