"""Scale benchmark (issue 14): the corpus and mining stages on synthetic S2ORC shards at 1x, 2x, 4x a base size.

    .venv/bin/python benchmarks/scale.py [--base 500000] [--sizes 1 2 4] [--shard-sentences 50000] [--workers 2]
                                         [--sentences PATH] [--lexicon PATH] [--workdir DIR]

Generator: S2ORC-format shards (`papers` + `s2orc` records, `content.text` with JSON-encoded `paragraph` and
`sectionheader` spans, gzipped) whose paragraphs are resampled (seeded) from the embedded ACL corpus's
sentence table (`--sentences`, default `cfg.paths.sentences` of the default run), so sentence lengths,
paragraph lengths and marker rates are the real corpus's; about 150 sentences per paper, publication dates
2015-2025, `--shard-sentences` sentences per shard. Paragraphs are written as running text, so the corpus
stage sentence-splits them with spaCy as it does real S2ORC.

For each size, a fresh process runs the partitioned corpus build (`corpus.papers_per_part`: one part per
shard; `--corpus-engine dask`: one task per part on a LocalCluster of `--workers` single-threaded worker
processes, `local`: one after another in the driver) and then mining on Dask (`engine: dask`, the same kind
of LocalCluster, one task per sentence part), with the lexicon `--lexicon` (default `cfg.paths.final_lexicon`).
Peak RSS is sampled every 0.1 s over the process tree (driver + Dask workers): "tree" is the largest sum
seen, "largest" the largest single process. Prints one table (Markdown) and the issue's goals:
peak RSS at 4x within 1.3x of 1x; wall time linear in size (+-20%); end-to-end <= 2x parse-only
(parse-only = the corpus stage). Generation time is not counted.

This is a measurement script, not a test. On a shared machine the times are noisy: say so when quoting them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SENTENCES_PER_PAPER = 150


# --- the generator ---------------------------------------------------------------------------------------------


def paragraph_pool(sentences_path: Path) -> list[list[str]]:
    """Paragraphs (lists of sentences) of the embedded corpus, in table order."""
    import pandas as pd

    frame = pd.read_parquet(sentences_path, columns=["paper_id", "para", "sent", "text"])
    return frame.groupby(["paper_id", "para"], sort=False)["text"].agg(list).tolist()


def s2orc_record(corpusid: int, paragraphs: list[list[str]]) -> dict:
    """A full-text record in the `s2orc` layout: a section header, then one paragraph span per paragraph."""
    header = "1 Introduction"
    text, spans = header, []
    for para in paragraphs:
        text += "\n\n"
        start = len(text)
        text += " ".join(para)
        spans.append({"start": start, "end": len(text)})
    annotations = {"sectionheader": json.dumps([{"start": 0, "end": len(header)}]), "paragraph": json.dumps(spans)}
    return {"corpusid": corpusid, "content": {"text": text, "annotations": annotations}}


def papers_record(corpusid: int, rng: random.Random) -> dict:
    year = rng.randint(2015, 2025)
    return {"corpusid": corpusid, "title": f"Synthetic paper {corpusid}", "year": year,
            "publicationdate": f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", "venue": "Synthetic",
            "s2fieldsofstudy": [{"category": "Computer Science", "source": "s2-fos-model"}]}


def generate(dest: Path, n_sentences: int, shard_sentences: int, pool: list[list[str]], seed: int = 13) -> dict:
    """Write `dest/papers/*.gz` and `dest/s2orc/*.gz` holding about `n_sentences` sentences."""
    rng = random.Random(seed)
    for sub in ("papers", "s2orc"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    written, corpusid, shard = 0, 0, 0
    while written < n_sentences:
        in_shard = 0
        with gzip.open(dest / "s2orc" / f"shard-{shard:04d}.jsonl.gz", "wt", compresslevel=1) as text_out, \
                gzip.open(dest / "papers" / f"shard-{shard:04d}.jsonl.gz", "wt", compresslevel=1) as meta_out:
            while in_shard < shard_sentences and written < n_sentences:
                corpusid += 1
                paragraphs, count = [], 0
                while count < SENTENCES_PER_PAPER:
                    para = pool[rng.randrange(len(pool))]
                    paragraphs.append(para)
                    count += len(para)
                text_out.write(json.dumps(s2orc_record(corpusid, paragraphs)) + "\n")
                meta_out.write(json.dumps(papers_record(corpusid, rng)) + "\n")
                in_shard += count
                written += count
        shard += 1
    return {"sentences": written, "papers": corpusid, "shards": shard}


# --- one measured run (in its own process) ------------------------------------------------------------------------


class TreeMemory:
    """Peak RSS of this process and its descendants (Dask workers), sampled every `interval` seconds."""

    def __init__(self, interval: float = 0.1):
        import psutil

        self.root = psutil.Process()
        self.interval = interval
        self.peak_tree = self.peak_largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            sizes = []
            for proc in [self.root, *self.root.children(recursive=True)]:
                try:
                    sizes.append(proc.memory_info().rss)
                except psutil.Error:
                    pass
            self.peak_tree = max(self.peak_tree, sum(sizes))
            self.peak_largest = max(self.peak_largest, max(sizes))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


WHOLE_SHARD = 10**9  # records per part: a whole shard per part, as in docs/scale.md's table (parts are record ranges of a shard)


def run_one(workdir: Path, lexicon: Path, workers: int, corpus_engine: str) -> dict:
    import shutil

    os.environ["RATIO_OUTPUT_ROOT"] = str(workdir / "out")
    from ratio_utils import mining
    from ratio_utils.config import load_config
    from ratio_utils.corpus import build_corpus

    overrides = {
        "corpus": {"sources": ["s2orc"], "papers_per_part": WHOLE_SHARD, "progress": False, "engine": corpus_engine,
                   "dask_workers": workers, "dask_processes": True,
                   "s2orc": {"release": "synthetic", "download_dir": str(workdir / "shards")}},
        "mining": {"engine": "dask", "dask_workers": workers, "dask_processes": True, "progress": False},
    }  # fmt: skip
    cfg = load_config(overrides=overrides)
    cfg.paths.interim.mkdir(parents=True, exist_ok=True)
    shutil.copy(lexicon, cfg.paths.final_lexicon)
    result = {}
    with TreeMemory() as corpus_memory:
        started = time.perf_counter()
        build = build_corpus(cfg)
        result["corpus_s"] = time.perf_counter() - started
    with TreeMemory() as mining_memory:
        started = time.perf_counter()
        mined, _ = mining.mine(cfg)
        result["mining_s"] = time.perf_counter() - started
    stats = build.statistics.set_index("corpus").loc["all"]
    result |= {
        "sentences": int(stats["sentences"]), "consecutive_pairs": int(mined.counts["pairs.consecutive"]),
        "pairs_kept": len(mined.pairs), "parts": build.report["parts"]["total"],
        "corpus_peak_tree_mb": corpus_memory.peak_tree / 2**20, "corpus_peak_largest_mb": corpus_memory.peak_largest / 2**20,
        "mining_peak_tree_mb": mining_memory.peak_tree / 2**20, "mining_peak_largest_mb": mining_memory.peak_largest / 2**20,
    }  # fmt: skip
    return result


# --- the table --------------------------------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    header = ("| size | sentences | parts | consecutive pairs | kept pairs | corpus s | mining s | total s "
              "| total / parse | s per 100K sentences | peak RSS tree MB (corpus / mining) | largest process MB |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        total = r["corpus_s"] + r["mining_s"]
        lines.append(
            f"| {r['size']}x | {r['sentences']:,} | {r['parts']} | {r['consecutive_pairs']:,} | {r['pairs_kept']:,} "
            f"| {r['corpus_s']:.0f} | {r['mining_s']:.0f} | {total:.0f} | {total / r['corpus_s']:.2f} "
            f"| {100_000 * total / r['sentences']:.1f} | {r['corpus_peak_tree_mb']:.0f} / {r['mining_peak_tree_mb']:.0f} "
            f"| {max(r['corpus_peak_largest_mb'], r['mining_peak_largest_mb']):.0f} |"
        )
    return "\n".join(lines)


def goals(rows: list[dict]) -> list[str]:
    small, large = rows[0], rows[-1]
    scale = large["sentences"] / small["sentences"]
    peak = lambda r: max(r["corpus_peak_tree_mb"], r["mining_peak_tree_mb"])  # noqa: E731
    per_sentence = lambda r: (r["corpus_s"] + r["mining_s"]) / r["sentences"]  # noqa: E731
    fit = []
    if len(rows) > 2:
        # wall time = fixed + per-sentence cost x sentences (least squares); linear means small residuals
        import numpy as np

        x = np.array([r["sentences"] for r in rows], dtype=float)
        for label, y in (("total", [r["corpus_s"] + r["mining_s"] for r in rows]), ("corpus", [r["corpus_s"] for r in rows]),
                         ("mining", [r["mining_s"] for r in rows])):
            slope, fixed = np.polyfit(x, np.array(y), 1)
            worst = max(abs(fixed + slope * xi - yi) / yi for xi, yi in zip(x, y))
            fit.append(f"{label}: {fixed:.1f} s fixed + {1e3 * slope:.3f} ms per sentence ({len(rows)} sizes; largest residual "
                       f"{100 * worst:.0f}% of the measured time)")
    return [
        f"peak RSS (tree) {large['size']}x / {small['size']}x: {peak(large) / peak(small):.2f} (goal <= 1.3)",
        f"time per sentence {large['size']}x / {small['size']}x ({scale:.1f}x the sentences): "
        f"{per_sentence(large) / per_sentence(small):.2f} (goal 0.8-1.2: linear)",
        "end-to-end / parse-only: " + ", ".join(f"{(r['corpus_s'] + r['mining_s']) / r['corpus_s']:.2f}" for r in rows) + " (goal <= 2)",
    ] + fit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=500_000, help="sentences at 1x")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--shard-sentences", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--corpus-engine", choices=["dask", "local"], default="dask",
                        help="build the corpus parts on the Dask workers too (default) or one after another")
    parser.add_argument("--sentences", type=Path, default=None, help="sentence table to resample (default: the default run's)")
    parser.add_argument("--lexicon", type=Path, default=None, help="lexicon table (default: the default run's)")
    parser.add_argument("--workdir", type=Path, default=Path("build/scale_benchmark"))
    parser.add_argument("--run", type=Path, default=None, help=argparse.SUPPRESS)  # internal: one measured run
    args = parser.parse_args(argv)
    if args.run is not None:
        print(json.dumps(run_one(args.run, args.lexicon, args.workers, args.corpus_engine)))
        return 0

    from ratio_utils.config import load_config

    cfg = load_config()
    sentences = args.sentences or cfg.paths.sentences
    lexicon = args.lexicon or cfg.paths.final_lexicon
    for path in (sentences, lexicon):
        if not Path(path).exists():
            raise SystemExit(f"{path} not found: run notebooks 00-04 first, or pass --sentences/--lexicon")
    pool = paragraph_pool(sentences)
    rows = []
    for size in args.sizes:
        workdir = (args.workdir / f"{size}x").resolve()
        if workdir.exists():
            import shutil

            shutil.rmtree(workdir)
        made = generate(workdir / "shards", size * args.base, args.shard_sentences, pool)
        print(f"{size}x: generated {made['sentences']:,} sentences, {made['papers']:,} papers, {made['shards']} shards", file=sys.stderr)
        out = subprocess.run([sys.executable, __file__, "--run", str(workdir), "--lexicon", str(Path(lexicon).resolve()),
                              "--workers", str(args.workers), "--corpus-engine", args.corpus_engine], check=True, capture_output=True, text=True)
        rows.append({"size": size} | json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(table(rows))
    print()
    for line in goals(rows):
        print("- " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
