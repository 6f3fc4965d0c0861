#!/usr/bin/env bash
# Create or refresh .venv so that run_all.sh and run_tests.sh work on a fresh machine with a supported Python
# (3.11 or 3.12; docs/environment.md). Idempotent: when the requirement files have not changed it returns at once.
#   bash tools/bootstrap.sh                # .venv from the lock (requirements.txt + requirements-nodeps.txt + -e .)
#   bash tools/bootstrap.sh --lock [ARGS]  # regenerate requirements.txt from pyproject.toml (pip-compile; ARGS go to
#                                          # pip-compile, e.g. --upgrade-package mteb); see docs/environment.md
# Environment: PYTHON=/path/to/python3.x picks the interpreter; TORCH_INDEX_URL names the index torch is installed
# from before the lock (https://download.pytorch.org/whl/cpu for the CPU build, .../whl/cu128 for CUDA 12.8);
# unset, plain `pip install torch==<locked>` is used.
# No browser is installed here: the browser tests install theirs (tools/install_browser.sh, from run_tests.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUPPORTED="3.11 3.12"  # keep in step with requires-python in pyproject.toml
PIP_TOOLS_VERSION=7.7.0

supported() {  # supported PYTHON: it runs and its major.minor is in $SUPPORTED
  local v
  v=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || return 1
  [[ " $SUPPORTED " == *" $v "* ]]
}

PY=${PYTHON:-}
if [ -n "$PY" ]; then
  supported "$PY" || { echo "bootstrap: PYTHON=$PY is not a supported Python ($SUPPORTED)" >&2; exit 1; }
  if [ -x .venv/bin/python ] && [ "${1:-}" != "--lock" ] \
     && [ "$("$PY" -V 2>&1)" != "$(.venv/bin/python -V 2>&1)" ]; then
    echo "bootstrap: .venv has $(.venv/bin/python -V 2>&1), PYTHON is $("$PY" -V 2>&1): remove .venv to switch" >&2
    exit 1
  fi
elif [ -x .venv/bin/python ] && supported .venv/bin/python; then
  PY=.venv/bin/python  # refresh the existing venv with its own interpreter
else
  pyenv_root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for candidate in python3.11 python3.12 python3 "$pyenv_root"/versions/3.11*/bin/python3 "$pyenv_root"/versions/3.12*/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && supported "$candidate"; then
      PY=$candidate; break
    fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: no supported Python ($SUPPORTED) found (set PYTHON=/path/to/python3.11)" >&2; exit 1; }

locked_torch=$(grep -E '^torch==' requirements.txt | sed -E 's/[[:space:]]*#.*//')

if [ "${1:-}" = "--lock" ]; then
  shift
  # pip-compile in a throw-away venv, with pip's own configuration (a find-links folder holding the CPU torch
  # wheel, where there is one) plus TORCH_INDEX_URL. It keeps the versions already in requirements.txt unless told
  # to upgrade (--upgrade, --upgrade-package NAME), so a new dependency does not move the others.
  "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || echo "bootstrap --lock: warning: the lock is compiled with Python 3.11 (the oldest supported); this is $("$PY" -V)" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$PY" -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q "pip-tools==$PIP_TOOLS_VERSION"
  extra=()
  [ -n "${TORCH_INDEX_URL:-}" ] && extra=(--pip-args "--extra-index-url $TORCH_INDEX_URL")
  CUSTOM_COMPILE_COMMAND="bash tools/bootstrap.sh --lock" "$tmp/venv/bin/pip-compile" -q pyproject.toml \
    --all-extras --strip-extras --allow-unsafe --annotation-style=line \
    --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
    --output-file requirements.txt "${extra[@]}" "$@"
  # torch: drop the local label of the wheel that was resolved (2.13.0+cpu -> 2.13.0), so that the CPU and the
  # CUDA builds both satisfy the lock; which one is installed is chosen before the lock (TORCH_INDEX_URL).
  sed -i -E 's/^torch==([0-9][0-9.]*)\+[A-Za-z0-9.]+/torch==\1/' requirements.txt
  sed -i '/^#    bash tools\/bootstrap.sh --lock$/a\
#\
# torch is pinned without a local label: install the CPU or the CUDA build of that version first (docs/environment.md;\
# tools/bootstrap.sh does, from TORCH_INDEX_URL). pylate: requirements-nodeps.txt, installed with --no-deps.' requirements.txt
  if grep -qE '^(nvidia-|triton==|cuda-)' requirements.txt; then
    echo "bootstrap --lock: the lock names CUDA packages: pip resolved a CUDA torch." >&2
    echo "  Rerun with TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu (the lock is for the CPU build)." >&2
    exit 1
  fi
  echo "bootstrap --lock: requirements.txt regenerated; review with git diff requirements.txt" >&2
  exit 0
fi

stamp=$( { cat requirements.txt requirements-nodeps.txt pyproject.toml; "$PY" -c 'import sys; print(sys.version)'; } \
  | sha256sum | cut -d' ' -f1)
if [ -f .venv/.ratio-stamp ] && [ "$(cat .venv/.ratio-stamp)" = "$stamp" ]; then
  exit 0
fi
echo "bootstrap: installing the environment into .venv (first run: a few minutes; later, only what changed)" >&2
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# torch first, from the index the user chose: resolved by the lock alone, pip would take PyPI's build (CUDA on
# Linux x86_64). Skipped when the locked version (any build of it: +cpu, +cu128) is already installed.
installed_torch=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null || true)
if [ "torch==$installed_torch" != "$locked_torch" ]; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    .venv/bin/pip install -q "$locked_torch" --index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple
  else
    .venv/bin/pip install -q "$locked_torch"
  fi
fi
.venv/bin/pip install -q -r requirements.txt
# pylate without its dependencies (requirements-nodeps.txt says why).
.venv/bin/pip install -q --no-deps -r requirements-nodeps.txt
.venv/bin/pip install -q --no-deps --no-build-isolation -e .
# papermill needs a named kernel inside the venv, or it fails with NoSuchKernel.
.venv/bin/python -m ipykernel install --sys-prefix --name ratio --display-name "Python (ratio)" >/dev/null
echo "$stamp" > .venv/.ratio-stamp
