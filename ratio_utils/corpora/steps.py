"""Stage 00: the steps every corpus build takes on its papers, whole (`build`) or one part at a time (`partitioned`).

Admission (a valid paper whose id no earlier paper had), sentence splitting of unsplit paragraphs, the papers and
sentence tables (schema.PAPER_COLUMNS, schema.SENTENCE_COLUMNS) with every cleaning rule counted, their statistics,
and `CorpusBuild`, what a build returns. Both builds import these from here, so neither imports the other's internals.

Reads and writes nothing (the builds do).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pandas as pd
from tqdm import tqdm  # plain bars: tqdm.auto needs ipywidgets inside papermill

from ..schema import PAPER_COLUMNS, SENTENCE_COLUMNS
from ..text import CleaningCounts, SentenceCleaner, SentenceSplitter
from .base import IngestLog, Paper


@dataclass
class CorpusBuild:
    """What a build wrote. A partitioned build leaves `papers` and `sentences` None (they stay in their
    parts on disk, never in memory at once): use `report` and `statistics`, or read the parts."""

    papers: pd.DataFrame | None
    sentences: pd.DataFrame | None
    report: dict
    statistics: pd.DataFrame

    @property
    def n_sentences(self) -> int:
        return int(self.statistics.loc[self.statistics["corpus"] == "all", "sentences"].sum())


def admit_papers(papers: Iterable[Paper], corpus: str, seen: dict[str, str], dedup: dict[str, list[str]],
                 log: IngestLog, read_ids: list[str] | None = None) -> Iterator[Paper]:
    """The valid papers whose id no earlier paper had; `seen` (id -> corpus) and `dedup` are updated, and
    `read_ids` (if given) gets the id of every valid paper read, admitted or not."""
    for paper in papers:
        problem = record_problem(paper)
        if problem is not None:
            log.quarantine(corpus, problem[0], paper.origin_file or paper.source, paper.origin_line,
                           paper_id=paper.paper_id, detail=problem[1])
            continue
        if not valid_paper(paper, log):
            continue
        if read_ids is not None:
            read_ids.append(paper.paper_id)
        if paper.paper_id in seen:
            if seen[paper.paper_id] == corpus:
                log.quarantine(corpus, "duplicate_id", paper.origin_file or paper.source, paper.origin_line,
                               paper_id=paper.paper_id, detail="id seen earlier in the same corpus")
            else:
                dedup[f"{corpus} in {seen[paper.paper_id]}"].append(paper.paper_id)
                log.count(corpus, f"duplicates_of_{seen[paper.paper_id]}")
            continue
        seen[paper.paper_id] = corpus
        yield paper


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # an escaped half of a UTF-16 pair: no UTF-8 writer takes it


def record_problem(paper: Paper) -> tuple[str, str] | None:
    """(reason, detail) if a paper's fields would break the tables (a year that is not an integer, a date
    that does not parse, text with a lone surrogate), else None: such a record is quarantined, not fatal."""
    if paper.year is None:
        return "missing_year", "year is null"
    if isinstance(paper.year, bool) or not isinstance(paper.year, int):
        return "bad_year", f"year {paper.year!r} is not an integer"
    if paper.date is not None:
        try:
            pd.Timestamp(paper.date)
        except (TypeError, ValueError) as exc:
            return "bad_date", f"date {paper.date!r}: {exc}"
    texts = [paper.title, paper.venue, *(s for para in paper.paragraphs for s in para)]
    for text in texts:
        if isinstance(text, str) and _LONE_SURROGATE.search(text):
            return "invalid_text", ("text holds a lone UTF-16 surrogate (an escaped half pair), which UTF-8 "
                                    "cannot encode")
    return None


def valid_paper(paper: Paper, log: IngestLog) -> bool:
    """Drop empty sentences (counted); quarantine a paper without any sentence."""
    empty = 0
    cleaned = []
    for para in paper.paragraphs:
        kept = [s for s in para if s.strip()]
        empty += len(para) - len(kept)
        cleaned.append(kept)
    if empty:
        log.count(paper.corpus, "empty_sentences_removed", empty)
    keep = [i for i, para in enumerate(cleaned) if para]
    paper.paragraphs = [cleaned[i] for i in keep]
    if paper.paragraph_kinds is not None:
        paper.paragraph_kinds = [paper.paragraph_kinds[i] for i in keep]
    if paper.paragraph_sections is not None:
        paper.paragraph_sections = [paper.paragraph_sections[i] for i in keep]
    if not paper.paragraphs:
        log.quarantine(paper.corpus, "empty_paper", paper.origin_file or paper.source, paper.origin_line,
                       paper_id=paper.paper_id, detail="no sentences")
        return False
    return True


def split_unsplit(papers: Sequence[Paper], splitter: SentenceSplitter, log: IngestLog, progress: bool = True) -> None:
    """Sentence-split (in place) every paper whose paragraphs are not split yet, in one spaCy batch."""
    todo = [p for p in papers if not p.sentences_split]
    if not todo:
        return
    texts = [para[0] if len(para) == 1 else " ".join(para) for p in todo for para in p.paragraphs]
    started = time.perf_counter()
    split = []
    with tqdm(total=len(texts), desc="splitting sentences (spaCy senter)", unit="para", disable=not progress,
              mininterval=1.0) as bar:
        for start in range(0, len(texts), 2048):
            split.extend(splitter.split_many(texts[start:start + 2048]))
            bar.update(min(2048, len(texts) - start))
    i = 0
    for paper in todo:
        paragraphs = []
        for _ in paper.paragraphs:
            paragraphs.append(split[i])
            i += 1
        paper.paragraphs = paragraphs
        paper.sentences_split = True
        log.count(paper.corpus, "paragraphs_sentence_split", len(paragraphs))
    log.count("_all", "sentence_split_seconds", round(time.perf_counter() - started))


SENTENCE_DTYPES = {"para": "int32", "sent": "int32", "year": "int32"}


def papers_frame(papers: Sequence[Paper]) -> pd.DataFrame:
    frame = pd.DataFrame([{col: getattr(p, col) for col in PAPER_COLUMNS} for p in papers],
                         columns=list(PAPER_COLUMNS))
    frame["year"] = frame["year"].astype("int32")
    frame["date"] = pd.to_datetime(frame["date"], errors="raise")
    return frame


def sentences_frame(papers: Sequence[Paper], cleaner: SentenceCleaner, counts: dict[str, CleaningCounts],
                    progress: bool = True) -> pd.DataFrame:
    columns: dict[str, list] = {col: [] for col in SENTENCE_COLUMNS}
    for paper in tqdm(papers, desc="cleaning sentences", unit="paper", disable=not progress, mininterval=1.0):
        tally = counts.setdefault(paper.corpus, CleaningCounts())
        for p, para in enumerate(paper.paragraphs):
            for s, text in enumerate(para):
                result = cleaner.clean(text)
                tally.add(result)
                columns["corpus"].append(paper.corpus)
                columns["paper_id"].append(paper.paper_id)
                columns["year"].append(paper.year)
                columns["date"].append(paper.date)
                columns["para"].append(p)
                columns["sent"].append(s)
                columns["text"].append(text)
                columns["text_clean"].append(result.text_clean)
                columns["drop_reason"].append(result.drop_reason)
    frame = pd.DataFrame(columns, columns=list(SENTENCE_COLUMNS))
    frame = frame.astype(SENTENCE_DTYPES)
    frame["date"] = pd.to_datetime(frame["date"], errors="raise")
    for col in ("corpus", "drop_reason"):
        frame[col] = frame[col].astype("category")
    return frame


def corpus_statistics(papers: pd.DataFrame, sentences: pd.DataFrame) -> pd.DataFrame:
    """Per corpus (and in total): papers, paragraphs, sentences, pairs, kept sentences/pairs, years."""
    s = sentences.assign(kept=sentences["drop_reason"].isna())
    s = s.sort_values(["corpus", "paper_id", "para", "sent"], kind="stable")
    same_para = (s["paper_id"].eq(s["paper_id"].shift(-1)) & s["para"].eq(s["para"].shift(-1)))
    s = s.assign(pair=same_para, pair_kept=same_para & s["kept"] & s["kept"].shift(-1, fill_value=False))
    rows = []
    for corpus, group in list(s.groupby("corpus", observed=True, sort=False)) + [("all", s)]:
        paper_rows = papers if corpus == "all" else papers[papers["corpus"] == corpus]
        rows.append({
            "corpus": corpus,
            "papers": len(paper_rows),
            "paragraphs": int(group.groupby(["paper_id", "para"]).ngroups),
            "sentences": len(group),
            "sentences_kept": int(group["kept"].sum()),
            "pairs": int(group["pair"].sum()),
            "pairs_kept": int(group["pair_kept"].sum()),
            "first_year": int(paper_rows["year"].min()),
            "last_year": int(paper_rows["year"].max()),
        })
    return pd.DataFrame(rows)

