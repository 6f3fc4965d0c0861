"""Stage 05 fanned out: shards of an in-memory sentence table on Dask, or a partitioned sentence table
(corpus.papers_per_part) mined part by part, locally or one Dask task per part (docs/scale.md).

`mine_parts` reads every `sentences.parquet/part-i.parquet` and writes `pairs.parquet/part-i.parquet` and
`distractors.parquet/part-i.parquet` (atomically, one pair of parts per task): no process holds the corpus,
and only the matcher and the rule counts travel.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ..cluster import dask_client
from ..io import write_parquet_atomic
from ..params import MiningParams
from ..parts import part_files, part_path, remove_parts_from, reset_table
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
        futures = [client.submit(_mine_shard, shard, matcher_future, _quiet(params), pure=False) for shard in shard_futures]
        results = []
        for future in tqdm(as_completed(futures), total=len(futures), desc="shards", disable=not params.progress):
            results.append(future.result())
        return combine(results)


def mine_part(sentence_part: str, index: int, matcher: MarkerMatcher, params: MiningParams, pairs: str, distractors: str) -> Counter:
    """Mine one sentence part and write its pairs and distractors parts (same number); return the counts.

    Runs on a Dask worker (or in the local process): the worker reads its own part and writes its
    own outputs, so only the matcher and the counts travel. Paths must be visible to every worker.
    """
    frame = pd.read_parquet(sentence_part, columns=list(SENTENCE_COLUMNS))
    result = mine_sentences(frame, matcher, params, sentence_part)
    write_parquet_atomic(_string_columns(result.pairs), part_path(pairs, index))
    write_parquet_atomic(_string_columns(result.distractors), part_path(distractors, index))
    return result.counts


def _string_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns typed as strings even when a part is empty, so every part has one parquet schema."""
    return frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object})


def mine_parts(sentences: "str | Path", pairs: "str | Path", distractors: "str | Path", matcher: MarkerMatcher,
               params: MiningParams, client=None) -> Counter:
    """Mine every part of a partitioned sentence table into pairs/distractors parts; return the summed counts.

    `engine: local` mines the parts one after another in this process; `engine: dask` (or a given
    client) sends the matcher once to every worker and one task per part. Both write the same parts.
    """
    from tqdm.auto import tqdm

    parts = part_files(sentences)
    for table in (pairs, distractors):
        reset_table(table, partitioned=True)
        remove_parts_from(table, len(parts))
    jobs = [(str(path), index) for index, path in enumerate(parts)]
    counts: Counter = Counter()
    if params.engine == "local" and client is None:
        for path, index in tqdm(jobs, desc="sentence parts", disable=not params.progress):
            counts.update(mine_part(path, index, matcher, _quiet(params), str(pairs), str(distractors)))
        return counts
    from dask.distributed import as_completed

    with dask_client(params.dask_scheduler, params.dask_workers, params.dask_processes, client) as client:
        matcher_future = client.scatter(matcher, broadcast=True)
        futures = [client.submit(mine_part, path, index, matcher_future, _quiet(params), str(pairs), str(distractors), pure=False)
                   for path, index in jobs]
        for future in tqdm(as_completed(futures), total=len(futures), desc="sentence parts", disable=not params.progress):
            counts.update(future.result())
    return counts
