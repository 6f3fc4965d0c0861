"""Notebook 01_marker_curation: the released lexicon validated, spans before the first comma,
the reviewers' sheet and rule (paper §4.1, Appendix A "Manual curation").

Reads the released lexicon CSV and `Paths.sentences`; writes `Paths.curated_lexicon` (the artefact),
`Paths.lexicon_review` (sheets, `span_status.csv`), tables/lexicon_group_conflicts,
tables/review_decisions (when decision files exist), tables/span_review_status and its figure.
"""

from __future__ import annotations

import pandas as pd
from IPython.display import Image, Markdown

from ..config import Config
from ..io import atomic_path
from ..lexicon import curation
from ..lexicon import markers as lx
from ..publish.display import Stage, say, show_figure, written_files
from ..publish.published import set_figure_style, write_table


class MarkerCurationStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = lx.lexicon_params(self.cfg)
        set_figure_style()
        self.released_csv = lx.released_lexicon_path(self.cfg, self.params)
        self._lexicon: lx.Lexicon | None = None
        self._sentences = None
        self._span_counts = None

    @property
    def lexicon(self) -> lx.Lexicon:
        if self._lexicon is None:
            self._lexicon = lx.load_released_csv(self.released_csv)
        return self._lexicon

    @property
    def sentences(self):
        """The kept sentences as a lazy scan: each step streams what it needs (the table is never held)."""
        if self._sentences is None:
            self._sentences = curation.scan_sentences(self.cfg.paths.sentences)
        return self._sentences

    @property
    def span_counts(self):
        if self._span_counts is None:
            self._span_counts = curation.count_spans(self.sentences, self.params.max_span_words)
        return self._span_counts

    def validation_report(self) -> pd.DataFrame:
        """Every row of the released file checked; what was merged or resolved."""
        return lx.report_summary(self.lexicon)

    def group_conflicts(self) -> pd.DataFrame:
        """Markers whose rows disagree on the group, with the resolution (tables/lexicon_group_conflicts)."""
        conflicts = lx.conflict_table(self.lexicon)
        write_table(conflicts, "lexicon_group_conflicts", self.cfg,
                    caption="Released lexicon: markers whose rows disagree on the group",
                    notes=["Resolution: move > distractor > BLACKLIST; every case listed with its line in the "
                           "released file."],
                    inputs=[self.released_csv], latex=False)
        return conflicts

    def write_artefact(self) -> dict:
        """The lexicon artefact (parquet, CSV, report)."""
        return written_files(lx.write_lexicon(self.lexicon, self.cfg.paths.curated_lexicon), self.cfg)

    def top_spans(self, shown: int = 20) -> pd.DataFrame:
        counts = self.span_counts
        say(f"{curation.count_kept(self.sentences):,} sentences, {counts.height:,} distinct spans, "
            f"{counts['count'].sum():,} sentences with a span")
        return counts.head(shown).to_pandas()

    def review_sheet(self, shown: int = 5) -> pd.DataFrame:
        """k seeded pairs per top span, one sheet per reviewer."""
        top = self.span_counts.head(self.params.top_spans)
        # part by part: a partitioned corpus's pairs are never held together (curation.sample_review_pairs)
        sampled = curation.sample_review_pairs(curation.scan_sentence_parts(self.cfg.paths.sentences),
                                               top["span"].to_list(), self.params.pairs_per_span, self.cfg.seed,
                                               self.params.max_span_words)
        sheet = curation.review_sheet(top, sampled, self.params.reviewers)
        files = curation.write_review_sheet(sheet, self.cfg.paths.lexicon_review, self.params.reviewers)
        say(f"{written_files(files, self.cfg)} {len(sheet):,} pairs for {sheet['span'].nunique()} spans")
        return sheet.head(shown)

    def review_decisions(self) -> pd.DataFrame | Markdown:
        """The paper's rule on the recorded decision files (tables/review_decisions), if there are any."""
        decisions = lx.read_review_decisions(self.cfg.paths.from_params(self.params.review_decisions_dir),
                                             self.params.reviewers)
        if decisions is None:
            return Markdown(f"No decision files under {self.params.review_decisions_dir}: the released lexicon's "
                            "hand-made rows are the recorded decisions.")
        accepted = lx.apply_review_rule(decisions, self.params.reviewers)
        write_table(accepted, "review_decisions", self.cfg, caption="Spans accepted by the reviewers' rule",
                    latex=False)
        return accepted

    def _status(self) -> pd.DataFrame:
        return curation.span_status(self.span_counts.head(self.params.status_top_spans), self.lexicon.frame)

    def span_review_status(self) -> pd.DataFrame:
        """Top spans of our corpus by the authors' recorded decision (tables/span_review_status)."""
        status = self._status()
        summary = curation.status_summary(status)
        write_table(summary, "span_review_status", self.cfg,
                    caption=f"Top {self.params.status_top_spans} spans before the first comma in our corpus, "
                            "by recorded decision",
                    notes=["Decisions are the released lexicon's manual rows and extendable connectives "
                           "(no reviewer decision files here).",
                           "'not reviewed': no hand-made row; also_in_lexicon in the span list says whether an "
                           "LLM/pattern row has it."],
                    inputs=[self.released_csv, self.cfg.paths.sentences])
        with atomic_path(self.cfg.paths.span_status) as tmp:
            status.to_csv(tmp, index=False)
        return summary

    def span_review_figure(self) -> Image:
        summary = curation.status_summary(self._status())
        fig = curation.plot_status(summary, self.params.status_top_spans)
        return show_figure(fig, "span_review_status", self.cfg, inputs=[self.released_csv, self.cfg.paths.sentences])

    def reviewed_spans(self, shown: int = 25) -> pd.DataFrame:
        status = self._status()
        return status[status["status"] != "not reviewed"].head(shown)
