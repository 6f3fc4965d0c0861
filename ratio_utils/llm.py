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
"""

from __future__ import annotations

import collections
import concurrent.futures
import datetime as _dt
import hashlib
import itertools
import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# plain tqdm: tqdm.auto warns in notebooks without ipywidgets, and text bars read fine there
from tqdm import tqdm

from .io import iter_jsonl, write_json_atomic, write_text_atomic

MODES = ("sync", "batch", "replay", "dry_run")
CHAT_ENDPOINT = "/v1/chat/completions"
_TERMINAL_BATCH_STATES = {"completed", "failed", "expired", "cancelled"}
# Without a tokenizer for every model behind an OpenAI-compatible endpoint, estimates use the
# common rule of thumb of about four characters per token; only the pre-run estimate uses it.
_CHARS_PER_TOKEN = 4.0
_TOKENS_PER_MESSAGE = 4


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
    cache_dir: str = "cache/llm"  # relative to the output root
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


# --------------------------------------------------------------------------------------------
# responses: parsing, the on-disk store
# --------------------------------------------------------------------------------------------


def result_from_response(custom_id: str, rhash: str, response: dict, json_expected: bool, cached: bool) -> ChatResult:
    """A ChatResult from a chat-completions response body."""
    usage = response.get("usage") or {}
    model = response.get("model") if isinstance(response, dict) else None
    try:
        choice = response["choices"][0]
        content = choice["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ChatResult(custom_id, None, None, "response has no choices[0].message", usage, cached, rhash, model)
    if content is None or content == "":
        reason = choice.get("finish_reason")
        return ChatResult(custom_id, content, None, f"empty content (finish_reason={reason})", usage, cached, rhash, model)
    parsed = None
    if json_expected:
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError as exc:
            return ChatResult(custom_id, content, None, f"content is not valid JSON: {exc.msg}", usage, cached, rhash, model)
        if not isinstance(parsed, dict):
            return ChatResult(custom_id, content, None, f"content is JSON but not an object ({type(parsed).__name__})",
                              usage, cached, rhash, model)
    return ChatResult(custom_id, content, parsed, None, usage, cached, rhash, model)


class ResponseStore:
    """Recorded responses: a writable cache plus read-only replay sources.

    Read-only sources are folders (cache entries `<hash>.json`, flat or under `<hash[:2]>/`, and
    batch JSONL files) and batch JSONL files. A batch output line is matched by custom_id; when a
    batch input file with the same custom_id is known, its body must hash to the request's hash.
    """

    def __init__(self, cache_dir: Path, replay_dirs: Sequence[Path] = (), replay_files: Sequence[Path] = ()):
        self.cache_dir = Path(cache_dir)
        self.replay_dirs = [Path(p) for p in replay_dirs]
        self.replay_files = [Path(p) for p in replay_files]
        self._batch_outputs: dict[str, tuple[dict, str]] | None = None  # custom_id -> (response body, file)
        self._batch_inputs: dict[str, str] = {}  # custom_id -> request hash

    @property
    def responses_dir(self) -> Path:
        return self.cache_dir / "responses"

    def entry_path(self, rhash: str) -> Path:
        return self.responses_dir / rhash[:2] / f"{rhash}.json"

    def describe_sources(self) -> str:
        parts = [self.responses_dir, *self.replay_dirs, *self.replay_files]
        return ", ".join(os.path.relpath(p) for p in parts)  # relative: shown in notebooks and table notes

    def has_replay_source(self) -> bool:
        """True if any recorded response exists anywhere this store looks."""
        if self.responses_dir.is_dir() and any(self.responses_dir.rglob("*.json")):
            return True
        for folder in self.replay_dirs:
            if folder.is_dir() and (any(folder.rglob("*.json")) or any(folder.rglob("*.jsonl"))):
                return True
        return any(path.is_file() for path in self.replay_files)

    def lookup(self, custom_id: str, rhash: str) -> tuple[dict, str] | None:
        """(response body, where it came from) or None."""
        own = self.entry_path(rhash)
        if own.exists():
            return json.loads(own.read_text(encoding="utf-8"))["response"], str(own)
        for folder in self.replay_dirs:
            for candidate in (folder / rhash[:2] / f"{rhash}.json", folder / f"{rhash}.json",
                              folder / "responses" / rhash[:2] / f"{rhash}.json"):
                if candidate.exists():
                    entry = json.loads(candidate.read_text(encoding="utf-8"))
                    if entry.get("request_hash", rhash) == rhash:
                        return entry["response"], str(candidate)
        outputs = self._load_batch_files()
        if custom_id in outputs:
            known = self._batch_inputs.get(custom_id)
            if known is None or known == rhash:
                return outputs[custom_id]
        return None

    def store(self, request: ChatRequest, rhash: str, response: dict, source: str) -> Path:
        entry = {
            "request_hash": rhash,
            "custom_id": request.custom_id,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source": source,
            "meta": request.meta,
            "request": request.body(),
            "response": response,
        }
        return write_json_atomic(self.entry_path(rhash), entry)

    def store_invalid(self, request: ChatRequest, rhash: str, response: dict, error: str, source: str) -> Path:
        entry = {"request_hash": rhash, "custom_id": request.custom_id, "error": error, "source": source,
                 "meta": request.meta, "request": request.body(), "response": response}
        return write_json_atomic(self.cache_dir / "invalid" / f"{rhash}.json", entry)

    def _load_batch_files(self) -> dict[str, tuple[dict, str]]:
        if self._batch_outputs is not None:
            return self._batch_outputs
        outputs: dict[str, tuple[dict, str]] = {}
        files = list(self.replay_files)
        for folder in self.replay_dirs:
            if folder.is_dir():
                files += sorted(folder.rglob("*.jsonl"))
        for path in files:
            if not path.is_file():
                raise FileNotFoundError(f"replay batch file not found: {path}")
            for _, line in iter_jsonl(path, required=("custom_id",)):
                if "body" in line and "method" in line:  # a batch input line
                    self._batch_inputs[line["custom_id"]] = request_hash(line["body"])
                    continue
                response = line.get("response") or {}
                if response.get("status_code") == 200 and not line.get("error"):
                    outputs[line["custom_id"]] = (response.get("body") or {}, f"{path}")
        self._batch_outputs = outputs
        return outputs


# --------------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------------


class LLMClient:
    """Sync and batch chat completions against an OpenAI-compatible endpoint, with a response cache."""

    def __init__(self, settings: LLMSettings, cache_dir: Path, *, replay_dirs: Sequence[Path] = (),
                 replay_files: Sequence[Path] = (), api_key: str | None = None):
        self.settings = settings
        self.cache_dir = Path(cache_dir)
        self.store = ResponseStore(self.cache_dir, replay_dirs, replay_files)
        key = api_key if api_key is not None else os.environ.get(settings.api_key_env)
        if not key and not settings.api_key_required and self.base_url_display != "https://api.openai.com/v1":
            key = "no-key-required"
        self.__key = key or None  # name-mangled and never printed; see __repr__ and _redact
        self._openai = None
        self.requests_sent = 0
        self.last_report: RunReport | None = None

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_config(cls, cfg) -> "LLMClient":
        """The client of a run: the `llm` params section, the key from the environment, the cache
        under the output root, and `<shared>/llm_cache/` as a replay source when it exists."""
        settings = cfg.section("llm", LLMSettings)
        root = cfg.paths.root

        def resolve(value: str) -> Path:
            path = Path(os.path.expanduser(value))
            return path if path.is_absolute() else root / path

        replay_dirs = [resolve(p) for p in settings.replay_dirs]
        shared_cache = cfg.paths.llm_cache
        if shared_cache.is_dir():
            replay_dirs.append(shared_cache)
        return cls(settings, resolve(settings.cache_dir), replay_dirs=replay_dirs,
                   replay_files=[resolve(p) for p in settings.replay_batch_files])

    def __repr__(self) -> str:
        return f"LLMClient(model={self.settings.model!r}, endpoint={self.base_url_display!r}, key={'set' if self.__key else 'not set'})"

    @property
    def base_url_display(self) -> str:
        return self.settings.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"

    @property
    def has_key(self) -> bool:
        return bool(self.__key)

    def describe(self) -> dict[str, Any]:
        """What a notebook prints about the client: never the key, only whether it is set."""
        return {
            "model": self.settings.model,
            "endpoint": self.base_url_display,
            "key": f"${self.settings.api_key_env} {'set' if self.__key else 'not set'}",
            "mode": self.settings.mode,
            "cache": str(self.cache_dir),
            "replay sources": self.store.describe_sources(),
        }

    def available(self) -> tuple[bool, str]:
        """Whether `run` can answer anything: an endpoint with a key, or recorded responses."""
        if self.settings.mode == "dry_run":
            return True, "dry run: request files are written, nothing is sent"
        if self.settings.mode != "replay" and self.__key:
            return True, f"endpoint {self.base_url_display} (key from ${self.settings.api_key_env})"
        if self.store.has_replay_source():
            return True, f"replaying recorded responses from {self.store.describe_sources()}"
        if self.settings.mode == "replay":
            return False, f"replay mode but no recorded responses in {self.store.describe_sources()}"
        return False, (f"no API key in ${self.settings.api_key_env} and no recorded responses in "
                       f"{self.store.describe_sources()}")

    # -- secrets -------------------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        if self.__key and self.__key in text:
            text = text.replace(self.__key, "***")
        return text

    def _client(self):
        if self._openai is None:
            from openai import OpenAI

            # Retries are ours (tenacity, configurable backoff), so the SDK's own are switched off.
            self._openai = OpenAI(api_key=self.__key, base_url=self.settings.base_url, max_retries=0,
                                  timeout=self.settings.timeout_s)
        return self._openai

    # -- the one entry point -------------------------------------------------------------------
    def run(self, requests: list[ChatRequest], *, mode: str | None = None, desc: str = "",
            allow_replay_misses: bool = False) -> list[ChatResult]:
        """Answer every request, in the order given: cached answers first, the rest by `mode`.

        In replay (asked for, or the fallback without a key) a request with no recorded response
        raises ReplayMiss, unless `allow_replay_misses`: then it gets an error result starting with
        REPLAY_MISS_ERROR (`ChatResult.replay_miss`) and is counted in `last_report.n_replay_misses`.
        """
        mode = mode or self.settings.mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        repeated = sorted(cid for cid, n in collections.Counter(r.custom_id for r in requests).items() if n > 1)
        if repeated:
            raise ValueError(f"custom_id must be unique within a run; duplicated: {repeated[:5]}")
        if mode in ("sync", "batch") and not self.__key:
            if self.store.has_replay_source():
                print(f"[llm] no API key in ${self.settings.api_key_env}: answering {desc or 'requests'} from recorded responses (replay)")
                mode = "replay"
            else:
                raise LLMUnavailable(self.available()[1])

        hashes = [r.request_hash for r in requests]
        first_of: dict[str, int] = {}
        for i, h in enumerate(hashes):
            first_of.setdefault(h, i)
        results: list[ChatResult | None] = [None] * len(requests)
        models = ", ".join(sorted({r.model for r in requests})) or self.settings.model
        report = RunReport(desc=desc, mode=mode, model=models, n_requests=len(requests), n_unique=len(first_of))

        pending: list[int] = []  # index of the first request of each uncached body
        for h, i in first_of.items():
            found = self.store.lookup(requests[i].custom_id, h)
            if found is None:
                pending.append(i)
                continue
            response, source = found
            if not source.startswith(str(self.store.responses_dir)):
                self.store.store(requests[i], h, response, f"replayed from {source}")
            results[i] = result_from_response(requests[i].custom_id, h, response, requests[i].response_format_json, True)
        report.n_cached = report.n_unique - len(pending)
        report.n_to_send = len(pending)
        self._estimate(report, [requests[i] for i in pending], mode)
        self._print_estimate(report)

        if pending and mode == "replay":
            if not allow_replay_misses:
                raise ReplayMiss([(requests[i].custom_id, hashes[i]) for i in pending], self.store.describe_sources())
            print(f"[llm] replay: {len(pending)} of {report.n_unique} unique request(s) have no recorded response; "
                  "they are answered as misses")
            report.n_replay_misses = len(pending)
            for i in pending:
                results[i] = ChatResult(requests[i].custom_id, None, None, f"{REPLAY_MISS_ERROR} (request_hash {hashes[i]})",
                                        {}, False, hashes[i])
        elif pending:
            self._check_budget(len(pending), consume=(mode != "dry_run"))
            if mode == "sync":
                self._run_sync(requests, hashes, pending, results, desc)
            else:
                self._run_batch(requests, hashes, pending, results, desc, report, dry_run=(mode == "dry_run"))

        # fan the answer of each unique body out to its duplicates (same body, other custom_id)
        for i, h in enumerate(hashes):
            if results[i] is None:
                src = results[first_of[h]]
                results[i] = ChatResult(requests[i].custom_id, src.content, src.parsed, src.error, src.usage, src.cached, h, src.model)
        final = [r for r in results if r is not None]
        self._account(report, requests, final, mode)
        self._print_report(report)
        self.last_report = report
        return final

    # -- accounting ----------------------------------------------------------------------------
    def _cost(self, usage: Iterable[tuple[str, int, int]], mode: str) -> float | None:
        """USD for (model, input tokens, output tokens) triples; None if a model has no price."""
        total = 0.0
        for model, input_tokens, output_tokens in usage:
            price = self.settings.prices.get(model)
            if not price:
                return None
            total += (input_tokens * price["input"] + output_tokens * price["output"]) / 1e6
        return total * (self.settings.batch_discount if mode in ("batch", "dry_run") else 1.0)

    def _estimate(self, report: RunReport, to_send: list[ChatRequest], mode: str) -> None:
        per_request = []
        for r in to_send:
            chars = sum(len(str(m.get("content", ""))) for m in r.messages)
            tokens_in = int(chars / _CHARS_PER_TOKEN) + _TOKENS_PER_MESSAGE * len(r.messages)
            per_request.append((r.model, tokens_in, self.settings.est_output_tokens))
        report.est_input_tokens = sum(t for _, t, _ in per_request)
        report.est_output_tokens = sum(t for _, _, t in per_request)
        report.est_cost_usd = self._cost(per_request, mode)

    def _account(self, report: RunReport, requests: list[ChatRequest], results: list[ChatResult], mode: str) -> None:
        report.n_ok = sum(r.ok for r in results)
        report.n_failed = len(results) - report.n_ok
        report.answered_by = sorted({r.model for r in results if r.ok and r.model})
        seen, usage = set(), []
        for request, r in zip(requests, results):
            if r.cached or r.request_hash in seen:  # cached answers cost nothing this run
                continue
            seen.add(r.request_hash)
            tokens_in = int(r.usage.get("prompt_tokens") or 0)
            tokens_out = int(r.usage.get("completion_tokens") or 0)
            usage.append((request.model, tokens_in, tokens_out))
            report.input_tokens += tokens_in
            report.output_tokens += tokens_out
            details = r.usage.get("completion_tokens_details") or {}
            report.reasoning_tokens += int(details.get("reasoning_tokens") or 0)
        report.cost_usd = self._cost(usage, mode)

    @staticmethod
    def _fmt_cost(cost: float | None) -> str:
        return "unknown (no price for this model in llm.prices)" if cost is None else f"${cost:,.2f}"

    def _print_estimate(self, r: RunReport) -> None:
        print(f"[llm] {r.desc or 'run'}: {r.n_requests} request(s), {r.n_unique} unique, {r.n_cached} cached, "
              f"{r.n_to_send} to send ({r.mode}, {r.model}); estimate {r.est_input_tokens:,} input + "
              f"{r.est_output_tokens:,} output tokens, cost {self._fmt_cost(r.est_cost_usd)}")

    def _print_report(self, r: RunReport) -> None:
        print(f"[llm] {r.desc or 'run'}: {r.n_ok} ok, {r.n_failed} failed; used {r.input_tokens:,} input + "
              f"{r.output_tokens:,} output tokens ({r.reasoning_tokens:,} reasoning), cost {self._fmt_cost(r.cost_usd)}")

    def _check_budget(self, n: int, *, consume: bool = True) -> None:
        limit = self.settings.max_requests
        if limit is not None and self.requests_sent + n > limit:
            raise BudgetExceeded(
                f"this run would send {n} request(s) but the budget llm.max_requests={limit} allows "
                f"{max(limit - self.requests_sent, 0)} more ({self.requests_sent} already sent); nothing was sent"
            )
        if consume:
            self.requests_sent += n

    # -- synchronous path ----------------------------------------------------------------------
    def _retrying(self):
        import openai
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

        def retryable(exc: BaseException) -> bool:
            if isinstance(exc, (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)):
                return True
            return isinstance(exc, openai.APIStatusError) and exc.status_code in (408, 409)

        return Retrying(
            retry=retry_if_exception(retryable),
            wait=wait_exponential_jitter(multiplier=self.settings.retry_initial_s, max=self.settings.retry_max_s),
            stop=stop_after_attempt(self.settings.max_retries + 1),
            reraise=True,
        )

    def _send_one(self, request: ChatRequest) -> dict:
        body = request.body()
        model, messages = body.pop("model"), body.pop("messages")
        raw = self._retrying()(
            lambda: self._client().chat.completions.with_raw_response.create(model=model, messages=messages, extra_body=body)
        )
        return json.loads(raw.http_response.text)

    def _describe_exception(self, exc: BaseException) -> str:
        status = getattr(exc, "status_code", None)
        prefix = f"HTTP {status}: " if status else ""
        return self._redact(f"{prefix}{type(exc).__name__}: {exc}")

    def _run_sync(self, requests, hashes, pending, results, desc) -> None:
        def work(i: int) -> ChatResult:
            request, h = requests[i], hashes[i]
            try:
                response = self._send_one(request)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a result's error
                return ChatResult(request.custom_id, None, None, self._describe_exception(exc), {}, False, h)
            return self._accept_response(request, h, response, "sync")

        self._client()  # build the SDK client once, before the worker threads share it
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.settings.concurrency)) as pool:
            futures = {pool.submit(work, i): i for i in pending}
            for future in tqdm(concurrent.futures.as_completed(futures), total=len(futures), desc=desc or "llm sync"):
                results[futures[future]] = future.result()

    def _accept_response(self, request: ChatRequest, h: str, response: dict, source: str) -> ChatResult:
        """Turn a successful HTTP answer into a result; cache it only if it is usable."""
        result = result_from_response(request.custom_id, h, response, request.response_format_json, False)
        if result.ok:
            self.store.store(request, h, response, source)
        else:
            self.store.store_invalid(request, h, response, result.error or "", source)
        return result

    # -- batch path ----------------------------------------------------------------------------
    def _job_dir(self, desc: str, hashes: Iterable[str]) -> Path:
        slug = re.sub(r"[^a-z0-9]+", "-", desc.lower()).strip("-")[:40] or "run"
        digest = hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()[:12]
        # The same requests map to the same folder, so an interrupted job is resumed; a job that
        # finished earlier (its failures still uncached) gets a fresh folder, so a rerun retries them.
        for attempt in itertools.count(1):
            job = self.cache_dir / "batches" / (f"{slug}-{digest}" + (f"-{attempt}" if attempt > 1 else ""))
            state_path = job / "state.json"
            if not state_path.exists():
                return job
            rounds = json.loads(state_path.read_text(encoding="utf-8")).get("rounds", [])
            if not rounds or not all(e.get("downloaded") for entries in rounds for e in entries):
                return job
        raise AssertionError("unreachable")

    def _split_lines(self, lines: list[str]) -> list[list[str]]:
        """Split request lines into files within the Batch API limits (count and bytes)."""
        chunks: list[list[str]] = []
        current: list[str] = []
        size = 0
        for line in lines:
            n = len(line.encode("utf-8")) + 1
            if n > self.settings.batch_max_bytes:
                raise LLMError(f"one batch request line is {n} bytes, over llm.batch_max_bytes={self.settings.batch_max_bytes}")
            if current and (len(current) >= self.settings.batch_max_requests or size + n > self.settings.batch_max_bytes):
                chunks.append(current)
                current, size = [], 0
            current.append(line)
            size += n
        if current:
            chunks.append(current)
        return chunks

    def _write_batch_files(self, job: Path, round_no: int, requests: list[ChatRequest]) -> list[Path]:
        lines = [canonical_json({"custom_id": r.custom_id, "method": "POST", "url": CHAT_ENDPOINT, "body": r.body()})
                 for r in requests]
        paths = []
        for k, chunk in enumerate(self._split_lines(lines)):
            paths.append(write_text_atomic(job / f"r{round_no}_input_{k:03d}.jsonl", "\n".join(chunk) + "\n"))
        return paths

    def _run_batch(self, requests, hashes, pending, results, desc, report: RunReport, *, dry_run: bool) -> None:
        job = self._job_dir(desc, (hashes[i] for i in pending))
        report.batch_dir = str(job)
        by_custom_id = {requests[i].custom_id: i for i in pending}
        state_path = job / "state.json"
        state = json.loads(state_path.read_text()) if state_path.exists() else {"rounds": []}
        if dry_run:
            paths = self._write_batch_files(job, 0, [requests[i] for i in pending])
            print(f"[llm] dry run: {len(pending)} request(s) written to {len(paths)} file(s) in {job}; nothing sent")
            for i in pending:
                results[i] = ChatResult(requests[i].custom_id, None, None, f"dry run: not sent (request files in {job})", {}, False, hashes[i])
            return
        remaining = list(pending)
        max_rounds = self.settings.batch_max_resubmits + 1
        for round_no in range(max_rounds):
            if not remaining:
                break
            if round_no < len(state["rounds"]):  # resume: this round was submitted by an earlier, interrupted run
                entries = state["rounds"][round_no]
                already = {cid for e in entries for cid in e["custom_ids"]}
                remaining = [i for i in remaining if requests[i].custom_id in already]
            else:
                if round_no > 0:
                    self._check_budget(len(remaining))
                    print(f"[llm] resubmitting {len(remaining)} failed request(s) (round {round_no})")
                round_requests = [requests[i] for i in remaining]
                entries = []
                for path in self._write_batch_files(job, round_no, round_requests):
                    ids = [json.loads(line)["custom_id"] for line in path.read_text(encoding="utf-8").splitlines() if line]
                    entries.append({"input": path.name, "custom_ids": ids})
                state["rounds"].append(entries)
                write_json_atomic(state_path, state)
            for i in remaining:  # a request counts as answered only if this round answers it
                results[i] = None
            try:
                self._submit_and_collect(job, entries, state, state_path)
            except BatchTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised without the original text, which may quote credentials
                raise LLMError(f"batch job {job.name}: {self._describe_exception(exc)}; rerun to resume "
                               f"(state in {state_path})") from None
            failed: list[int] = []
            errors: dict[str, str] = {}
            for entry in entries:
                outcome = self._read_batch_results(job, entry, requests, hashes, by_custom_id, results)
                errors.update(outcome)
            for i in remaining:
                if results[i] is None or (not results[i].ok and requests[i].custom_id in errors):
                    failed.append(i)
                    results[i] = ChatResult(requests[i].custom_id, None, None,
                                            errors.get(requests[i].custom_id, "no result in the batch output"), {}, False, hashes[i])
            remaining = failed
        if remaining:
            print(f"[llm] {len(remaining)} request(s) still failed after {max_rounds} round(s); see {job}")

    def _submit_and_collect(self, job: Path, entries: list[dict], state: dict, state_path: Path) -> None:
        client = self._client()
        retrying = self._retrying()
        for entry in entries:
            if entry.get("batch_id"):
                continue
            upload = (entry["input"], (job / entry["input"]).read_bytes(), "application/jsonl")
            uploaded = retrying(lambda: client.files.create(file=upload, purpose="batch"))
            batch = retrying(lambda: client.batches.create(
                input_file_id=uploaded.id, endpoint=CHAT_ENDPOINT, completion_window=self.settings.batch_completion_window))
            entry.update(file_id=uploaded.id, batch_id=batch.id, status=batch.status)
            write_json_atomic(state_path, state)
            print(f"[llm] submitted {entry['input']} ({len(entry['custom_ids'])} requests) as batch {batch.id}")
        started = time.monotonic()
        total = sum(len(e["custom_ids"]) for e in entries)
        with tqdm(total=total, desc="llm batch") as bar:
            while True:
                done = 0
                for entry in entries:
                    if entry.get("status") in _TERMINAL_BATCH_STATES and entry.get("downloaded"):
                        done += len(entry["custom_ids"])
                        continue
                    batch = retrying(lambda: client.batches.retrieve(entry["batch_id"]))
                    entry["status"] = batch.status
                    counts = getattr(batch, "request_counts", None)
                    done += (counts.completed + counts.failed) if counts else 0
                    if batch.status in _TERMINAL_BATCH_STATES:
                        self._download(job, entry, batch, retrying)
                        write_json_atomic(state_path, state)
                bar.n = min(done, total)
                bar.refresh()
                if all(e.get("downloaded") for e in entries):
                    return
                if time.monotonic() - started > self.settings.batch_timeout_s:
                    raise BatchTimeout(f"batches {[e['batch_id'] for e in entries if not e.get('downloaded')]} not finished "
                                       f"after {self.settings.batch_timeout_s:.0f}s; rerun to resume polling (state in {state_path})")
                time.sleep(self.settings.batch_poll_interval_s)

    def _download(self, job: Path, entry: dict, batch, retrying) -> None:
        client = self._client()
        stem = entry["input"].replace("_input_", "_{}_").removesuffix(".jsonl")
        for kind, file_id in (("output", batch.output_file_id), ("errors", batch.error_file_id)):
            if file_id:
                content = retrying(lambda: client.files.content(file_id))
                write_text_atomic(job / f"{stem.format(kind)}.jsonl", content.text)
                entry[kind] = f"{stem.format(kind)}.jsonl"
        errors = getattr(batch, "errors", None)
        if batch.status != "completed" and errors is not None:
            data = getattr(errors, "data", None) or []
            entry["batch_errors"] = [self._redact(f"{getattr(e, 'code', '')}: {getattr(e, 'message', '')}") for e in data]
        entry["downloaded"] = True

    def _read_batch_results(self, job, entry, requests, hashes, by_custom_id, results) -> dict[str, str]:
        """Match output and error lines to requests by custom_id; returns custom_id -> error."""
        errors: dict[str, str] = {}
        unknown = 0
        for kind in ("output", "errors"):
            if not entry.get(kind):
                continue
            for _, line in iter_jsonl(job / entry[kind], required=("custom_id",)):
                cid = line["custom_id"]
                if cid not in by_custom_id:
                    unknown += 1
                    continue
                i = by_custom_id[cid]
                response = line.get("response") or {}
                if response.get("status_code") == 200 and not line.get("error"):
                    results[i] = self._accept_response(requests[i], hashes[i], response.get("body") or {}, f"batch {entry['batch_id']}")
                    if not results[i].ok:
                        errors[cid] = results[i].error or ""
                else:
                    err = line.get("error") or (response.get("body") or {}).get("error") or {}
                    message = err.get("message") if isinstance(err, dict) else str(err)
                    errors[cid] = self._redact(f"batch error (HTTP {response.get('status_code')}): {message}")
        if unknown:
            print(f"[llm] {unknown} line(s) in the output of batch {entry['batch_id']} name a custom_id this run did not send; ignored")
        if entry.get("status") != "completed":
            for cid in entry["custom_ids"]:
                errors.setdefault(cid, f"batch {entry['batch_id']} ended as {entry.get('status')}: {entry.get('batch_errors') or ''}")
        return errors
