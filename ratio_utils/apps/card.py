"""Write the dataset card of a benchmark directory that no run of ours wrote (the official release, say):
`ratio-card DIR`, so that Hugging Face `datasets.load_dataset(DIR, config)` reads every table offline.

Reads: the directory's pairs and pools (ratio_utils.dataset.benchmark). Writes: the card, README.md in the directory
(ratio_utils.dataset.card).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..corpora.registry import LICENCES
from ..dataset.benchmark import load_benchmark
from ..dataset.card import CardSources, card_configs, write_dataset_card


def main(argv: list[str] | None = None) -> int:
    """Write the card of a directory that no run of ours wrote (the official release, say)."""
    parser = argparse.ArgumentParser(
        prog="ratio-card", description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  ratio-card ratio-release/ --licence s2orc='ODC-By 1.0'")
    parser.add_argument("benchmark", type=Path, help="a directory in the release layout")
    parser.add_argument("--name", default=None, help="what the card calls the directory (default: its folder name)")
    parser.add_argument("--licence", action="append", default=[], metavar="CORPUS=TEXT",
                        help="the licence of a corpus its pairs name (repeatable; built-in sources are known)")
    parser.add_argument("--license", dest="licence_id", default=None, metavar="HUB_ID",
                        help="the card's Hub licence id (e.g. cc-by-4.0), where the pairs name no corpus to derive it "
                             "from")
    args = parser.parse_args(argv)
    try:
        licences = dict(item.split("=", 1) for item in args.licence)
    except ValueError:
        parser.error("--licence takes CORPUS=TEXT")
    try:
        bench = load_benchmark(args.benchmark)
        path = write_dataset_card(bench, CardSources(args.name or args.benchmark.resolve().name,
                                                      {**LICENCES, **licences}, args.licence_id))
    except (FileNotFoundError, ValueError) as exc:
        print(f"ratio-card: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}: configs {', '.join(c['config_name'] for c in card_configs(bench)[0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
