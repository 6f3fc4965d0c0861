"""Stage 06: de-duplicate the mined pairs, split them by publication date, build the shared candidate pools.

Reads `cfg.paths.pairs` and `cfg.paths.distractors` (stage 05) and, for paper counts, `cfg.paths.papers`;
writes the benchmark in the official release layout under `cfg.paths.benchmark`, `split_report.json`
beside it, and Table 5 (through the stage). One job per module:

* `dataset/splits` — the split windows: each paper's split or the reason it is excluded;
* `dataset/in_memory` — dedupe, split, pools, train/test overlap on whole tables (`build_benchmark`);
* `dataset/bounded` — the same benchmark hash bucket by hash bucket, past `dataset.max_in_memory_bytes`;
* `dataset/leakage` — the leakage checks (`LeakageError`), on whole tables or one bucket of ids;
* `dataset/release` — the official release layout and the split report;
* `dataset/card` — the release directory's dataset card, for Hugging Face `datasets`;
* `dataset/tables` — Table 5, its notes and the figures.

`ratio_utils.stages.split_and_pool` runs these steps in notebook 06's order.
"""

from .benchmark import load_benchmark
from .bounded import build_bounded
from .in_memory import BuiltBenchmark, build_benchmark, build_from_tables, fits_in_memory
from .leakage import (
    LeakageError,
    check_golds_in_pool,
    check_no_distractor_equals_gold,
    check_no_pair_in_two_splits,
    check_test_pool_disjoint_from_train,
    check_test_queries_not_in_train,
    run_leakage_checks,
)
from .release import release_pairs, split_report, write_release
from .splits import assign_split, hash_position, paper_splits
from .tables import (
    PAPER_FIGURES,
    PAPER_FIGURES_AS_WRITTEN,
    TABLE5_NOTES,
    corpus_papers_per_split,
    marker_frequency_figure,
    papers_per_year_figure,
    split_boundaries,
    table5,
    table5_notes,
    table5_shown,
    window_label,
)

__all__ = [
    "load_benchmark", "BuiltBenchmark", "build_benchmark", "build_bounded", "build_from_tables", "fits_in_memory",
    "LeakageError",
    "check_golds_in_pool", "check_no_distractor_equals_gold", "check_no_pair_in_two_splits",
    "check_test_pool_disjoint_from_train", "check_test_queries_not_in_train", "run_leakage_checks", "release_pairs",
    "write_release", "split_report", "assign_split", "hash_position", "paper_splits", "PAPER_FIGURES",
    "PAPER_FIGURES_AS_WRITTEN", "TABLE5_NOTES", "corpus_papers_per_split", "marker_frequency_figure",
    "papers_per_year_figure", "split_boundaries", "table5", "table5_notes", "table5_shown", "window_label",
]  # fmt: skip
