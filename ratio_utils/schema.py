"""The one definition of each shared concept: moves, splits, marker groups, ids and columns.

Every stage imports these names instead of spelling strings itself, so a column rename or a
new move is a change in one place. A move's texts (its instruction, its definitions, the
annotators' question) are data, read from prompts/moves.toml by `move_text`.
"""

from __future__ import annotations

import enum
import hashlib
import re
import tomllib
from functools import cache
from importlib.resources import files
from typing import Self


class _ParsedFromValue:
    """The `parse` of an enum whose values are lower-case names (Move, Split)."""

    @classmethod
    def parse(cls, value: "str | Self") -> Self:
        """Accept a member (`Move.ADDRESS`), its value ('address') or that in any case ('ADDRESS'); anything else is
        a clear error naming the enum ('unknown move ...')."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ValueError(f"unknown {cls.__name__.lower()} {value!r}; expected one of "
                             f"{[member.value for member in cls]}") from None


class Move(_ParsedFromValue, str, enum.Enum):
    """An ideation move (paper §3). The value is the lower-case name used in paths and columns."""

    ADDRESS = "address"
    BROADEN = "broaden"
    SPECIFY = "specify"


class Split(_ParsedFromValue, str, enum.Enum):
    """A benchmark split. SILVER is the judge-filtered subset of TEST (paper §4.3)."""

    TRAIN = "train"
    VALIDATION = "validation"
    TEST = "test"
    SILVER = "silver"

    @property
    def pool_split(self) -> "Split":
        """The split whose candidate pool this split's queries are ranked against."""
        return Split.TEST if self is Split.SILVER else self


MOVES: tuple[Move, ...] = tuple(Move)
POOL_SPLITS: tuple[Split, ...] = (Split.TRAIN, Split.VALIDATION, Split.TEST)

# The generic input prefixes of the paper (§5.1, Appendix C), used for every dense model, and the instruction layout
# of the instruction-following models (Qwen3-Embedding, Stella s2p) that models without their own layout get too.
GENERIC_QUERY_PREFIX = "query: "
GENERIC_DOC_PREFIX = "document: "
GENERIC_PREFIXES = (GENERIC_QUERY_PREFIX, GENERIC_DOC_PREFIX)
DEFAULT_INSTRUCTION_TEMPLATE = "Instruct: {instruction}\nQuery: "

# The wording of each move, one text per purpose (the retriever's instruction, the marker prompts' definition, what
# annotators read): prompts/moves.toml, shipped as ratio_utils/resources/prompts/moves.toml (a link in a checkout).
MOVE_TEXTS_FILE = "prompts/moves.toml"


@cache
def _move_texts() -> dict[str, dict[str, str]]:
    return tomllib.loads(files("ratio_utils").joinpath("resources", *MOVE_TEXTS_FILE.split("/"))
                         .read_text(encoding="utf-8"))


def move_text(move: Move | str, purpose: str) -> str:
    """A move's text for one purpose, exactly as prompts/moves.toml writes it.

    move: a Move or its name (`Move.parse`).
    purpose: `instruction` (the retriever's, Appendix C), `definition` (the marker prompts'), `annotator_definition`
        or `annotator_question` (the human-eval packets'); another is a KeyError naming the file and the move.
    """
    name = Move.parse(move).value
    texts = _move_texts()[name]
    if purpose not in texts:
        raise KeyError(f"{MOVE_TEXTS_FILE}: no {purpose!r} text of [{name}]; it has {sorted(texts)}")
    return texts[purpose]


def instructed_query_prefix(move: Move | str, template: str = DEFAULT_INSTRUCTION_TEMPLATE) -> str:
    """The query prefix that carries the move's instruction (Appendix C)."""
    return template.format(instruction=move_text(move, "instruction"))


# The released lexicon's `group` column (shared/lexicon/PROVENANCE.md).
GROUP_TO_MOVE: dict[str, Move] = {
    "Solving_problems_improvements_mitigation": Move.ADDRESS,
    "more_generally": Move.BROADEN,
    "more_specific": Move.SPECIFY,
}
MOVE_TO_GROUP: dict[Move, str] = {move: group for group, move in GROUP_TO_MOVE.items()}
DISTRACTOR_CATEGORIES: tuple[str, ...] = (
    "explicit_contrast",
    "explicit_similarity",
    "implicit_similarity",
    "common_irrelevant",
)
REJECTED_GROUP = "BLACKLIST"


class MarkerKind(str, enum.Enum):
    MOVE = "move"
    DISTRACTOR = "distractor"
    REJECTED = "rejected"


class MarkerSource(str, enum.Enum):
    """Where a marker came from (paper §4.1, Table 4)."""

    MANUAL = "manual"
    EXTENDABLE = "extendable"
    LLM = "llm"
    PATTERN = "pattern"


# --- tables that cross stage boundaries -------------------------------------------------------

# data/interim/papers.parquet: one row per paper.
PAPER_COLUMNS = ("paper_id", "corpus", "title", "year", "date", "venue", "source")

# data/interim/sentences.parquet: one row per sentence, in reading order.
# `text` is the sentence as the corpus gives it; `text_clean` after the Appendix B.1 noise rules;
# `drop_reason` names the rule that removed the sentence (null when kept). Dropped sentences stay
# in the table so that paragraph/sentence indices keep their meaning and nothing vanishes silently.
SENTENCE_COLUMNS = (
    "corpus",
    "paper_id",
    "year",
    "date",
    "para",
    "sent",
    "text",
    "text_clean",
    "drop_reason",
)

# data/interim/lexicon_curated.parquet (01) and lexicon.parquet (04, what 05 mines with): one row per marker
# (ratio_utils.lexicon.markers writes both).
# `marker` is the normalised phrase (see normalize_marker); `move` is null for non-move rows;
# `category` is the distractor category, or the move subcategory for LLM rows.
LEXICON_COLUMNS = (
    "marker",
    "raw",
    "kind",
    "move",
    "category",
    "group",
    "source",
    "extendable",
    "strength",
)

# Benchmark files, in the layout of the official Ratio release:
#   data/{move}/{split}.parquet  and  candidates/{split}.parquet
# The first seven columns are the authors' names; the rest are ours.
PAIR_COLUMNS = (
    "corpusid",
    "year",
    "publicationdate",
    "queryTerm",
    "queryTerm_group",
    "querySentence",
    "goldSentence",
    "query_id",
    "gold_id",
    "marker_source",
    "marker_has_anaphor",
)
CANDIDATE_COLUMNS = ("docid", "text", "source", "corpusid")

# Run files: one row per (query, retrieved candidate), rank starting at 1.
RUN_COLUMNS = ("qid", "docid", "rank", "score")
# Relevance judgements: one row per (query, relevant candidate).
QREL_COLUMNS = ("qid", "docid")


_WHITESPACE = re.compile(r"\s+")


def normalize_text_key(text: str) -> str:
    """The form two sentences must share to count as the same sentence: lower case, single spaces."""
    return _WHITESPACE.sub(" ", text).strip().lower()


def sentence_id(text: str) -> str:
    """A stable id for a sentence: the first 16 hex digits of SHA-1 over its normalised text.

    Ids depend on the text only, so the same sentence gets the same id in every split and run,
    and deduplication by id is deduplication by normalised text.
    """
    return hashlib.sha1(normalize_text_key(text).encode("utf-8")).hexdigest()[:16]


def seeded_hash(seed: int, key: str) -> int:
    """A 64-bit hash of `key` under `seed`: the first 8 bytes of SHA-1 over "<seed>:<key>".

    The same on every run and machine (Python's hash() of a str is salted per process): the corpus
    sample (stage 00) and the fraction split of a shared window (stage 06) draw papers by it.
    """
    return int.from_bytes(hashlib.sha1(f"{seed}:{key}".encode("utf-8")).digest()[:8], "big")


SEEDED_HASH_RANGE = 2**64  # seeded_hash(...) / SEEDED_HASH_RANGE lies in [0, 1)


def normalize_marker(phrase: str) -> str:
    """The canonical form of a marker: lower case, single spaces, no trailing comma.

    The trailing comma in the lexicon marks the boundary between the marker and the sentence
    content (paper §4.1); the matcher re-imposes that boundary, so it is not part of the key.
    """
    return normalize_text_key(phrase).rstrip(",").rstrip()

# A published model folder's scores (notebooks 09, 13): prose and scores, not weights (left out of a fingerprint).
MODEL_RESULTS_FILE = "results.json"

# The files of a benchmark directory that describe it rather than hold its data (outside Benchmark.checksum).
PROVENANCE_DIR = "provenance"  # <root>/provenance/: who produced the labels (ratio_utils.publish.label_sources)
CARD_FILE = "README.md"  # <root>/README.md: the dataset card (ratio_utils.dataset.card)

# The notebooks of the pipeline, by number: the one table of their identifiers (a run file names the notebook that
# wrote it; pipeline.READS_FROM says which earlier notebooks each one reads). tests/test_pipeline.py checks it
# against notebooks/.
NOTEBOOKS: dict[str, str] = {
    "00": "00_corpus",
    "01": "01_marker_curation",
    "02": "02_marker_extensions",
    "03": "03_llm_marker_generation",
    "04": "04_pattern_expansion",
    "05": "05_pair_mining",
    "06": "06_split_and_pool",
    "07": "07_silver_filter",
    "08": "08_retrieval_baselines",
    "09": "09_finetune",
    "10": "10_llm_rerank",
    "11": "11_analyses",
    "12": "12_human_eval_stats",
    "13": "13_unified_retriever",
    "14": "14_summary",
}
