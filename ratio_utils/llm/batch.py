"""The Batch API path of `LLMClient`: request lines split into files within the Batch API limits,
upload, submit, poll, download of output and error files, resubmission of failed requests, and a
resumable job folder `<llm.cache_dir>/batches/<desc>-<digest>/` (input/output/error JSONL files
and `state.json`). `LLMClient` inherits these methods; they use its settings, SDK client, retries,
budget and response store.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from collections.abc import Iterable
from pathlib import Path

# plain tqdm: tqdm.auto warns in notebooks without ipywidgets, and text bars read fine there
from tqdm import tqdm

from ..io import iter_jsonl, read_json_if_exists, write_json_atomic, write_text_atomic
from .types import BatchTimeout, ChatRequest, ChatResult, LLMError, RunReport, canonical_json

CHAT_ENDPOINT = "/v1/chat/completions"
_TERMINAL_BATCH_STATES = {"completed", "failed", "expired", "cancelled"}


class BatchMixin:
    """The batch path of `LLMClient` (see the module docstring); not used on its own."""

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
                raise LLMError(f"one batch request line is {n} bytes, "
                               f"over llm.batch_max_bytes={self.settings.batch_max_bytes}")
            if current and (len(current) >= self.settings.batch_max_requests
                            or size + n > self.settings.batch_max_bytes):
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
        state = read_json_if_exists(state_path) or {"rounds": []}
        if dry_run:
            paths = self._write_batch_files(job, 0, [requests[i] for i in pending])
            print(f"[llm] dry run: {len(pending)} request(s) written to {len(paths)} file(s) in {job}; nothing sent")
            for i in pending:
                results[i] = ChatResult(requests[i].custom_id, None, None,
                                        f"dry run: not sent (request files in {job})", {}, False, hashes[i])
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
                    ids = [json.loads(line)["custom_id"]
                           for line in path.read_text(encoding="utf-8").splitlines() if line]
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
                                            errors.get(requests[i].custom_id, "no result in the batch output"), {},
                                            False, hashes[i])
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
                input_file_id=uploaded.id, endpoint=CHAT_ENDPOINT,
                completion_window=self.settings.batch_completion_window))
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
                    raise BatchTimeout(f"batches {[e['batch_id'] for e in entries if not e.get('downloaded')]} "
                                       f"not finished after {self.settings.batch_timeout_s:.0f}s; "
                                       f"rerun to resume polling (state in {state_path})")
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
            entry["batch_errors"] = [self._redact(f"{getattr(e, 'code', '')}: {getattr(e, 'message', '')}")
                                     for e in data]
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
                    results[i] = self._accept_response(requests[i], hashes[i], response.get("body") or {},
                                                       f"batch {entry['batch_id']}")
                    if not results[i].ok:
                        errors[cid] = results[i].error or ""
                else:
                    err = line.get("error") or (response.get("body") or {}).get("error") or {}
                    message = err.get("message") if isinstance(err, dict) else str(err)
                    errors[cid] = self._redact(f"batch error (HTTP {response.get('status_code')}): {message}")
        if unknown:
            print(f"[llm] {unknown} line(s) in the output of batch {entry['batch_id']} name a custom_id this run "
                  "did not send; ignored")
        if entry.get("status") != "completed":
            for cid in entry["custom_ids"]:
                errors.setdefault(cid, f"batch {entry['batch_id']} ended as {entry.get('status')}: "
                                       f"{entry.get('batch_errors') or ''}")
        return errors
