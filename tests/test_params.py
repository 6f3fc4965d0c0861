"""Every shipped params file is valid for every stage: a typo in one would otherwise surface only
when that stage runs (or, for params/paper.yaml, on someone else's cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratio_utils import train
from ratio_utils.config import PARAMS_SECTIONS, REPO_ROOT, load_config

PARAMS_FILES = sorted((REPO_ROOT / "params").glob("*.yaml"))
STAGES = PARAMS_SECTIONS


def test_the_three_documented_params_files_exist():
    assert {p.name for p in PARAMS_FILES} >= {"default.yaml", "smoke.yaml", "paper.yaml"}


@pytest.mark.parametrize("params_file", PARAMS_FILES, ids=lambda p: p.name)
def test_params_file_is_valid_for_every_stage(params_file: Path):
    cfg = load_config(params_file)
    unknown_sections = set(cfg.sections) - set(STAGES)
    assert not unknown_sections, f"{params_file.name}: sections no stage reads: {unknown_sections}"
    for name, cls in STAGES.items():
        cfg.section(name, cls)  # raises on an unknown key
    params = train.load_train_params(cfg)
    assert train.load_hyperparams(REPO_ROOT / params.configs_file, ids=params.configs)
