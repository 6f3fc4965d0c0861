"""Notebook 06_split_and_pool: de-duplication, temporal split, shared candidate pools, leakage
checks, the benchmark in the release layout (paper §4.2, Appendix B.2, Table 5).

Reads `Paths.pairs`, `Paths.distractors` (notebook 05; a file or a folder of parts), `Paths.papers`; writes
`Paths.benchmark` (the release layout), `Paths.split_report`, the benchmark's dataset card (ratio_utils.dataset.card),
tables/table5_split_and_pool and figures/marker_frequency_per_move. Past `dataset.max_in_memory_bytes` of mined rows
the benchmark is built bucket by bucket (`dataset/bounded`, the same benchmark); below it in one process
(`dataset/in_memory`, then `dataset/release`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from IPython.display import Image, Markdown

from .. import dataset
from ..config import Config
from ..dataset.card import write_run_card
from ..io import write_json_atomic
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

    def build(self) -> dict:
        """Build, check for leakage, write the release layout and the split report; the counts."""
        paths = self.cfg.paths
        for path in (paths.pairs, paths.distractors):
            if not Path(path).exists():
                raise FileNotFoundError(f"{path} not found: run notebook 05 (pair mining) first")
        if dataset.fits_in_memory(paths.pairs, paths.distractors, self.params):
            self.built = dataset.build_from_tables(paths.pairs, paths.distractors, self.params)
            dataset.write_release(self.built, paths.benchmark)
        else:  # bucket by bucket (the same benchmark)
            self.built = dataset.build_bounded(paths.pairs, paths.distractors, self.params, paths.benchmark)
        write_json_atomic(paths.split_report, dataset.split_report(self.built, self.params))
        return self.built.report()

    def table5(self) -> pd.DataFrame:
        """Pairs per move and split, pool sentences by source, papers per split, beside the paper's."""
        corpus_papers = dataset.corpus_papers_per_split(self.cfg, self.params)
        table5 = dataset.table5(self.built, corpus_papers)
        write_table(
            table5, "table5_split_and_pool", self.cfg, shown=dataset.table5_shown(table5),
            caption="Table 5: temporal split and shared candidate pools (ours beside the paper's)",
            notes=dataset.table5_notes(self.built, corpus_papers)
            + [f"Split windows ({self.params.split_by}, inclusive): {self.params.splits}."],
            inputs=[self.cfg.paths.pairs, self.cfg.paths.distractors],
        )
        return table5

    def marker_frequency(self) -> Image:
        set_figure_style()
        fig = dataset.marker_frequency_figure(self.built.pairs)
        return show_figure(fig, "marker_frequency_per_move", self.cfg, inputs=[self.cfg.paths.pairs])

    def contamination(self) -> Markdown:
        """Whether the test papers are newer than the pretrained encoders the run uses (the point of a temporal
        split)."""
        years = (self.built.pairs.loc[self.built.pairs["split"] == "test", "year"].dropna() if self.built
                 else pd.Series(dtype=float))
        note = (None if years.empty
                else contamination_note((int(years.min()), int(years.max())), encoders_used(self.cfg)))
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
