"""The command line of `ratio_utils.evaluation.scoring.evaluate`: `python -m ratio_utils.evaluation` and the
`ratio-evaluate` script (pyproject.toml). Every flag is an argument of `evaluate`; see docs/evaluate_your_model.md.

Reads: the benchmark directory given by --benchmark (default: the rebuilt one of --params), i.e. the pairs
data/<move>/<split>.parquet and pools candidates/<split>.parquet of the evaluated splits, and the model given by
--model (its stored prompts when no prefix flag is given).
Writes: the score table and the prefixes used on stdout; skipped moves and errors on stderr (exit status 2 for a
split the benchmark lacks, a missing benchmark or params file); the JSON result given by --out (model, fingerprint,
benchmark file checksums, parameters, scores); with --runs-dir the run files
(<runs-dir>/<system>/<move>/<split>.parquet + .trec); with --cache-dir the embedding cache.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..io import write_json_atomic
from ..evaluation.metrics import DEFAULT_KS
from ..evaluation.scoring import EvaluationError, evaluate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratio-evaluate",
        description="Score a retriever on the Ratio benchmark (Recall@k, MRR@k; MRR@10 is primary).",
    )
    parser.add_argument("--model", required=True,
                        help="a sentence-transformers folder or packaged name (all-MiniLM-L6-v2, all-mpnet-base-v2), "
                             "a PyLate checkpoint with --colbert, or bm25-unigram / bm25-bigram / bm25-trigram")
    parser.add_argument("--benchmark", type=Path, default=None,
                        help="benchmark directory (data/, candidates/); default: the rebuilt one of --params")
    parser.add_argument("--params", default=None, help="params file whose benchmark is the default (params/default.yaml)")
    parser.add_argument("--move", default="all", help="address, broaden, specify or all (default all)")
    parser.add_argument("--split", default="silver", help="silver (default, primary), test, validation or train")
    parser.add_argument("--fallback-to-test", action="store_true",
                        help="when the silver split is absent, evaluate the unfiltered test split instead (recorded)")
    parser.add_argument("--query-prefix", default=None,
                        help="text put before every query (e.g. 'query: '); default: the model's stored 'query' prompt "
                             "(config_sentence_transformers.json), else none; '' forces none")
    parser.add_argument("--doc-prefix", default=None,
                        help="text put before every candidate (e.g. 'document: '); default: the model's stored "
                             "'document' prompt, else none; '' forces none")
    parser.add_argument("--instruction", action="store_true",
                        help="prefix each query with its move's instruction (paper Appendix C) after --query-prefix")
    parser.add_argument("--colbert", action="store_true", help="--model is a PyLate ColBERT checkpoint (MaxSim)")
    parser.add_argument("--k", type=int, default=100, help="candidates kept per query (default 100)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=None, help="torch device (default: sentence-transformers' choice)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="embedding cache folder (default: none)")
    parser.add_argument("--fp16-storage", action="store_true", help="store pool embeddings as float16")
    parser.add_argument("--runs-dir", type=Path, default=None, help="write run files (parquet + TREC) here")
    parser.add_argument("--name", default=None, help="system name in run files and the result (default: model)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    return parser


def format_result(result: dict) -> str:
    """The scores of an `evaluate` result as a table in percent, then the prefixes used and where they came from."""
    ks = [k for k in DEFAULT_KS if f"R@{k}" in next(iter(result["scores"].values()))]
    header = ["move", "split"] + [f"R@{k}" for k in ks] + [f"M@{k}" for k in ks]
    lines = ["  ".join(f"{h:>8}" for h in header)]
    for move, scores in result["scores"].items():
        cells = [move, result["splits"][move]] + [f"{100 * scores[f'R@{k}']:.1f}" for k in ks]
        cells += [f"{100 * scores[f'MRR@{k}']:.1f}" for k in ks]
        lines.append("  ".join(f"{c:>8}" for c in cells))
    params = result.get("params", {})
    source = params.get("prefix_source", {})
    lines.append(f"prefixes: query {params.get('query_prefix', '')!r} ({source.get('query', 'flag')}), "
                 f"document {params.get('doc_prefix', '')!r} ({source.get('document', 'flag')})")
    return "\n".join(lines) + "\n(percent; M@k = MRR@k, MRR@10 is the primary metric)"


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), evaluate, print the table, write --out; 0 on success, 2 on an
    EvaluationError or a missing file (argparse exits with 2 itself on a bad flag)."""
    args = build_parser().parse_args(argv)
    try:
        result = evaluate(
            args.model, args.benchmark, args.split, args.move,
            params_file=args.params, fallback_to_test=args.fallback_to_test,
            query_prefix=args.query_prefix, doc_prefix=args.doc_prefix, instruction=args.instruction,
            colbert=args.colbert, k=args.k, batch_size=args.batch_size, device=args.device,
            cache_dir=args.cache_dir, fp16_storage=args.fp16_storage, runs_dir=args.runs_dir, name=args.name,
        )
    except (EvaluationError, FileNotFoundError) as exc:
        print(f"ratio-evaluate: error: {exc}", file=sys.stderr)
        return 2
    print(format_result(result))
    if args.out:
        write_json_atomic(args.out, result)
        print(f"result written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
