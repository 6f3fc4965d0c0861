#!/usr/bin/env bash
# Full reproduction: executes notebooks/NN_*.ipynb in order (one console line per notebook); the default run refreshes
# notebooks/executed/ (other params files: outputs/<name>/notebooks/executed/).
#   ./run_all.sh                          # default params (embedded ACL corpus)
#   ./run_all.sh --params params/smoke.yaml
#   ./run_all.sh --from 05 | --only 08 | --list
set -euo pipefail
cd "$(dirname "$0")"
bash tools/bootstrap.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m ratio_utils.pipeline "$@"
