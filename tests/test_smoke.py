"""Every notebook executes under papermill on the smoke params (what run_all.sh runs, on a tiny slice).

A notebook that breaks fails CI here. Outputs go to a temporary root, never into the repository.
"""

from __future__ import annotations

import os
import re
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


def _executed(root):
    import nbformat

    return {path.name: nbformat.read(path, as_version=4) for path in sorted((root / "runs" / "smoke").glob("*.ipynb"))}


def _outputs(notebook, kind):
    return [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type in kind]


def test_tables_1_7_8_are_displayed_once_per_run(smoke_run):
    from ratio_utils.paper_tables import SHOWN_IN, TABLE_SPECS

    root, _ = smoke_run
    for name, spec in TABLE_SPECS.items():
        caption = "<b>" + spec.caption.split("{")[0]  # the caption PaperTables.show puts above the table
        shown = {nb_name: sum(caption in str(o.get("data", {}).get("text/html", ""))
                              for o in _outputs(nb, ("display_data", "execute_result")))
                 for nb_name, nb in _executed(root).items()}
        assert {k: v for k, v in shown.items() if v} == {f"{SHOWN_IN}.ipynb": 1}, name


def test_stream_outputs_hold_no_terminal_escapes_and_each_notice_once(smoke_run):
    """Nested progress bars leave cursor-up codes (\\x1b[A); a missing LLM price is said once per run."""
    root, _ = smoke_run
    notices = []
    for name, nb in _executed(root).items():
        for output in _outputs(nb, ("stream",)):
            assert "\x1b[" not in output["text"], f"{name}: {output['text'][:300]!r}"
            assert "cost unknown" not in output["text"], name
            notices += [line for line in output["text"].splitlines() if "llm.prices has no price" in line]
    assert len(notices) == len(set(notices))


def test_the_time_table_says_what_was_reused(smoke_run):
    from ratio_utils.run_records import reused_by_notebook

    root, _ = smoke_run
    reused = reused_by_notebook(root / "runs" / "smoke")
    # 09 scores the base model on the pool notebook 08 embedded, and its tables use 08's intervals.
    assert any(name.startswith("09_") and "computed before" in line for name, line in reused.items())
    assert re.search(r"\|\s*seconds\s*\|\s*reused\s*\|", (root / "reports" / "summary.md").read_text())
