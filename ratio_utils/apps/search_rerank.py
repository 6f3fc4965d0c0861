"""LLM reranking where people search (`ratio-search query --rerank`, the explorer's "rerank with LLM" switch, the MCP
tool's `rerank=True`): the top 100 of the move's retriever reranked by notebook 10's listwise prompt.

The request is the one notebook 10 sends (`retrieval.rerank.rerank_request`: the move's prompt file
`prompts/rerank/<move>/<prompt>.md`, the statement as the query, the first-stage candidates numbered in order), the
answer is read by the same parser and repair rules (`retrieval.rerank.parse_ranking`, `REPAIR_RULES`), and the
reranked list is the model's k picks followed by the rest in first-stage order (`retrieval.rerank.reranked_order`).
It goes through `ratio_utils.llm` with the run's `llm` and `rerank` params: the user's OpenAI-compatible endpoint
(`llm.base_url` or $OPENAI_BASE_URL) and key (the variable `llm.api_key_env` names), the on-disk answer cache keyed by
the request hash (a statement asked again costs nothing), retries on 429/5xx. A person is waiting, so a request here
waits at most `SEARCH_TIMEOUT_S` and is retried at most `SEARCH_MAX_RETRIES` times, whatever the params say for the
notebook's batch.

Never silent: without a key (and no recorded answer for this very request) the answer says that reranking is
unavailable and why, and keeps the first-stage order; a failed request (timeout, HTTP error) or an answer that is not a
ranking says so too, with the first-stage order. The `status` of `RerankOutcome` is one of `RERANK_STATUSES`.

Reads: the rerank prompt files, the LLM answer cache (and `<shared>/llm_cache/`). Writes: the answer cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass, field

import pandas as pd

from ..llm import LLMClient
from ..param_sections import RerankParams
from ..retrieval.rerank import load_rerank_prompt, parse_ranking, rerank_request, reranked_order
from ..schema import Move, sentence_id

SEARCH_TIMEOUT_S = 60.0  # seconds one rerank request may take before the first-stage order is shown
SEARCH_MAX_RETRIES = 2
# reranked: the model's order; unavailable: no key and no recorded answer; failed: the request got no answer (timeout,
# HTTP error); unusable_answer: an answer that is not a ranking (notebook 10's repair rule of that name)
RERANK_STATUSES = ("reranked", "unavailable", "failed", "unusable_answer")


@dataclass
class RerankOutcome:
    """What the reranker did to one move's hits.

    status: one of RERANK_STATUSES.
    message: one sentence for the person or agent (why the order is the first stage's, when it is).
    reranker: the LLM that answered or would have (`rerank.model`, else `llm.model`).
    repairs: notebook 10's repair rules applied to the answer (`retrieval.rerank.REPAIR_RULES`).
    cached: whether the answer came from the on-disk cache or recorded answers (cost nothing).
    """

    status: str
    message: str
    reranker: str
    repairs: list[str] = field(default_factory=list)
    cached: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class SearchReranker:
    """Listwise LLM reranking of one statement's first-stage hits, built once per process from a run's config."""

    def __init__(self, cfg, *, timeout_s: float = SEARCH_TIMEOUT_S, max_retries: int = SEARCH_MAX_RETRIES,
                 client: LLMClient | None = None):
        """cfg: the run's config (its `llm` and `rerank` sections, the answer cache, the prompt folder).
        timeout_s: seconds one request may take (at most the params' `llm.timeout_s`).
        max_retries: retries of one request on 408/409/429/5xx and connection errors (at most `llm.max_retries`).
        client: an LLMClient to use instead of the run's (tests)."""
        self.params = cfg.section("rerank", RerankParams)
        if client is None:
            base = LLMClient.from_config(cfg)
            settings = dataclasses.replace(base.settings, mode="sync",
                                           timeout_s=min(timeout_s, base.settings.timeout_s),
                                           max_retries=min(max_retries, base.settings.max_retries))
            client = LLMClient(settings, base.cache_dir, replay_dirs=base.store.replay_dirs,
                               replay_files=base.store.replay_files)
        self.client = client
        self.model = self.params.model or client.settings.model
        self.prompts_dir = cfg.paths.from_params(self.params.prompts_dir)
        self._prompts: dict[Move, object] = {}

    @property
    def top_n(self) -> int:
        """Candidates shown to the model (notebook 10's `rerank.top_n`, 100 by default)."""
        return self.params.top_n

    def _prompt(self, move: Move):
        if move not in self._prompts:
            self._prompts[move] = load_rerank_prompt(self.prompts_dir, move, self.params.prompt, self.params.k)
        return self._prompts[move]

    def rerank(self, statement: str, move: Move | str, hits: pd.DataFrame) -> tuple[pd.DataFrame, RerankOutcome]:
        """`hits` (a search result: rank, score, sentence, ...; the first stage's top n) in the model's order, ranks
        renumbered and the first-stage rank and score kept as `first_stage_rank`, `first_stage_score`; or in their own
        order with an outcome that says why."""
        move = Move.parse(move)
        hits = hits.reset_index(drop=True)
        if hits.empty:
            return hits, RerankOutcome("reranked", "nothing to rerank", self.model)
        try:
            prompt = self._prompt(move)
        except (OSError, ValueError) as exc:
            return self._first_stage(hits), RerankOutcome(
                "unavailable", f"reranking is unavailable: the {move.value} prompt cannot be read ({exc})", self.model)
        shown = hits.iloc[: self.top_n]
        request = rerank_request(f"search-{move.value}-{sentence_id(statement)}", prompt, statement,
                                 list(shown["sentence"]), self.model, self.params, meta={"source": "search"})
        # The client reports on stdout; stdout may be the MCP stdio channel, so its lines go to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            if self.client.has_key and self.client.settings.mode != "replay":
                result = self.client.run([request], mode="sync", desc=f"rerank {move.value}")[0]
            else:
                result = self.client.run([request], mode="replay", desc=f"rerank {move.value}",
                                         allow_replay_misses=True)[0]
                if result.replay_miss:
                    why = (f"no API key in ${self.client.settings.api_key_env}" if not self.client.has_key
                           else "llm.mode is replay")
                    return self._first_stage(hits), RerankOutcome(
                        "unavailable", f"reranking is unavailable ({why}, and no recorded answer for this request): "
                        "the first-stage order is shown", self.model)
        if result.content is None:
            return self._first_stage(hits), RerankOutcome(
                "failed", f"reranking failed ({result.error}): the first-stage order is shown", self.model,
                cached=result.cached)
        ranking = parse_ranking(result.parsed, len(shown), self.params.k)
        if ranking.positions is None:
            return self._first_stage(hits), RerankOutcome(
                "unusable_answer", "reranking failed: the model's answer is not a ranking (" +
                (result.error or "no 'ranking' list") + "): the first-stage order is shown", self.model,
                list(ranking.repairs), result.cached)
        order = reranked_order(list(range(len(hits))), ranking.positions, self.top_n)
        reranked = self._first_stage(hits).iloc[order].reset_index(drop=True)
        reranked["rank"] = range(1, len(reranked) + 1)
        repaired = f" (answer repaired: {', '.join(ranking.repairs)})" if ranking.repairs else ""
        return reranked, RerankOutcome(
            "reranked", f"the top {self.params.k} of {len(shown)} reranked by {result.model or self.model}{repaired}",
            result.model or self.model, list(ranking.repairs), result.cached)

    @staticmethod
    def _first_stage(hits: pd.DataFrame) -> pd.DataFrame:
        out = hits.copy()
        out["first_stage_rank"] = out["rank"]
        out["first_stage_score"] = out["score"]
        return out
