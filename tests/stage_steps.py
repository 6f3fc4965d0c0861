"""Notebooks 05 and 06 as the notebooks run them (through their stages), for the tests that build on their outputs."""

from __future__ import annotations


def mine(cfg):
    """Notebook 05's mining step: (result, lexicon check)."""
    from ratio_utils.stages.pair_mining import PairMiningStage

    stage = PairMiningStage.from_config(cfg)
    stage.mine()
    return stage.result, stage.lexicon_check


def build(cfg):
    """Notebook 06's build step: the built benchmark."""
    from ratio_utils.stages.split_and_pool import SplitAndPoolStage

    stage = SplitAndPoolStage.from_config(cfg)
    stage.build()
    return stage.built
