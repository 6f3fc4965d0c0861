"""Who produced the labels an output rests on: the silver judge's verdicts and each reranker's orders.

An LLM step may be answered by the model its params name, or, when recorded answers are replayed, by
whatever model recorded them (the default run replays answers of a stand-in model; PROVENANCE.md under
`<shared>/llm_cache/`). Every table, figure and summary built on silver queries or on reranked runs names
who answered, from one record per label source written where the labels are produced:

- the silver set: `<benchmark>/provenance/silver.json`, written by notebook 07 (`judge.SilverFilter`);
  outside the benchmark checksum (`Benchmark.checksum`), since it describes the labels, not the data;
- a reranked run: the `retriever` entry of its sidecar (`retrieval.runs.RunInfo`), written by notebook 10.

Readers: `published.write_table` / `published.save_figure` (`labels=`), `paper_tables`, the analyses, the
unified and fine-tuning tables, the summary.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..io import write_json_atomic
from ..schema import PROVENANCE_DIR

SILVER_RECORD = Path(PROVENANCE_DIR) / "silver.json"  # under the benchmark root
UNRECORDED = "unrecorded"  # a silver set whose benchmark carries no record of its judge
REPLAYED_FROM = "../shared/llm_cache"  # the recorded answers, as tables name them (never a machine path)


@dataclass(frozen=True)
class LabelSource:
    """One producer of labels: the LLM judge of the silver set, or the LLM reranker of one run."""

    role: str  # "judge" (silver verdicts) or "reranker" (reranked orders)
    configured: str  # the model the params name
    answered_by: tuple[str, ...] = ()  # the `model` field of the responses used
    replayed_from: str | None = None  # where recorded answers came from (None: the endpoint answered)
    detail: dict = field(default_factory=dict)  # prompts, counts of pairs without a verdict, ...

    @property
    def stand_in(self) -> bool:
        """True when the answers were not written by the configured model."""
        return bool(self.answered_by) and set(self.answered_by) != {self.configured}

    @property
    def answered(self) -> str:
        return ", ".join(self.answered_by) or "nobody (no answer)"

    def note(self) -> str:
        """One sentence for a table note or a figure footer."""
        what = "Silver labels: LLM judge" if self.role == "judge" else "Reranked orders: LLM reranker"
        if self.configured == UNRECORDED:
            return f"{what.split(':')[0]}: who produced them is not recorded (no {SILVER_RECORD} in the benchmark)."
        where = f"answers replayed from {self.replayed_from}" if self.replayed_from else "answers from the endpoint"
        stand_in = f" — a stand-in, not {self.configured}" if self.stand_in else ""
        return f"{what} {self.configured} configured; {where}, produced by {self.answered}{stand_in}."

    def to_json(self) -> dict:
        return {**asdict(self), "answered_by": list(self.answered_by)}

    @classmethod
    def from_json(cls, data: dict) -> "LabelSource":
        return cls(role=data["role"], configured=data["configured"], answered_by=tuple(data.get("answered_by") or ()),
                   replayed_from=data.get("replayed_from"), detail=dict(data.get("detail") or {}))


def write_silver_source(benchmark_root: Path, source: LabelSource) -> Path:
    return write_json_atomic(Path(benchmark_root) / SILVER_RECORD, source.to_json())


def read_silver_source(benchmark_root: Path) -> LabelSource | None:
    """The silver set's record, or None where no silver set was judged here (e.g. the official release)."""
    path = Path(benchmark_root) / SILVER_RECORD
    if not path.exists():
        return None
    return LabelSource.from_json(json.loads(path.read_text(encoding="utf-8")))


def silver_sources(bench) -> list[LabelSource]:
    """[the silver set's record] when any move's queries are silver (`Benchmark.query_split`), else [].

    A silver set without a record (e.g. the official release) says that its producer is not recorded."""
    from ..schema import MOVES, Split

    if not any(bench.query_split(move) is Split.SILVER for move in MOVES):
        return []
    return [read_silver_source(bench.root) or LabelSource(role="judge", configured=UNRECORDED)]


def remove_silver_source(benchmark_root: Path) -> None:
    (Path(benchmark_root) / SILVER_RECORD).unlink(missing_ok=True)


def rerank_source(retriever: dict) -> LabelSource | None:
    """The reranker's record from a reranked run's sidecar (`RunInfo.retriever`); None for a first-stage run."""
    if "reranker" not in retriever:
        return None
    return LabelSource(role="reranker", configured=retriever["reranker"],
                       answered_by=tuple(retriever.get("answered_by") or ()),
                       replayed_from=retriever.get("replayed_from"))


def notes(sources: Iterable[LabelSource]) -> list[str]:
    """One note per distinct source, silver first: what a table or figure built on them says."""
    unique = {json.dumps(s.to_json(), sort_keys=True): s for s in sources if s is not None}
    ordered = sorted(unique.values(), key=lambda s: (s.role != "judge", s.configured))
    return list(dict.fromkeys(s.note() for s in ordered))
