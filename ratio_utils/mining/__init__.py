"""Stage 05: mine query–gold pairs and distractor candidates from consecutive sentences (paper §4, App. A, B.1).

Reads `cfg.paths.sentences` and `cfg.paths.final_lexicon`; writes `cfg.paths.pairs`, `cfg.paths.distractors`,
`cfg.paths.mining_report` and `cfg.paths.lexicon_conflicts` (through `ratio_utils.stages.pair_mining`, which runs
these steps in the notebook's order). One job per module:

* `mining/matcher` — the lexicon as a longest-prefix matcher (comma and extension rules), its conflicts;
* `mining/cleaning` — the Appendix B.1 rules of one pair (gold side shared with distractors; query side);
* `mining/extraction` — one sentence table mined: consecutive pairs, matching, cleaning, counted rows; the report
  and the displays of the mined rows;
* `mining/parallel` — shards on Dask, or a partitioned sentence table part by part (docs/scale.md); the mined
  tables written and read back (one file or parts).
"""

from .cleaning import (
    CleanText,
    anaphor_pattern,
    clean_candidate,
    clean_query,
    find_citation,
    normalize_text,
    strip_gold_prefix,
    strip_query_prefix,
)
from .extraction import (
    DISTRACTOR_TABLE_COLUMNS,
    PAIR_TABLE_COLUMNS,
    MiningResult,
    combine,
    consecutive_pairs,
    counts_to_report,
    drop_count_table,
    example_pairs,
    lowered_second_sentences,
    marker_frequencies,
    mine_sentences,
    mining_report,
    prepare_sentences,
)
from .matcher import (
    NO_COMMA,
    NO_MARKER,
    LexiconCheck,
    MarkerEntry,
    MarkerMatch,
    MarkerMatcher,
    build_matcher,
    match_key,
)
from .parallel import (
    EXAMPLE_SAMPLE_PER_MOVE,
    MINED_ORDER,
    MinedPartOutputs,
    MinedParts,
    mine_part,
    mine_parts,
    mine_table,
    mine_with_dask,
    mined_parts_result,
    mining_run_key,
    read_mined,
    read_mined_summary,
    sample_mined_pairs,
    shard_by_paper,
    write_mined,
)

__all__ = [ "CleanText", "anaphor_pattern", "clean_candidate", "clean_query", "find_citation", "normalize_text",
    "strip_gold_prefix", "strip_query_prefix", "DISTRACTOR_TABLE_COLUMNS", "PAIR_TABLE_COLUMNS", "MiningResult",
    "combine",
    "consecutive_pairs", "counts_to_report", "lowered_second_sentences", "mine_sentences", "prepare_sentences",
    "NO_COMMA",
    "NO_MARKER", "LexiconCheck", "MarkerEntry", "MarkerMatch", "MarkerMatcher", "build_matcher", "match_key",
    "MinedPartOutputs",
    "MinedParts", "mine_part", "mining_run_key",
    "mine_parts", "mine_with_dask", "shard_by_paper", "EXAMPLE_SAMPLE_PER_MOVE", "MINED_ORDER", "drop_count_table",
    "read_mined_summary", "sample_mined_pairs", "example_pairs", "marker_frequencies",
    "mine_table", "mined_parts_result", "mining_report", "read_mined", "write_mined",
]  # fmt: skip
