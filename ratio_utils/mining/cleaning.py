"""Stage 05's Appendix B.1 cleaning rules of one pair: the gold side (shared with distractors) and the query side.

Pure functions on strings; each drop returns the rule that dropped it, so the extraction can count it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..param_sections import MiningParams

WHITESPACE_RUN = re.compile(r"\s+")

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
    text = WHITESPACE_RUN.sub(" ", text).strip()
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
    prefix, rest = strip_query_prefix(WHITESPACE_RUN.sub(" ", sentence).strip(), params.query_prefix_max_words)
    text = normalize_text(rest, params.lowercase)
    if len(text) < params.min_chars:
        return CleanText(None, "query_too_short"), prefix
    return CleanText(text, None), normalize_text(prefix, params.lowercase)
