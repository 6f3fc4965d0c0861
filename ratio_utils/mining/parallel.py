"""Stage 05 fanned out: shards of an in-memory sentence table on Dask, or a partitioned sentence table
(corpus.papers_per_part) mined part by part, locally or one Dask task per part (docs/scale.md).

`mine_parts` reads every `sentences.parquet/part-i.parquet` and writes `pairs.parquet/part-i.parquet` and
`distractors.parquet/part-i.parquet` (atomically, one pair of parts per task): no process holds the corpus,
and only the matcher and the rule counts travel. Each mined part's report (`cfg.paths.mining_parts/part-i.json`:
its key and counts) is written after both tables, so it marks the part finished; the key hashes the sentence
part's bytes, the mining params that change rows and the lexicon's SHA-256, and a rerun (a killed notebook 05
resumed) takes a finished part's counts from its report instead of mining it again.

The mined tables of a run, one parquet file or a folder of parts, are written (`mine_table`, `write_mined`) and
read back here (`read_mined`; a partitioned run's short columns and seeded example rows: `mined_parts_result`).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..cluster import dask_client
from ..io import sha256_file, write_json_atomic, write_parquet_atomic
from ..param_sections import EXECUTION_SETTINGS, MiningParams
from ..parts import object_text, part_files, part_path, read_table, remove_parts_from, reset_table, scan_table
from ..schema import SENTENCE_COLUMNS
from .extraction import MiningResult, combine, mine_sentences
from .matcher import MarkerMatcher


def shard_by_paper(sentences: pd.DataFrame, n_shards: int) -> list[pd.DataFrame]:
    """Split a sentence table into shards that never cut a paper (pairs live inside one paper)."""
    if n_shards <= 1 or sentences.empty:
        return [sentences]
    papers = pd.Index(sentences["corpus"].astype(str) + "\x1f" + sentences["paper_id"].astype(str))
    codes, uniques = pd.factorize(papers, sort=True)
    shard_of_paper = np.arange(len(uniques)) * n_shards // max(len(uniques), 1)
    shard = shard_of_paper[codes]
    return [sentences[shard == i] for i in range(n_shards) if (shard == i).any()]


def _mine_shard(shard: pd.DataFrame, matcher: MarkerMatcher, params: MiningParams) -> MiningResult:
    return mine_sentences(shard, matcher, params)


def _quiet(params: MiningParams) -> MiningParams:
    return MiningParams(**{**params.__dict__, "progress": False})


def mine_with_dask(sentences: pd.DataFrame, matcher: MarkerMatcher, params: MiningParams, client=None) -> MiningResult:
    """Run `mine_sentences` over shards of papers of one in-memory table on a Dask cluster and combine the results.

    `client`: an existing distributed.Client; otherwise see `dask_client`. For a corpus that does not
    fit in memory, build it in parts (`corpus.papers_per_part`) and use `mine_parts`.
    """
    from dask.distributed import as_completed
    from tqdm.auto import tqdm

    with dask_client(params.dask_scheduler, params.dask_workers, params.dask_processes, client) as client:
        shards = shard_by_paper(sentences, params.shards)
        matcher_future = client.scatter(matcher, broadcast=True)
        # Shards are scattered (sent once, as data) rather than embedded in the task graph.
        shard_futures = client.scatter(shards)
        futures = [client.submit(_mine_shard, shard, matcher_future, _quiet(params), pure=False)
                   for shard in shard_futures]
        results = []
        for future in tqdm(as_completed(futures), total=len(futures), desc="shards", disable=not params.progress):
            results.append(future.result())
        return combine(results)


def mining_run_key(params: MiningParams, lexicon_digest: str) -> str:
    """What every mined part of a run depends on besides its sentences: the rules' params and the lexicon."""
    settings = {k: v for k, v in asdict(params).items() if k not in EXECUTION_SETTINGS}
    return hashlib.sha256(json.dumps({"params": settings, "lexicon": lexicon_digest},
                                     sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class MinedPartOutputs:
    """Where the mined part `index` goes (plain paths: the task may run on a Dask worker)."""

    index: int
    pairs: Path
    distractors: Path
    report: Path

    @classmethod
    def of(cls, pairs: "str | Path", distractors: "str | Path", reports: "str | Path",
           index: int) -> "MinedPartOutputs":
        return cls(index, part_path(pairs, index), part_path(distractors, index),
                   Path(reports) / f"part-{index:05d}.json")

    def finished(self, key: str) -> dict | None:
        """The part's report if it was finished with this key and both its tables are there; else None."""
        if not (self.report.exists() and self.pairs.exists() and self.distractors.exists()):
            return None
        done = json.loads(self.report.read_text())
        return done if done.get("key") == key else None


def mine_part(sentence_part: str, outputs: MinedPartOutputs, run_key: str, matcher: MarkerMatcher,
              params: MiningParams) -> tuple[Counter, bool]:
    """Mine one sentence part into its pairs and distractors parts (same number), then its report; return the
    counts and whether the part was already finished with the same key (then nothing is mined or written).

    Runs on a Dask worker (or in the local process): the worker hashes and reads its own part and writes its
    own outputs, so only the matcher and the counts travel. Paths must be visible to every worker.
    """
    key = hashlib.sha256(f"{run_key}|{sha256_file(sentence_part)}".encode()).hexdigest()
    done = outputs.finished(key)
    if done is not None:
        return Counter(done["counts"]), True
    frame = pd.read_parquet(sentence_part, columns=list(SENTENCE_COLUMNS))
    result = mine_sentences(frame, matcher, params, sentence_part)
    write_parquet_atomic(_string_columns(result.pairs), outputs.pairs)
    write_parquet_atomic(_string_columns(result.distractors), outputs.distractors)
    write_json_atomic(outputs.report, {"key": key, "sentences": Path(sentence_part).name,
                                       "counts": {k: int(n) for k, n in result.counts.items()}})  # last
    return result.counts, False


def _string_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns typed as strings even when a part is empty, so every part has one parquet schema."""
    return frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object})


@dataclass
class MinedParts:
    """What `mine_parts` did: the rule counts summed over parts, and how many parts a rerun found finished."""

    counts: Counter
    total: int
    reused: int

    def summary(self) -> dict[str, int]:
        return {"total": self.total, "skipped_unchanged": self.reused, "built": self.total - self.reused}


def mine_parts(sentences: "str | Path", pairs: "str | Path", distractors: "str | Path", reports: "str | Path",
               matcher: MarkerMatcher, params: MiningParams, lexicon_digest: str, client=None) -> MinedParts:
    """Mine every part of a partitioned sentence table into pairs/distractors parts and their reports.

    `engine: local` mines the parts one after another in this process; `engine: dask` (or a given
    client) sends the matcher once to every worker and one task per part. Both write the same parts.
    A part already finished with the same key (`mine_part`) is not mined again.
    """
    from tqdm.auto import tqdm

    parts = part_files(sentences)
    for table in (pairs, distractors):
        reset_table(table, partitioned=True)
        remove_parts_from(table, len(parts))
    for stale in sorted(Path(reports).glob("part-*.json"))[len(parts):]:
        stale.unlink()
    run_key = mining_run_key(params, lexicon_digest)
    jobs = [(str(path), MinedPartOutputs.of(pairs, distractors, reports, index)) for index, path in enumerate(parts)]
    mined = MinedParts(Counter(), len(jobs), 0)

    def add(counts: Counter, reused: bool) -> None:
        mined.counts.update(counts)
        mined.reused += reused

    if params.engine == "local" and client is None:
        for path, outputs in tqdm(jobs, desc="sentence parts", disable=not params.progress):
            add(*mine_part(path, outputs, run_key, matcher, _quiet(params)))
        return mined
    from dask.distributed import as_completed

    with dask_client(params.dask_scheduler, params.dask_workers, params.dask_processes, client) as client:
        matcher_future = client.scatter(matcher, broadcast=True)
        futures = [client.submit(mine_part, path, outputs, run_key, matcher_future, _quiet(params), pure=False)
                   for path, outputs in jobs]
        for future in tqdm(as_completed(futures), total=len(futures), desc="sentence parts",
                           disable=not params.progress):
            add(*future.result())
    return mined


# -- the mined tables of a run: one file, or a folder of parts ----------------------------------------------------
def mine_table(sentences: "str | Path", matcher: MarkerMatcher, params: MiningParams, client=None) -> MiningResult:
    """A sentence table in one parquet file mined in this process, or in shards on Dask (`engine: dask` or a given
    client): the same rows either way."""
    frame = pd.read_parquet(sentences, columns=list(SENTENCE_COLUMNS))
    if params.engine == "dask" or client is not None:
        return mine_with_dask(frame, matcher, params, client)
    return mine_sentences(frame, matcher, params, sentences)


def write_mined(result: MiningResult, pairs: "str | Path", distractors: "str | Path") -> None:
    """The pairs and distractors of a whole-table run, each as one parquet file (parts of an earlier run removed)."""
    for table in (pairs, distractors):
        reset_table(table, partitioned=False)
    write_parquet_atomic(result.pairs, pairs)
    write_parquet_atomic(result.distractors, distractors)


MINED_ORDER = ["corpus", "paper_id", "para", "sent"]  # the row order of `extraction._sorted`

EXAMPLE_SAMPLE_PER_MOVE = 50  # whole pairs per move kept from a partitioned run for notebook 05's examples


def read_mined(table: "str | Path") -> pd.DataFrame:
    """Pairs or distractors as one frame: a single file, or every part (a polars scan) in `_sorted`'s order."""
    return read_table(table, parts_order=MINED_ORDER)


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
        kept = (frame.assign(_rank=rank.to_numpy()).sort_values("_rank", kind="stable").groupby("move")
                .head(per_move).drop(columns="_rank"))
    if kept is None:
        raise FileNotFoundError(f"{table}: no parquet file or parts")
    return kept.sort_values(MINED_ORDER, kind="stable").reset_index(drop=True)


def mined_parts_result(mined: MinedParts, pairs: "str | Path", distractors: "str | Path", seed: int) -> MiningResult:
    """What notebook 05 shows of a partitioned run (the parts are the output): each pair's move and marker, each
    distractor's category (categories: a few bytes a row), the counts and a seeded sample of whole pairs."""
    return MiningResult(read_mined_summary(pairs, ["move", "marker"]), read_mined_summary(distractors, ["category"]),
                        mined.counts, examples=sample_mined_pairs(pairs, EXAMPLE_SAMPLE_PER_MOVE, seed))
