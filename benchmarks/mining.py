"""Matcher speed: the project's trie matcher against a naive startswith loop over the full lexicon.

    .venv/bin/python benchmarks/mining.py [--params params/default.yaml] [--naive-sample 20000]

Reads the default run's sentence table and lexicon (run notebooks 00-04 first, or pass --sentences and
--lexicon), builds the ~303K consecutive pairs of the default corpus, and matches their second sentences
(a) with `MarkerMatcher.match_series` (and the per-sentence `match`) on all pairs and (b) with
`MarkerMatcher.match_naive` (`str.startswith` against every marker) on a seeded sample. Both must give identical
matches on the sample; it prints pairs/second for both, the ratio, and the end-to-end rate of `mine_sentences`
(matching + cleaning). One process, one core.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

# One core: polars (the vectorised first test of the matcher) must not use a thread pool.
os.environ.setdefault("POLARS_MAX_THREADS", "1")

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratio_utils.config import load_config  # noqa: E402
from ratio_utils.mining import (
    build_matcher,
    consecutive_pairs,
    lowered_second_sentences,
    mine_sentences,
    prepare_sentences,
)
from ratio_utils.param_sections import MiningParams
from ratio_utils.schema import SENTENCE_COLUMNS  # noqa: E402


def best_of(repeats: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params/default.yaml")
    parser.add_argument("--sentences", help="sentence table (default: the params' data/interim/sentences.parquet)")
    parser.add_argument("--lexicon",
                        help="lexicon table (default: the params' final lexicon, data/interim/lexicon.parquet)")
    parser.add_argument("--naive-sample", type=int, default=20_000, help="pairs for the naive loop (0 = all)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    cfg = load_config(args.params)
    params = cfg.section("mining", MiningParams)
    params.progress = False
    sentences_path = Path(args.sentences or cfg.paths.sentences)
    lexicon_path = Path(args.lexicon or cfg.paths.final_lexicon)
    for path in (sentences_path, lexicon_path):
        if not path.exists():
            print(f"missing {path}: run notebooks 00-04 with {args.params} first, or pass --sentences/--lexicon",
                  file=sys.stderr)
            return 2
    sentences = pd.read_parquet(sentences_path, columns=list(SENTENCE_COLUMNS))
    matcher, _ = build_matcher(pd.read_parquet(lexicon_path), params.extension_max_words, lexicon_path)

    frame = prepare_sentences(sentences, sentences_path)
    _, second = consecutive_pairs(frame)
    _, series = lowered_second_sentences(frame, second)
    texts = series.to_list()
    print(f"pairs: {len(texts):,}   markers: {len(matcher.entries):,}   sentences: {len(frame):,}   "
          f"POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']}")

    fast_s, fast = best_of(args.repeats, lambda: matcher.match_series(series))
    loop_s, loop = best_of(args.repeats, lambda: [matcher.match(t) for t in texts])
    assert loop == fast, "match_series and match disagree"
    rng = random.Random(args.seed)
    sample_idx = (range(len(texts)) if args.naive_sample <= 0 or args.naive_sample >= len(texts)
                  else sorted(rng.sample(range(len(texts)), args.naive_sample)))
    sample = [texts[i] for i in sample_idx]
    naive_s, naive = best_of(1, lambda: [matcher.match_naive(t) for t in sample])
    mismatches = sum(fast[i] != n for i, n in zip(sample_idx, naive))
    matched = sum(m is not None for m in fast)
    end_to_end_s, _ = best_of(1, lambda: mine_sentences(sentences, matcher, params))

    fast_rate = len(texts) / fast_s
    naive_rate = len(sample) / naive_s
    print(f"{'method':<34}{'pairs':>10}{'seconds':>10}{'pairs/s':>14}")
    print(f"{'project matcher (match_series)':<34}{len(texts):>10,}{fast_s:>10.3f}{fast_rate:>14,.0f}")
    print(f"{'project matcher, per-text match()':<34}{len(texts):>10,}{loop_s:>10.3f}{len(texts) / loop_s:>14,.0f}")
    print(f"{'naive startswith loop':<34}{len(sample):>10,}{naive_s:>10.3f}{naive_rate:>14,.0f}")
    print(f"{'mine_sentences end to end':<34}{len(texts):>10,}{end_to_end_s:>10.3f}"
          f"{len(texts) / end_to_end_s:>14,.0f}")
    print(f"speed-up of the matcher over the naive loop: {fast_rate / naive_rate:,.0f}x  "
          "(goal >= 100x; >= 500K pairs/s)")
    print(f"pairs whose second sentence starts with a marker: {matched:,}")
    print(f"identical matches on the {len(sample):,} sampled pairs: {mismatches == 0} ({mismatches} differ)")
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
