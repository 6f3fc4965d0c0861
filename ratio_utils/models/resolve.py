"""Resolve a model spec once into a ModelRef, load it, fingerprint it.

A spec is a local folder, a registry or packaged short name ("all-MiniLM-L6-v2"), a Hugging Face hub id
("Qwen/Qwen3-Embedding-0.6B", optionally "@revision"), a live SentenceTransformer, or a ModelRef (returned as is).
Resolution order (docs/models.md):

1. an existing local path -> itself ("folder");
2. a short name -> its installed packaged model ("packaged"), else the registry's hub id (3.);
3. a hub id -> the Hugging Face cache or hub through huggingface_hub.snapshot_download ("hub"); when that fails and
   an installed packaged model ships the same model, that copy, with a log line saying so;
4. a live model -> itself ("object"), fingerprinted by its weights.

The hub honours the user's HF_HOME / HF_HUB_CACHE, HF_HUB_OFFLINE and HF_ENDPOINT, read at call time (huggingface_hub
reads them once, at its import); this library never sets them. Everything that is not available raises
ModelNotAvailableError naming the model, the reason and the ways to get it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..io import sha256_file
from ..schema import GENERIC_PREFIXES, MODEL_RESULTS_FILE
from .errors import ModelNotAvailableError
from .names import model_key, model_name
from .packaged import INSTALL_COMMAND, PACKAGED_MODELS, PackagedModel, packaged_model, packaged_model_path
from .registry import Prefixes, RegistryEntry, registry_entry, registry_names

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

Source = Literal["folder", "packaged", "hub", "object"]
GENERIC_STYLE = Prefixes(*GENERIC_PREFIXES)  # the paper's generic prefixes (Appendix C) as a prefix style
ST_CONFIG_FILE = "config_sentence_transformers.json"  # where sentence-transformers saves a model's `prompts`

# "org/name" or "org/name@revision": one slash, the hub's allowed characters.
_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")
# Files a sentence-transformers / PyLate load never reads: other frameworks' weights and exports (MiniLM's repo
# holds ~1 GB of ONNX / OpenVINO files beside its 90 MB of safetensors).
HUB_IGNORE = ["onnx/*", "openvino/*", "*.onnx", "*.onnx_data", "*.h5", "*.msgpack", "*.ot", "tf_model*", "flax_model*",
              "*.tflite", "*.gguf", "coreml/*"]


# -- the Hugging Face environment, read at call time ------------------------------------------------------------------


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    """The user switched the hub off (HF_HUB_OFFLINE, or transformers' older TRANSFORMERS_OFFLINE)."""
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def hf_hub_cache() -> Path:
    """The Hugging Face cache the user's environment names now: HF_HUB_CACHE, else $HF_HOME/hub, else the default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = (os.environ.get("HF_HOME")
            or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface")
    return Path(home).expanduser() / "hub"


# -- the reference ---------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _folder_fingerprint(path: str, stamp: tuple) -> str:
    digest = hashlib.sha256()
    root = Path(path)
    for child in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = child.relative_to(root)
        if rel.parts[0].startswith(".") or rel.name in ("README.md", MODEL_RESULTS_FILE):
            continue  # git metadata, prose and notebook 09's scores do not change the embeddings
        digest.update(str(rel).encode())
        digest.update(sha256_file(child).encode())
    return digest.hexdigest()


def _path_fingerprint(path: Path) -> str:
    if path.is_file():
        return sha256_file(path)
    stamp = tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in path.rglob("*") if p.is_file()))
    return _folder_fingerprint(str(path), stamp)


def _state_fingerprint(model: Any) -> str:
    """Checksum of a live torch model: every parameter/buffer plus the settings that change encodings."""
    import torch

    digest = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        digest.update(key.encode())
        # Viewing as bytes works for every dtype (bf16 has no numpy equivalent).
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    digest.update(repr(getattr(model, "max_seq_length", None)).encode())
    digest.update(repr([type(m).__name__ for m in model]).encode() if hasattr(model, "__iter__") else b"")
    return digest.hexdigest()


def stored_prompts(model_path: str | os.PathLike) -> dict[str, str]:
    """The `prompts` a sentence-transformers folder stores ({"query": "query: ", "document": "document: "}; {} if
    none).

    Notebook 09 saves its models with the prefixes they were trained with, so a user re-scoring one
    gets the published number by using them. A malformed file is an error naming it.
    """
    path = Path(model_path) / ST_CONFIG_FILE
    if not path.is_file():
        return {}
    try:
        prompts = json.loads(path.read_text(encoding="utf-8")).get("prompts") or {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ValueError(f"{path}: 'prompts' must map names to strings, got {prompts!r}")
    return dict(prompts)


@dataclass(frozen=True)
class ModelRef:
    """A model resolved once: what it is called, where it came from, where its files are, how to prefix its inputs.

    Built by resolve_model and handed down, so a stage resolves (and fingerprints) a model string once instead of
    at every layer. `location` is the folder for "folder" / "packaged", the hub id for "hub", a description for
    "object"; `path` is the local folder (None for "object"); `revision` the hub commit.
    """

    name: str
    source: Source
    location: str
    path: Path | None = None
    entry: RegistryEntry | None = None
    packaged: PackagedModel | None = None
    revision: str | None = None
    model: Any = field(default=None, compare=False, repr=False)  # the live object of source "object"

    @property
    def fingerprint(self) -> str:
        """Changes whenever the encodings could (embedding-cache key), read anew on every call: a live model's from
        its weights (training changes them in place), a folder's from its files (re-hashed only when a file's size or
        modification time changed), so a folder rewritten in place never keeps its old fingerprint."""
        if self.source == "object":
            return _state_fingerprint(self.model)
        if self.source == "hub" and self.revision:
            # A hub commit names its files exactly; hashing a multi-GB snapshot on every run would cost minutes.
            return hashlib.sha256(f"hub:{self.location}@{self.revision}".encode()).hexdigest()
        return _path_fingerprint(self.path)

    @property
    def prompts(self) -> dict[str, str]:
        """The prompts the model itself stores (config_sentence_transformers.json, or a live model's `prompts`)."""
        if self.source == "object":
            return dict(getattr(self.model, "prompts", None) or {})
        return stored_prompts(self.path) if self.path and self.path.is_dir() else {}

    def prefixes(self, style: str = "generic") -> Prefixes:
        """The prefixes of a setup: "generic" (the paper's "query: " / "document: ") or "recommended" (registry)."""
        if self.entry is not None:
            return self.entry.prefixes(style)
        if style == "generic":
            return GENERIC_STYLE
        raise ValueError(f"{self.name} is not in the model registry: it has no recommended prefixes")

    @property
    def kind(self) -> str:
        return self.entry.kind if self.entry else "dense"

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else self.location


# -- the hub ---------------------------------------------------------------------------------------------------------


class _HubUnavailable(Exception):
    """Internal: why snapshot_download gave nothing (turned into ModelNotAvailableError by the caller)."""


def _hub_reason(exc: BaseException, repo_id: str, cache: Path, offline: bool) -> str:
    from huggingface_hub import errors

    where = f"the local Hugging Face cache ({cache})"
    if isinstance(exc, errors.GatedRepoError):
        return (f"gated on the hub: accept its terms on https://huggingface.co/{repo_id} and log in "
                "(HF_TOKEN or `hf auth login`)")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return "no such model on the hub (or it is private and no token was given)"
    if isinstance(exc, errors.RevisionNotFoundError):
        return "the hub has no such revision of it"
    if type(exc).__name__ == "IncompleteSnapshotError":
        return f"its copy in {where} is incomplete and the hub cannot complete it"
    if isinstance(exc, errors.LocalEntryNotFoundError):
        if offline:
            return f"not in {where}, and HF_HUB_OFFLINE is set, so nothing is downloaded"
        cause = exc.__cause__ or exc.__context__
        detail = f" ({type(cause).__name__}: {str(cause).splitlines()[0][:120]})" if cause else ""
        return f"not in {where}, and the hub is unreachable{detail}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


def hub_snapshot(repo_id: str, revision: str | None = None, *, download: bool = True) -> Path:
    """The local snapshot folder of a hub model: from the cache, downloading what is missing unless offline.

    cache_dir, offline mode and endpoint are passed explicitly from the environment as it is now, so a user (or a
    test) that sets HF_HOME or HF_HUB_OFFLINE after huggingface_hub was imported is still obeyed.
    """
    from huggingface_hub import snapshot_download

    cache = hf_hub_cache()
    offline = hub_offline() or not download
    try:
        folder = snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=offline,
                                   endpoint=os.environ.get("HF_ENDPOINT") or None, ignore_patterns=HUB_IGNORE)
    except Exception as exc:  # noqa: BLE001 - every hub failure becomes one error with its reason
        raise _HubUnavailable(_hub_reason(exc, repo_id, cache, offline)) from exc
    return Path(folder)


def _ways_to_get(repo_id: str | None, packaged: PackagedModel | None) -> str:
    ways = []
    if repo_id:
        ways.append(f"on a machine with the hub, `hf download {repo_id}` (or `huggingface-cli download {repo_id}`) "
                    f"fills the Hugging Face cache (HF_HOME; here {hf_hub_cache()}), which can be copied to this one")
    ways.append("pass a local folder holding the model (a sentence-transformers or PyLate folder)")
    if packaged is not None:
        also = f" (or {packaged.pip_install})" if packaged.pip_install != packaged.install_command else ""
        ways.append(f"install its PyPI copy: {packaged.install_command}{also}")
    return "; ".join(f"({i}) {w}" for i, w in enumerate(ways, start=1))


def _not_available(spec: str, repo_id: str | None, reason: str,
                   packaged: PackagedModel | None) -> ModelNotAvailableError:
    name = f"{spec!r}" + (f" ({repo_id})" if repo_id and repo_id != spec else "")
    return ModelNotAvailableError(f"model {name} is not available: {reason}. Ways to get it: "
                                  f"{_ways_to_get(repo_id, packaged)}", model=spec, reason=reason)


# -- resolution ------------------------------------------------------------------------------------------------------

_fallback_logged: set[str] = set()


def _origin_name(origin: str) -> str:
    """The model name of a folder: a hub snapshot's repo (models--org--name/snapshots/<commit>), a packaged folder's
    model (its package names the folder "model"), else the folder's own name."""
    cached = [p for p in Path(origin).parts if p.startswith("models--")]
    if cached:
        return model_name(cached[-1].removeprefix("models--").replace("--", "/"))
    for packaged in PACKAGED_MODELS.values():
        # the assembled folder, never an assembly: naming a model must not unzip one
        folder = (packaged_model_path(packaged) if packaged.how == "module" and packaged.is_installed()
                  else packaged.target())
        if Path(origin).resolve() == folder.resolve():
            return packaged.name
    return model_name(origin)


def _live_model_name(model: Any) -> str:
    """A live model's name: that of the folder or hub id its first module was loaded from, else its class name."""
    try:
        origin = model[0].auto_model.config._name_or_path  # sentence-transformers Transformer module
    except (AttributeError, IndexError, KeyError, TypeError):
        origin = None
    return _origin_name(str(origin)) if origin else type(model).__name__


def _packaged_ref(spec: str, packaged: PackagedModel, entry: RegistryEntry | None, cache_dir: Path | None) -> ModelRef:
    path = packaged_model_path(packaged, cache_dir)
    return ModelRef(name=entry.name if entry else packaged.name, source="packaged", location=str(path), path=path,
                    entry=entry, packaged=packaged)


def resolve_model(spec: Any, cache_dir: Path | None = None, *, download: bool = True) -> ModelRef:
    """Resolve a model spec once (module docstring: the order); `download=False` only looks in the caches.

    `cache_dir` is the packaged-model cache (default model_cache_dir()), not the Hugging Face one.
    """
    if isinstance(spec, ModelRef):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        if hasattr(spec, "state_dict") and hasattr(spec, "encode"):
            name = _live_model_name(spec)
            return ModelRef(name=name, source="object", location=f"<live {type(spec).__name__} {name}>",
                            entry=registry_entry(name), model=spec)
        raise TypeError(f"cannot resolve a model from {type(spec).__name__}: pass a folder, a name, a hub id or a "
                        "SentenceTransformer")
    text = str(spec).strip()
    as_path = Path(os.path.expanduser(text))
    if as_path.exists():
        path = as_path.resolve()
        return ModelRef(name=_origin_name(text), source="folder", location=str(path), path=path)

    hub = _HUB_ID.match(text)
    repo_id, revision = (hub["repo"], hub["rev"]) if hub else (None, None)
    entry = registry_entry(repo_id or text)
    packaged = _entry_packaged(entry) or (packaged_model(text) if not hub else None)

    if repo_id is None:  # a short name: the packaged copy when installed, else the registry's hub id
        if packaged is not None and packaged.is_installed(cache_dir):
            return _packaged_ref(text, packaged, entry, cache_dir)
        if entry is None:
            if "/" in text or text.startswith((".", "~")):
                raise ModelNotAvailableError(f"model {text!r}: no such folder ({as_path.resolve()})", model=text,
                                             reason="no such folder")
            raise ModelNotAvailableError(
                f"model {text!r} is neither a local folder, nor a registry or packaged name "
                f"({', '.join(registry_names())}), nor a hub id 'org/name'. Pass a local folder or the model's "
                "Hugging Face id.", model=text, reason="unknown model name")
        repo_id = entry.hub_id
    elif Path(repo_id).parent.is_dir() and entry is None:
        # "models/all-MiniLM-L6-v2__address" with a models/ folder here: a missing folder, not a hub id.
        raise ModelNotAvailableError(f"model {text!r}: no such folder ({as_path.resolve()}); a hub id would not "
                                     "name an existing local folder's child", model=text, reason="no such folder")

    try:
        folder = hub_snapshot(repo_id, revision, download=download)
    except _HubUnavailable as exc:
        reason = str(exc)
        if packaged is not None and packaged.is_installed(cache_dir):
            if repo_id not in _fallback_logged:
                _fallback_logged.add(repo_id)
                logger.warning("%s: %s; using the installed packaged copy (%s)", repo_id, reason, packaged.name)
            return _packaged_ref(text, packaged, entry, cache_dir)
        raise _not_available(text, repo_id, reason, packaged) from None
    return ModelRef(name=entry.name if entry else model_name(repo_id), source="hub", location=repo_id, path=folder,
                    entry=entry, packaged=packaged, revision=folder.name)


def _entry_packaged(entry: RegistryEntry | None) -> PackagedModel | None:
    """The PyPI copy the registry names for a model (None without one)."""
    return PACKAGED_MODELS.get(entry.packaged) if entry is not None and entry.packaged else None


def resolve_model_path(name_or_path: str | os.PathLike, cache_dir: Path | None = None) -> Path:
    """The local folder of a model given by folder, name or hub id (resolve_model; the folder it resolves to)."""
    ref = resolve_model(name_or_path, cache_dir)
    if ref.path is None:
        raise TypeError(f"{ref.location} is a live model: it has no folder")
    return ref.path


# -- loading ---------------------------------------------------------------------------------------------------------

# Checkpoints saved by older transformers carry the `position_ids` buffer, which newer versions rebuild
# instead of loading: reported as UNEXPECTED on every load, and harmless (the buffer is arange(max_len)).
_HARMLESS_UNEXPECTED = re.compile(r"position_ids$")
_REPORT_ROW = re.compile(r"^(\S+)\s*\|\s*([A-Z]+)\s*\|", re.MULTILINE)


class _HarmlessLoadReportFilter(logging.Filter):
    """Drops a transformers LOAD REPORT whose only findings are harmless UNEXPECTED keys; keeps any other."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "LOAD REPORT" not in message:
            return True
        rows = [(key, status) for key, status in _REPORT_ROW.findall(message) if key != "Key"]
        return not rows or not all(status == "UNEXPECTED" and _HARMLESS_UNEXPECTED.search(key) for key, status in rows)


def _silence_harmless_load_reports() -> None:
    for name in ("transformers.modeling_utils", "transformers.utils.loading_report"):
        target = logging.getLogger(name)
        if not any(isinstance(f, _HarmlessLoadReportFilter) for f in target.filters):
            target.addFilter(_HarmlessLoadReportFilter())


def load_sentence_transformer(ref_or_spec: Any, device: str | None = None, **kwargs: Any) -> "SentenceTransformer":
    """Load a dense model from its resolved folder, with the registry's dtype / remote-code / length settings.

    A live model is returned as it is. Late-interaction (ColBERT) models load through PyLate (retrieval.colbert).
    Extra keyword arguments go to SentenceTransformer and override the registry's.
    """
    ref = resolve_model(ref_or_spec)
    if ref.source == "object":
        return ref.model
    if ref.kind == "late-interaction":
        raise ValueError(f"{ref.name} is a late-interaction (ColBERT) model: load it with PyLate "
                         "(ratio_utils.retrieval.colbert), not as a sentence-transformers model")
    _silence_harmless_load_reports()
    from sentence_transformers import SentenceTransformer

    options = ref.entry.model_kwargs() if ref.entry else {}
    options.update(kwargs)
    model = SentenceTransformer(str(ref.path), device=device, **options)
    if ref.entry and ref.entry.max_seq_length:
        model.max_seq_length = ref.entry.max_seq_length
    return model


def model_fingerprint(model_or_path: Any) -> str:
    """A checksum that changes whenever the model's encodings could change (embedding-cache key).

    A path is fingerprinted by its files (names and contents, README and dotfiles excluded; memoised
    per path and modification time); a hub snapshot by its commit; a live model by its weights, so a model being
    fine-tuned gets a new fingerprint after every update. The kinds of fingerprint of one model differ, which only
    costs one extra cache entry.
    """
    if isinstance(model_or_path, (str, os.PathLike, ModelRef)):
        return resolve_model(model_or_path).fingerprint
    if hasattr(model_or_path, "state_dict"):
        return _state_fingerprint(model_or_path)
    raise TypeError(f"cannot fingerprint {type(model_or_path).__name__}: pass a path or a torch model")


__all__ = ["GENERIC_STYLE", "HUB_IGNORE", "ModelRef", "ST_CONFIG_FILE", "hf_hub_cache", "hub_offline",
           "hub_snapshot", "load_sentence_transformer", "model_fingerprint", "model_key", "resolve_model",
           "resolve_model_path", "stored_prompts", "INSTALL_COMMAND"]
