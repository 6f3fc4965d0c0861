"""Notebook 05_pair_mining: consecutive sentences matched against the lexicon -> pairs and distractors,
every cleaning rule counted (paper §4, Appendix A, Appendix B.1), and Table 4 with its Data columns.

Reads `Paths.sentences` (schema.SENTENCE_COLUMNS; a file or a folder of parts) and `Paths.final_lexicon`
(notebook 04); writes `Paths.pairs`, `Paths.distractors` (a file, or a folder of parts for a partitioned sentence
table, with a report per part in `Paths.mining_parts`, the resume record), `Paths.mining_report` (every rule
counted), `Paths.lexicon_conflicts` and tables/table4. The mining is `ratio_utils.mining`: `mining/matcher` (the
lexicon as a matcher), `mining/parallel` (one table, shards on Dask, or part by part; the mined tables),
`mining/extraction` (the rules, the report, the displays).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .. import mining
from ..config import Config
from ..io import atomic_path, sha256_file, write_json_atomic
from ..lexicon import markers as lx
from ..param_sections import MiningParams
from ..publish.display import Stage
from ..publish.published import write_table

TABLE4_DATA_NOTE = ("Data columns: markers that open at least one kept pair of this run's corpus; the paper's Data "
                    "total is 809 on 366.6M S2ORC pairs.")


class PairMiningStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = self.cfg.section("mining", MiningParams)
        self.result: mining.MiningResult | None = None
        self.lexicon_check = None

    def mine(self, client=None) -> pd.Series:
        """Mine (local or Dask engine: the same rows) and write the pairs, distractors and report.

        A partitioned sentence table (a folder of parts, from `corpus.papers_per_part`) is mined part by part into
        pairs/distractors parts (`mining.mine_parts`); the result then holds, of the rows, only what this notebook
        shows (`mining.mined_parts_result`). The parts are the output."""
        paths = self.cfg.paths
        for path in (paths.sentences, paths.final_lexicon):
            if not Path(path).exists():
                raise FileNotFoundError(f"{path} not found: run the earlier notebooks (00 corpus, 01-04 lexicon) "
                                        "first")
        matcher, self.lexicon_check = mining.build_matcher(pd.read_parquet(paths.final_lexicon),
                                                           self.params.extension_max_words, paths.final_lexicon)
        parts = None
        if Path(paths.sentences).is_dir():
            mined = mining.mine_parts(paths.sentences, paths.pairs, paths.distractors, paths.mining_parts, matcher,
                                      self.params, sha256_file(paths.final_lexicon), client)
            self.result, parts = (mining.mined_parts_result(mined, paths.pairs, paths.distractors, self.cfg.seed),
                                  mined.summary())
        else:
            self.result = mining.mine_table(paths.sentences, matcher, self.params, client)
            mining.write_mined(self.result, paths.pairs, paths.distractors)
        inputs = {"sentences": str(paths.sentences), "lexicon": str(paths.final_lexicon)}
        write_json_atomic(paths.mining_report, mining.mining_report(self.result, self.lexicon_check.summary(),
                                                                    self.params, inputs, parts))
        with atomic_path(paths.lexicon_conflicts) as tmp:
            self.lexicon_check.conflicts.to_csv(tmp, index=False)
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
            caption="Table 4: discourse markers by source and move (Lexicon: in the lexicon; Data: in at least one "
                    "mined pair)",
            notes=[TABLE4_DATA_NOTE, *lx.table4_notes(table4),
                   *lx.manual_count_notes(table4, lx.read_released_csv_rows(lx.released_lexicon_path(self.cfg)))],
            inputs=[self.cfg.paths.final_lexicon, self.cfg.paths.pairs],
        )
        return table4
