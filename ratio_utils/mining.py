"""Stage 05: mine query–gold pairs and distractor candidates from consecutive sentences (paper §4, App. A, B.1).

Reads `cfg.paths.sentences` (schema.SENTENCE_COLUMNS) and `cfg.paths.final_lexicon` (schema.LEXICON_COLUMNS);
writes `cfg.paths.pairs`, `cfg.paths.distractors` and `cfg.paths.mining_report` (every rule counted).

For every pair of consecutive sentences inside one paragraph, the lower-cased second sentence is matched
against the non-rejected markers:

* the **longest** marker that is a character prefix wins (so `specifically,` (Specify) beats
  `specifically` (distractor), and `to counter this …` (Address) beats `to counter` (distractor));
* an extendable connective (`special_word=True`) also matches its prefix plus up to
  `extension_max_words` more words and a comma; it competes by the length of that opening phrase
  with the longest fixed marker (trailing commas excluded; a tie goes to the fixed marker);
* the winner counts only if the opening phrase ends at a comma: the marker ends with a comma or the
  text right after it begins with one. Otherwise the pair is dropped and counted, with no fallback
  to a shorter marker (`in order to overcome this problem, we …` is not cut after `this`);
* a marker with words after an inner comma (`to address this issue, we propose`, 1,163 released
  rows) is matched as a whole, and its opening phrase ends at its first comma;
* the first sentence is the query, the rest of the second sentence the gold (or, for a distractor
  marker, a distractor candidate of the marker's category).

Pairs are then cleaned by the Appendix B.1 rules (`clean_candidate` for the gold side, shared with
distractors; `clean_query`), each rule counted. The same `mine_sentences` function runs on the whole
table or, through Dask, on shards of papers (`mine_with_dask`), and both give the same rows. A partitioned
sentence table (corpus.papers_per_part) is mined part by part, locally or one Dask task per part, each
writing its own pairs/distractors part (`mine_parts`): no process holds the corpus.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .cluster import dask_client
from .io import InputError, atomic_path, require_columns, write_json_atomic, write_parquet_atomic
from .parts import part_files, part_path, read_table, remove_parts_from, reset_table
from .schema import (
    DISTRACTOR_CATEGORIES,
    LEXICON_COLUMNS,
    SENTENCE_COLUMNS,
    MarkerKind,
    Move,
    normalize_marker,
    sentence_id,
)
from .params import MiningParams  # noqa: F401  (the `mining` section, re-exported)


# --- parameters ------------------------------------------------------------------------------


# --- the lexicon as a matcher ----------------------------------------------------------------

_SPACES = re.compile(r"\s+")


def match_key(raw: str) -> str:
    """The form a marker is matched in: lower case, single spaces, its trailing comma KEPT.

    `schema.normalize_marker` drops the trailing comma (it names the marker); matching keeps it,
    because `specifically,` and `specifically` are different prefixes and the longer one must win.
    """
    return _SPACES.sub(" ", str(raw)).strip().lower()


@dataclass(frozen=True)
class MarkerEntry:
    """One matchable marker (a row of the lexicon with kind move or distractor)."""

    key: str  # match key (see match_key)
    marker: str  # the lexicon key, schema.normalize_marker(raw)
    kind: str  # MarkerKind.MOVE / MarkerKind.DISTRACTOR value
    label: str  # the move ('address', ...) or the distractor category
    source: str  # MarkerSource value
    extendable: bool


@dataclass(frozen=True)
class MarkerMatch:
    """The winning marker of one sentence and where its opening phrase ends."""

    entry: MarkerEntry
    phrase_end: int  # index of the comma that closes the opening phrase (exclusive end of the phrase)
    rest_start: int  # where the rest of the sentence starts (after that comma)


NO_MARKER = None
NO_COMMA = "no_comma"  # a marker is a prefix but the opening phrase does not end at a comma
_END = ""  # trie key for "a marker ends here" (no character is the empty string)


def _prefix_pattern(node: dict) -> str:
    """A regular expression that matches a text iff some key of the trie is a prefix of it.

    Below a node where a key ends, nothing more is needed (that key already is a prefix), so the
    pattern stops there; that keeps it small even for thousands of markers.
    """
    if _END in node:
        return ""
    branches = [_escape(char) + _prefix_pattern(child) for char, child in sorted(node.items())]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


_REGEX_META = set("\\.^$|?*+()[]{}-#&~")


def _escape(char: str) -> str:
    """Escape one character for both Python's `re` and Rust's `regex` (polars), which differ on
    escapes of ordinary characters (re.escape writes `\\ ` for a space; Rust rejects some of those)."""
    return "\\" + char if char in _REGEX_META else char


class MarkerMatcher:
    """Longest-prefix matcher over the marker lexicon: a character trie walked once per sentence.

    Hand-written rather than a library (pyahocorasick & co. find substrings anywhere, not the
    longest anchored prefix with the comma and extension rules); the walk stops at the first
    character that no marker continues, so a sentence that starts with no marker costs a few
    dictionary look-ups.
    """

    def __init__(self, entries: Iterable[MarkerEntry], extension_max_words: int = 5):
        self.entries: list[MarkerEntry] = list(entries)
        self.extension_max_words = extension_max_words
        self._root: dict = {}
        for index, entry in enumerate(self.entries):
            node = self._root
            for char in entry.key:
                node = node.setdefault(char, {})
            if _END in node:
                raise ValueError(f"duplicate match key {entry.key!r}; build the matcher with build_matcher()")
            node[_END] = index
        # After an extendable prefix: up to N words (no spaces or commas inside) then a comma.
        self._extension = re.compile(r"(?: [^ ,]+){0,%d}," % extension_max_words)
        self._first_comma = [entry.key.find(",") for entry in self.entries]
        self._keys = [entry.key for entry in self.entries]
        self._phrase_len = [len(key) - key.endswith(",") for key in self._keys]
        # A C-speed first test: does any marker start the sentence? Most sentences start with none,
        # and for them the Python walk below never runs.
        self._prefix_regex = _prefix_pattern(self._root) if self.entries else None
        self._any_prefix = re.compile(self._prefix_regex) if self.entries else None

    def match(self, text: str) -> MarkerMatch | str | None:
        """Match one lower-cased, single-spaced sentence; NO_MARKER, NO_COMMA or a MarkerMatch."""
        if self._any_prefix is None or self._any_prefix.match(text) is None:
            return NO_MARKER
        return self._walk(text)

    def match_series(self, texts) -> list:
        """`match` for a polars String Series of lower-cased sentences: the first test (does any
        marker start the sentence?) runs vectorised in polars, the trie walk only on the hits."""
        if self._prefix_regex is None or len(texts) == 0:
            return [NO_MARKER] * len(texts)
        hits = texts.str.contains("^" + self._prefix_regex).fill_null(False).arg_true().to_list()
        out: list = [NO_MARKER] * len(texts)
        walk = self._walk
        for index, text in zip(hits, texts.gather(hits).to_list()):
            out[index] = walk(text)
        return out

    def _walk(self, text: str) -> MarkerMatch | str | None:
        node = self._root
        best = -1  # index of the longest fixed marker that is a prefix
        best_len = 0
        ext = -1  # the longest extendable prefix seen
        ext_len = 0
        entries = self.entries
        for position, char in enumerate(text):
            node = node.get(char)
            if node is None:
                break
            index = node.get(_END)
            if index is not None:
                best, best_len = index, position + 1
                if entries[index].extendable:
                    ext, ext_len = index, position + 1
        if best < 0:
            return NO_MARKER
        if ext >= 0 and (ext_len == len(text) or text[ext_len] in " ,"):
            extension = self._extension.match(text, ext_len)
            # The extension competes by the length of its phrase (comma excluded) with the fixed
            # marker's (trailing comma excluded); on a tie the fixed marker wins.
            if extension is not None and extension.end() - 1 > self._phrase_len[best]:
                return MarkerMatch(entries[ext], extension.end() - 1, extension.end())
        return self._resolve(best, best_len, text)

    def _resolve(self, index: int, length: int, text: str) -> MarkerMatch | str:
        comma = self._first_comma[index]
        if comma >= 0:
            # The marker carries its comma (normally its last character). A key with words after its
            # comma (`to address this issue, we propose`) still ends its opening phrase there.
            return MarkerMatch(self.entries[index], comma, comma + 1)
        if length < len(text) and text[length] == ",":
            return MarkerMatch(self.entries[index], length, length + 1)
        return NO_COMMA

    def match_naive(self, text: str) -> MarkerMatch | str | None:
        """The same rules, testing every marker with str.startswith (the benchmark's reference)."""
        hits = [index for index, key in enumerate(self._keys) if text.startswith(key)]
        if not hits:
            return NO_MARKER
        best = max(hits, key=lambda i: len(self._keys[i]))  # keys are unique, so lengths of prefixes differ
        best_len = len(self._keys[best])
        extendable = [i for i in hits if self.entries[i].extendable]
        if extendable:
            ext = max(extendable, key=lambda i: len(self._keys[i]))
            ext_len = len(self._keys[ext])
            if ext_len == len(text) or text[ext_len] in " ,":
                extension = self._extension.match(text, ext_len)
                if extension is not None and extension.end() - 1 > self._phrase_len[best]:
                    return MarkerMatch(self.entries[ext], extension.end() - 1, extension.end())
        return self._resolve(best, best_len, text)


@dataclass
class LexiconCheck:
    """What the lexicon carries that the matcher had to decide about; shown in notebook 05."""

    conflicts: pd.DataFrame  # one row per finding: marker, issue, kinds, labels, raws
    n_entries: int
    n_rejected: int

    def summary(self) -> dict[str, Any]:
        counts = self.conflicts["issue"].value_counts().to_dict() if len(self.conflicts) else {}
        return {"entries": self.n_entries, "rejected_rows": self.n_rejected, "findings": counts}


def _label(row: pd.Series) -> str:
    if row["kind"] == MarkerKind.MOVE.value:
        return Move.parse(row["move"]).value
    category = row["category"]
    if category not in DISTRACTOR_CATEGORIES:
        raise ValueError(f"distractor marker {row['raw']!r} has unknown category {category!r}")
    return category


def build_matcher(lexicon: pd.DataFrame, extension_max_words: int = 5, source: str | Path = "lexicon") -> tuple[MarkerMatcher, LexiconCheck]:
    """Turn the lexicon table into a matcher, reporting (not silently resolving) its conflicts.

    Findings:
    * `duplicate_rows` — several rows with the same match key and the same label (merged; the
      first row's source is kept);
    * `ambiguous_key` — the same match key with different labels (moves or categories): the key is
      left out of matching, since no rule of the paper says which label wins;
    * `move_and_rejected` — a move marker whose normalised phrase is also in BLACKLIST (rejected
      rows are never matched, so the move row is used);
    * `move_and_distractor` — the same normalised phrase as a move and a distractor marker with
      different match keys (e.g. `specifically,` vs `specifically`; longest match decides);
    * `clause_marker` — a key with words after its comma; its opening phrase ends at that comma.
    """
    require_columns(lexicon, LEXICON_COLUMNS, source)
    frame = lexicon.copy()
    frame["kind"] = frame["kind"].astype(str).str.lower()
    bad_kind = sorted(set(frame["kind"]) - {k.value for k in MarkerKind})
    if bad_kind:
        raise InputError(source, f"unknown marker kind(s) {bad_kind}")
    frame["key"] = frame["raw"].map(match_key)
    # The lexicon's own key names the marker (the lexicon stage writes normalize_marker(raw)); fill gaps.
    given = frame["marker"].astype(object)
    frame["marker"] = given.where(given.notna() & (given.astype(str) != ""), frame["raw"].map(normalize_marker))
    empty = frame["marker"] == ""
    if empty.any():
        raise InputError(source, f"{int(empty.sum())} lexicon row(s) with an empty marker, e.g. row {int(np.flatnonzero(empty)[0])}")
    usable = frame[frame["kind"] != MarkerKind.REJECTED.value].copy()
    usable["label"] = usable.apply(_label, axis=1)
    rejected = frame[frame["kind"] == MarkerKind.REJECTED.value]

    findings: list[dict] = []

    def finding(marker: str, issue: str, rows: pd.DataFrame) -> None:
        findings.append(
            {
                "marker": marker,
                "issue": issue,
                "kinds": "|".join(sorted(set(rows["kind"]))),
                "labels": "|".join(sorted(set(rows.get("label", rows["group"]).astype(str)))),
                "raws": " || ".join(rows["raw"].astype(str)),
            }
        )

    entries: list[MarkerEntry] = []
    for key, rows in usable.groupby("key", sort=True):
        labels = set(rows["label"])
        if len(labels) > 1:
            finding(rows["marker"].iloc[0], "ambiguous_key", rows)
            continue
        if len(rows) > 1:
            finding(rows["marker"].iloc[0], "duplicate_rows", rows)
        first = rows.iloc[0]
        entries.append(
            MarkerEntry(
                key=key,
                marker=first["marker"],
                kind=first["kind"],
                label=first["label"],
                source=str(first["source"]),
                extendable=bool(rows["extendable"].fillna(False).astype(bool).any()),
            )
        )
        if "," in key.rstrip(","):
            finding(first["marker"], "clause_marker", rows)
    moves = usable[usable["kind"] == MarkerKind.MOVE.value]
    rejected_markers = set(rejected["marker"])
    for marker, rows in moves[moves["marker"].isin(rejected_markers)].groupby("marker"):
        both = pd.concat([rows, rejected[rejected["marker"] == marker].assign(label="BLACKLIST")])
        finding(marker, "move_and_rejected", both)
    distractor_markers = set(usable.loc[usable["kind"] == MarkerKind.DISTRACTOR.value, "marker"])
    for marker, rows in moves[moves["marker"].isin(distractor_markers)].groupby("marker"):
        both = pd.concat([rows, usable[(usable["marker"] == marker) & (usable["kind"] == MarkerKind.DISTRACTOR.value)]])
        finding(marker, "move_and_distractor", both)

    conflicts = pd.DataFrame(findings, columns=["marker", "issue", "kinds", "labels", "raws"])
    check = LexiconCheck(conflicts=conflicts, n_entries=len(entries), n_rejected=len(rejected))
    return MarkerMatcher(entries, extension_max_words), check


# --- Appendix B.1 cleaning rules of a pair ---------------------------------------------------------

_ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|"
    "firstly|secondly|thirdly|fourthly|fifthly|lastly"
)
_GOLD_PREFIXES = (
    # "firstly, ..." / "second, ..." (an ordinal opening the sentence, closed by a comma)
    re.compile(r"^(?:%s)\s*,\s*" % _ORDINALS, re.IGNORECASE),
    # "firstly we ..." (the -ly ordinals are never content)
    re.compile(r"^(?:firstly|secondly|thirdly|fourthly|fifthly|lastly)\s+", re.IGNORECASE),
    # "(1) ", "1) ", "(iv) ", "iv) ", "(a) ", "a) "
    re.compile(r"^\(?(?:\d{1,2}|[ivx]{1,5}|[a-h])\)\s*", re.IGNORECASE),
    # "1. ", "iv. " (not "i.e.": a space must follow the dot)
    re.compile(r"^(?:\d{1,2}|[ivx]{1,5})\.\s+", re.IGNORECASE),
    # stray punctuation and bullets left in front of the content
    re.compile(r"^[\s,;:.\-–—•*·)\]]+"),
)
_CITATION_PATTERNS = {
    "bracketed_number": re.compile(r"\[\s*\d+(?:\s*[,;–-]\s*\d+)*\s*\]"),
    "empty_brackets": re.compile(r"\[\s*\]|\(\s*\)"),
    "et_al": re.compile(r"\bet\s+al\b\.?", re.IGNORECASE),
    # (Collins, 2002) / (Collins 2002; Smith and Jones, 2004a) / (see Collins, 2002)
    "author_year": re.compile(r"\([^()]*[A-Z][A-Za-z\-']+,?\s+(?:19|20)\d{2}[a-z]?\b[^()]*\)"),
    # Collins (2002)
    "narrative_author_year": re.compile(r"\b[A-Z][A-Za-z\-']+\s+\((?:19|20)\d{2}[a-z]?\)"),
}


def strip_query_prefix(text: str, max_words: int) -> tuple[str, str]:
    """Split a leading introductory clause (at most `max_words` words before the first comma) off a query.

    Returns (prefix, rest); prefix is '' when there is none. The clause must start with a letter (a
    sentence opening with a number list is left alone) and hold no bracket or quote.
    """
    comma = text.find(",")
    if comma <= 0 or max_words <= 0:
        return "", text
    head = text[:comma].strip()
    if not head or not head[0].isalpha() or len(head.split()) > max_words:
        return "", text
    if any(char in head for char in "()[]{}\"“”"):
        return "", text  # a bracket or quote opened before the comma: not an introductory phrase
    rest = text[comma + 1 :].strip()
    if not rest:
        return "", text
    return head, rest


def strip_gold_prefix(text: str) -> str:
    """Remove ordinal, roman-numeral and list prefixes and stray punctuation until none is left."""
    previous = None
    while previous != text:
        previous = text
        for pattern in _GOLD_PREFIXES:
            text = pattern.sub("", text, count=1)
    return text.strip()


def find_citation(text: str) -> str | None:
    """The name of the first citation pattern found in `text`, or None."""
    for name, pattern in _CITATION_PATTERNS.items():
        if pattern.search(text):
            return name
    return None


def normalize_text(text: str, lowercase: bool) -> str:
    text = _SPACES.sub(" ", text).strip()
    return text.lower() if lowercase else text


def anaphor_pattern(anaphors: Iterable[str]) -> re.Pattern:
    words = sorted((re.escape(a.lower()) for a in anaphors), key=len, reverse=True)
    return re.compile(r"\b(?:%s)\b" % "|".join(words))


@dataclass(frozen=True)
class CleanText:
    text: str | None  # None when dropped
    rule: str | None  # the rule that dropped it
    detail: str | None = None


def clean_candidate(rest: str, params: MiningParams) -> CleanText:
    """The gold-side rules, shared by gold sentences and distractors (same extraction procedure)."""
    text = strip_gold_prefix(rest)
    citation = find_citation(text)
    if citation:
        return CleanText(None, "gold_has_citation", citation)
    text = normalize_text(text, params.lowercase)
    if len(text.split()) <= 1:
        return CleanText(None, "gold_single_word")
    if len(text) < params.min_chars:
        return CleanText(None, "gold_too_short")
    return CleanText(text, None)


def clean_query(sentence: str, params: MiningParams) -> tuple[CleanText, str]:
    """The query-side rules: introductory clause removed (returned), then the length rule."""
    prefix, rest = strip_query_prefix(_SPACES.sub(" ", sentence).strip(), params.query_prefix_max_words)
    text = normalize_text(rest, params.lowercase)
    if len(text) < params.min_chars:
        return CleanText(None, "query_too_short"), prefix
    return CleanText(text, None), normalize_text(prefix, params.lowercase)


# --- mining one table of sentences -----------------------------------------------------------------

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
    pairs: pd.DataFrame
    distractors: pd.DataFrame
    counts: Counter

    def report(self) -> dict[str, Any]:
        return counts_to_report(self.counts)


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
    same = (corpus[1:] == corpus[:-1]) & (paper[1:] == paper[:-1]) & (para[1:] == para[:-1]) & (sent[1:] == sent[:-1] + 1)
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
            "corpus": cols["corpus"][g], "paper_id": cols["paper_id"][g], "year": cols["year"][g], "date": cols["date"][g],
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


def mine_sentences(sentences: pd.DataFrame, matcher: MarkerMatcher, params: MiningParams, source: str | Path = "sentences") -> MiningResult:
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
    for k in tqdm(hits, desc="cleaning", unit="pair", disable=not (params.progress and len(hits) > 20_000), mininterval=1.0):
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
            frame[column] = frame[column].astype("str").where(frame[column].notna(), None) if column != "date" else frame[column].astype("str")
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


# --- scale-out ------------------------------------------------------------------------------------


def shard_by_paper(sentences: pd.DataFrame, n_shards: int) -> list[pd.DataFrame]:
    """Split a sentence table into shards that never cut a paper (pairs live inside one paper)."""
    if n_shards <= 1 or sentences.empty:
        return [sentences]
    papers = pd.Index(sentences["corpus"].astype(str) + "\x1f" + sentences["paper_id"].astype(str))
    codes, uniques = pd.factorize(papers, sort=True)
    shard_of_paper = np.arange(len(uniques)) * n_shards // max(len(uniques), 1)
    shard = shard_of_paper[codes]
    return [sentences[shard == i] for i in range(n_shards) if (shard == i).any()]


def _mine_shard(shard: pd.DataFrame, matcher: MarkerMatcher, params: MiningParams) -> MiningResult:
    return mine_sentences(shard, matcher, params)


def _quiet(params: MiningParams) -> MiningParams:
    return MiningParams(**{**params.__dict__, "progress": False})


def mine_with_dask(sentences: pd.DataFrame, matcher: MarkerMatcher, params: MiningParams, client=None) -> MiningResult:
    """Run `mine_sentences` over shards of papers of one in-memory table on a Dask cluster and combine the results.

    `client`: an existing distributed.Client; otherwise see `dask_client`. For a corpus that does not
    fit in memory, build it in parts (`corpus.papers_per_part`) and use `mine_parts`.
    """
    from dask.distributed import as_completed
    from tqdm.auto import tqdm

    with dask_client(params.dask_scheduler, params.dask_workers, params.dask_processes, client) as client:
        shards = shard_by_paper(sentences, params.shards)
        matcher_future = client.scatter(matcher, broadcast=True)
        # Shards are scattered (sent once, as data) rather than embedded in the task graph.
        shard_futures = client.scatter(shards)
        futures = [client.submit(_mine_shard, shard, matcher_future, _quiet(params), pure=False) for shard in shard_futures]
        results = []
        for future in tqdm(as_completed(futures), total=len(futures), desc="shards", disable=not params.progress):
            results.append(future.result())
        return combine(results)


def mine_part(sentence_part: str, index: int, matcher: MarkerMatcher, params: MiningParams, pairs: str, distractors: str) -> Counter:
    """Mine one sentence part and write its pairs and distractors parts (same number); return the counts.

    Runs on a Dask worker (or in the local process): the worker reads its own part and writes its
    own outputs, so only the matcher and the counts travel. Paths must be visible to every worker.
    """
    frame = pd.read_parquet(sentence_part, columns=list(SENTENCE_COLUMNS))
    result = mine_sentences(frame, matcher, params, sentence_part)
    write_parquet_atomic(_string_columns(result.pairs), part_path(pairs, index))
    write_parquet_atomic(_string_columns(result.distractors), part_path(distractors, index))
    return result.counts


def _string_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns typed as strings even when a part is empty, so every part has one parquet schema."""
    return frame.astype({c: "string" for c in frame.columns if frame[c].dtype == object})


def mine_parts(sentences: "str | Path", pairs: "str | Path", distractors: "str | Path", matcher: MarkerMatcher,
               params: MiningParams, client=None) -> Counter:
    """Mine every part of a partitioned sentence table into pairs/distractors parts; return the summed counts.

    `engine: local` mines the parts one after another in this process; `engine: dask` (or a given
    client) sends the matcher once to every worker and one task per part. Both write the same parts.
    """
    from tqdm.auto import tqdm

    parts = part_files(sentences)
    for table in (pairs, distractors):
        reset_table(table, partitioned=True)
        remove_parts_from(table, len(parts))
    jobs = [(str(path), index) for index, path in enumerate(parts)]
    counts: Counter = Counter()
    if params.engine == "local" and client is None:
        for path, index in tqdm(jobs, desc="sentence parts", disable=not params.progress):
            counts.update(mine_part(path, index, matcher, _quiet(params), str(pairs), str(distractors)))
        return counts
    from dask.distributed import as_completed

    with dask_client(params.dask_scheduler, params.dask_workers, params.dask_processes, client) as client:
        matcher_future = client.scatter(matcher, broadcast=True)
        futures = [client.submit(mine_part, path, index, matcher_future, _quiet(params), str(pairs), str(distractors), pure=False)
                   for path, index in jobs]
        for future in tqdm(as_completed(futures), total=len(futures), desc="sentence parts", disable=not params.progress):
            counts.update(future.result())
    return counts


# --- the stage ------------------------------------------------------------------------------------


def _check_inputs(cfg) -> None:
    for path in (cfg.paths.sentences, cfg.paths.final_lexicon):
        if not Path(path).exists():
            raise FileNotFoundError(f"{path} not found: run the earlier notebooks (00 corpus, 01-04 lexicon) first")


def mine(cfg, client=None) -> tuple[MiningResult, LexiconCheck]:
    """Stage 05 end to end: read inputs, mine (locally or with Dask), write pairs, distractors, report.

    A partitioned sentence table (a folder of parts, from `corpus.papers_per_part`) is mined part by
    part into pairs/distractors parts (`mine_parts`); the returned result then holds the kept rows read
    back from the parts (kept pairs are about 1% of the sentences).
    """
    params: MiningParams = cfg.section("mining", MiningParams)
    _check_inputs(cfg)
    lexicon = pd.read_parquet(cfg.paths.final_lexicon)
    matcher, check = build_matcher(lexicon, params.extension_max_words, cfg.paths.final_lexicon)
    if Path(cfg.paths.sentences).is_dir():
        counts = mine_parts(cfg.paths.sentences, cfg.paths.pairs, cfg.paths.distractors, matcher, params, client)
        result = MiningResult(read_mined(cfg.paths.pairs), read_mined(cfg.paths.distractors), counts)
    else:
        sentences = pd.read_parquet(cfg.paths.sentences, columns=list(SENTENCE_COLUMNS))
        if params.engine == "dask" or client is not None:
            result = mine_with_dask(sentences, matcher, params, client)
        else:
            result = mine_sentences(sentences, matcher, params, cfg.paths.sentences)
        for table in (cfg.paths.pairs, cfg.paths.distractors):
            reset_table(table, partitioned=False)
        write_parquet_atomic(result.pairs, cfg.paths.pairs)
        write_parquet_atomic(result.distractors, cfg.paths.distractors)
    report = result.report()
    report["lexicon"] = check.summary()
    report["params"] = dict(params.__dict__)
    report["inputs"] = {"sentences": str(cfg.paths.sentences), "lexicon": str(cfg.paths.final_lexicon)}
    write_json_atomic(cfg.paths.mining_report, report)
    with atomic_path(cfg.paths.lexicon_conflicts) as tmp:
        check.conflicts.to_csv(tmp, index=False)
    return result, check


MINED_ORDER = ["corpus", "paper_id", "para", "sent"]  # the row order of `_sorted`


def read_mined(table: "str | Path") -> pd.DataFrame:
    """Pairs or distractors as one frame: a single file, or every part (a polars scan) in `_sorted`'s order."""
    return read_table(table, parts_order=MINED_ORDER)


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
    return pairs.groupby(["move", "marker"]).size().rename("pairs").reset_index().sort_values(["move", "pairs"], ascending=[True, False])
