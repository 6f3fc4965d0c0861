"""Scale benchmark (issue 14): the corpus and mining stages on synthetic S2ORC shards at 1x, 2x, 4x a base size.

    .venv/bin/python benchmarks/scale.py [--base 500000] [--sizes 1 2 4] [--shard-sentences 50000] [--workers 2]
                                         [--sentences PATH] [--lexicon PATH] [--workdir DIR]

Generator: S2ORC-format shards (`papers` + `s2orc` records, `content.text` with JSON-encoded `paragraph` and
`sectionheader` spans, gzipped) whose paragraphs are resampled (seeded) from the embedded ACL corpus's
sentence table (`--sentences`, default `cfg.paths.sentences` of the default run), so sentence lengths,
paragraph lengths and marker rates are the real corpus's; about 150 sentences per paper, publication dates
2015-2025, `--shard-sentences` sentences per shard. Paragraphs are written as running text, so the corpus
stage sentence-splits them with spaCy as it does real S2ORC. Each paper ends with a references section (back
matter, dropped by the reader). `ReleaseShape` adds what a real release holds besides clean papers (the
`s2orc_v2` layout, other fields, undated papers, doubled spans, bad records); benchmarks/rehearsal.py uses it,
this benchmark writes the clean `s2orc` release.

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
import datetime as _dt
import gzip
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SENTENCES_PER_PAPER = 150


# --- the generator ---------------------------------------------------------------------------------------------


def paragraph_pool(sentences_path: Path) -> list[list[str]]:
    """Paragraphs (lists of sentences) of the embedded corpus, in table order."""
    import pandas as pd

    frame = pd.read_parquet(sentences_path, columns=["paper_id", "para", "sent", "text"])
    return frame.groupby(["paper_id", "para"], sort=False)["text"].agg(list).tolist()


def copy_of(sentence: str, n: int) -> str:
    """The sentence as the n-th copy of its paragraph: a copy word before its final punctuation (the opening
    words, where the markers are, stay as they are)."""
    body, end = (sentence[:-1], sentence[-1]) if sentence[-1:] in ".!?" else (sentence, "")
    return f"{body} copy{n}{end}"


@dataclass(frozen=True)
class ReleaseShape:
    """What a synthetic release holds besides clean computer-science papers (shares of papers, per shard counts).

    The default is the clean release `benchmarks/scale.py` measures; `benchmarks/rehearsal.py` adds what the
    real release has and the reader must handle: papers of other fields (full text included, dropped by the
    field filter), computer-science papers with a year but no publication date (dropped by the paper's
    rule), paragraph spans listed twice (removed), and bad records (quarantined)."""

    text_dataset: str = "s2orc"  # or "s2orc_v2": `body.text` with `section_header` / `bib_ref` annotations
    first_date: str = "2015-01-01"
    last_date: str = "2025-12-28"
    other_field_share: float = 0.0
    undated_share: float = 0.0
    duplicated_span_share: float = 0.0
    # A paragraph drawn again gets a copy word in each sentence ("... copy3."), so that its pairs are new pairs:
    # otherwise de-duplication keeps only the earliest copy of each, and the later (test) windows of a large
    # release get none.
    distinct_copies: bool = False
    # alternately a truncated line (malformed JSON) and a record whose spans are no list
    bad_records_per_shard: int = 0
    # issue 17's two records that stop a shard task: a selected paper with `year: null` beside its publication date,
    # and a paragraph with an escaped lone surrogate; one of each per shard
    issue_17_records: bool = False


def text_record(corpusid: int, paragraphs: list[list[str]], layout: str = "s2orc",
                duplicate_span: bool = False) -> dict:
    """A full-text record: a section header, one paragraph span per paragraph, then a references section
    (back matter, dropped by the reader); `layout` `s2orc` (`content`) or `s2orc_v2` (`body`)."""
    header = "1 Introduction"
    text, spans = header, []
    for para in paragraphs:
        text += "\n\n"
        start = len(text)
        text += " ".join(para)
        spans.append({"start": start, "end": len(text)})
    headers = [{"start": 0, "end": len(header)}]
    text += "\n\n"
    headers.append({"start": len(text), "end": len(text) + len("References")})
    text += "References\n\n"
    references = {"start": len(text), "end": len(text) + len("Doe, J. 2020. A cited paper.")}
    text += "Doe, J. 2020. A cited paper."
    spans.append(references)
    if duplicate_span:
        spans.insert(1, spans[0])
    if layout == "s2orc_v2":
        annotations = {"section_header": json.dumps(headers), "paragraph": json.dumps(spans), "bib_ref": [references]}
        return {"corpusid": corpusid, "title": f"Synthetic paper {corpusid}", "authors": [],
                "openaccessinfo": {"license": None},
                "body": {"text": text, "annotations": annotations}, "bibliography": {"text": "", "annotations": {}}}
    annotations = {"sectionheader": json.dumps(headers), "paragraph": json.dumps(spans),
                   "bibref": json.dumps([references])}
    return {"corpusid": corpusid, "content": {"text": text, "annotations": annotations}}


def papers_record(corpusid: int, rng: random.Random, shape: ReleaseShape = ReleaseShape(),
                  field: str = "Computer Science", dated: bool = True) -> dict:
    first, last = _dt.date.fromisoformat(shape.first_date), _dt.date.fromisoformat(shape.last_date)
    date = first + _dt.timedelta(days=rng.randint(0, (last - first).days))
    return {"corpusid": corpusid, "title": f"Synthetic paper {corpusid}", "year": date.year,
            "publicationdate": date.isoformat() if dated else None, "venue": "Synthetic",
            "s2fieldsofstudy": [{"category": field, "source": "s2-fos-model"}]}


def _bad_record(corpusid: int, kind: int, layout: str) -> str:
    """A bad full-text line: a truncated JSON line, or a record whose paragraph annotation is not a list."""
    if kind % 2 == 0:
        return json.dumps(text_record(corpusid, [["Truncated."]], layout))[:40]
    record = text_record(corpusid, [["This record's paragraph spans are an object, not a list."]], layout)
    (record.get("body") or record["content"])["annotations"]["paragraph"] = json.dumps({"start": 0, "end": 5})
    return json.dumps(record)


def generate(dest: Path, n_sentences: int, shard_sentences: int, pool: list[list[str]], seed: int = 13,
             shape: ReleaseShape = ReleaseShape()) -> dict:
    """Write `dest/papers/*.gz` and `dest/<shape.text_dataset>/*.gz`, about `n_sentences` sentences of
    selected papers (computer science, dated) and, on top, the papers `shape` adds."""
    rng = random.Random(seed)
    layout = shape.text_dataset
    for sub in ("papers", layout):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    written, corpusid, shard = 0, 0, 0
    drawn: Counter = Counter()  # times each paragraph of the pool was drawn
    made = {"other_field": 0, "undated": 0, "duplicated_spans": 0, "bad_records": 0}
    while written < n_sentences:
        in_shard = 0
        with gzip.open(dest / layout / f"shard-{shard:04d}.jsonl.gz", "wt", compresslevel=1) as text_out, \
                gzip.open(dest / "papers" / f"shard-{shard:04d}.jsonl.gz", "wt", compresslevel=1) as meta_out:
            for kind in range(shape.bad_records_per_shard):
                corpusid += 1
                meta_out.write(json.dumps(papers_record(corpusid, rng, shape)) + "\n")
                text_out.write(_bad_record(corpusid, kind, layout) + "\n")
                made["bad_records"] += 1
            if shape.issue_17_records:
                for defect in ("year_null", "lone_surrogate"):
                    corpusid += 1
                    meta = papers_record(corpusid, rng, shape)
                    paragraphs = [list(pool[rng.randrange(len(pool))])]
                    if defect == "year_null":
                        meta["year"] = None
                    else:
                        paragraphs[0][-1] += " \ud800"  # json.dumps writes it as the escape \\ud800
                    meta_out.write(json.dumps(meta) + "\n")
                    text_out.write(json.dumps(text_record(corpusid, paragraphs, layout)) + "\n")
                    made[defect] = made.get(defect, 0) + 1
            while in_shard < shard_sentences and written < n_sentences:
                corpusid += 1
                paragraphs, count = [], 0
                while count < SENTENCES_PER_PAPER:
                    index = rng.randrange(len(pool))
                    para = pool[index]
                    if shape.distinct_copies and drawn[index]:
                        para = [copy_of(sentence, drawn[index]) for sentence in para]
                    drawn[index] += 1
                    paragraphs.append(para)
                    count += len(para)
                other_field = rng.random() < shape.other_field_share
                undated = not other_field and rng.random() < shape.undated_share
                doubled = rng.random() < shape.duplicated_span_share
                text_out.write(json.dumps(text_record(corpusid, paragraphs, layout, doubled)) + "\n")
                meta_out.write(json.dumps(papers_record(corpusid, rng, shape,
                                                        "Medicine" if other_field else "Computer Science",
                                                        dated=not undated)) + "\n")
                made["other_field"] += other_field
                made["undated"] += undated
                made["duplicated_spans"] += doubled
                if not (other_field or undated):
                    in_shard += count
                    written += count
        shard += 1
    return {"sentences": written, "papers": corpusid, "shards": shard} | made


# --- one measured run (in its own process) ------------------------------------------------------------------------


class TreeMemory:
    """Peak RSS of a process (this one, or `pid`) and its descendants (Dask workers), sampled every `interval`
    seconds: the largest sum seen (`peak_tree`), the largest single process (`peak_largest`) and, for each
    of `roles` (name -> predicate on a process's command line), the largest process that has it (`peak_role`)."""

    def __init__(self, interval: float = 0.1, pid: int | None = None, roles: dict | None = None):
        import psutil

        self.root = psutil.Process(pid)
        self.interval = interval
        self.roles = roles or {}
        self.peak_tree = self.peak_largest = 0
        self.peak_role = dict.fromkeys(self.roles, 0)
        self._cmdlines: dict[tuple, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            sizes = []
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:  # the root has ended
                procs = []
            for proc in procs:
                try:
                    rss = proc.memory_info().rss
                    key = (proc.pid, proc.create_time())  # a pid can be reused by a later process
                    cmdline = self._cmdlines.get(key) or self._cmdlines.setdefault(key, proc.cmdline())
                except psutil.Error:
                    continue
                sizes.append(rss)
                for role, has_role in self.roles.items():
                    if has_role(cmdline):
                        self.peak_role[role] = max(self.peak_role[role], rss)
            if sizes:
                self.peak_tree = max(self.peak_tree, sum(sizes))
                self.peak_largest = max(self.peak_largest, max(sizes))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# records per part: a whole shard per part, as in docs/scale.md's table (parts are record ranges of a shard)
WHOLE_SHARD = 10**9


def run_one(workdir: Path, lexicon: Path, workers: int, corpus_engine: str) -> dict:
    import shutil

    os.environ["RATIO_OUTPUT_ROOT"] = str(workdir / "out")
    from ratio_utils.config import load_config
    from ratio_utils.corpora import build_corpus
    from ratio_utils.stages.pair_mining import PairMiningStage

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
        stage = PairMiningStage.from_config(cfg)
        stage.mine()
        mined = stage.result
        result["mining_s"] = time.perf_counter() - started
    stats = build.statistics.set_index("corpus").loc["all"]
    result |= {
        "sentences": int(stats["sentences"]), "consecutive_pairs": int(mined.counts["pairs.consecutive"]),
        "pairs_kept": len(mined.pairs), "parts": build.report["parts"]["total"],
        "corpus_peak_tree_mb": corpus_memory.peak_tree / 2**20,
        "corpus_peak_largest_mb": corpus_memory.peak_largest / 2**20,
        "mining_peak_tree_mb": mining_memory.peak_tree / 2**20,
        "mining_peak_largest_mb": mining_memory.peak_largest / 2**20,
    }  # fmt: skip
    return result


# --- the table -------------------------------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    header = ("| size | sentences | parts | consecutive pairs | kept pairs | corpus s | mining s | total s "
              "| total / parse | s per 100K sentences | peak RSS tree MB (corpus / mining) | largest process MB |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        total = r["corpus_s"] + r["mining_s"]
        lines.append(
            f"| {r['size']}x | {r['sentences']:,} | {r['parts']} | {r['consecutive_pairs']:,} | {r['pairs_kept']:,} "
            f"| {r['corpus_s']:.0f} | {r['mining_s']:.0f} | {total:.0f} | {total / r['corpus_s']:.2f} "
            f"| {100_000 * total / r['sentences']:.1f} "
            f"| {r['corpus_peak_tree_mb']:.0f} / {r['mining_peak_tree_mb']:.0f} "
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
        for label, y in (("total", [r["corpus_s"] + r["mining_s"] for r in rows]),
                         ("corpus", [r["corpus_s"] for r in rows]),
                         ("mining", [r["mining_s"] for r in rows])):
            slope, fixed = np.polyfit(x, np.array(y), 1)
            worst = max(abs(fixed + slope * xi - yi) / yi for xi, yi in zip(x, y))
            fit.append(f"{label}: {fixed:.1f} s fixed + {1e3 * slope:.3f} ms per sentence "
                       f"({len(rows)} sizes; largest residual "
                       f"{100 * worst:.0f}% of the measured time)")
    return [
        f"peak RSS (tree) {large['size']}x / {small['size']}x: {peak(large) / peak(small):.2f} (goal <= 1.3)",
        f"time per sentence {large['size']}x / {small['size']}x ({scale:.1f}x the sentences): "
        f"{per_sentence(large) / per_sentence(small):.2f} (goal 0.8-1.2: linear)",
        "end-to-end / parse-only: "
        + ", ".join(f"{(r['corpus_s'] + r['mining_s']) / r['corpus_s']:.2f}" for r in rows) + " (goal <= 2)",
    ] + fit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=int, default=500_000, help="sentences at 1x")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--shard-sentences", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--corpus-engine", choices=["dask", "local"], default="dask",
                        help="build the corpus parts on the Dask workers too (default) or one after another")
    parser.add_argument("--sentences", type=Path, default=None,
                        help="sentence table to resample (default: the default run's)")
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
        print(f"{size}x: generated {made['sentences']:,} sentences, {made['papers']:,} papers, "
              f"{made['shards']} shards", file=sys.stderr)
        out = subprocess.run([sys.executable, __file__, "--run", str(workdir),
                              "--lexicon", str(Path(lexicon).resolve()),
                              "--workers", str(args.workers), "--corpus-engine", args.corpus_engine],
                             check=True, capture_output=True, text=True)
        rows.append({"size": size} | json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(table(rows))
    print()
    for line in goals(rows):
        print("- " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
