"""Tables and figures are written with their provenance, notes and blank missing cells."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from ratio_utils.publish.published import save_figure, write_table


def test_write_table_writes_every_format_with_notes_and_blank_missing_cells(cfg, tmp_path):
    source = tmp_path / "input.txt"
    source.write_text("x")
    frame = pd.DataFrame({"system": ["BM25", "ColBERT"], "M@10": [12.345, None], "n": pd.array([3, None], dtype="Int64")})
    written = write_table(frame, "demo", cfg, caption="Demo", notes=["ColBERT: not available offline"], inputs=[source])
    md = written["md"].read_text()
    assert "12.3" in md and "<NA>" not in md and "nan" not in md
    assert "- ColBERT: not available offline" in md
    assert pd.read_csv(written["csv"]).shape == (2, 3)
    assert "\\begin{table}" in written["tex"].read_text()
    record = json.loads(written["provenance"].read_text())
    assert record["notes"] == ["ColBERT: not available offline"]
    assert record["inputs"]["input.txt"] is not None and record["params"]["name"] == cfg.name  # relative to the root


def test_save_figure_writes_png_and_pdf(cfg):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    written = save_figure(fig, "demo", cfg)
    assert written["png"].read_bytes()[:4] == b"\x89PNG" and written["pdf"].read_bytes()[:4] == b"%PDF"


def test_commit_is_dirty_only_when_code_changed(tmp_path):
    """Refreshing committed outputs (tables, figures, executed notebooks, the summary) is not a code change."""
    import subprocess

    from ratio_utils.publish.published import git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ("tables/t.md", "reports/summary.md", "notebooks/executed/00.ipynb", "results/ml/tables/t.md", "ratio_utils/m.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("v1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1")
    head = git_commit(tmp_path)
    assert head and not head.endswith("-dirty")
    for name in ("tables/t.md", "reports/summary.md", "notebooks/executed/00.ipynb", "results/ml/tables/t.md"):
        (tmp_path / name).write_text("v2\n")
    assert git_commit(tmp_path) == head
    (tmp_path / "ratio_utils/m.py").write_text("v2\n")
    assert git_commit(tmp_path) == head + "-dirty"
