"""Every notebook executes under papermill on the smoke params (what run_all.sh runs, on a tiny slice).

A notebook that breaks fails CI here. Outputs go to a temporary root, never into the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest

from ratio_utils.config import REPO_ROOT
from ratio_utils.pipeline import discover_notebooks

pytestmark = [pytest.mark.smoke, pytest.mark.slow]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, shared_dir):
    root = tmp_path_factory.mktemp("smoke")
    env = dict(os.environ, RATIO_OUTPUT_ROOT=str(root), RATIO_SHARED=str(shared_dir), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "ratio_utils.pipeline", "--params", "params/smoke.yaml", "--run-id", "smoke"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )
    return root, proc


def test_every_notebook_runs_on_smoke_params(smoke_run):
    root, proc = smoke_run
    assert proc.returncode == 0, f"smoke run failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    timings = pd.read_csv(root / "runs" / "smoke" / "timings.csv")
    executed = {name.split("__")[0].removesuffix(".ipynb") for name in timings.notebook}
    assert executed == {nb.stem for nb in discover_notebooks()}
