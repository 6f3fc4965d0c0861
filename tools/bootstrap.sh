#!/usr/bin/env bash
# Create or refresh .venv so that run_all.sh and run_tests.sh work on a fresh machine with only
# Python 3.11. Idempotent: when the requirement files have not changed it returns at once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$candidate; break
    fi
  done
fi
[ -n "$PY" ] || { echo "bootstrap: Python 3.11 not found (set PYTHON=/path/to/python3.11)" >&2; exit 1; }

# A headless browser for the annotation app's tests (tests/test_annotate.py): Debian's chromium and its
# driver, since no browser build can be downloaded. Installed only when missing, as root, where apt exists;
# elsewhere the browser tests skip and say why. A failed install does not stop the bootstrap.
if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing chromium and chromium-driver (apt-get, for the browser tests)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
      || echo "bootstrap: could not install chromium; the browser tests will skip" >&2
  else
    echo "bootstrap: no chromium/chromedriver (install them as root: apt-get install chromium chromium-driver); the browser tests will skip" >&2
  fi
fi

stamp=$(cat requirements.txt requirements-nodeps.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f .venv/.ratio-stamp ] && [ "$(cat .venv/.ratio-stamp)" = "$stamp" ]; then
  exit 0
fi
echo "bootstrap: installing the environment into .venv (first run only, a few minutes)" >&2
"$PY" -m venv .venv
.venv/bin/pip install -q -r requirements.txt
# pylate without its dependencies: resolving them pulls an old sentence-transformers or CUDA torch.
.venv/bin/pip install -q --no-deps -r requirements-nodeps.txt
.venv/bin/pip install -q --no-deps --no-build-isolation -e .
# papermill needs a named kernel inside the venv, or it fails with NoSuchKernel.
.venv/bin/python -m ipykernel install --sys-prefix --name ratio --display-name "Python (ratio)" >/dev/null
echo "$stamp" > .venv/.ratio-stamp
