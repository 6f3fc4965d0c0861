"""Notebook 06_split_and_pool: de-duplication, temporal split, shared candidate pools, leakage
checks, the benchmark in the release layout (paper §4.2, Appendix B.2, Table 5).

Reads `Paths.pairs`, `Paths.distractors`, `Paths.papers`; writes `Paths.benchmark`,
`Paths.split_report`, the benchmark's dataset card (ratio_utils.dataset.card), tables/table5_split_and_pool and
figures/marker_frequency_per_move.
"""

from __future__ import annotations

import pandas as pd
from IPython.display import Image, Markdown

from .. import dataset
from ..config import Config
from ..dataset.card import write_run_card
from ..models import contamination_note, encoders_used
from ..param_sections import SPLITS, DatasetParams
from ..publish.display import Stage, show_figure
from ..publish.published import set_figure_style, write_table
from ..schema import MOVES


class SplitAndPoolStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = self.cfg.section("dataset", DatasetParams)
        self.built: dataset.BuiltBenchmark | None = None

    def windows(self):
        return self.params.windows()

    def build(self):
        """Build, check for leakage, write the release layout; the counts."""
        self.built = dataset.build(self.cfg)
        return self.built.report()

    def table5(self) -> pd.DataFrame:
        """Pairs per move and split, pool sentences by source, papers per split, beside the paper's."""
        corpus_papers = dataset.corpus_papers_per_split(self.cfg, self.params)
        table5 = dataset.table5(self.built, corpus_papers)
        write_table(
            table5, "table5_split_and_pool", self.cfg, shown=dataset.table5_shown(table5),
            caption="Table 5: temporal split and shared candidate pools (ours beside the paper's)",
            notes=dataset.table5_notes(self.built, corpus_papers) + [f"Split windows ({self.params.split_by}, inclusive): {self.params.splits}."],
            inputs=[self.cfg.paths.pairs, self.cfg.paths.distractors],
        )
        return table5

    def marker_frequency(self) -> Image:
        set_figure_style()
        fig = dataset.marker_frequency_figure(self.built.pairs)
        return show_figure(fig, "marker_frequency_per_move", self.cfg, inputs=[self.cfg.paths.pairs])

    def contamination(self) -> Markdown:
        """Whether the test papers are newer than the pretrained encoders the run uses (the point of a temporal split)."""
        years = self.built.pairs.loc[self.built.pairs["split"] == "test", "year"].dropna() if self.built else pd.Series(dtype=float)
        note = None if years.empty else contamination_note((int(years.min()), int(years.max())), encoders_used(self.cfg))
        return Markdown(note or "Every test paper is newer than the pretrained encoders this run uses.")

    def benchmark_on_disk(self) -> pd.DataFrame:
        """The written benchmark read back with the loader that also reads the official release."""
        bench = dataset.load_benchmark(self.cfg.paths.benchmark)
        return pd.DataFrame(
            [{"split": s, "pool": len(bench.pool(s)), **{m.value: len(bench.queries(m, s)) for m in MOVES}}
             for s in SPLITS]
        )

    def dataset_card(self) -> Markdown:
        """The benchmark directory's dataset card (README.md), so that Hugging Face `datasets` loads it."""
        return Markdown(write_run_card(self.cfg))
