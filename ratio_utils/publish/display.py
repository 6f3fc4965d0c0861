"""The one shape of a stage (`Stage`: built from a notebook's parameters, one method per displayed result) and what a
stage shows in its notebook: a short text, a saved figure (shown once, from its file), written files (paths relative
to the output root, never this machine's). A library module, so that stage modules share it without importing one
another. Writes only what `show_figure` saves (figures/<name>.*).

IPython (the `pipeline` extra) is imported only where a notebook result is shown (`say`, `show_figure`), so a
command that builds on a stage's library code (ratio-search, ratio-explorer) runs without it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config, load_config
from .published import save_figure

if TYPE_CHECKING:
    from IPython.display import Image


class Stage:
    """What one notebook runs: `stage = XStage.from_params(params_file, overrides)` after the parameters cell and the
    import, then one method call (or attribute) of `stage` per displayed result. A subclass reads its params sections
    in `__init__` from the config it is given, so tests build it with `from_config` and a notebook with
    `from_params`."""

    def __init__(self, cfg: Config):
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: Config, **notebook_params):
        """The stage on a loaded config; notebook parameters other than the params file (09's `move`) by name."""
        return cls(cfg, **notebook_params)

    @classmethod
    def from_params(cls, params_file: str | Path, overrides: dict | str | None = None, **notebook_params):
        """The stage as a notebook's parameters cell names it (papermill passes `overrides` as JSON text)."""
        return cls.from_config(load_config(params_file, overrides), **notebook_params)


def say(text: str) -> None:
    """Show one line of text above a cell's result."""
    from IPython.display import Markdown, display

    display(Markdown(text))


def show_figure(fig, name: str, cfg: Config, *, inputs: Iterable[str | Path] = (), notes: Iterable[str] = ()) -> Image:
    """Save figures/<name>.png/.pdf (+ provenance) and show the PNG once (the live figure is closed); outside a
    notebook, `save_figure` writes the same files without IPython."""
    import matplotlib.pyplot as plt
    from IPython.display import Image

    written = save_figure(fig, name, cfg, inputs=inputs, notes=notes)
    plt.close(fig)
    return Image(filename=str(written["png"]))


def written_files(written: dict, cfg: Config) -> dict:
    """{kind: path} (nested dicts too) with paths relative to the output root."""
    return {k: written_files(v, cfg) if isinstance(v, dict) else cfg.paths.relative(v) for k, v in written.items()}
