"""The silver filter (paper §4.3, Appendix E): LLM judge prompts, their calibration, the silver set.

Serves notebook 07 (`ratio_utils.stages.silver_filter` runs these steps in the notebook's order). Reads the test
pairs of the benchmark (`ratio_utils.dataset.benchmark`), the judge prompts (`prompts/judge/<move>/<variant>.md`,
versioned by a front-matter header and hashed, read by `ratio_utils.llm.prompts`) and human label files; asks the
judge through `ratio_utils.llm` (Batch API by default, every answer cached and replayable). Through the stage:

    <benchmark>/data/<move>/silver.parquet      pairs accepted by both retained prompts (only with a real judge)
    data/interim/judge/annotation/*.csv|html     annotation sheets (calibration and panel pairs)
    data/interim/judge/judgements.parquet        every verdict: pair, prompt, version, hash, accept, reason, error
    data/interim/judge/silver_verdicts.parquet   one row per judged test pair: both verdicts and the silver decision
    tables/table9_judge_agreement.*              Table 9 (prompt–human and human–human agreement)
    tables/judge_prompt_selection.*, judge_silver_summary.*, judge_anaphora.*, table9_paper_reference.*

With no endpoint and nothing to replay, nothing is judged: no label is invented, the silver set is
not written (later stages fall back to the unfiltered test set) and every table says so in its notes.

One module per layer: `sampling` (pair ids, the judge's view, the stratified sample, nested in waves),
`labels` (annotation sheets, label files, the calibration and panel labels), `agreement_stats` (Table 9
statistics), `verdicts` (asking the judge, the silver rule, prompt selection), `anaphora` (the anaphora test and
its table), `silver` (the silver set written, its label source, the silver summary and Table 9 rows, the notes).
"""

from __future__ import annotations

from ..llm.prompts import PromptFile, load_prompts, prompt_table, read_prompt
from .agreement_stats import (
    Agreement,
    agreement,
    human_panel_agreement,
    majority_label,
    rater_panel_agreement,
    single_annotator_agreement,
    unanimous_label,
)
from .anaphora import ANAPHORA_SHOWN_COLUMNS, PAPER_ANAPHORA, anaphora_analysis, anaphora_notes, anaphora_table
from .labels import (
    ANNOTATION_SETS,
    LABEL_COLUMNS,
    SHEET_COLUMNS,
    annotation_pairs,
    calibration_reference,
    label_summary,
    labelled_pairs,
    load_label_files,
    panel_labels,
    parse_label,
    write_annotation_sheet,
    write_annotation_sheets,
)
from .sampling import (
    first_wave,
    format_pair,
    has_explicit_anaphor,
    nested_sample,
    pair_ids,
    paper_markers,
    sample_for_judging,
    sample_overview,
    stratified_equal_allocation,
    with_pair_columns,
)
from .silver import (
    PAPER_TABLE9_TEXT,
    TABLE9_COLUMNS,
    TABLE9_NOTES,
    judge_label_source,
    no_judge_note,
    paper_table9,
    portable,
    provenance_notes,
    remove_stale_silver,
    silver_summary,
    table9_rows,
    unanswered_note,
    with_release_columns,
    write_silver,
)
from .verdicts import (
    FIXED_IN_PARAMS,
    accepted_ids,
    both_rule,
    fixed_prompts,
    judge_pairs,
    judge_plan,
    judge_requests,
    parse_verdict,
    prompt_selection,
    select_prompts,
    silver_verdicts,
    unanswered_ids,
    unanswered_requests,
    verdict_matrix,
    write_requests,
)

__all__ = [
    "ANAPHORA_SHOWN_COLUMNS", "ANNOTATION_SETS", "FIXED_IN_PARAMS", "LABEL_COLUMNS", "PAPER_ANAPHORA",
    "PAPER_TABLE9_TEXT", "SHEET_COLUMNS", "TABLE9_COLUMNS", "TABLE9_NOTES", "Agreement", "PromptFile",
    "accepted_ids", "agreement", "anaphora_analysis", "anaphora_notes", "anaphora_table", "annotation_pairs",
    "both_rule", "calibration_reference", "first_wave", "fixed_prompts", "format_pair", "has_explicit_anaphor",
    "human_panel_agreement", "judge_label_source", "judge_pairs", "judge_plan", "judge_requests", "label_summary",
    "labelled_pairs", "load_label_files", "load_prompts", "majority_label", "nested_sample", "no_judge_note",
    "pair_ids", "panel_labels", "paper_markers",
    "paper_table9", "parse_label", "parse_verdict", "portable", "prompt_selection", "prompt_table", "provenance_notes",
    "rater_panel_agreement", "read_prompt", "remove_stale_silver", "sample_for_judging", "sample_overview",
    "select_prompts", "silver_summary", "silver_verdicts", "single_annotator_agreement", "stratified_equal_allocation",
    "table9_rows", "unanimous_label", "unanswered_ids", "unanswered_note", "unanswered_requests", "verdict_matrix",
    "with_pair_columns", "with_release_columns", "write_annotation_sheet", "write_annotation_sheets", "write_requests",
    "write_silver",
]  # fmt: skip
