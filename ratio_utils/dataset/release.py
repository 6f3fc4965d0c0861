"""Stage 06's output in the official release layout: `data/<move>/<split>.parquet` (schema.PAIR_COLUMNS plus
our extras) and `candidates/<split>.parquet`, written through `ratio_utils.dataset.benchmark`; and the split report
beside it (`split_report`, written by ratio_utils.stages.split_and_pool to `cfg.paths.split_report`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..param_sections import SPLITS, DatasetParams
from ..schema import MOVES, PAIR_COLUMNS
from .benchmark import write_pairs, write_pool
from .in_memory import BuiltBenchmark


def release_pairs(pairs: pd.DataFrame) -> pd.DataFrame:
    """Our pair rows under the official release's column names (schema.PAIR_COLUMNS) plus our extras."""
    dates = pd.to_datetime(pairs["date"], errors="coerce")
    frame = pd.DataFrame(
        {
            "corpusid": pairs["paper_id"].astype(str),
            "year": pd.to_numeric(pairs["year"], errors="coerce").astype("Int64"),
            "publicationdate": dates.dt.strftime("%Y-%m-%d").where(dates.notna(), None),
            "queryTerm": pairs["marker"],
            "queryTerm_group": pairs["move"],
            "querySentence": pairs["query"],
            "goldSentence": pairs["gold"],
            "query_id": pairs["query_id"],
            "gold_id": pairs["gold_id"],
            "marker_source": pairs["marker_source"],
            "marker_has_anaphor": pairs["marker_has_anaphor"].astype(bool),
            "marker_text": pairs["marker_text"],
            "query_prefix": pairs["query_prefix"],
            "query_original": pairs["query_original"],
            "gold_original": pairs["gold_original"],
            "corpus": pairs["corpus"],
        }
    )
    return frame[list(PAIR_COLUMNS) + [c for c in frame.columns if c not in PAIR_COLUMNS]].reset_index(drop=True)


def write_release(built: BuiltBenchmark, root: Path) -> list[Path]:
    written = []
    for split in SPLITS:
        for move in MOVES:
            rows = built.pairs[(built.pairs["split"] == split) & (built.pairs["move"] == move.value)]
            written.append(write_pairs(release_pairs(rows), root, move, split))
        written.append(write_pool(built.pools[split], root, split))
    return written


def split_report(built: BuiltBenchmark, params: DatasetParams) -> dict:
    """The benchmark's counts (`BuiltBenchmark.report`) and the split params that decided them."""
    report = built.report()
    report["params"] = {"split_by": params.split_by, "splits": params.splits, "year_only": params.year_only}
    if any(w.fraction is not None for w in params.windows()):
        report["params"]["hash_seed"] = params.hash_seed
    return report
