"""One client for every LLM step of the compendium (marker labelling, the silver judge, reranking).

Serves notebook 07 (silver filter) and any later stage that asks an LLM. It talks to any
OpenAI-compatible endpoint through the `openai` package, either synchronously (chat completions,
JSON answers) or through the Batch API (JSONL request files, upload, poll, download), and it keeps
every successful raw response on disk:

    <cache_dir>/responses/<hash[:2]>/<hash>.json    one readable JSON file per response
    <cache_dir>/invalid/<hash>.json                 answers that were not the JSON asked for (not reused)
    <cache_dir>/batches/<job>/                      request files, batch state, downloaded output/error files

The cache key is a hash of the full request body (model, messages, response format and extra
parameters) and never of the API key, so a rerun costs nothing, and `replay` mode answers only from
recorded responses: this cache, read-only copies of other caches (`<shared>/llm_cache/` when it
exists) and batch output files, failing with the custom_id and the request hash on a miss, or,
when the caller accepts a partial replay (`run(..., allow_replay_misses=True)`), answering each miss
with an error result that says so and counting the misses in the run's report.
The API key is read from the environment, sent only in the Authorization header, and scrubbed from
every message this module writes or raises.

Modules: `types` (requests, results, errors, the request hash; the settings are `param_sections.LLMSettings`),
`prompts` (prompt files: YAML header + system message), `store` (response parsing, the on-disk cache and replay
sources), `batch` (the Batch API path: files, upload, polling, resubmission), `client` (`LLMClient`: the one entry
point `run`, sync path, budget, accounting).
"""

from __future__ import annotations

from ..param_sections import LLM_MODES, LLMSettings
from .batch import CHAT_ENDPOINT
from .client import LLMClient
from .prompts import PromptFile, load_prompts, prompt_table, read_prompt
from .store import ResponseStore, result_from_response
from .types import (
    REPLAY_MISS_ERROR,
    BatchTimeout,
    BudgetExceeded,
    ChatRequest,
    ChatResult,
    LLMError,
    LLMUnavailable,
    ReplayMiss,
    RunReport,
    canonical_json,
    request_hash,
)

__all__ = [
    "CHAT_ENDPOINT", "LLM_MODES", "REPLAY_MISS_ERROR", "PromptFile", "load_prompts", "prompt_table", "read_prompt",
    "BatchTimeout", "BudgetExceeded", "ChatRequest", "ChatResult", "LLMClient", "LLMError", "LLMSettings",
    "LLMUnavailable", "ReplayMiss", "ResponseStore", "RunReport",
    "canonical_json", "request_hash", "result_from_response",
]
