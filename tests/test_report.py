"""Tables and figures are written with their provenance, notes and blank missing cells."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from ratio_utils.report import save_figure, write_table


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
