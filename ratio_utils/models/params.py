"""What a run's params ask of models: the models to load, the encoders used, and the contamination caveat."""

from __future__ import annotations

from .names import model_name
from .registry import encoder_training, registry_entry

# When each pretrained encoder was released and what its training data is known to include (its model card):
# test papers older than an encoder may be in its training data, which the paper's temporal split avoids.
# Read from the registry (registry.toml: released, training), keyed by registry name.
ENCODER_TRAINING: dict[str, tuple[int, str]] = encoder_training()


def models_in_params(cfg) -> list[str]:
    """Every model a run's params ask a notebook to load, as written: the dense baselines (08) and the bases of
    fine-tuning (09), the analyses (11) and the unified retriever (13)."""
    sections = cfg.sections
    names = [*sections.get("retrieval", {}).get("dense_models", []),
             *(sections.get(name, {}).get("base_model") for name in ("train", "analysis", "unified"))]
    return [name for name in names if name]


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
    return (f"Contamination: the test papers were published {first}–{last}, not after the pretrained encoders: {described}. "
            "Their training data may include these papers or their citation neighbours, which can inflate the untuned "
            "scores; the paper's temporal split (test papers newer than every encoder) exists to avoid this.")
