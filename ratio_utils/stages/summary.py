"""Stage 14 (notebook 14_summary): the page a reviewer opens first, written last.

Collects what the other stages wrote (`ratio_utils.reporting.summary.collect`: the headline tables beside the paper,
the claims, the reranker's gold promotion beside the paper's rate, how scores move with pool size, queries per
split, what differs from the paper, what was reduced or not run, provenance and wall times),
saves its figures and writes reports/summary.md; each part is then one cell of the notebook.

Reads:  cfg.paths.tables (every *.records.csv: the tables' numbers, never their display cells; every
        *.provenance.json: captions and notes; rerank_summary.csv: notebook 10's gold promotion;
        analysis_pool_size.csv: notebook 11's pool-size numbers), figures/figure_pool_size_<move>.png (linked),
        cfg.paths.benchmark, cfg.paths.papers, runs/<run-id>/timings.csv.
Writes: cfg.paths.summary_report (reports/summary.md), figures/summary_mrr10.*, figures/papers_per_year_splits.*
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import Markdown

from ..config import Config
from ..io import write_text_atomic
from ..param_sections import SummaryParams
from ..pipeline import RUN_DIR_ENV, TIMINGS_FILE
from ..publish.display import Stage
from ..publish.published import save_figure, set_figure_style
from ..reporting import claims, summary_provenance
from ..reporting.summary import Summary, claims_reading, collect, label_lines, render_markdown
from ..reporting.summary_figure import pool_size_figures
from ..reporting.summary_setting import papers_per_year


def find_timings(cfg: Config) -> Path | None:
    """This run's timings (the pipeline names its folder in RATIO_RUN_DIR), else the newest runs/*/timings.csv."""
    current = os.environ.get(RUN_DIR_ENV)
    if current and (Path(current) / TIMINGS_FILE).exists():
        return Path(current) / TIMINGS_FILE
    found = sorted(Path(cfg.paths.root, "runs").glob(f"*/{TIMINGS_FILE}"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def run_wall_times(cfg: Config) -> pd.DataFrame:
    """Seconds per executed notebook of this run, with what each reused (`summary_provenance.wall_times`)."""
    return summary_provenance.wall_times(find_timings(cfg))


class SummaryStage(Stage):
    """What notebook 14 shows: the summary written first (reports/summary.md), then its parts, one per cell."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = cfg.section("summary", SummaryParams)
        self.params.metrics = tuple(self.params.metrics)
        self._summary: Summary | None = None

    @property
    def summary(self) -> Summary:
        """The collected summary; reports/summary.md and its figures are written on first use."""
        if self._summary is None:
            self._summary = self._write()
        return self._summary

    def _write(self) -> Summary:
        """Collect the summary, save its figures and write reports/summary.md."""
        cfg = self.cfg
        set_figure_style()
        summary = collect(cfg, self.params, find_timings(cfg))
        report = Path(cfg.paths.summary_report)
        figure_files = {}
        if summary.figure is not None:
            saved = save_figure(summary.figure, "summary_mrr10", cfg, inputs=[cfg.paths.tables],
                                labels=summary.label_sources)
            figure_files["mrr"] = os.path.relpath(saved["png"], report.parent)
        years = papers_per_year(cfg)
        if years is not None:
            saved = save_figure(years, "papers_per_year_splits", cfg, inputs=[cfg.paths.papers])
            figure_files["years"] = os.path.relpath(saved["png"], report.parent)
        if not summary.pool_size.empty:  # notebook 11's figures, linked as they are
            for move, path in pool_size_figures(cfg.paths.figures).items():
                figure_files[f"pool_size_{move}"] = os.path.relpath(path, report.parent)
        write_text_atomic(report, render_markdown(summary, figure_files))
        return summary

    def provenance(self) -> dict[str, Any]:
        return self.summary.provenance

    def labels(self):
        """Who produced the labels, and the contamination caveat."""
        return Markdown("\n".join(label_lines(self.summary)))

    def claims_rule(self):
        """The claims table's rule and its one-line reading."""
        return Markdown(f"{claims.RULE}\n\nClaim rows per verdict — {claims_reading(self.summary)}.")

    def papers_per_year(self):
        return papers_per_year(self.cfg)
