#!/usr/bin/env bash
# The test suite (what CI runs). Extra arguments go to pytest, e.g. ./run_tests.sh -m "not smoke".
# Tests never reach a network: the hub is offline here. The browser tests need Debian's chromium + chromium-driver,
# installed where missing by tools/install_browser.sh (as root, with apt-get; otherwise those tests skip).
set -euo pipefail
cd "$(dirname "$0")"
bash tools/bootstrap.sh
bash tools/install_browser.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -q "$@"
