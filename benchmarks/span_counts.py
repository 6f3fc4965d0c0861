"""Span counting speed: one vectorised pass (polars) vs a Counter over a generator vs a scan per span.

    .venv/bin/python benchmarks/span_counts.py [--params params/default.yaml] [--spans 50] [--naive-sample 20000]

Reads the run's sentence table (notebook 00; or --sentences PATH), counts the spans before the first
comma (at most seven words) (a) with `curation.count_spans` (polars, the project's implementation),
(b) with a `collections.Counter` over a generator of `curation.span_of`, and (c) naively: for each of
the top --spans spans, one scan over the sentences testing whether a sentence opens with it (the
approach the one-pass count replaces; it only counts the spans it is given). (c) runs on a seeded
sample. All three must agree on the counts they share. Prints sentences/second side by side.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratio_utils.config import load_config  # noqa: E402
from ratio_utils.lexicon import curation  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def naive_counts(texts: list[str], spans: list[str]) -> dict[str, int]:
    """One scan over all sentences per span: does the sentence's lower-cased text open with `span,`?"""
    counts = {}
    for span in spans:
        n = 0
        for text in texts:
            if curation.span_of(text) == span:
                n += 1
        counts[span] = n
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params/default.yaml")
    parser.add_argument("--sentences", help="sentence table (default: the run's cfg.paths.sentences)")
    parser.add_argument("--spans", type=int, default=50, help="spans the naive scan counts")
    parser.add_argument("--naive-sample", type=int, default=20000, help="sentences the naive scan reads")
    args = parser.parse_args()
    cfg = load_config(args.params)
    sentences = curation.read_sentences(args.sentences or cfg.paths.sentences)
    texts = sentences["text_clean"].to_list()
    n = len(texts)

    t_polars, counts = timed(lambda: curation.count_spans(sentences, 7))
    t_counter, counter = timed(lambda: Counter(s for s in map(curation.span_of, texts) if s is not None))
    assert dict(zip(counts["span"].to_list(), counts["count"].to_list())) == dict(counter), \
        "polars and Counter disagree"

    sample = sentences.sample(n=min(args.naive_sample, n), seed=cfg.seed)
    top = counts.head(args.spans)["span"].to_list()
    t_naive, naive = timed(lambda: naive_counts(sample["text_clean"].to_list(), top))
    sample_counts = dict(curation.count_spans(sample, 7).iter_rows())
    assert all(naive[s] == sample_counts.get(s, 0) for s in top), "naive scan disagrees"

    rows = [
        ("polars, one pass (count_spans)", n, t_polars, "all spans"),
        ("Counter over a generator (span_of)", n, t_counter, "all spans"),
        (f"naive: one scan per span ({len(top)} spans)", sample.height, t_naive, f"only {len(top)} spans"),
    ]
    print(f"{n:,} sentences, {counts.height:,} distinct spans")
    print(f"{'implementation':45s} {'sentences':>10s} {'seconds':>9s} {'sentences/s':>13s}  counts")
    for name, size, seconds, what in rows:
        print(f"{name:45s} {size:>10,} {seconds:>9.2f} {size / seconds:>13,.0f}  {what}")
    base = rows[0][1] / rows[0][2]
    print(f"one pass vs naive: {base / (rows[2][1] / rows[2][2]):,.0f}x more sentences/s "
          f"(and the naive scan would need {len(counts):,} scans to count every span)")


if __name__ == "__main__":
    main()
