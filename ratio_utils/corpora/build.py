"""Stage 00 build: read every source, dedupe, sample, sentence-split, clean; write the papers and sentence
tables, the corpus report, the quarantine, and the notebook's tables and figure.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict

import pandas as pd
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from ..config import Config
from ..io import InputError, write_json_atomic, write_parquet_atomic, write_text_atomic
from ..param_sections import CorpusParams
from ..parts import reset_table
from ..schema import seeded_hash
from ..text import CleaningCounts, SentenceCleaner, SentenceSplitter
from .base import CorpusReader, IngestLog, Paper
from .registry import make_readers
from .steps import (
    CorpusBuild,
    admit_papers,
    corpus_statistics,
    papers_frame,
    sentences_frame,
    split_unsplit,
    valid_paper,
)

# --- building the tables ---------------------------------------------------------------------------------------------


def read_papers(readers: Sequence[CorpusReader], log: IngestLog, progress: bool = True) -> tuple[list[Paper], dict]:
    """Every valid paper of every reader, in reader order; duplicates of an earlier id are counted and left out."""
    papers: list[Paper] = []
    seen: dict[str, str] = {}
    dedup: dict[str, list[str]] = defaultdict(list)
    for reader in readers:
        stream = tqdm(reader.papers(log), desc=f"reading {reader.corpus}", unit="paper", disable=not progress,
                      mininterval=1.0)
        papers.extend(admit_papers(stream, reader.corpus, seen, dedup, log))
    return papers, {key: sorted(ids) for key, ids in dedup.items()}


def sample_papers(papers: Sequence[Paper], n: int, year_bins: Sequence[int], seed: int) -> list[Paper]:
    """A deterministic sample of `n` papers spread over year bins and, within a bin, over years.

    The bins are `<= year_bins[0]`, `(year_bins[0], year_bins[1]]`, ..., `> year_bins[-1]` (the
    default corpus's train / validation / test years), each given an equal share; inside a bin,
    years take turns, each giving its paper with the smallest seeded hash, so every year that has
    papers is represented before any year gets a second one. Returns papers in input order.
    """
    if n >= len(papers):
        return list(papers)
    bounds = sorted(year_bins)

    def bin_of(year: int) -> int:
        return next((i for i, bound in enumerate(bounds) if year <= bound), len(bounds))

    by_bin: dict[int, dict[int, list[Paper]]] = defaultdict(lambda: defaultdict(list))
    for paper in papers:
        by_bin[bin_of(paper.year)][paper.year].append(paper)
    queues = {
        b: [sorted(ps, key=lambda p: seeded_hash(seed, p.paper_id)) for _, ps in sorted(years.items())]
        for b, years in by_bin.items()
    }
    chosen: set[int] = set()
    bins = sorted(queues)
    share = {b: n // len(bins) + (1 if i < n % len(bins) else 0) for i, b in enumerate(bins)}
    leftover = 0
    for b in bins:
        leftover += share[b] - _take_round_robin(queues[b], share[b], chosen)
    for b in bins:  # a bin with too few papers passes its share on
        if leftover <= 0:
            break
        leftover -= _take_round_robin(queues[b], leftover, chosen)
    return [p for p in papers if id(p) in chosen]


def _take_round_robin(year_queues: list[list[Paper]], k: int, chosen: set[int]) -> int:
    taken = 0
    while taken < k and any(year_queues):
        for queue in year_queues:
            while queue and id(queue[0]) in chosen:
                queue.pop(0)
            if queue and taken < k:
                chosen.add(id(queue.pop(0)))
                taken += 1
    return taken


def build_corpus(cfg: Config, params: CorpusParams | None = None, write: bool = True) -> CorpusBuild:
    """Read every source, dedupe, sample, split, clean; write papers, sentences, report, quarantine."""
    params = params or cfg.section("corpus", CorpusParams)
    if params.papers_per_part is not None:
        from .partitioned import build_corpus_parts

        return build_corpus_parts(cfg, params, write=write)
    started = time.perf_counter()
    log = IngestLog(strict=params.strict)
    readers = make_readers(cfg, params)
    papers, dedup = read_papers(readers, log, params.progress)
    if not papers:
        raise InputError(", ".join(r.corpus for r in readers), "no valid paper in any source")
    read_total = len(papers)
    if params.max_papers is not None:
        papers = sample_papers(papers, params.max_papers, params.sample_year_bins, cfg.seed)
    split_unsplit(papers, SentenceSplitter(), log, params.progress)
    # A split paragraph can come out empty (whitespace only): drop it the same counted way.
    papers = [p for p in papers if valid_paper(p, log)]
    cleaner = SentenceCleaner(params.cleaning_rules())
    cleaning: dict[str, CleaningCounts] = {}
    sentences = sentences_frame(papers, cleaner, cleaning, params.progress)
    paper_table = papers_frame(papers)
    statistics = corpus_statistics(paper_table, sentences)
    total_cleaning = CleaningCounts()
    for counts in cleaning.values():
        total_cleaning.merge(counts)
    report = {
        "params": asdict(params),
        "sources": [r.corpus for r in readers],
        "papers_read": read_total,
        "papers_written": len(papers),
        "sampled": params.max_papers is not None and len(papers) < read_total,
        "deduplicated": {key: {"count": len(ids), "paper_ids": ids} for key, ids in dedup.items()},
        "reader_counts": {corpus: dict(sorted(c.items())) for corpus, c in log.counts.items()},
        "quarantine": {r.corpus: log.quarantine_counts(r.corpus) for r in readers},
        "cleaning": ({corpus: counts.to_dict() for corpus, counts in cleaning.items()}
                     | {"all": total_cleaning.to_dict()}),
        "statistics": statistics.to_dict(orient="records"),
        "papers_per_year": {corpus: {int(y): int(n) for y, n in g["year"].value_counts().sort_index().items()}
                            for corpus, g in paper_table.groupby("corpus")},
        "seconds": round(time.perf_counter() - started, 1),
    }
    if write:
        for table in (cfg.paths.papers, cfg.paths.sentences):
            reset_table(table, partitioned=False)
        write_parquet_atomic(paper_table, cfg.paths.papers)
        write_parquet_atomic(sentences, cfg.paths.sentences)
        quarantine_dir = cfg.paths.quarantine
        for reader in readers:
            records = log.quarantined.get(reader.corpus, [])
            write_text_atomic(quarantine_dir / f"{reader.corpus}.jsonl",
                              "".join(json.dumps(r) + "\n" for r in records))
        report["outputs"] = {"papers": str(cfg.paths.papers), "sentences": str(cfg.paths.sentences),
                             "quarantine_dir": str(quarantine_dir)}
        write_json_atomic(cfg.paths.corpus_report, report)
    return CorpusBuild(paper_table, sentences, report, statistics)


# --- report outputs (tables and figures) -----------------------------------------------------------------------------


def cleaning_table(report: dict) -> pd.DataFrame:
    """One row per cleaning rule: kind (edit/drop) and the count per corpus."""
    corpora = [c for c in report["cleaning"] if c != "all"] + ["all"]
    rows = []
    for kind in ("edits", "drops"):
        for rule in report["cleaning"]["all"][kind]:
            rows.append({"rule": rule, "kind": kind[:-1]} | {c: report["cleaning"][c][kind][rule] for c in corpora})
    return pd.DataFrame(rows)


def write_corpus_outputs(build: CorpusBuild, cfg: Config) -> dict[str, dict]:
    """tables/corpus_statistics, tables/corpus_cleaning, figures/corpus_papers_per_year."""
    from ..publish.published import save_figure, set_figure_style, write_table

    inputs = [cfg.paths.papers, cfg.paths.sentences]
    notes = []
    if build.report["sampled"]:
        notes.append(f"Sample of {build.report['papers_written']} of {build.report['papers_read']} papers "
                     "(corpus.max_papers).")
    for key, info in build.report["deduplicated"].items():
        notes.append(f"{info['count']} papers of {key.replace(' in ', ' already in ')} left out (same ACL id).")
    quarantined = {c: q for c, q in build.report["quarantine"].items() if q}
    if quarantined:
        notes.append(f"Quarantined records: {quarantined} (data/interim/quarantine/).")
    notes.append("pairs = consecutive sentences within one paragraph; *_kept: after the Appendix B.1 drop rules.")
    written = {
        "statistics": write_table(build.statistics, "corpus_statistics", cfg, caption="Corpus statistics per source",
                                  notes=notes, inputs=inputs, latex=True),
        "cleaning": write_table(cleaning_table(build.report), "corpus_cleaning", cfg,
                                caption="Sentences changed (edit) or removed (drop) by each cleaning rule "
                                        "(Appendix B.1)",
                                inputs=inputs, latex=False),
    }
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    set_figure_style()
    if build.papers is not None:
        fig = year_histogram(build.papers, plt)
    else:  # a partitioned build: the counts of its report, not the papers table
        per_year = pd.DataFrame(build.report["papers_per_year"]).fillna(0).astype(int)
        per_year.index = per_year.index.astype(int)
        fig = year_bars(per_year.sort_index(), plt)
    written["figure"] = save_figure(fig, "corpus_papers_per_year", cfg, inputs=[cfg.paths.papers], notes=notes[:1])
    plt.close(fig)
    return written


def year_histogram(papers: pd.DataFrame, plt=None):
    """Stacked bar chart of papers per publication year and corpus."""
    if plt is None:
        import matplotlib.pyplot as plt
    return year_bars(papers.groupby(["year", "corpus"]).size().unstack(fill_value=0).sort_index(), plt)


def year_bars(counts: pd.DataFrame, plt=None):
    """Stacked bars of a year x corpus table of paper counts."""
    if plt is None:
        import matplotlib.pyplot as plt
    counts = counts.reindex(range(int(counts.index.min()), int(counts.index.max()) + 1), fill_value=0)
    fig, ax = plt.subplots(figsize=(8, 3))
    counts.plot.bar(stacked=True, ax=ax, width=0.85)
    ax.set_xlabel("publication year")
    ax.set_ylabel("papers")
    labels = [str(y) if y % 5 == 0 else "" for y in counts.index]
    ax.set_xticklabels(labels, rotation=0)
    ax.legend(title="corpus")
    fig.tight_layout()
    return fig


