"""Requests, results and errors of the LLM client (its `llm` params section, `LLMSettings`, is in
`param_sections`): `ChatRequest` (and its request hash, the cache key), `ChatResult`, `RunReport`,
the error classes. Plain data; reads and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------------------------
# settings, requests, results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    custom_id: str
    model: str
    messages: list[dict]  # OpenAI chat messages
    response_format_json: bool = True
    extra: dict = field(default_factory=dict)  # reasoning_effort, verbosity, temperature, max_tokens ...
    # Recorded with the cached response (e.g. the prompt file and its hash) but never sent and
    # not part of the cache key.
    meta: dict = field(default_factory=dict)

    def body(self) -> dict:
        """The chat-completions request body: what is sent, what a batch line carries, what is hashed."""
        body: dict[str, Any] = {"model": self.model, "messages": self.messages}
        if self.response_format_json:
            body["response_format"] = {"type": "json_object"}
        body.update(self.extra)
        return body

    @property
    def request_hash(self) -> str:
        return request_hash(self.body())


@dataclass
class ChatResult:
    custom_id: str
    content: str | None
    parsed: dict | None
    error: str | None
    usage: dict
    cached: bool
    request_hash: str = ""
    model: str | None = None  # the `model` field of the response: who actually answered

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def replay_miss(self) -> bool:
        """True when replay found no recorded response for this request (see `run`)."""
        return bool(self.error) and self.error.startswith(REPLAY_MISS_ERROR)


@dataclass
class RunReport:
    """What one `run` did: counts, tokens and cost (estimate before, usage after)."""

    desc: str
    mode: str
    model: str
    n_requests: int = 0
    n_unique: int = 0
    n_cached: int = 0
    n_to_send: int = 0
    n_ok: int = 0
    n_failed: int = 0
    est_input_tokens: int = 0
    est_output_tokens: int = 0
    est_cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = None
    batch_dir: str | None = None
    n_replay_misses: int = 0  # unique requests replay could not answer (allow_replay_misses=True)
    answered_by: list[str] = field(default_factory=list)  # the `model` field of the usable responses


class LLMError(RuntimeError):
    """Base class of this module's errors (messages never contain the API key)."""


class LLMUnavailable(LLMError):
    pass


class ReplayMiss(LLMError):
    def __init__(self, misses: list[tuple[str, str]], where: str):
        self.misses = misses
        shown = "; ".join(f"custom_id={cid} request_hash={h}" for cid, h in misses[:5])
        more = f" (and {len(misses) - 5} more)" if len(misses) > 5 else ""
        super().__init__(f"replay: no recorded response for {len(misses)} request(s): {shown}{more}. "
                         f"Searched: {where}")


class BudgetExceeded(LLMError):
    pass


class BatchTimeout(LLMError):
    pass


REPLAY_MISS_ERROR = "replay miss: no recorded response"


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(body: dict) -> str:
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()
