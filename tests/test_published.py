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
    frame = pd.DataFrame({"system": ["BM25", "ColBERT"], "M@10": [12.345, None],
                          "n": pd.array([3, None], dtype="Int64")})
    written = write_table(frame, "demo", cfg, caption="Demo", notes=["ColBERT: not available offline"],
                          inputs=[source])
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


def test_latex_export_carries_its_notes_escaped(cfg):
    """In LaTeX as in Markdown: who answered, what a sample covers and why a row is empty travel with the table."""
    frame = pd.DataFrame({"system": ["BM25_uni", "Qwen"], "M@10": [12.3, None]})
    notes = ["Qwen3-Embedding-0.6B (generic, Baseline): `Qwen/Qwen3-Embedding-0.6B`: not run: not in the cache",
             "50% of a_b & c; cost ~$3 #1 {x} ^ \\ end"]
    tex = write_table(frame, "demo", cfg, caption="Demo & more", notes=notes)["tex"].read_text()
    assert r"\textit{Notes:}" in tex
    assert r"\texttt{Qwen/Qwen3-Embedding-0.6B}: not run: not in the cache" in tex
    assert (r"50\% of a\_b \& c; cost \textasciitilde{}\$3 \#1 \{x\} \textasciicircum{} "
            r"\textbackslash{} end") in tex
    assert r"\caption{Demo \& more}" in tex  # pandas leaves the caption as it is: escaped here
    # under the tabular, inside the float, in the order of the Markdown notes
    assert tex.index(r"\end{tabular}") < tex.index("Qwen3-Embedding") < tex.index("50\\%") < tex.index(r"\end{table}")
    assert tex.count("{") - tex.count(r"\{") == tex.count("}") - tex.count(r"\}")  # the braces balance
    plain = write_table(frame, "plain", cfg, caption="Plain")["tex"].read_text()
    assert "Notes" not in plain


def test_latex_escape_leaves_no_special_character_unescaped():
    from ratio_utils.publish.published import latex_escape

    assert latex_escape("a_b") == r"a\_b" and latex_escape("`x_y`") == r"\texttt{x\_y}"
    assert latex_escape("100%") == r"100\%" and latex_escape("plain text") == "plain text"


def _pdf_figure():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [1, 0], label="MRR@10")
    ax.set_title("Address: N = 1030")
    ax.legend()
    return fig


def test_saved_figures_are_byte_identical_on_a_rerun_with_truetype_fonts(cfg):
    """No creation date in the PDF and Type 42 (TrueType) fonts, never Type 3: a rerun rewrites no committed figure."""
    fig = _pdf_figure()
    first = {ext: path.read_bytes() for ext, path in save_figure(fig, "demo", cfg).items() if ext in ("png", "pdf")}
    plt.close(fig)
    fig = _pdf_figure()
    second = {ext: path.read_bytes() for ext, path in save_figure(fig, "demo", cfg).items() if ext in ("png", "pdf")}
    plt.close(fig)
    assert first == second
    pdf = first["pdf"]
    assert b"/CreationDate" not in pdf
    assert b"/Subtype /Type3" not in pdf  # matplotlib's default, pdf.fonttype 3
    assert b"/Subtype /TrueType" in pdf or b"/Subtype /CIDFontType2" in pdf  # Type 42: the TrueType font itself


def test_commit_is_dirty_only_when_code_changed(tmp_path):
    """Refreshing committed outputs (tables, figures, executed notebooks, the summary) is not a code change."""
    import subprocess

    from ratio_utils.publish.published import git_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    for name in ("tables/t.md", "reports/summary.md", "notebooks/executed/00.ipynb", "results/ml/tables/t.md",
                 "ratio_utils/m.py"):
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


def test_provenance_names_python_and_the_versions_of_the_packages_that_change_numbers(cfg):
    import importlib.metadata
    import platform

    from ratio_utils.publish.published import NUMBER_CHANGING_PACKAGES, provenance

    software = provenance(cfg)["software"]
    assert software["python"] == platform.python_version()
    for name in ("torch", "sentence-transformers", "transformers", "faiss-cpu", "bm25s", "numpy"):
        assert software[name] == importlib.metadata.version(name)
    assert set(software) - {"python"} <= set(NUMBER_CHANGING_PACKAGES)
