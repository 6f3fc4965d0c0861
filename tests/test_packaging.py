"""Packaging (issue 37): pyproject.toml declares what ratio_utils imports, requirements.txt is a lock with every line
pinned and in step with pyproject, every console script names a module that exists, and (RATIO_WHEEL_TEST=1) a wheel
installed with the `eval` extra into a fresh venv scores a tiny benchmark (tools/check_wheel.sh)."""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ratio_utils"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]

# modules of ratio_utils that the core dependencies alone must import (their module-level imports), and the
# distributions installed with --no-deps (requirements-nodeps.txt) rather than declared
CORE_MODULES = ("__init__.py", "config.py", "io.py", "schema.py", "models", "dataset", "retrieval", "evaluation")
NODEPS = {"pylate"}
# the distribution of a module that is not installed in the running environment, where it is not the module's name
KNOWN = {"yaml": "pyyaml", "sklearn": "scikit-learn", "Stemmer": "pystemmer", "faiss": "faiss-cpu",
         "IPython": "ipython", "pylate": "pylate"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(extras: bool = True) -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    if extras:
        reqs += [Requirement(r) for group in PROJECT["optional-dependencies"].values() for r in group]
    return {_norm(r.name): r for r in reqs}


def _third_party_imports(paths, module_level_only: bool = False) -> dict[str, set[str]]:
    """{top-level module: {files}} for every absolute import of a non-stdlib module other than ratio_utils."""
    found: dict[str, set[str]] = {}
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = tree.body if module_level_only else ast.walk(tree)
        for node in nodes:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("ratio_utils", "__future__"):
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    dists = {_norm(d) for d in _packages_distributions().get(module, [])}
    if not dists:  # not installed here: the usual name
        dists.add(_norm(KNOWN.get(module, module)))
    return dists


def _undeclared(imports: dict[str, set[str]], declared: set[str]) -> list[str]:
    problems = []
    for module, files in sorted(imports.items()):
        dists = _distributions(module)
        if not dists & declared:
            problems.append(f"{module} (distribution {'/'.join(sorted(dists))}, in {sorted(files)[0]})")
    return problems


def test_every_import_of_ratio_utils_is_declared():
    imports = _third_party_imports(sorted(PACKAGE.rglob("*.py")))
    declared = set(_declared()) | NODEPS
    problems = _undeclared(imports, declared)
    assert not problems, ("imported by ratio_utils but not in pyproject's dependencies or "
                          "extras:\n") + "\n".join(problems)


def test_the_core_imports_with_the_core_dependencies_alone():
    paths = []
    for name in CORE_MODULES:
        path = PACKAGE / name
        paths += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    imports = _third_party_imports(paths, module_level_only=True)
    problems = _undeclared(imports, set(_declared(extras=False)))
    assert not problems, ("imported at module level by the core but not in [project] "
                          "dependencies:\n") + "\n".join(problems)


def _requirement_lines(path: Path) -> list[str]:
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-nodeps.txt", "requirements-mpnet.txt"])
def test_every_requirement_line_is_pinned(name):
    lines = _requirement_lines(ROOT / name)
    assert lines
    unpinned = [line for line in lines if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!-]*", line)]
    assert not unpinned, f"{name}: lines not pinned as name==version: {unpinned}"


def _lock() -> dict[str, str]:
    return {_norm(n): v for n, v in (line.split("==") for line in _requirement_lines(ROOT / "requirements.txt"))}


def test_the_lock_satisfies_pyproject():
    """requirements.txt is in step with pyproject.toml: every declared requirement is locked at a version it allows
    (else regenerate the lock: bash tools/bootstrap.sh --lock)."""
    lock = _lock()
    problems = []
    for name, req in _declared().items():
        if name not in lock:
            problems.append(f"{req}: not in requirements.txt")
        elif not req.specifier.contains(lock[name], prereleases=True):
            problems.append(f"{req}: locked at {lock[name]}")
    assert not problems, "regenerate the lock (bash tools/bootstrap.sh --lock):\n" + "\n".join(problems)
    assert not NODEPS & set(lock), "pylate belongs in requirements-nodeps.txt (installed with --no-deps), not the lock"
    assert not [n for n in lock if n.startswith(("nvidia-", "triton", "cuda-"))], "the lock names CUDA packages"
    assert lock["torch"] == "2.13.0", "torch is locked without a local label (+cpu), at the version of the results"


def test_the_lock_header_names_its_command():
    assert "bash tools/bootstrap.sh --lock" in (ROOT / "requirements.txt").read_text().split("\n\n")[0]


def test_requires_python_matches_bootstrap():
    supported = re.search(r'^SUPPORTED="([^"]+)"', (ROOT / "tools" / "bootstrap.sh").read_text(),
                          re.M).group(1).split()
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(PROJECT["requires-python"])
    assert all(f"{v}.0" in spec for v in supported), (supported, str(spec))
    major, minor = map(int, supported[-1].split("."))
    assert f"{major}.{minor + 1}.0" not in spec, "requires-python admits a version bootstrap.sh does not support"
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in supported


@pytest.mark.parametrize("script", sorted(PROJECT["scripts"]))
def test_console_script_targets_exist(script):
    target = PROJECT["scripts"][script]
    module, _, function = target.partition(":")
    parts = module.split(".")
    base = ROOT.joinpath(*parts)
    path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    assert path.is_file(), (f"{script} -> {target}: no {base.relative_to(ROOT)}.py nor "
                            f"{base.relative_to(ROOT)}/__init__.py")
    body = ast.parse(path.read_text()).body
    defined = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined |= {a.asname or a.name for n in body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert function in defined, f"{script} -> {target}: {path.relative_to(ROOT)} defines no {function}"


def test_package_data_covers_the_data_files():
    """The static pages (every *_static folder) and the model registry (models/*.toml) go into the wheel."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["ratio_utils"]
    files = [p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and (any(part.endswith("_static") for part in p.relative_to(PACKAGE).parts) or p.suffix == ".toml")]
    assert files
    missing = [str(f.relative_to(PACKAGE)) for f in files
               if not any(fnmatch.fnmatch(str(f.relative_to(PACKAGE)), pattern) for pattern in patterns)]
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"


def test_the_package_data_of_the_commands_have_one_home_in_the_checkout():
    """ratio_utils/resources (the params, prompts, lexicon data and corpus manifest a command reads, config.packaged)
    holds links to the checkout's own files, never second copies, and pyproject's package-data ships them."""
    resources = PACKAGE / "resources"
    links = sorted(p for p in resources.rglob("*") if p.is_symlink())
    assert {p.relative_to(resources).as_posix() for p in links} >= {"params", "prompts", "data/lexicon"}
    for link in links:
        target = link.resolve()
        assert target.exists() and target.is_relative_to(ROOT) and not target.is_relative_to(resources), link
        assert target == ROOT / link.relative_to(resources), f"{link} points to {target}, not the same checkout path"
    copies = [p for p in resources.rglob("*") if p.is_file() and not any(q.is_symlink() for q in (p, *p.parents))]
    assert not copies, f"second copies of checkout files under ratio_utils/resources: {copies}"
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["ratio_utils"]
    shipped = [p for p in resources.rglob("*") if p.is_file()]
    assert shipped and all(any(fnmatch.fnmatch(str(p.relative_to(PACKAGE)), pattern) for pattern in patterns)
                           for p in shipped)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("RATIO_WHEEL_TEST") != "1",
                    reason="builds a wheel and a fresh venv with torch (4 to 6 minutes on 2 cores): "
                           "set RATIO_WHEEL_TEST=1")
def test_wheel_installs_with_eval_and_scores_a_benchmark():
    done = subprocess.run(["bash", str(ROOT / "tools" / "check_wheel.sh")], capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "wheel check passed" in done.stdout
