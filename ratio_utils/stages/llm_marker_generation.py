"""Notebook 03_llm_marker_generation: LLM generation and labelling of markers, or the replay of the
released labels without an endpoint (Appendix A "LLM generation").

Reads `Paths.curated_lexicon` (notebook 01, never 04's final lexicon) and the released lexicon CSV; writes
`Paths.llm_markers("proposed")`, `Paths.llm_markers("labels")` and tables/llm_marker_labels_ours (online only),
tables/llm_marker_labels.
"""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from ..config import Config
from ..io import write_parquet_atomic
from ..lexicon import marker_llm
from ..lexicon import markers as lx
from ..llm import ReplayMiss
from ..publish.display import Stage
from ..publish.published import write_table

# How the released file's counts relate to the paper's (Appendix A): read off the file, stated once here.
RELEASED_LABEL_NOTES = [
    "The 3,779 kept strong-true markers are the file's Address (3,773) and Broaden (263) LLM rows less the 257 "
    "Address pattern markers the paper counts separately (the file has no Address combo rows).",
    "WEAK-TRUE and FALSE: the file keeps only the rejected candidates it files under BLACKLIST/common_irrelevant, "
    "28 of them without a label, and no labels for the Broaden rows, so 270/207 cannot be rebuilt exactly "
    "(file: 269/186).",
]


class LLMMarkerGenerationStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = lx.lexicon_params(self.cfg)
        self.lexicon = lx.read_artefact(self.cfg.paths.curated_lexicon)
        self.released_csv = lx.released_lexicon_path(self.cfg, self.params)
        self.released = lx.read_released_csv_rows(self.released_csv)
        self.client, self.why = marker_llm.llm_client(self.cfg)

    def client_status(self) -> Markdown:
        return Markdown(f"LLM client: {'available' if self.client else 'NOT available'} - {self.why}")

    def generate(self) -> pd.DataFrame | Markdown:
        """The generation and labelling loop (online only); our labeller's counts (tables/llm_marker_labels_ours)."""
        if self.client is None:
            return Markdown("Skipped: no LLM endpoint or recorded responses on this machine; the released labels are "
                            "replayed below.")
        params = self.params
        try:
            run = marker_llm.run_generation(self.client, self.lexicon.frame, params, self.cfg.seed)
        except ReplayMiss as miss:
            # Without a key the client replays recorded responses; when none were recorded for these requests it
            # cannot answer them: the same case as no endpoint at all.
            self.client = None
            return Markdown(f"Skipped: no API key and {len(miss.misses)} request(s) without a recorded response; "
                            "the released labels are replayed below.")
        for name in ("proposed", "labels"):
            write_parquet_atomic(run[name], self.cfg.paths.llm_markers(name))
        ours = marker_llm.label_counts(run["labels"])
        write_table(ours, "llm_marker_labels_ours", self.cfg,
                    caption="Our labeller's counts of the generated candidates",
                    notes=[f"models: {', '.join(params.generation_models)}; labeller: {params.labeller_model}; "
                           f"rounds: {params.generation_rounds}",
                           f"generation answers without usable markers: {run['failed_generation_answers']}; "
                           f"label problems: {len(run['label_problems'])}"])
        return ours

    def released_counts(self) -> pd.DataFrame:
        """The released labels (column `strength`) counted."""
        return marker_llm.released_label_counts(self.released)

    def reconciled(self) -> pd.DataFrame:
        """The paper's counts beside the released file's (tables/llm_marker_labels)."""
        reconciled = marker_llm.reconcile_with_paper(self.released_counts())
        source = ("Replayed from the released file (no LLM called)." if self.client is None
                  else "Released file beside our own run (llm_marker_labels_ours).")
        write_table(reconciled, "llm_marker_labels", self.cfg,
                    caption="LLM labels: the paper's counts beside the released lexicon",
                    notes=[source, *RELEASED_LABEL_NOTES], inputs=[self.released_csv])
        return reconciled
