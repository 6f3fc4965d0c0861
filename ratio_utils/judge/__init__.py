"""The silver filter (paper §4.3, Appendix E): LLM judge prompts, their calibration, the silver set.

Serves notebook 07. Reads the test pairs of the benchmark (`ratio_utils.dataset.benchmark`), the judge
prompts (`prompts/judge/<move>/<variant>.md`, versioned by a front-matter header and hashed) and
human label files; asks the judge through `ratio_utils.llm` (Batch API by default, every answer
cached and replayable). Writes:

    <benchmark>/data/<move>/silver.parquet      pairs accepted by both retained prompts (only with a real judge)
    data/interim/judge/annotation/*.csv|html     annotation sheets (calibration and panel pairs)
    data/interim/judge/judgements.parquet        every verdict: pair, prompt, version, hash, accept, reason, error
    data/interim/judge/silver_verdicts.parquet   one row per judged test pair: both verdicts and the silver decision
    tables/table9_judge_agreement.*              Table 9 (prompt–human and human–human agreement)
    tables/judge_prompt_selection.*, judge_silver_summary.*, judge_anaphora.*, table9_paper_reference.*

With no endpoint and nothing to replay, nothing is judged: no label is invented, the silver set is
not written (later stages fall back to the unfiltered test set) and every table says so in its notes.

One module per layer (prompt files are read by `llm.prompts`): `sampling` (pair ids,
the judge's view, the stratified sample), `labels` (annotation sheets, label files),
`agreement_stats` (Table 9 statistics), `verdicts` (asking the judge, the silver rule, prompt
selection), `anaphora` (the anaphora test), `silver` (`SilverFilter`, notebook 07 step by step).
"""

from __future__ import annotations

from .agreement_stats import (
    Agreement,
    agreement,
    human_panel_agreement,
    majority_label,
    rater_panel_agreement,
    single_annotator_agreement,
    unanimous_label,
)
from .anaphora import anaphora_analysis
from .labels import (
    ANNOTATION_SETS,
    SHEET_COLUMNS,
    annotation_pairs,
    load_label_files,
    parse_label,
    write_annotation_sheet,
)
from ..llm.prompts import PromptFile, load_prompts, prompt_table, read_prompt
from .sampling import (
    format_pair,
    has_explicit_anaphor,
    pair_ids,
    paper_markers,
    sample_for_judging,
    stratified_equal_allocation,
    with_pair_columns,
)
from .silver import PAPER_ANAPHORA, PAPER_TABLE9_TEXT, TABLE9_COLUMNS, SilverFilter
from .verdicts import both_rule, judge_pairs, judge_requests, parse_verdict, select_prompts, verdict_matrix

__all__ = [
    "ANNOTATION_SETS", "PAPER_ANAPHORA", "PAPER_TABLE9_TEXT", "SHEET_COLUMNS", "TABLE9_COLUMNS",
    "Agreement", "PromptFile", "SilverFilter",
    "agreement", "anaphora_analysis", "annotation_pairs", "both_rule", "format_pair", "has_explicit_anaphor",
    "human_panel_agreement", "judge_pairs", "judge_requests", "load_label_files", "load_prompts", "majority_label",
    "pair_ids", "paper_markers", "parse_label", "parse_verdict", "prompt_table", "rater_panel_agreement", "read_prompt",
    "sample_for_judging", "select_prompts", "single_annotator_agreement", "stratified_equal_allocation",
    "unanimous_label", "verdict_matrix", "with_pair_columns", "write_annotation_sheet",
]
