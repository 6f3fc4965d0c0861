"""What a stage module shows in its notebook (notebooks 01, 04, 06): a short text, a saved figure (shown once, from
its file), written files (paths relative to the output root, never this machine's). A library module, so that stage
modules share it without importing one another."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from IPython.display import Image, Markdown, display

from .config import Config
from .published import save_figure


def say(text: str) -> None:
    """Show one line of text above a cell's result."""
    display(Markdown(text))


def show_figure(fig, name: str, cfg: Config, *, inputs: Iterable[str | Path] = (), notes: Iterable[str] = ()) -> Image:
    """Save figures/<name>.png/.pdf (+ provenance) and show the PNG once (the live figure is closed)."""
    import matplotlib.pyplot as plt

    written = save_figure(fig, name, cfg, inputs=inputs, notes=notes)
    plt.close(fig)
    return Image(filename=str(written["png"]))


def written_files(written: dict, cfg: Config) -> dict:
    """{kind: path} (nested dicts too) with paths relative to the output root."""
    return {k: written_files(v, cfg) if isinstance(v, dict) else cfg.paths.relative(v) for k, v in written.items()}
