"""Notebook 02_marker_extensions: extensions of the extendable connectives found in the corpus
(Appendix A "Marker extensions").

Reads `Paths.curated_lexicon` (notebook 01, never 04's final lexicon) and `Paths.sentences`; writes
`Paths.marker_extensions` and tables/marker_extensions.
"""

from __future__ import annotations

import pandas as pd

from ..config import Config
from ..io import write_parquet_atomic
from ..lexicon import curation
from ..lexicon import markers as lx
from ..publish.display import Stage
from ..publish.published import write_table


class MarkerExtensionsStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = lx.lexicon_params(self.cfg)
        self.connectives = lx.read_artefact(self.cfg.paths.curated_lexicon).extendable_connectives()
        self._extensions: pd.DataFrame | None = None

    def connective_table(self) -> pd.DataFrame:
        return self.connectives[["marker", "kind", "move", "category"]]

    @property
    def extensions(self) -> pd.DataFrame:
        """Spans long enough for the longest connective plus the extension words, counted in one pass."""
        if self._extensions is None:
            longest = int(self.connectives["marker"].str.split().str.len().max())
            sentences = curation.scan_sentences(self.cfg.paths.sentences)  # streamed: one group-by pass
            span_counts = curation.count_spans(sentences, longest + self.params.max_extension_words)
            self._extensions = curation.connective_extensions(span_counts, self.connectives,
                                                              self.params.max_extension_words)
            write_parquet_atomic(self._extensions, self.cfg.paths.marker_extensions)
        return self._extensions

    def top_extensions(self, shown: int = 20) -> pd.DataFrame:
        return self.extensions.head(shown)

    def summary(self) -> pd.DataFrame:
        """Per connective: extensions found and sentences they open (tables/marker_extensions)."""
        summary = curation.extension_summary(self.extensions, self.connectives, self.params.extension_examples)
        write_table(summary, "marker_extensions", self.cfg,
                    caption=f"Extendable connectives: extensions of at most {self.params.max_extension_words} words "
                    "ending at a comma",
                    notes=["extensions: distinct extension phrases found; sentences: sentences opening with the "
                           "connective or an extension;",
                           "bare_connective: sentences where the connective itself is followed by the comma."],
                    inputs=[self.cfg.paths.curated_lexicon, self.cfg.paths.sentences])
        return summary
