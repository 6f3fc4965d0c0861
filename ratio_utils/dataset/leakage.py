"""Stage 06's leakage checks: run on every build (whole tables, or one hash bucket of ids at a time); each
raises `LeakageError`. A check restricted to the rows whose ids fall in one bucket is the whole check
restricted to those ids, so running it on every bucket is running it on the whole benchmark.
"""

from __future__ import annotations

import pandas as pd

from ..schema import DISTRACTOR_CATEGORIES


class LeakageError(AssertionError):
    """A leakage check failed: the benchmark would let training see evaluation data."""



def check_no_pair_in_two_splits(pairs: pd.DataFrame) -> None:
    splits_per_pair = pairs.groupby(["query", "gold"])["split"].nunique()
    leaked = splits_per_pair[splits_per_pair > 1]
    if len(leaked):
        example = leaked.index[0]
        raise LeakageError(f"{len(leaked)} (query, gold) pair(s) occur in more than one split, e.g. {example!r}")


def check_test_pool_disjoint_from_train(pools: dict[str, pd.DataFrame]) -> None:
    shared = set(pools["test"]["docid"]) & set(pools["train"]["docid"])
    if shared:
        raise LeakageError(f"{len(shared)} sentence(s) of the test pool are also in the train pool, e.g. docid "
                           f"{sorted(shared)[0]}")


def check_test_queries_not_in_train(pools: dict[str, pd.DataFrame], pairs: pd.DataFrame) -> None:
    test_queries = set(pairs.loc[pairs["split"] == "test", "query_id"])
    train_sentences = set(pools["train"]["docid"]) | set(pairs.loc[pairs["split"] == "train", "query_id"])
    shared = test_queries & train_sentences
    if shared:
        raise LeakageError(f"{len(shared)} test query sentence(s) also occur in the training data, e.g. id "
                           f"{sorted(shared)[0]}")


def check_no_distractor_equals_gold(pools: dict[str, pd.DataFrame], pairs: pd.DataFrame) -> None:
    gold_ids = set(pairs["gold_id"])
    for split, pool in pools.items():
        distractor = pool[pool["source"].isin(DISTRACTOR_CATEGORIES)]
        bad = distractor[distractor["docid"].isin(gold_ids)]
        if len(bad):
            raise LeakageError(f"{len(bad)} distractor(s) of the {split} pool equal a gold sentence, e.g. "
                               f"{bad['text'].iloc[0]!r}")


def check_golds_in_pool(pools: dict[str, pd.DataFrame], pairs: pd.DataFrame) -> None:
    """Not a leak but a broken benchmark: every query's gold must be in its split's pool."""
    for split, pool in pools.items():
        missing = set(pairs.loc[pairs["split"] == split, "gold_id"]) - set(pool["docid"])
        if missing:
            raise LeakageError(f"{len(missing)} gold sentence(s) of {split} pairs are missing from the {split} pool")


def run_leakage_checks(pairs: pd.DataFrame, pools: dict[str, pd.DataFrame]) -> None:
    check_no_pair_in_two_splits(pairs)
    check_test_pool_disjoint_from_train(pools)
    check_test_queries_not_in_train(pools, pairs)
    check_no_distractor_equals_gold(pools, pairs)
    check_golds_in_pool(pools, pairs)
