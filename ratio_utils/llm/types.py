"""Settings, requests, results and errors of the LLM client: the `llm` params section
(`LLMSettings`), `ChatRequest` (and its request hash, the cache key), `ChatResult`, `RunReport`,
the error classes. Plain data; reads and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

MODES = ("sync", "batch", "replay", "dry_run")


# --------------------------------------------------------------------------------------------
# settings, requests, results
# --------------------------------------------------------------------------------------------


@dataclass
class LLMSettings:
    """The `llm` params section. Defaults follow the paper (Batch API, JSON answers)."""

    model: str = "gpt-5.4"
    base_url: str | None = None  # None: $OPENAI_BASE_URL, else the OpenAI API
    api_key_env: str = "OPENAI_API_KEY"  # the NAME of the environment variable holding the key
    api_key_required: bool = True  # False for local servers (vLLM, llama.cpp) that take no key
    mode: str = "batch"  # sync | batch | replay | dry_run
    cache_dir: str = "output:cache/llm"  # params paths (Paths.from_params), as are the two below
    replay_dirs: list[str] = field(default_factory=list)  # read-only caches/batch files to replay
    replay_batch_files: list[str] = field(default_factory=list)  # batch input/output JSONL files
    max_requests: int | None = 100_000  # request budget per client (fresh requests, resubmits included)
    max_retries: int = 6  # per synchronous request, on 408/409/429/5xx and connection errors
    retry_initial_s: float = 1.0
    retry_max_s: float = 60.0
    timeout_s: float = 600.0
    concurrency: int = 4  # parallel synchronous requests
    batch_max_requests: int = 50_000  # Batch API limits per input file
    batch_max_bytes: int = 200 * 1024 * 1024
    batch_completion_window: str = "24h"
    batch_poll_interval_s: float = 30.0
    batch_timeout_s: float = 26 * 3600.0
    batch_max_resubmits: int = 2
    est_output_tokens: int = 400  # per request, for the pre-run estimate (reasoning included)
    prices: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> {input, output} USD / 1M tokens
    batch_discount: float = 0.5  # the Batch API halves the per-token price

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"llm.mode must be one of {MODES}, got {self.mode!r}")
        if self.batch_max_requests < 1 or self.batch_max_bytes < 1:
            raise ValueError("llm.batch_max_requests and llm.batch_max_bytes must be positive")


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
        super().__init__(f"replay: no recorded response for {len(misses)} request(s): {shown}{more}. Searched: {where}")


class BudgetExceeded(LLMError):
    pass


class BatchTimeout(LLMError):
    pass


REPLAY_MISS_ERROR = "replay miss: no recorded response"


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(body: dict) -> str:
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()
