"""Stage 05 end to end (notebook 05): read the inputs, mine (one table, shards on Dask, or part by part),
write the outputs and the report; the displays of the mined rows.

Reads `cfg.paths.sentences` (schema.SENTENCE_COLUMNS; a file or a folder of parts) and `cfg.paths.final_lexicon`
(schema.LEXICON_COLUMNS); writes `cfg.paths.pairs`, `cfg.paths.distractors` (a file, or a folder of parts
for a partitioned sentence table, with a report per part in `cfg.paths.mining_parts`, the resume record),
`cfg.paths.mining_report` (every rule counted) and `cfg.paths.lexicon_conflicts`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..io import atomic_path, sha256_file, write_json_atomic, write_parquet_atomic
from ..param_sections import MiningParams
from ..parts import object_text, part_files, read_table, reset_table, scan_table
from ..schema import SENTENCE_COLUMNS
from .extraction import MiningResult, mine_sentences
from .matcher import LexiconCheck, build_matcher
from .parallel import mine_parts, mine_with_dask


def _check_inputs(cfg) -> None:
    for path in (cfg.paths.sentences, cfg.paths.final_lexicon):
        if not Path(path).exists():
            raise FileNotFoundError(f"{path} not found: run the earlier notebooks (00 corpus, 01-04 lexicon) first")


def mine(cfg, client=None) -> tuple[MiningResult, LexiconCheck]:
    """Stage 05 end to end: read inputs, mine (locally or with Dask), write pairs, distractors, report.

    A partitioned sentence table (a folder of parts, from `corpus.papers_per_part`) is mined part by
    part into pairs/distractors parts (`mine_parts`); the returned result then holds, of the rows, only
    what notebook 05 shows: each pair's move and marker, each distractor's category (categories: a few
    bytes a row) and a seeded sample of whole pairs for the examples. The parts are the output.
    """
    params: MiningParams = cfg.section("mining", MiningParams)
    _check_inputs(cfg)
    lexicon = pd.read_parquet(cfg.paths.final_lexicon)
    matcher, check = build_matcher(lexicon, params.extension_max_words, cfg.paths.final_lexicon)
    mined = None
    if Path(cfg.paths.sentences).is_dir():
        mined = mine_parts(cfg.paths.sentences, cfg.paths.pairs, cfg.paths.distractors, cfg.paths.mining_parts, matcher,
                           params, sha256_file(cfg.paths.final_lexicon), client)
        result = MiningResult(read_mined_summary(cfg.paths.pairs, ["move", "marker"]),
                              read_mined_summary(cfg.paths.distractors, ["category"]), mined.counts,
                              examples=sample_mined_pairs(cfg.paths.pairs, EXAMPLE_SAMPLE_PER_MOVE, cfg.seed))
    else:
        sentences = pd.read_parquet(cfg.paths.sentences, columns=list(SENTENCE_COLUMNS))
        if params.engine == "dask" or client is not None:
            result = mine_with_dask(sentences, matcher, params, client)
        else:
            result = mine_sentences(sentences, matcher, params, cfg.paths.sentences)
        for table in (cfg.paths.pairs, cfg.paths.distractors):
            reset_table(table, partitioned=False)
        write_parquet_atomic(result.pairs, cfg.paths.pairs)
        write_parquet_atomic(result.distractors, cfg.paths.distractors)
    report = result.report()
    if mined is not None:
        report["parts"] = mined.summary()
    report["lexicon"] = check.summary()
    report["params"] = dict(params.__dict__)
    report["inputs"] = {"sentences": str(cfg.paths.sentences), "lexicon": str(cfg.paths.final_lexicon)}
    write_json_atomic(cfg.paths.mining_report, report)
    with atomic_path(cfg.paths.lexicon_conflicts) as tmp:
        check.conflicts.to_csv(tmp, index=False)
    return result, check


MINED_ORDER = ["corpus", "paper_id", "para", "sent"]  # the row order of `_sorted`


def read_mined(table: "str | Path") -> pd.DataFrame:
    """Pairs or distractors as one frame: a single file, or every part (a polars scan) in `_sorted`'s order."""
    return read_table(table, parts_order=MINED_ORDER)


EXAMPLE_SAMPLE_PER_MOVE = 50  # whole pairs per move kept from a partitioned run for notebook 05's examples


def read_mined_summary(table: "str | Path", columns: list[str]) -> pd.DataFrame:
    """A few short columns of every mined row, as categories (a partitioned run's pairs do not fit whole)."""
    return scan_table(table).select(columns).collect().to_pandas().astype("category")


def sample_mined_pairs(table: "str | Path", per_move: int, seed: int) -> pd.DataFrame:
    """A seeded sample of whole pairs: per move the `per_move` pairs whose query id hashes lowest, one part at a
    time (so at most parts x moves x per_move rows are held), in `_sorted`'s order."""
    kept = None
    for path in part_files(table):
        frame = object_text(pd.read_parquet(path))
        if kept is not None:
            frame = pd.concat([kept, frame], ignore_index=True)
        rank = pd.util.hash_pandas_object(frame["query_id"], index=False, hash_key=f"{seed:016d}"[-16:])
        kept = frame.assign(_rank=rank.to_numpy()).sort_values("_rank", kind="stable").groupby("move").head(per_move).drop(columns="_rank")
    if kept is None:
        raise FileNotFoundError(f"{table}: no parquet file or parts")
    return kept.sort_values(MINED_ORDER, kind="stable").reset_index(drop=True)


def drop_count_table(result: MiningResult) -> pd.DataFrame:
    """Every counted rule as rows (stage, rule, count) for display."""
    rows = [(key.rsplit(".", 1)[0], key.rsplit(".", 1)[1], n) for key, n in sorted(result.counts.items())]
    return pd.DataFrame(rows, columns=["what", "rule", "count"])


def example_pairs(pairs: pd.DataFrame, per_move: int = 3, seed: int = 13) -> pd.DataFrame:
    """A few random pairs per move, with the original second sentence beside the cleaned gold."""
    shuffled = pairs.sample(frac=1.0, random_state=seed)
    columns = ["move", "marker_text", "query_prefix", "query", "gold", "gold_original"]
    return shuffled.groupby("move").head(per_move).sort_values("move", kind="stable")[columns]


def marker_frequencies(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs per (move, marker), most frequent first."""
    if pairs.empty:
        return pd.DataFrame(columns=["move", "marker", "pairs"])
    return pairs.groupby(["move", "marker"]).size().rename("pairs").reset_index().sort_values(["move", "pairs"], ascending=[True, False])
