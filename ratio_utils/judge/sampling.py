"""The pairs the judge sees: pair ids, the judge's view of a pair, the explicit-anaphor flag, and
the marker-stratified sample of test pairs (equal allocation). Pure functions on frames; reads and
writes nothing.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..schema import Move, normalize_marker

# The explicit anaphors the paper counts in Address markers (Appendix E).
_ANAPHOR = re.compile(r"\b(this|these|such|it|the above)\b", re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# pairs: ids, the judge's view, sampling
# --------------------------------------------------------------------------------------------


def format_pair(query: str, marker: str, gold: str) -> str:
    """The judge's view of a pair: `querySentence. Marker, goldSentence` (paper Appendix E).

    `marker` is the marker as it stood in the paper (`marker_text`), not the lexicon entry: for a
    clause-bearing entry such as `for this purpose, we propose,` the gold sentence already starts
    after the marker's first comma, and joining the entry would repeat the clause.
    """
    query = query.strip()
    if not query.endswith((".", "!", "?")):
        query += "."
    marker = normalize_marker(marker)
    marker = marker[:1].upper() + marker[1:]
    return f"{query} {marker}, {gold.strip()}"


def pair_ids(frame: pd.DataFrame) -> pd.Series:
    return frame["query_id"].astype(str) + "-" + frame["gold_id"].astype(str)


def paper_markers(frame: pd.DataFrame) -> pd.Series:
    """The marker as it stood in the paper (`marker_text`); the lexicon entry (`queryTerm`) only
    where a release lacks it."""
    if "marker_text" not in frame.columns:
        return frame["queryTerm"]
    text = frame["marker_text"].astype("object")
    return text.where(text.notna() & (text.astype(str).str.strip() != ""), frame["queryTerm"])


def has_explicit_anaphor(marker: str) -> bool:
    return bool(_ANAPHOR.search(marker or ""))


def with_pair_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `pair_id` and `judge_text`; fill `marker_has_anaphor` from the marker if a release lacks it."""
    frame = frame.copy()
    frame["pair_id"] = pair_ids(frame)
    frame["judge_text"] = [format_pair(q, m, g)
                           for q, m, g in zip(frame.querySentence, paper_markers(frame), frame.goldSentence)]
    if "marker_has_anaphor" not in frame.columns:
        frame["marker_has_anaphor"] = frame["queryTerm"].map(has_explicit_anaphor)
    return frame


def stratified_equal_allocation(frame: pd.DataFrame, by: str, n: int | None, seed: int) -> pd.DataFrame:
    """Sample `n` rows so that every stratum contributes the same number, or all its rows if it has fewer.

    Water-filling: strata smaller than the common quota give all their rows; the quota is the
    largest share the rest can take; the few rows left over after an even split go, one each, to
    randomly chosen strata that still have rows. (No library offers equal allocation with caps.)
    """
    if n is None or n >= len(frame):
        return frame.copy()
    rng = np.random.default_rng(seed)
    keys = frame[by].map(normalize_marker)
    sizes = keys.value_counts()
    strata = sorted(sizes.index, key=lambda k: (sizes[k], k))
    take: dict[str, int] = {}
    remaining, left = n, len(strata)
    for pos, key in enumerate(strata):
        share = remaining // left
        if sizes[key] <= share:
            take[key] = int(sizes[key])
            remaining -= take[key]
            left -= 1
            continue
        rest = strata[pos:]
        for k in rest:
            take[k] = share
        extra = remaining - share * len(rest)
        for k in rng.choice(rest, size=extra, replace=False):
            take[k] += 1
        break
    chosen = []
    for key, count in take.items():
        index = frame.index[keys == key]
        chosen.extend(rng.choice(index, size=count, replace=False).tolist())
    return frame.loc[sorted(chosen)].copy()


def nested_sample(frame: pd.DataFrame, by: str, waves: list[int] | None, seed: int) -> pd.DataFrame:
    """A sample drawn in waves, each with a `wave` column (1, 2, ...): wave 1 is `stratified_equal_allocation(frame,
    by, waves[0], seed)`, each later wave the same rule with the same seed over the rows no earlier wave drew. One
    wave (a plain number) is exactly today's sample; `None` takes every row as wave 1. Rows in wave order."""
    if waves is None:
        return frame.assign(wave=1)
    drawn: list[pd.DataFrame] = []
    rest = frame
    for number, n in enumerate(waves, start=1):
        if rest.empty:
            break
        wave = stratified_equal_allocation(rest, by, n, seed)
        drawn.append(wave.assign(wave=number))
        rest = rest.loc[~rest.index.isin(wave.index)]
    return pd.concat(drawn) if drawn else frame.iloc[:0].assign(wave=pd.Series(dtype=int))


def sample_for_judging(test_pairs: dict[Move, pd.DataFrame], sizes: dict[str, int | list[int] | None],
                       seed: int) -> dict[Move, pd.DataFrame]:
    """The pairs the judge sees: per move, all test pairs or a marker-stratified sample (in waves for a list of
    sizes, `nested_sample`), with the wave of each pair.

    A (query, gold) pair is judged once: repeated pairs would get the same verdict anyway.
    """
    samples = {}
    for move, frame in test_pairs.items():
        frame = with_pair_columns(frame)
        repeated = int(frame["pair_id"].duplicated().sum())
        if repeated:
            print(f"{move.value}: {repeated} repeated (query, gold) pair(s) are judged once")
        frame = frame.drop_duplicates("pair_id")
        size = sizes.get(move.value)
        waves = None if size is None else list(size) if isinstance(size, (list, tuple)) else [size]
        samples[move] = nested_sample(frame, "queryTerm", waves, seed)
    return samples


def sample_overview(test_pairs: dict[Move, pd.DataFrame], samples: dict[Move, pd.DataFrame],
                    sizes: dict[str, int | list[int] | None]) -> pd.DataFrame:
    """Per move: test pairs and markers, the pairs sampled (per wave) and their markers, the share with an anaphor."""
    return pd.DataFrame([
        {"move": m.value, "test pairs": len(test_pairs[m]),
         "markers": test_pairs[m]["queryTerm"].map(normalize_marker).nunique(),
         "sampled": len(s), "markers sampled": s["queryTerm"].map(normalize_marker).nunique(),
         "with anaphor %": 100 * s["marker_has_anaphor"].astype(bool).mean() if len(s) else np.nan,
         "sample size (param)": sizes.get(m.value) or "all",
         "per wave": ", ".join(str(n) for n in s["wave"].value_counts().sort_index())}
        for m, s in samples.items()
    ])


def first_wave(sample: pd.DataFrame, move: Move) -> pd.DataFrame:
    """The pairs of a sample's first wave (annotation sheets are drawn from it, so labels made on earlier sheets
    stay valid as waves are added); the whole sample when it has one wave."""
    if sample["wave"].max() <= 1:
        return sample
    print(f"{move.value}: annotation sheets from wave 1 of the nested sample "
          f"({int((sample['wave'] == 1).sum())} pairs)")
    return sample[sample["wave"] == 1]
