"""The command line of `ratio_utils.evaluation.scoring.evaluate`: the `ratio-evaluate` script (pyproject.toml; also
`python -m ratio_utils.apps.evaluate`). Every flag is an argument of `evaluate`; see docs/evaluate_your_model.md.

Reads: the benchmark directory given by --benchmark (default: the rebuilt one of --params), i.e. the pairs
data/<move>/<split>.parquet and pools candidates/<split>.parquet of the evaluated splits, and the model given by
--model (its stored prompts when no prefix flag is given).
Writes: the score table (headed by the model, its fingerprint, the benchmark and the split each move used; per move
and split: the number of queries, every metric with its 95 % bootstrap interval, † under 30 queries) and the prefixes
used on stdout; skipped moves, benchmark rows left out under --allow-invalid and errors on stderr, one line each
(ratio_utils.apps.cli: exit status 2 for a split the benchmark lacks, a model that cannot be found, a missing or bad
benchmark, params or YAML file, an --out that is a folder; the traceback only with --debug); the JSON result
given by --out (model, fingerprint, benchmark file checksums, parameters, scores, queries, intervals); with --runs-dir
the run files (<runs-dir>/<system>/<move>/<split>.parquet + .trec); the embedding cache (--cache-dir, default
$RATIO_EMBEDDING_CACHE or ~/.cache/ratio/embeddings; --no-cache for none).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..evaluation.metrics import DEFAULT_KS, NDCG_KS
from ..evaluation.scoring import EvaluationError, evaluate
from ..evaluation.stats import DAGGER, INDICATIVE_BELOW, format_ci
from ..io import write_json_atomic
from .cli import add_allow_invalid_flag, add_debug_flag, one_line_errors, report_problems

PROG = "ratio-evaluate"
EPILOG = """examples:
  ratio-evaluate --model all-MiniLM-L6-v2 --split test
  ratio-evaluate --model sentence-transformers/all-mpnet-base-v2 --query-prefix 'query: ' --doc-prefix 'document: '
  ratio-evaluate --model models/all-mpnet-base-v2__specify --move specify --out result.json

Each split's candidate pool is encoded once per (model, prefix) for all moves, and kept in the embedding cache
(keyed by model fingerprint, prefix and the pool's checksum) for the next run."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Score a retriever on the Ratio benchmark: Recall@k, MRR@k and nDCG@10, each with its 95 percent "
                    "bootstrap interval; MRR@10 is the primary metric.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True,
                        help="a sentence-transformers model: a local folder, a packaged or registry name "
                             "(all-MiniLM-L6-v2, all-mpnet-base-v2) or a Hugging Face hub id; a PyLate checkpoint "
                             "with --colbert; or bm25-unigram / bm25-bigram / bm25-trigram.")
    parser.add_argument("--benchmark", type=Path, default=None,
                        help="benchmark directory (data/, candidates/); default: the rebuilt one of --params.")
    parser.add_argument("--params", default=None,
                        help="params file whose benchmark is the default (params/default.yaml); read and checked "
                             "whenever given.")
    parser.add_argument("--move", default="all", help="address, broaden, specify or all (default all).")
    parser.add_argument("--split", default="silver", help="silver (default, primary), test, validation or train.")
    parser.add_argument("--fallback-to-test", action="store_true",
                        help="when the silver split is absent, evaluate the unfiltered test split instead (recorded).")
    parser.add_argument("--query-prefix", default=None,
                        help="text put before every query (e.g. 'query: '); default: the model's stored 'query' "
                             "prompt (config_sentence_transformers.json), else none; '' forces none.")
    parser.add_argument("--doc-prefix", default=None,
                        help="text put before every candidate (e.g. 'document: '); default: the model's stored "
                             "'document' prompt, else none; '' forces none.")
    parser.add_argument("--instruction", action="store_true",
                        help="prefix each query with its move's instruction (paper Appendix C) after --query-prefix.")
    parser.add_argument("--colbert", action="store_true", help="--model is a PyLate ColBERT checkpoint (MaxSim).")
    parser.add_argument("--k", type=int, default=100, help="candidates kept per query (default 100).")
    parser.add_argument("--batch-size", type=int, default=64, help="texts encoded per batch (default 64).")
    parser.add_argument("--device", default=None, help="torch device (default: sentence-transformers' choice).")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--cache-dir", type=Path, default=None,
                       help="embedding cache folder (default: $RATIO_EMBEDDING_CACHE, else "
                            "~/.cache/ratio/embeddings).")
    cache.add_argument("--no-cache", action="store_true", help="keep no embeddings on disk (encodes every run).")
    parser.add_argument("--fp16-storage", action="store_true", help="store pool embeddings as float16.")
    parser.add_argument("--runs-dir", type=Path, default=None, help="write run files (parquet + TREC) here.")
    parser.add_argument("--name", default=None, help="system name in run files and the result (default: model).")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON result to this file.")
    parser.add_argument("--no-intervals", action="store_true", help="skip the bootstrap intervals (faster).")
    add_allow_invalid_flag(parser)
    add_debug_flag(parser)
    return parser


FINGERPRINT_SHOWN = 12  # characters of the model fingerprint in the table's heading (the result file has all)


def format_heading(result: dict) -> str:
    """What the table shows, in words: the model (and its fingerprint), the benchmark, the split each move used, and
    a fall-back from the requested split said as one."""
    fingerprint = result.get("model_fingerprint")
    model = result["model"] + (f" (fingerprint {fingerprint[:FINGERPRINT_SHOWN]})" if fingerprint else "")
    benchmark = result.get("benchmark", {}).get("path", "")
    requested = result.get("params", {}).get("split_requested")
    used = sorted(set(result["splits"].values()))
    line = f"{model} on {benchmark}, split {', '.join(used)}"
    fell_back = [m for m, s in result["splits"].items() if requested and s != requested]
    if fell_back:
        line += (f" ({', '.join(fell_back)}: no {requested} split, fell back to "
                 f"{', '.join(sorted({result['splits'][m] for m in fell_back}))})")
    return line


def format_result(result: dict) -> str:
    """The scores of an `evaluate` result as a table in percent — one column per move and split with its number of
    queries (n; † under 30 queries), one row per metric with its 95 % bootstrap interval — then the prefixes used."""
    first = next(iter(result["scores"].values()))
    ks = [k for k in DEFAULT_KS if f"R@{k}" in first]
    metrics = ([f"R@{k}" for k in ks] + [f"MRR@{k}" for k in ks]
               + [f"nDCG@{k}" for k in NDCG_KS if f"nDCG@{k}" in first])
    labels = {m: m.replace("MRR@", "M@") for m in metrics}
    moves = list(result["scores"])
    queries = result.get("queries", {})
    intervals = result.get("intervals", {})
    flags = {m: DAGGER if result.get("indicative", {}).get(m) else "" for m in moves}
    headers = [f"{m}/{result['splits'][m]}{flags[m]}" for m in moves]
    rows = [["n"] + [str(queries.get(m, "")) for m in moves]]
    for metric in metrics:
        cells = []
        for move in moves:
            low, high = intervals.get(move, {}).get(metric, (None, None))
            cells.append(format_ci(result["scores"][move][metric], low, high))
        rows.append([labels[metric]] + cells)
    widths = [max(len(r[0]) for r in rows)] + [max(len(h), *(len(r[i + 1]) for r in rows))
                                                for i, h in enumerate(headers)]
    lines = [format_heading(result)]
    lines.append("  ".join([" " * widths[0]] + [h.rjust(w) for h, w in zip(headers, widths[1:])]))
    lines += ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]) for r in rows]
    params = result.get("params", {})
    source = params.get("prefix_source", {})
    lines.append(f"prefixes: query {params.get('query_prefix', '')!r} ({source.get('query', 'flag')}), "
                 f"document {params.get('doc_prefix', '')!r} ({source.get('document', 'flag')})")
    notes = "(percent; M@k = MRR@k, MRR@10 is the primary metric"
    if intervals:
        notes += f"; [low, high]: {result.get('confidence', 0.95):.0%} bootstrap interval over queries"
    if any(flags.values()):
        notes += f"; {DAGGER}: fewer than {INDICATIVE_BELOW} queries, indicative only"
    return "\n".join(lines) + "\n" + notes + ")"


def _problems(result: dict) -> list:
    from ..dataset.benchmark import BenchmarkProblem

    return [BenchmarkProblem.from_record(record) for record in result.get("benchmark_problems", [])]


@one_line_errors(PROG, expected=(EvaluationError,))
def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv[1:]), evaluate, print the table, write --out; 0 on success, 2 on bad input
    (ratio_utils.apps.cli; argparse exits with 2 itself on a bad flag)."""
    args = build_parser().parse_args(argv)
    if args.out is not None and args.out.is_dir():  # found before the evaluation, not after it
        raise IsADirectoryError(f"--out {args.out} is a folder; name the JSON file to write "
                                f"(e.g. {args.out}/result.json)")
    result = evaluate(
        args.model, args.benchmark, args.split, args.move,
        params_file=args.params, fallback_to_test=args.fallback_to_test,
        query_prefix=args.query_prefix, doc_prefix=args.doc_prefix, instruction=args.instruction,
        colbert=args.colbert, k=args.k, batch_size=args.batch_size, device=args.device,
        cache_dir=False if args.no_cache else args.cache_dir, fp16_storage=args.fp16_storage,
        runs_dir=args.runs_dir, name=args.name, intervals=not args.no_intervals, allow_invalid=args.allow_invalid,
    )
    print(format_result(result))
    report_problems(PROG, _problems(result), str(args.out) if args.out else None)
    if args.out:
        write_json_atomic(args.out, result)
        print(f"result written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
