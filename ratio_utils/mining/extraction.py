"""Stage 05 on one sentence table: consecutive pairs of one paragraph, matched and cleaned into pair and
distractor rows, every rule counted (paper §4, App. A, B.1).

`mine_sentences` takes a sentence table (schema.SENTENCE_COLUMNS, a whole corpus or one shard or part of
papers) and returns a `MiningResult`; it reads and writes no file. For every pair of consecutive sentences
inside one paragraph, the lower-cased second sentence goes through the matcher; the first sentence is the
query, the rest of the second sentence the gold (or, for a distractor marker, a distractor candidate of the
marker's category). Rows come out in one order and dtypes (`_sorted`), so any sharding gives equal frames.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..io import require_columns
from ..param_sections import MiningParams
from ..schema import SENTENCE_COLUMNS, MarkerKind, sentence_id
from .cleaning import anaphor_pattern, clean_candidate, clean_query, strip_gold_prefix
from .matcher import NO_COMMA, NO_MARKER, MarkerMatch, MarkerMatcher

PAIR_TABLE_COLUMNS = (
    "corpus", "paper_id", "year", "date", "para", "sent",  # para/sent of the query; the gold is sent + 1
    "move", "marker", "marker_text", "marker_source", "marker_has_anaphor",
    "query", "gold", "query_prefix", "query_original", "gold_original", "query_id", "gold_id",
)  # fmt: skip
DISTRACTOR_TABLE_COLUMNS = (
    "corpus", "paper_id", "year", "date", "para", "sent",  # para/sent of the distractor sentence itself
    "category", "marker", "marker_text", "marker_source", "text", "text_original", "docid",
)  # fmt: skip


@dataclass
class MiningResult:
    # every kept pair; for a partitioned run only `move` and `marker` (mining/parallel.read_mined_summary)
    pairs: pd.DataFrame
    distractors: pd.DataFrame  # every kept distractor; for a partitioned run only `category`
    counts: Counter
    # a partitioned run's seeded sample of whole pair rows (None: `pairs` are whole)
    examples: pd.DataFrame | None = None

    @property
    def example_rows(self) -> pd.DataFrame:
        """The rows notebook 05's examples are drawn from: every pair, or the sample of a partitioned run."""
        return self.pairs if self.examples is None else self.examples

    def report(self) -> dict[str, Any]:
        return counts_to_report(self.counts)


def mining_report(result: MiningResult, lexicon_summary: dict, params: MiningParams, inputs: dict[str, str],
                  parts: dict[str, int] | None = None) -> dict[str, Any]:
    """The run's mining report: every rule counted, the parts mined or reused (a partitioned run), the lexicon's
    findings, the params and the inputs."""
    report = result.report()
    if parts is not None:
        report["parts"] = parts
    report["lexicon"] = lexicon_summary
    report["params"] = dict(params.__dict__)
    report["inputs"] = inputs
    return report


def drop_count_table(result: MiningResult) -> pd.DataFrame:
    """Every counted rule as rows (stage, rule, count) for display."""
    rows = [(key.rsplit(".", 1)[0], key.rsplit(".", 1)[1], n) for key, n in sorted(result.counts.items())]
    return pd.DataFrame(rows, columns=["what", "rule", "count"])


def example_pairs(pairs: pd.DataFrame, per_move: int = 3, seed: int = 13) -> pd.DataFrame:
    """A few random pairs per move, with the original second sentence beside the cleaned gold."""
    shuffled = pairs.sample(frac=1.0, random_state=seed)
    columns = ["move", "marker_text", "query_prefix", "query", "gold", "gold_original"]
    return shuffled.groupby("move").head(per_move).sort_values("move", kind="stable")[columns]


def marker_frequencies(pairs: pd.DataFrame) -> pd.DataFrame:
    """Pairs per (move, marker), most frequent first."""
    if pairs.empty:
        return pd.DataFrame(columns=["move", "marker", "pairs"])
    return (pairs.groupby(["move", "marker"]).size().rename("pairs").reset_index()
            .sort_values(["move", "pairs"], ascending=[True, False]))

def counts_to_report(counts: Counter) -> dict[str, Any]:
    """Nest flat counter keys ('pairs.dropped.gold_too_short') into a JSON-friendly dict."""
    report: dict[str, Any] = {}
    for key in sorted(counts):
        node = report
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = int(counts[key])
    return report


def consecutive_pairs(sentences: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Row positions (first, second) of consecutive sentences of one paragraph of one paper.

    `sentences` must be sorted by corpus, paper_id, para, sent (mine_sentences sorts it). A gap in
    `sent` (a sentence missing from the table) breaks the pair: the two are not consecutive.
    """
    if len(sentences) < 2:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    corpus = sentences["corpus"].to_numpy()
    paper = sentences["paper_id"].to_numpy()
    para = sentences["para"].to_numpy()
    sent = sentences["sent"].to_numpy()
    same = ((corpus[1:] == corpus[:-1]) & (paper[1:] == paper[:-1]) & (para[1:] == para[:-1])
            & (sent[1:] == sent[:-1] + 1))
    first = np.flatnonzero(same)
    return first, first + 1


def prepare_sentences(sentences: pd.DataFrame, source: str | Path) -> pd.DataFrame:
    """The sentence columns in reading order (corpus, paper, paragraph, sentence); a missing column is an error."""
    require_columns(sentences, SENTENCE_COLUMNS, source)
    frame = sentences[list(SENTENCE_COLUMNS)].sort_values(["corpus", "paper_id", "para", "sent"], kind="stable")
    return frame.reset_index(drop=True)


def lowered_second_sentences(sentences: pd.DataFrame, second: np.ndarray):
    """(original-case list, lower-case polars Series) of the single-spaced second sentences."""
    import polars as pl

    text = sentences["text_clean"].where(sentences["text_clean"].notna(), sentences["text"])
    series = pl.Series(text.iloc[second].fillna("").astype(str).tolist(), dtype=pl.String)
    spaced = series.str.replace_all(r"\s+", " ").str.strip_chars()
    return spaced.to_list(), spaced.str.to_lowercase()


class _PairExtractor:
    """Turns one matched consecutive pair into a cleaned pair or distractor row, counting each rule."""

    _COLUMNS = ("corpus", "paper_id", "year", "date", "para", "sent", "text", "text_clean", "drop_reason")

    def __init__(self, frame: pd.DataFrame, params: MiningParams, counts: Counter):
        self.cols = {c: frame[c].to_numpy() for c in self._COLUMNS}
        self.params = params
        self.counts = counts
        self.anaphor = anaphor_pattern(params.anaphors)

    def _flagged(self, row: int) -> str | None:
        reason = self.cols["drop_reason"][row]
        return None if reason is None or pd.isna(reason) else str(reason)

    def extract(self, found: MarkerMatch, q: int, g: int, text: str) -> tuple[str, dict] | None:
        """('pair' | 'distractor', row), or None when a rule dropped it. `text`: the second sentence."""
        counts, cols, entry = self.counts, self.cols, found.entry
        is_move = entry.kind == MarkerKind.MOVE.value
        side = "pairs" if is_move else "distractors"
        counts[f"{side}.matched.{entry.label}"] += 1
        if (reason := self._flagged(g)) is not None:
            counts[f"{side}.dropped.second_sentence_dropped"] += 1
            counts[f"{side}.second_sentence_drop_reason.{reason}"] += 1
            return None
        if is_move and (reason := self._flagged(q)) is not None:
            counts["pairs.dropped.query_sentence_dropped"] += 1
            counts[f"pairs.query_sentence_drop_reason.{reason}"] += 1
            return None
        rest = text[found.rest_start :].lstrip(" ,")
        gold = clean_candidate(rest, self.params)
        if gold.text is None:
            counts[f"{side}.dropped.{gold.rule}"] += 1
            if gold.detail:
                counts[f"{side}.citation_kind.{gold.detail}"] += 1
            return None
        if strip_gold_prefix(rest) != rest.strip():
            counts[f"{side}.modified.gold_prefix_stripped"] += 1
        marker_text = text[: found.phrase_end].strip()
        base = {
            "corpus": cols["corpus"][g], "paper_id": cols["paper_id"][g], "year": cols["year"][g],
            "date": cols["date"][g],
            "marker": entry.marker, "marker_text": marker_text, "marker_source": entry.source,
        }  # fmt: skip
        if not is_move:
            counts[f"distractors.kept.{entry.label}"] += 1
            return "distractor", {
                **base, "para": cols["para"][g], "sent": cols["sent"][g], "category": entry.label,
                "text": gold.text, "text_original": cols["text"][g], "docid": sentence_id(gold.text),
            }  # fmt: skip
        query_text = cols["text_clean"][q]
        if query_text is None or pd.isna(query_text):
            query_text = cols["text"][q]
        query, prefix = clean_query(str(query_text), self.params)
        if query.text is None:
            counts[f"pairs.dropped.{query.rule}"] += 1
            return None
        if prefix:
            counts["pairs.modified.query_prefix_stripped"] += 1
        counts[f"pairs.kept.{entry.label}"] += 1
        return "pair", {
            **base, "para": cols["para"][q], "sent": cols["sent"][q], "move": entry.label,
            "marker_has_anaphor": bool(self.anaphor.search(marker_text.lower())),
            "query": query.text, "gold": gold.text, "query_prefix": prefix,
            "query_original": cols["text"][q], "gold_original": cols["text"][g],
            "query_id": sentence_id(query.text), "gold_id": sentence_id(gold.text),
        }  # fmt: skip


def mine_sentences(sentences: pd.DataFrame, matcher: MarkerMatcher, params: MiningParams,
                   source: str | Path = "sentences") -> MiningResult:
    """Mine pairs and distractors from one sentence table (a whole corpus or one shard of papers)."""
    from tqdm.auto import tqdm

    frame = prepare_sentences(sentences, source)
    first, second = consecutive_pairs(frame)
    counts: Counter = Counter()
    counts["pairs.consecutive"] = len(first)
    cased, lowered = lowered_second_sentences(frame, second)
    matches = matcher.match_series(lowered)
    hits = [k for k, found in enumerate(matches) if found is not NO_MARKER]
    counts["pairs.no_marker"] = len(matches) - len(hits)

    extractor = _PairExtractor(frame, params, counts)
    rows: dict[str, list[dict]] = {"pair": [], "distractor": []}
    for k in tqdm(hits, desc="cleaning", unit="pair", disable=not (params.progress and len(hits) > 20_000),
                  mininterval=1.0):
        if matches[k] == NO_COMMA:
            counts["pairs.dropped.marker_not_followed_by_comma"] += 1
            continue
        # slice the original-case text where lower() kept the length (it almost always does)
        low = lowered[k]
        text = cased[k] if len(cased[k]) == len(low) else low
        extracted = extractor.extract(matches[k], first[k], second[k], text)
        if extracted is not None:
            rows[extracted[0]].append(extracted[1])
    pairs = pd.DataFrame(rows["pair"], columns=list(PAIR_TABLE_COLUMNS))
    distractors = pd.DataFrame(rows["distractor"], columns=list(DISTRACTOR_TABLE_COLUMNS))
    return MiningResult(_sorted(pairs), _sorted(distractors), counts)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """The one row order and dtypes of every mining output, so that any sharding gives equal frames.

    Dates become ISO strings (`YYYY-MM-DD`, missing = NaN) whatever type the sentence table used.
    """
    frame = frame.copy()
    frame["date"] = pd.to_datetime(frame["date"], errors="coerce").dt.strftime("%Y-%m-%d")
    frame["year"] = pd.to_numeric(frame["year"], errors="coerce").astype("Int64")
    for column in ("para", "sent"):
        frame[column] = frame[column].astype("int64")
    if "marker_has_anaphor" in frame.columns:
        frame["marker_has_anaphor"] = frame["marker_has_anaphor"].astype(bool)
    for column in frame.columns:
        if column not in ("year", "para", "sent", "marker_has_anaphor"):
            frame[column] = (frame[column].astype("str").where(frame[column].notna(), None) if column != "date"
                             else frame[column].astype("str"))
    return frame.sort_values(["corpus", "paper_id", "para", "sent"], kind="stable").reset_index(drop=True)


def combine(results: Iterable[MiningResult]) -> MiningResult:
    """One result from the results of several shards: rows concatenated and sorted, counts summed."""
    results = list(results)
    counts: Counter = Counter()
    for result in results:
        counts.update(result.counts)
    pairs = [r.pairs for r in results if len(r.pairs)]
    distractors = [r.distractors for r in results if len(r.distractors)]
    empty_pairs = pd.DataFrame(columns=list(PAIR_TABLE_COLUMNS))
    empty_distractors = pd.DataFrame(columns=list(DISTRACTOR_TABLE_COLUMNS))
    return MiningResult(
        _sorted(pd.concat(pairs, ignore_index=True)) if pairs else empty_pairs,
        _sorted(pd.concat(distractors, ignore_index=True)) if distractors else empty_distractors,
        counts,
    )
