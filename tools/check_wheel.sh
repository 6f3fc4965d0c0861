#!/usr/bin/env bash
# The wheel check (issues 37, 46): build a wheel of ratio-utils, install it with the extras of the console scripts
# (eval, explorer, train, mcp) into a fresh venv (torch first, the CPU build, then the wheel constrained by the lock so
# the versions are the locked ones), score a tiny benchmark with the `ratio-evaluate` console script, BM25 and
# all-MiniLM-L6-v2, from outside the source tree, then run every console script of the venv from a temp folder on the
# tiny fixture (tests/test_installed_package.py with RATIO_INSTALLED_VENV: pytest from the compendium's .venv, or
# TEST_PYTHON, drives the venv's scripts).
#   bash tools/check_wheel.sh            # prints the steps and their times; exit 0 when every step passed
# Environment: PYTHON (default: python3.11, else python3.12), TORCH_INDEX_URL (the index of the CPU torch, e.g.
# https://download.pytorch.org/whl/cpu; unset: plain `pip install torch==<locked>`), KEEP=1 keeps the temp folder.
# Takes 6 to 8 minutes on 2 cores with the wheels in pip's cache; tests/test_packaging.py runs it when
# RATIO_WHEEL_TEST=1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for candidate in python3.11 python3.12; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -V >/dev/null 2>&1; then PY=$candidate; break; fi
  done
fi
[ -n "$PY" ] || { echo "check_wheel: no python3.11 or python3.12 (set PYTHON)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ratio-wheel.XXXXXX")
# removing a venv with torch takes minutes on a slow disk: done in the background, after the result
[ "${KEEP:-0}" = 1 ] && echo "check_wheel: keeping $tmp" >&2 || trap '(rm -rf "$tmp" >/dev/null 2>&1 &)' EXIT
start=$SECONDS
step() { printf 'check_wheel: [%4ss] %s\n' "$((SECONDS - start))" "$*"; }

step "building the wheel ($("$PY" -V))"
# build isolation: the wheel is built from pyproject.toml alone, as `pip install .` would build it
"$PY" -m pip wheel -q --no-deps --wheel-dir "$tmp/dist" "$repo" >"$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log" >&2; exit 1; }
wheel=$(ls "$tmp"/dist/ratio_utils-*.whl)
step "built $(basename "$wheel")"

"$PY" -m venv "$tmp/venv"
pip=("$tmp/venv/bin/pip" install -q --disable-pip-version-check)
torch=$(grep -E '^torch==' requirements.txt | sed -E 's/[[:space:]]*#.*//')
step "installing $torch (CPU build) into a fresh venv"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "${pip[@]}" "$torch" --index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple
else
  "${pip[@]}" "$torch"
fi
step "installing the wheel with the eval, explorer, train and mcp extras, constrained by requirements.txt"
"${pip[@]}" -c requirements.txt "$wheel[eval,explorer,train,mcp]"
"$tmp/venv/bin/pip" check >&2 || { echo "check_wheel: pip check failed" >&2; exit 1; }

# from here on, outside the source tree: nothing may import the checkout instead of the installed wheel
cd "$tmp"
bin=$tmp/venv/bin
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
step "ratio-evaluate --help"
"$bin/ratio-evaluate" --help >"$tmp/help.txt"
grep -q -- "--model" "$tmp/help.txt"
"$bin/python" - <<'EOF'
import ratio_utils
assert "site-packages" in ratio_utils.__file__, ratio_utils.__file__
import ratio_utils.config, ratio_utils.io, ratio_utils.schema, ratio_utils.dataset.benchmark  # noqa: E401
import ratio_utils.retrieval, ratio_utils.evaluation  # noqa: E401
EOF

step "building a tiny benchmark with the installed library"
"$bin/python" - "$tmp/bench" <<'EOF'
import sys
from pathlib import Path

import pandas as pd

from ratio_utils.dataset.benchmark import write_pairs, write_pool
from ratio_utils.schema import Move, Split, sentence_id

# invented sentences (as in tests/conftest.py's tiny_benchmark): (query, gold, marker)
pairs = {
    Move.ADDRESS: [
        ("Our parser overfits badly when the training treebank is small.", "we add dropout between the recurrent layers of the parser.", "to address this issue"),
        ("Annotating named entities by hand is slow and expensive.", "we bootstrap labels from a gazetteer and a few seed rules.", "to reduce this cost"),
    ],
    Move.BROADEN: [
        ("Adding noise to word embeddings improved tagging accuracy.", "perturbing inputs during training acts as a regulariser for many neural models.", "more generally"),
        ("Our tagger transfers well from news to biomedical abstracts.", "models trained on one domain often carry over to related domains.", "more broadly"),
    ],
    Move.SPECIFY: [
        ("Morphologically rich languages pose problems for statistical translation.", "turkish words can carry several suffixes that each map to a separate english word.", "for example"),
        ("Evaluation metrics for summarisation reward lexical overlap.", "rouge counts the n-grams shared by a system summary and the references.", "for instance"),
    ],
}
root, pool_rows = Path(sys.argv[1]), []
for move, rows in pairs.items():
    frame = pd.DataFrame({
        "corpusid": [f"P{i:02d}-{move.value}" for i in range(len(rows))], "year": 2010, "publicationdate": pd.NaT,
        "queryTerm": [m for _, _, m in rows], "queryTerm_group": move.value,
        "querySentence": [q for q, _, _ in rows], "goldSentence": [g for _, g, _ in rows],
        "query_id": [sentence_id(q) for q, _, _ in rows], "gold_id": [sentence_id(g) for _, g, _ in rows],
        "marker_source": "manual", "marker_has_anaphor": False,
    })
    for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
        write_pairs(frame, root, move, split)
    pool_rows += [(sentence_id(g), g, move.value, c) for g, c in zip(frame.goldSentence, frame.corpusid)]
pool_rows.append((sentence_id("we report results averaged over five random seeds."),
                  "we report results averaged over five random seeds.", "common_irrelevant", "D00-0000"))
pool = pd.DataFrame(pool_rows, columns=["docid", "text", "source", "corpusid"])
for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
    write_pool(pool, root, split)
EOF

for model in bm25-unigram all-MiniLM-L6-v2; do
  step "ratio-evaluate --model $model on the tiny benchmark"
  "$bin/ratio-evaluate" --model "$model" --benchmark "$tmp/bench" --split test --k 5 --out "$tmp/$model.json" \
    >"$tmp/$model.log" 2>&1 || { cat "$tmp/$model.log" >&2; exit 1; }
  "$bin/python" - "$tmp/$model.json" <<'EOF'
import json, sys
result = json.load(open(sys.argv[1]))
assert set(result["scores"]) == {"address", "broaden", "specify"}, result["scores"]
for move, scores in result["scores"].items():
    assert all(0 <= v <= 1 for v in scores.values() if isinstance(v, (int, float))), (move, scores)
print("  ", {m: round(s.get("MRR@5", float("nan")), 3) for m, s in result["scores"].items()})
EOF
done

# every console script of the venv, from a temp folder, on the tiny fixture: the test drives the venv's scripts
test_python=${TEST_PYTHON:-$repo/.venv/bin/python}
step "every console script from a temp folder (tests/test_installed_package.py, $test_python)"
(cd "$repo" && RATIO_INSTALLED_VENV="$tmp/venv" "$test_python" -m pytest -q -p no:cacheprovider \
  tests/test_installed_package.py) >"$tmp/scripts.log" 2>&1 || { tail -n 80 "$tmp/scripts.log" >&2; exit 1; }
tail -n 1 "$tmp/scripts.log"
step "wheel check passed"
