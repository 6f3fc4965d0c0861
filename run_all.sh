#!/usr/bin/env bash
# Full reproduction: executes notebooks/NN_*.ipynb in order (one console line per notebook); the default run refreshes
# notebooks/executed/ (other params files: outputs/<name>/notebooks/executed/). Same as `ratio-run` in the venv.
#   ./run_all.sh                          # default params (embedded ACL corpus)
#   ./run_all.sh --params params/smoke.yaml
#   ./run_all.sh --from 05 | --only 08 | --list
# The Hugging Face hub is left to you: set HF_HUB_OFFLINE=1 to forbid downloads (docs/models.md). No browser is
# installed here (only the tests need one).
set -euo pipefail
cd "$(dirname "$0")"
bash tools/bootstrap.sh
export TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m ratio_utils.pipeline "$@"
