"""Notebook 04_pattern_expansion: Hearst-style templates expanded into inflected markers, the optional
LLM grammaticality filter (Appendix A "Pattern expansion", Table 3) and the lexicon by source (Table 4).

Reads the templates (`lexicon.templates_file`), the released lexicon CSV and `Paths.curated_lexicon` (notebook 01);
writes `Paths.final_lexicon` (the curated one with the new pattern markers, only after the grammaticality filter),
tables/pattern_regeneration, tables/table3, tables/table4_lexicon. The curated file is never rewritten here, so
02 and 03 read the same lexicon whether they run before or after this notebook.
"""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from ..config import Config
from ..lexicon import marker_llm, patterns
from ..lexicon import markers as lx
from ..llm import ReplayMiss
from ..publish.display import Stage, say
from ..publish.published import write_table
from ..schema import MarkerSource

TABLE4_PAPER_NOTE = (
    "The file files the paper's 257 Address pattern markers under LLM generation; paper per-source totals: "
    "manual 84+13+72, LLM 3,779, pattern 297, extendable 7 (4,252 - the others)."
)


class PatternExpansionStage(Stage):
    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = lx.lexicon_params(self.cfg)
        self.templates_file = cfg.paths.from_params(self.params.templates_file)
        self.templates = patterns.load_templates(self.templates_file,
                                                 self.params.max_slot_terms).select(self.params.template_ids)
        self.expanded = patterns.expand_all(self.templates)
        self.filtered: pd.DataFrame | None = None  # set by grammar_filter() when it runs
        self.released_csv = lx.released_lexicon_path(self.cfg, self.params)
        self.released = lx.read_released_csv_rows(self.released_csv)

    def slot_sizes(self) -> dict[str, int]:
        return {name: len(slot.terms) for name, slot in self.templates.slots.items()}

    def phrases_per_template(self) -> pd.DataFrame:
        return self.expanded.groupby(["move", "template"]).size().rename("phrases").reset_index()

    def grammar_filter(self) -> Markdown:
        """The LLM grammaticality filter, when an endpoint (or recorded responses) exists and params ask for it."""
        client, why = marker_llm.llm_client(self.cfg)
        if client is None or not self.params.grammar_filter:
            return Markdown(f"Grammaticality filter skipped: {why if client is None else 'disabled in params'}")
        try:
            self.filtered, verdicts = patterns.grammar_filter(
                client, self.expanded, self.params.labeller_model, self.params.grammar_batch_size
            )
        except ReplayMiss as miss:  # no key, and no recorded responses for these requests
            return Markdown(f"Grammaticality filter skipped: no API key and {len(miss.misses)} request(s) "
                            "without a recorded response")
        return Markdown(f"grammatical: {len(self.filtered):,} of {len(self.expanded):,}; "
                        f"unjudged: {len(self.expanded) - len(verdicts):,}")

    def regeneration(self) -> pd.DataFrame:
        """How much of the released pattern rows the expansion regenerates (tables/pattern_regeneration)."""
        regenerated = patterns.compare_with_released(self.expanded, self.released)
        write_table(regenerated, "pattern_regeneration", self.cfg,
                    caption="Released rows that our template expansion regenerates",
                    notes=["combo rows: the file's pattern-expansion rows (Broaden kept, BLACKLIST rejected).",
                           "The file has no Address combo rows; its Address pattern markers are among the "
                           "LLMgenerated rows (notebook 03), so those are compared too.",
                           "Expansion before any grammaticality filter." if self.filtered is None
                           else "Expansion before the grammaticality filter."],
                    inputs=[self.released_csv, self.templates_file])
        return regenerated

    def table3(self) -> pd.DataFrame:
        table3 = patterns.table3(self.templates, self.expanded, set(self.released["marker"]),
                                 self.params.table3_examples)
        write_table(table3, "table3", self.cfg,
                    caption="Table 3: expansion patterns for Address and Broaden, with examples",
                    notes=["[slot] filled from data/lexicon/slots; (..) optional; {a|b} alternatives; this stands for "
                           "this/that/these/those, agreeing in number.",
                           "in_released_file: expansions of the template that are rows of the released lexicon "
                           "(any group)."],
                    inputs=[self.templates_file])
        return table3

    def table4_lexicon(self) -> pd.DataFrame:
        """The final lexicon artefact (new pattern markers only after the filter) and Table 4's Lexicon columns."""
        lexicon = lx.read_artefact(self.cfg.paths.curated_lexicon)
        if self.filtered is not None:
            extra = self.filtered.assign(raw=self.filtered["marker"], category=self.filtered["template"])
            lexicon, added = lx.add_markers(lexicon, extra, MarkerSource.PATTERN)
            say(f"added {len(added):,} new pattern markers")
        lx.write_lexicon(lexicon, self.cfg.paths.final_lexicon)
        table4 = lx.table4(lexicon.frame, None)
        write_table(table4, "table4_lexicon", self.cfg,
                    caption="Table 4 (Lexicon columns): discourse markers by source and move",
                    notes=["Data columns are filled after mining: notebook 05 calls "
                           "ratio_utils.lexicon.markers.table4(lexicon, pairs).",
                           "Markers are distinct normalised phrases: the released file's "
                           f"{lexicon.report['move_rows_in_file']:,} move rows give "
                           f"{int((lexicon.frame['kind'] == 'move').sum()):,} move markers (the rest repeat a marker "
                           "up to case or a trailing comma).",
                           TABLE4_PAPER_NOTE, *lx.manual_count_notes(table4, self.released)],
                    inputs=[self.cfg.paths.final_lexicon])
        return table4
