#!/usr/bin/env bash
# The test suite (what CI runs). Extra arguments go to pytest, e.g. ./run_tests.sh -m "not smoke".
set -euo pipefail
cd "$(dirname "$0")"
bash tools/bootstrap.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -q "$@"
