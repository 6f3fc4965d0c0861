"""What a run's params ask of models: the models to load, the encoders used, and the contamination caveat."""

from __future__ import annotations

from .names import model_name
from .registry import encoder_training, registry_entry

# When each pretrained encoder was released and what its training data is known to include (its model card):
# test papers older than an encoder may be in its training data, which the paper's temporal split avoids.
# Read from the registry (registry.toml: released, training), keyed by registry name.
ENCODER_TRAINING: dict[str, tuple[int, str]] = encoder_training()


def _spec(entry) -> str | None:
    """A model entry as written: a name, or the `model` of a mapping ({model: NAME, prefixes: STYLE})."""
    if isinstance(entry, dict):
        entry = entry.get("model")
    return str(entry) if entry else None


# The notebooks that load the models of each params section's entries (by notebook number).
_LOADED_BY = {"retrieval": ("08", "12"), "train": ("09", "12"), "analysis": ("11",), "unified": ("13",)}


def models_in_params(cfg, notebooks=None) -> list[str]:
    """Every model a run's params ask a notebook to load, as written, once each, in order: the dense and ColBERT
    baselines (08: retrieval.dense_models, with or without their prefixes, colbert_models, colbert_checkpoints), the
    bases of fine-tuning (09: train.base_model and each of train.setups), the analyses (11) and the unified
    retriever (13). `notebooks` (numbers, "08"): only the models those notebooks load (notebook 12 reads the
    dense baselines and the fine-tuned base)."""
    sections = cfg.sections
    retrieval = sections.get("retrieval") or {}
    train = sections.get("train") or {}
    wanted = None if notebooks is None else {str(n).zfill(2)[:2] for n in notebooks}

    def asked(section: str) -> bool:
        return wanted is None or bool(wanted & set(_LOADED_BY[section]))

    names = []
    if asked("retrieval"):
        names += [*map(_spec, retrieval.get("dense_models") or [])]
        if wanted is None or "08" in wanted:
            names += [*map(_spec, retrieval.get("colbert_models") or []),
                      *(retrieval.get("colbert_checkpoints") or {}).values()]
    if asked("train"):
        names.append(train.get("base_model"))
        if wanted is None or "09" in wanted:
            names += [s.get("base_model") for s in train.get("setups") or [] if isinstance(s, dict)]
    names += [(sections.get(name) or {}).get("base_model") for name in ("analysis", "unified") if asked(name)]
    return list(dict.fromkeys(str(name) for name in names if name))


def encoders_used(cfg) -> list[str]:
    """Display names of the pretrained dense encoders a run's params use."""
    return list(dict.fromkeys(model_name(name) for name in models_in_params(cfg)))


def _training(name: str) -> tuple[int, str] | None:
    if name in ENCODER_TRAINING:
        return ENCODER_TRAINING[name]
    entry = registry_entry(name)  # any spelling of a registry model: its paper name, hub id, lower case
    return (entry.released, entry.training) if entry else None


def contamination_note(test_years: tuple[int, int], encoders: list[str]) -> str | None:
    """The caveat for encoders released in or after the first test year (None when every test paper is newer)."""
    first, last = test_years
    older = [(name, *known) for name in encoders if (known := _training(name)) and known[0] >= first]
    if not older:
        return None
    described = "; ".join(f"{name} (released {year}; {what})" for name, year, what in older)
    return (f"Contamination: the test papers were published {first if first == last else f'{first}–{last}'}, "
            f"not after the pretrained encoders: {described}. Their training data may include these papers or their "
            "citation neighbours, which can inflate the untuned scores; the paper's temporal split "
            "(test papers newer than every encoder) exists to avoid this.")
