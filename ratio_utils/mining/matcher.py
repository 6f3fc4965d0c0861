"""Stage 05's lexicon as a matcher: the longest marker that opens a sentence, with the comma and extension rules.

Reads nothing itself: `build_matcher` takes the lexicon table (schema.LEXICON_COLUMNS) and reports what it
had to decide about (`LexiconCheck`, written by the stage as `lexicon_conflicts.csv`).

* the **longest** marker that is a character prefix wins (so `specifically,` (Specify) beats
  `specifically` (distractor), and `to counter this …` (Address) beats `to counter` (distractor));
* an extendable connective (`special_word=True`) also matches its prefix plus up to
  `extension_max_words` more words and a comma; it competes by the length of that opening phrase
  with the longest fixed marker (trailing commas excluded; a tie goes to the fixed marker);
* the winner counts only if the opening phrase ends at a comma: the marker ends with a comma or the
  text right after it begins with one. Otherwise the pair is dropped and counted, with no fallback
  to a shorter marker (`in order to overcome this problem, we …` is not cut after `this`);
* a marker with words after an inner comma (`to address this issue, we propose`, 1,163 released
  rows) is matched as a whole, and its opening phrase ends at its first comma.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..io import InputError, require_columns
from ..schema import DISTRACTOR_CATEGORIES, LEXICON_COLUMNS, MarkerKind, Move, normalize_marker
from .cleaning import WHITESPACE_RUN


def match_key(raw: str) -> str:
    """The form a marker is matched in: lower case, single spaces, its trailing comma KEPT.

    `schema.normalize_marker` drops the trailing comma (it names the marker); matching keeps it,
    because `specifically,` and `specifically` are different prefixes and the longer one must win.
    """
    return WHITESPACE_RUN.sub(" ", str(raw)).strip().lower()


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


def build_matcher(lexicon: pd.DataFrame, extension_max_words: int = 5,
                  source: str | Path = "lexicon") -> tuple[MarkerMatcher, LexiconCheck]:
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
    usable, rejected = _lexicon_rows(lexicon, source)
    conflicts = _conflicts(usable, rejected)
    entries = _entries(usable)
    check = LexiconCheck(conflicts=conflicts, n_entries=len(entries), n_rejected=len(rejected))
    return MarkerMatcher(entries, extension_max_words), check


def _lexicon_rows(lexicon: pd.DataFrame, source: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the rows a marker can match, with their match key and label; the rejected rows), the table checked."""
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
        raise InputError(source, f"{int(empty.sum())} lexicon row(s) with an empty marker, e.g. row "
                         f"{int(np.flatnonzero(empty)[0])}")
    usable = frame[frame["kind"] != MarkerKind.REJECTED.value].copy()
    usable["label"] = usable.apply(_label, axis=1)
    rejected = frame[frame["kind"] == MarkerKind.REJECTED.value]
    return usable, rejected


def _ambiguous(rows: pd.DataFrame) -> bool:
    """Rows of one match key with different labels: no rule of the paper says which wins."""
    return len(set(rows["label"])) > 1


def _entries(usable: pd.DataFrame) -> list[MarkerEntry]:
    """One entry per match key, in key order; an ambiguous key has none."""
    entries: list[MarkerEntry] = []
    for key, rows in usable.groupby("key", sort=True):
        if _ambiguous(rows):
            continue
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
    return entries


def _conflicts(usable: pd.DataFrame, rejected: pd.DataFrame) -> pd.DataFrame:
    """The findings of `build_matcher` (its docstring lists them), one row each: those of each match key in key
    order, then the move markers also rejected, then those also distractors."""
    findings: list[dict] = []
    for key, rows in usable.groupby("key", sort=True):
        if _ambiguous(rows):
            findings.append(_finding(rows["marker"].iloc[0], "ambiguous_key", rows))
            continue
        if len(rows) > 1:
            findings.append(_finding(rows["marker"].iloc[0], "duplicate_rows", rows))
        if "," in key.rstrip(","):
            findings.append(_finding(rows["marker"].iloc[0], "clause_marker", rows))
    moves = usable[usable["kind"] == MarkerKind.MOVE.value]
    rejected_markers = set(rejected["marker"])
    for marker, rows in moves[moves["marker"].isin(rejected_markers)].groupby("marker"):
        both = pd.concat([rows, rejected[rejected["marker"] == marker].assign(label="BLACKLIST")])
        findings.append(_finding(marker, "move_and_rejected", both))
    distractor_markers = set(usable.loc[usable["kind"] == MarkerKind.DISTRACTOR.value, "marker"])
    for marker, rows in moves[moves["marker"].isin(distractor_markers)].groupby("marker"):
        both = pd.concat([rows,
                          usable[(usable["marker"] == marker) & (usable["kind"] == MarkerKind.DISTRACTOR.value)]])
        findings.append(_finding(marker, "move_and_distractor", both))
    return pd.DataFrame(findings, columns=["marker", "issue", "kinds", "labels", "raws"])


def _finding(marker: str, issue: str, rows: pd.DataFrame) -> dict:
    return {
        "marker": marker,
        "issue": issue,
        "kinds": "|".join(sorted(set(rows["kind"]))),
        "labels": "|".join(sorted(set(rows.get("label", rows["group"]).astype(str)))),
        "raws": " || ".join(rows["raw"].astype(str)),
    }
