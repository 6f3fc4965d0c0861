"""Warm `find_inspirations` latency of `ratio-mcp`, three moves per call, through the MCP SDK's client over stdio.

    .venv/bin/python benchmarks/mcp_latency.py [--model all-MiniLM-L6-v2] [--indexes DIR] [--calls 20] [--k 10]

Starts the server as an agent would (a subprocess speaking stdio), makes one call to load the model and open the index
(reported apart, as the cold start), then `--calls` calls with different statements, each asking all three moves for
k sentences without rerank, and prints the median, 90th percentile and maximum of the round trip as the client sees
it, beside the seconds the server spent in the three moves. Needs an index built first (`ratio-search index --model
NAME`; docs/agents.md names the one measured there). Goal (issue 47): median under 0.5 s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

STATEMENTS = [
    "Automatic metrics for text generation correlate poorly with human judgements.",
    "Annotating named entities by hand is slow and expensive.",
    "Neural machine translation degrades on rare words.",
    "Large language models hallucinate facts in summaries.",
    "Parsers trained on news text fail on social media posts.",
    "Dialogue systems often produce generic responses.",
    "Low-resource languages lack parallel corpora.",
    "Attention weights are not faithful explanations of model decisions.",
    "Word embeddings encode gender stereotypes.",
    "Question answering models exploit annotation artefacts.",
]


async def measure(args) -> None:
    from mcp import Client, StdioServerParameters

    command = (["-m", "ratio_utils.apps.mcp", "--model", args.model]
               + (["--indexes", str(args.indexes)] if args.indexes else []))
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"), TOKENIZERS_PARALLELISM="false")
    params = StdioServerParameters(command=sys.executable, args=command, env=env)
    started = time.perf_counter()
    async with Client(params, read_timeout_seconds=600) as client:
        connected = time.perf_counter() - started
        first = time.perf_counter()
        result = await client.call_tool("find_inspirations",
                                        {"statement": "warm-up statement about parsing.", "k": args.k})
        if result.is_error:
            raise SystemExit(f"the server answered an error: {result.content[0].text}")
        cold = time.perf_counter() - first
        index = result.structured_content["moves"][0]
        print(f"server started and connected in {connected:.2f} s; first call (model load + index open) {cold:.2f} s; "
              f"index {index['index']} of {index['index_sentences']:,} sentences, retriever {index['retriever']}")
        round_trips, in_server = [], []
        for i in range(args.calls):
            statement = STATEMENTS[i % len(STATEMENTS)] + ("" if i < len(STATEMENTS) else f" ({i})")
            t0 = time.perf_counter()
            result = await client.call_tool("find_inspirations", {"statement": statement, "k": args.k})
            round_trips.append(time.perf_counter() - t0)
            assert not result.is_error and len(result.structured_content["moves"]) == 3
            in_server.append(sum(m["seconds"] for m in result.structured_content["moves"]))
    q90 = statistics.quantiles(round_trips, n=10)[-1] if len(round_trips) >= 2 else round_trips[0]
    print(f"warm find_inspirations, 3 moves x k={args.k}, {args.calls} calls: median "
          f"{statistics.median(round_trips):.3f} s, 90th percentile {q90:.3f} s, max {max(round_trips):.3f} s (in the "
          f"server: median {statistics.median(in_server):.3f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--indexes", type=Path, default=None,
                        help="folder of index folders (default: data/search_index)")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--k", type=int, default=10)
    asyncio.run(measure(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
