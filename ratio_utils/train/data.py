"""Fine-tuning data (stage 09): a move's training pairs (a split's evaluation set is `Benchmark.eval_set`).

`training_data_fingerprint` keys a fine-tuned model by the files it was trained and selected on.

Reads:  the benchmark (queries, qrels and pools of one move and split).
Writes: nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import pandas as pd

from ..dataset.benchmark import Benchmark, candidates_path, pairs_path
from ..io import sha256_file
from ..schema import Move, Split


def training_pairs(bench: Benchmark, move: Move, max_pairs: int | None, seed: int) -> pd.DataFrame:
    """The move's training pairs as (anchor, positive), a seeded sample when `max_pairs` caps them."""
    frame = bench.queries(move, Split.TRAIN)
    pairs = frame[["querySentence", "goldSentence"]].rename(columns={"querySentence": "anchor",
                                                                     "goldSentence": "positive"})
    empty = (pairs["anchor"].isna() | pairs["positive"].isna() | (pairs["anchor"].str.strip() == "")
             | (pairs["positive"].str.strip() == ""))
    if empty.any():
        raise ValueError(f"{int(empty.sum())} training pair(s) of {move.value} have an empty query or gold sentence")
    if max_pairs is not None and len(pairs) > max_pairs:
        pairs = pairs.sample(n=max_pairs, random_state=seed)
    return pairs.reset_index(drop=True)


def training_data_fingerprint(bench: Benchmark, moves: Iterable[Move | str]) -> str:
    """A checksum of what a model of `moves` is trained and selected on: each move's train and validation
    pairs and the validation pool.

    Test, silver and the other moves' files are left out on purpose: a new silver set (test side only) must
    not retrain a model whose training and selection inputs are unchanged. A file that is absent counts as
    absent, so adding one changes the fingerprint.
    """
    files = [pairs_path(bench.root, Move.parse(m), s) for m in moves for s in (Split.TRAIN, Split.VALIDATION)]
    files.append(candidates_path(bench.root, Split.VALIDATION))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(bench.root).as_posix().encode())
        digest.update(sha256_file(path).encode() if path.exists() else b"absent")
    return digest.hexdigest()
