"""What a system is: `SystemSpec`, one row of the result tables (a model under one prefix style and setup, of one
retriever family), and the one parser of a system as a user spells it ("bm25-unigram", "colbert:PATH", a model id).

A spec names; it builds nothing (`systems/families` builds its retriever) and reads no file (`systems/runs` records
and reuses its run files). Its `name` is `retrieval.runs.system_name`, the run folder's and the sidecar's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..param_sections import RetrievalParams
from ..retrieval.runs import RunInfo, system_name
from ..schema import NOTEBOOKS, Move, Split

BASELINE_STAGE, TUNED_STAGE = NOTEBOOKS["08"], NOTEBOOKS["09"]  # the notebooks that write baseline and tuned runs
BM25_ORDERS = {1: "unigram", 2: "bigram", 3: "trigram"}  # the n-gram orders the tables name in words


def bm25_model_name(ngram: int) -> str:
    """The display name of a BM25 row: 'BM25-unigram' for order 1 (an order without a word: 'BM25-4gram')."""
    return f"BM25-{BM25_ORDERS.get(int(ngram), f'{ngram}gram')}"


@dataclass(frozen=True)
class SystemSpec:
    """One row of the result tables that a retriever fills (notebook 08; 09 for the tuned rows; 10 for reranked ones).

    The field order is the row's own (model, prefix, family, source, setup), as the tables and sidecars list it."""

    model: str  # display name, e.g. "BM25-unigram", "all-MiniLM-L6-v2"
    prefix: str  # prefix style: "-" (none), "generic", "recommended", "per-move"
    family: str  # a key of systems.families.FAMILIES: "bm25", "dense", "colbert", "llm-rerank", ...
    source: str  # what the family builds from: model name/path/hub id, checkpoint, n-gram order
    setup: str = "Baseline"  # one of retrieval.runs.SETUPS

    @property
    def name(self) -> str:
        """The system's one name (run folder, sidecar, Table rows' look-ups): retrieval.runs.system_name."""
        return system_name(self.model, self.prefix, self.setup)

    @property
    def key(self) -> tuple[str, str, str]:
        """(model, prefix, setup): the row of Tables 1, 7, 8."""
        return (self.model, self.prefix, self.setup)

    def info(self, move: Move, split: Split, checksum: str, params: RetrievalParams,
             stage: str = BASELINE_STAGE) -> RunInfo:
        """The sidecar of this system's run on (move, split) of the benchmark with `checksum`."""
        return RunInfo(model=self.model, prefix=self.prefix, setup=self.setup, family=self.family, move=move.value,
                       split=split.value, benchmark_checksum=checksum, stage=stage, k=params.k,
                       max_queries=params.max_queries, source=self.source)

    @classmethod
    def parse(cls, text: str, families: tuple[str, ...] = ("colbert",), prefix: str = "generic") -> "SystemSpec":
        """The one reading of a system as a user writes it (`ratio-evaluate --model`, params):

        * "bm25-unigram" / "bm25-bigram" / "bm25-trigram" (any case): BM25 of that n-gram order;
        * "<family>:<source>", for a family name in `families` (the registered ones: systems.families.parse_system
          passes them), e.g. "colbert:PATH" for a PyLate checkpoint;
        * anything else: a dense model (a registry or packaged name, a folder, a Hugging Face id), with `prefix`.
        """
        from ..models import model_name

        text = str(text)
        lowered = text.strip().lower()
        orders = {f"bm25-{word}": order for order, word in BM25_ORDERS.items()}
        if lowered in orders:
            return cls(bm25_model_name(orders[lowered]), "-", "bm25", str(orders[lowered]))
        family, sep, source = text.partition(":")
        if sep and family in families and source:
            return cls(model_name(source), "-", family, source)
        return cls(model_name(text), prefix, "dense", text)
