"""Notebook 00_corpus: corpus -> papers and sentence table (paper §4, Appendix B.1).

Reads the sources named in `corpus.sources`; writes `Paths.papers`, `Paths.sentences`,
`Paths.corpus_report`, `Paths.quarantine`, tables/corpus_statistics, tables/corpus_cleaning and
figures/corpus_papers_per_year (all through `ratio_utils.corpora`).
"""

from __future__ import annotations

import pandas as pd
from IPython.display import Image, Markdown

from ..config import Config
from ..corpora import CorpusBuild, build_corpus, cleaning_table, write_corpus_outputs
from ..param_sections import CorpusParams
from ..publish.display import Stage


class CorpusStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = self.cfg.section("corpus", CorpusParams)
        self._build: CorpusBuild | None = None
        self._written: dict | None = None

    def build(self) -> Markdown:
        """Read, deduplicate, sample, split and clean; write the corpus outputs."""
        self._build = build_corpus(self.cfg, self.params)
        report = self._build.report
        return Markdown(f"{report['papers_written']} papers, {self._build.n_sentences} sentences "
                        f"in {report['seconds']} s")

    @property
    def written(self) -> dict:
        if self._written is None:
            self._written = write_corpus_outputs(self.built, self.cfg)
        return self._written

    @property
    def built(self) -> CorpusBuild:
        if self._build is None:
            raise RuntimeError("run CorpusStage.build() first")
        return self._build

    def statistics(self) -> Markdown:
        """Papers, sentences and pairs per corpus (tables/corpus_statistics)."""
        return Markdown(self.written["statistics"]["md"].read_text(encoding="utf-8"))

    def cleaning(self) -> pd.DataFrame:
        """One row per cleaning rule, counted per corpus."""
        return cleaning_table(self.built.report)

    def reader_counts(self) -> dict:
        """Skipped files and sections, quarantined records, deduplicated papers."""
        report = self.built.report
        return {"reader_counts": report["reader_counts"], "quarantine": report["quarantine"],
                "deduplicated": {k: v["count"] for k, v in report["deduplicated"].items()}}

    def papers_per_year(self) -> Image:
        return Image(filename=str(self.written["figure"]["png"]))
