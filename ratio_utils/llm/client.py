"""The client: `LLMClient` answers a list of `ChatRequest`s in order, cached answers first, the rest
synchronously (threads, retries), through the Batch API (`batch.BatchMixin`), from recorded
responses (replay) or not at all (dry run); it estimates and accounts tokens and cost, enforces the
request budget, and keeps the API key out of every message it writes or raises.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# plain tqdm: tqdm.auto warns in notebooks without ipywidgets, and text bars read fine there
from tqdm import tqdm

from ..param_sections import LLM_MODES, LLMSettings
from ..publish.run_records import first_time_this_run
from .batch import BatchMixin
from .store import ResponseStore, result_from_response
from .types import (
    REPLAY_MISS_ERROR,
    BudgetExceeded,
    ChatRequest,
    ChatResult,
    LLMUnavailable,
    ReplayMiss,
    RunReport,
)

# Without a tokenizer for every model behind an OpenAI-compatible endpoint, estimates use the
# common rule of thumb of about four characters per token; only the pre-run estimate uses it.
_CHARS_PER_TOKEN = 4.0
_TOKENS_PER_MESSAGE = 4


# --------------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------------


class LLMClient(BatchMixin):
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
        resolve = cfg.paths.from_params
        replay_dirs = [resolve(p) for p in settings.replay_dirs]
        shared_cache = cfg.paths.llm_cache
        if shared_cache.is_dir():
            replay_dirs.append(shared_cache)
        return cls(settings, resolve(settings.cache_dir), replay_dirs=replay_dirs,
                   replay_files=[resolve(p) for p in settings.replay_batch_files])

    def __repr__(self) -> str:
        return (f"LLMClient(model={self.settings.model!r}, endpoint={self.base_url_display!r}, "
                f"key={'set' if self.__key else 'not set'})")

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
            # replayed answers may come from another model than the configured one: say which, before they are used
            "recorded answers by": ", ".join(self.store.recorded_models()) or "-",
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
        if mode not in LLM_MODES:
            raise ValueError(f"mode must be one of {LLM_MODES}, got {mode!r}")
        repeated = sorted(cid for cid, n in collections.Counter(r.custom_id for r in requests).items() if n > 1)
        if repeated:
            raise ValueError(f"custom_id must be unique within a run; duplicated: {repeated[:5]}")
        if mode in ("sync", "batch") and not self.__key:
            if self.store.has_replay_source():
                print(f"[llm] no API key in ${self.settings.api_key_env}: answering {desc or 'requests'} from "
                      "recorded responses (replay)")
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
            results[i] = result_from_response(requests[i].custom_id, h, response, requests[i].response_format_json,
                                              True)
        report.n_cached = report.n_unique - len(pending)
        report.n_to_send = len(pending)
        self._estimate(report, [requests[i] for i in pending], mode)
        self._notice_unpriced([requests[i] for i in pending])
        self._print_estimate(report)

        if pending and mode == "replay":
            if not allow_replay_misses:
                raise ReplayMiss([(requests[i].custom_id, hashes[i]) for i in pending], self.store.describe_sources())
            print(f"[llm] replay: {len(pending)} of {report.n_unique} unique request(s) have no recorded response; "
                  "they are answered as misses")
            report.n_replay_misses = len(pending)
            for i in pending:
                results[i] = ChatResult(requests[i].custom_id, None, None,
                                        f"{REPLAY_MISS_ERROR} (request_hash {hashes[i]})",
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
                results[i] = ChatResult(requests[i].custom_id, src.content, src.parsed, src.error, src.usage,
                                        src.cached, h, src.model)
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
        # An unknown cost prints nothing here: `_notice_unpriced` says once per run how to get one.
        return "" if cost is None else f", cost ${cost:,.2f}"

    def _notice_unpriced(self, requests: Sequence[ChatRequest]) -> None:
        """Once per pipeline run and model: costs cannot be shown without a price, and how to give one."""
        unpriced = sorted({r.model for r in requests} - set(self.settings.prices))
        new = [model for model in unpriced if first_time_this_run(f"llm.prices has no price for {model}")]
        if new:
            example = ", ".join(f"{model}: {{input: <USD per 1M tokens>, output: <USD per 1M tokens>}}"
                                for model in new)
            print(f"[llm] costs are not shown for {', '.join(new)}: llm.prices has no price for them; to see them, "
                  f"set llm.prices in the params file, e.g. llm: {{prices: {{{example}}}}}")

    def _print_estimate(self, r: RunReport) -> None:
        print(f"[llm] {r.desc or 'run'}: {r.n_requests} request(s), {r.n_unique} unique, {r.n_cached} cached, "
              f"{r.n_to_send} to send ({r.mode}, {r.model}); estimate {r.est_input_tokens:,} input + "
              f"{r.est_output_tokens:,} output tokens{self._fmt_cost(r.est_cost_usd)}")

    def _print_report(self, r: RunReport) -> None:
        if r.answered_by:
            print(f"[llm] {r.desc or 'run'}: answered by {', '.join(r.answered_by)} (configured: {r.model})")
        print(f"[llm] {r.desc or 'run'}: {r.n_ok} ok, {r.n_failed} failed; used {r.input_tokens:,} input + "
              f"{r.output_tokens:,} output tokens ({r.reasoning_tokens:,} reasoning){self._fmt_cost(r.cost_usd)}")

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
            lambda: self._client().chat.completions.with_raw_response.create(model=model, messages=messages,
                                                                             extra_body=body)
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
