"""Listwise LLM reranking of a first-stage top 100 (paper §5.2, Appendix C, H.3); serves notebook 10.

For each query whose gold sentence is in a first-stage system's top `top_n`, one chat request: the
system message is the move's prompt file (`prompts/rerank/<move>/<name>.md`: the move's definition,
its relation line and the rules; versioned and hashed like the judge's), the user message is
`Query: <query>` and the `top_n` candidates numbered in first-stage order, saying that this order
carries no information. The model answers `{"ranking": [i1, ..., ik]}`, the numbers of its k best.
The reranked list is those k candidates, then every other candidate in first-stage order (so M@100
means nothing for a reranked run). Queries whose gold is outside the top `top_n` are not sent (their
top-k metrics cannot change) and keep their first-stage ranking.

An answer that is not exactly k valid numbers is repaired by the rules of `REPAIR_RULES` (each counted).

Reads:  cfg.paths.retrieval_runs/<system>/<move>/<split>.parquet (+ .run.json), the benchmark, prompts/rerank/.
Writes (through ratio_utils.retrieval.rerank_jobs, run by ratio_utils.stages.llm_rerank): cfg.paths.retrieval_runs/
        <system> + rerank/<move>/<split>.*,
        cfg.paths.rerank_report, and request files (dry run) under the LLM cache.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..llm import ChatRequest, ChatResult
from ..llm.prompts import PromptFile, read_prompt
from ..param_sections import RerankParams
from ..schema import Move
from .runs import system_slug

RANKING_FIELD = "ranking"

# The repair rules, in the order they are applied to an answer; each is counted per (system, move).
REPAIR_RULES = {
    "unusable_answer": "the answer is not a JSON object with a list under 'ranking': the query keeps its first-stage "
                       "ranking",
    "non_integer": "entries that are not whole numbers are dropped (a numeric string such as \"7\" is read as 7)",
    "out_of_range": "numbers outside 1..n (n = candidates shown) are dropped",
    "duplicate": "a number given again is dropped (its first place is kept)",
    "too_many": "numbers after the first k are dropped",
    "too_few": "fewer than k numbers left: the best-ranked first-stage candidates not chosen fill the top k",
}


def load_rerank_prompt(prompts_dir: Path, move: Move, name: str, k: int) -> PromptFile:
    """The move's prompt file (same header format as the judge's), `{k}` filled in."""
    prompt = read_prompt(Path(prompts_dir) / move.value / f"{name}.md")
    return PromptFile(prompt.move, prompt.name, prompt.version, prompt.summary, prompt.text.replace("{k}", str(k)),
                       prompt.path, prompt.sha256)


def user_message(query: str, candidates: list[str], k: int) -> str:
    """`Query: <query>` and the candidates numbered from 1 in first-stage order."""
    lines = [f"Query: {query.strip()}", "",
             f"Candidates ({len(candidates)}), numbered in the order a first-stage retriever returned them; "
             "this order carries no information about which candidates are good:"]
    lines += [f"[{i}] {' '.join(text.split())}" for i, text in enumerate(candidates, start=1)]
    lines += ["", f'Answer with {{"{RANKING_FIELD}": [...]}}: the numbers of the {k} best candidates, best first.']
    return "\n".join(lines)


def rerank_request(custom_id: str, prompt: PromptFile, query: str, candidates: list[str], model: str,
                   params: RerankParams, meta: dict | None = None) -> ChatRequest:
    extra = {"reasoning_effort": params.reasoning_effort} if params.reasoning_effort is not None else {}
    extra.update(params.extra)
    return ChatRequest(
        custom_id=custom_id, model=model,
        messages=[{"role": "system", "content": prompt.text},
                  {"role": "user", "content": user_message(query, candidates, params.k)}],
        response_format_json=True, extra=extra,
        meta={"prompt": prompt.label, "prompt_sha256": prompt.sha256, "move": prompt.move.value, **(meta or {})},
    )


def custom_id(system: str, move: Move | str, split: str, qid: str) -> str:
    return f"rerank-{system_slug(system)}-{Move.parse(move).value}-{split}-{qid}"


@dataclass(frozen=True)
class Ranking:
    """The model's top k as 0-based positions in the first-stage list, and the repair rules applied."""

    positions: tuple[int, ...] | None  # None: the answer was unusable (first-stage order kept)
    repairs: tuple[str, ...]


def parse_ranking(parsed: dict | None, n_candidates: int, k: int) -> Ranking:
    """Read `{"ranking": [...]}` (numbers from 1) and repair it by REPAIR_RULES.

    Hand-written: the repairs are this compendium's own documented rules, not a library's.
    """
    raw = parsed.get(RANKING_FIELD) if isinstance(parsed, dict) else None
    if not isinstance(raw, list):
        return Ranking(None, ("unusable_answer",))
    repairs: list[str] = []
    numbers: list[int] = []
    for value in raw:
        number = _whole_number(value)
        if number is None:
            _once(repairs, "non_integer")
        elif not 1 <= number <= n_candidates:
            _once(repairs, "out_of_range")
        elif number - 1 in numbers:
            _once(repairs, "duplicate")
        else:
            numbers.append(number - 1)
    if len(numbers) > k:
        numbers = numbers[:k]
        repairs.append("too_many")
    if len(numbers) < min(k, n_candidates):
        chosen = set(numbers)
        numbers += [i for i in range(n_candidates) if i not in chosen][: min(k, n_candidates) - len(numbers)]
        repairs.append("too_few")
    return Ranking(tuple(numbers), tuple(repairs))


def _whole_number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _once(repairs: list[str], rule: str) -> None:
    if rule not in repairs:
        repairs.append(rule)


def reranked_order(first_stage: list[str], positions: tuple[int, ...] | None, top_n: int) -> list[str]:
    """The model's picks from the top `top_n`, then every other candidate in first-stage order."""
    if positions is None:
        return list(first_stage)
    top = first_stage[:top_n]
    picked = [top[i] for i in positions]
    chosen = set(picked)
    return picked + [d for d in first_stage if d not in chosen]


def ranked_run(orders: dict[str, list[str]]) -> pd.DataFrame:
    """A run frame (qid, docid, rank, score) from ranked docid lists; score = n - rank + 1, so it falls with rank."""
    rows = [(qid, docid, rank, float(len(order) - rank + 1))
            for qid, order in orders.items() for rank, docid in enumerate(order, start=1)]
    return pd.DataFrame(rows, columns=["qid", "docid", "rank", "score"])


def answer_status(result: ChatResult | None) -> str:
    """'answered' (content to parse), 'missing' (replay miss, dry run, API or batch error) or 'not_sent'."""
    if result is None:
        return "not_sent"
    return "answered" if result.content else "missing"


@dataclass
class QueryCounts:
    """What happened to the queries of one (system, move): the report's counts."""

    queries: int = 0
    to_rerank: int = 0  # gold in the first-stage top n: one request each (whether it is sent, replayed or written)
    not_sent_gold_outside_top_n: int = 0
    not_in_first_stage_run: int = 0
    # what happened to the requests: sent to the endpoint in this run, answered from recorded responses
    # (replay or the cache), or written as Batch API request files without an answer
    sent: int = 0
    replayed: int = 0
    request_files: int = 0
    answered: int = 0
    missing: int = 0  # no answer: replay miss, dry run, API or batch error
    replay_misses: int = 0
    repairs: collections.Counter = field(default_factory=collections.Counter)

    def to_dict(self) -> dict:
        return {"queries": self.queries, "to_rerank": self.to_rerank,
                "not_sent_gold_outside_top_n": self.not_sent_gold_outside_top_n,
                "not_in_first_stage_run": self.not_in_first_stage_run, "sent": self.sent, "replayed": self.replayed,
                "request_files": self.request_files, "answered": self.answered, "missing": self.missing,
                "replay_misses": self.replay_misses, "repairs": {r: int(self.repairs.get(r, 0)) for r in REPAIR_RULES}}
