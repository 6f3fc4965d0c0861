"""Command line of stage 09, also the torchrun entry point (`python -m ratio_utils.train`, see __main__.py).

Reads:  a params file and `--set KEY=VALUE` overrides.
Writes: what `selection.finetune` writes, then tables/table6_finetune_configs.* and
        tables/finetune_tuned_vs_baseline.* (unless --no-tables); with --dry-run nothing (the plan is printed).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import yaml

from ..config import load_config
from ..distributed import is_main_process
from ..schema import MOVES, Move
from .configurations import load_hyperparams, load_train_params
from .selection import finetune, move_model_dir, score_percent

# ---------------------------------------------------------------------------------------------
# Command line (also the torchrun entry point)
# ---------------------------------------------------------------------------------------------


def _parse_override(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    if not key or not _:
        raise argparse.ArgumentTypeError(f"--set expects KEY=VALUE, got {text!r}")
    return key, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ratio-train", description="Fine-tune one dense retriever per move (notebook 09's stage).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  ratio-train --params params/default.yaml --move address\n"
               "  ratio-train --params paper --move specify --dry-run\n"
               "  torchrun --nproc_per_node 4 -m ratio_utils.train --params params/paper.yaml --move specify")
    parser.add_argument("--params", default=None, help="params file, or the name of one the package ships "
                        "(default: params/default.yaml)")
    parser.add_argument("--move", default="all", help="address, broaden, specify or all (default: %(default)s)")
    parser.add_argument("--set", dest="overrides", action="append", type=_parse_override, default=[],
                        metavar="KEY=VALUE",
                        help="override a params value, e.g. train.max_train_pairs=null (repeatable)")
    parser.add_argument("--no-tables", action="store_true",
                        help="do not write Table 6 and the tuned-vs-baseline table")
    parser.add_argument("--dry-run", action="store_true", help="print, per move, the base model, the configurations "
                        "and where the model would go, then exit; nothing is loaded or written")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.params, dict(args.overrides))
        if args.dry_run:
            return _dry_run(cfg, args.move)
    except (FileNotFoundError, ValueError) as exc:  # a params file or configs file missing, a bad key or move
        print(f"ratio-train: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    results = finetune(cfg, args.move)
    if is_main_process():
        for result in results:
            print(f"{result.move}: selected config {result.selected.config['id']} "
                  f"validation MRR@10 {score_percent(result.selected.validation)} test MRR@10 "
                  f"{score_percent(result.test)} (baseline {score_percent(result.baseline.get('validation'))} / "
                  f"{score_percent(result.baseline.get('test'))}) -> {result.model_dir}")
        if not args.no_tables:
            from .tables import write_table6, write_tuned_vs_baseline  # the notebook's tables

            write_table6(cfg)
            write_tuned_vs_baseline(cfg)
    return 0


def _dry_run(cfg, move: str) -> int:
    """One line per move: what `finetune` would train (the params read as it reads them) and where it would publish."""
    params = load_train_params(cfg)
    moves = MOVES if move == "all" else [Move.parse(move)]
    print(f"params {cfg.source.name}: benchmark {cfg.paths.relative(cfg.paths.benchmark)}, "
          f"configurations from {params.configs_file}")
    for each in moves:
        ids = [hp.id for hp in load_hyperparams(params.configs_file, each, params.configs)]
        print(f"{each.value}: {params.base_model}, configurations {ids}, max {params.max_train_pairs} training pairs "
              f"-> {cfg.paths.relative(move_model_dir(cfg, params, each))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
