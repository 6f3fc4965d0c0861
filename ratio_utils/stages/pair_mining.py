"""Notebook 05_pair_mining: consecutive sentences matched against the lexicon -> pairs and distractors,
every cleaning rule counted (paper §4, Appendix A, Appendix B.1), and Table 4 with its Data columns.

Reads `Paths.sentences` and `Paths.final_lexicon` (notebook 04); writes `Paths.pairs`, `Paths.distractors`,
`Paths.mining_report`, `Paths.lexicon_conflicts` (through `ratio_utils.mining`) and tables/table4.
"""

from __future__ import annotations

import pandas as pd

from .. import mining
from ..config import Config
from ..lexicon import markers as lx
from ..param_sections import MiningParams
from ..publish.display import Stage
from ..publish.published import write_table

TABLE4_DATA_NOTE = ("Data columns: markers that open at least one kept pair of this run's corpus; the paper's Data total is 809 "
                    "on 366.6M S2ORC pairs.")


class PairMiningStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = self.cfg.section("mining", MiningParams)
        self.result: mining.MiningResult | None = None
        self.lexicon_check = None

    def mine(self) -> pd.Series:
        """Mine (local or Dask engine: the same rows) and write the pairs, distractors and report."""
        self.result, self.lexicon_check = mining.mine(self.cfg)
        return pd.Series({"pairs": len(self.result.pairs), "distractors": len(self.result.distractors)})

    def lexicon_findings(self):
        return self.lexicon_check.summary()

    def lexicon_conflict_examples(self, per_issue: int = 3) -> pd.DataFrame:
        return self.lexicon_check.conflicts.groupby("issue").head(per_issue)

    def drop_counts(self) -> pd.DataFrame:
        return mining.drop_count_table(self.result)

    def pairs_per_move(self) -> pd.DataFrame:
        return self.result.pairs["move"].value_counts().rename("pairs").to_frame()

    def distractors_per_category(self) -> pd.DataFrame:
        return self.result.distractors["category"].value_counts().rename("distractors").to_frame()

    def examples(self, per_move: int = 3) -> pd.DataFrame:
        return mining.example_pairs(self.result.example_rows, per_move=per_move, seed=self.cfg.seed)

    def top_markers(self, per_move: int = 8) -> pd.DataFrame:
        return mining.marker_frequencies(self.result.pairs).groupby("move").head(per_move)

    def table4(self) -> pd.DataFrame:
        """Markers by source and move: in the lexicon and in at least one mined pair (tables/table4)."""
        table4 = lx.table4(pd.read_parquet(self.cfg.paths.final_lexicon), self.result.pairs)
        write_table(
            table4, "table4", self.cfg,
            caption="Table 4: discourse markers by source and move (Lexicon: in the lexicon; Data: in at least one mined pair)",
            notes=[TABLE4_DATA_NOTE, *lx.table4_notes(table4),
                   *lx.manual_count_notes(table4, lx.read_released_csv_rows(lx.released_lexicon_path(self.cfg)))],
            inputs=[self.cfg.paths.final_lexicon, self.cfg.paths.pairs],
        )
        return table4
