"""ratio_utils.llm against a real OpenAI-compatible HTTP server on 127.0.0.1 (tests/openai_stub_server.py):
sync calls, retries, batches (split files, shuffled output, error file, resubmission), the cache,
replay, the request budget, cost accounting, and that the API key is never written or raised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai_stub_server import StubOpenAI

from ratio_utils.config import load_config
from ratio_utils.llm import (
    BatchTimeout,
    BudgetExceeded,
    ChatRequest,
    LLMClient,
    LLMSettings,
    LLMUnavailable,
    ReplayMiss,
    request_hash,
)

KEY = "fake-llm-key-9f8e7d6c5b4a-DO-NOT-LEAK"


def requests_for(n: int, prefix: str = "r") -> list[ChatRequest]:
    return [
        ChatRequest(
            custom_id=f"{prefix}{i}",
            model="test-model",
            messages=[{"role": "system", "content": "Answer in JSON."},
                      {"role": "user", "content": f"item number {i}" + ("" if prefix == "r" else f" ({prefix})")}],
            extra={"reasoning_effort": "medium", "verbosity": "low"},
            meta={"prompt_sha256": "abc123"},
        )
        for i in range(n)
    ]


def settings(stub: StubOpenAI, **overrides) -> LLMSettings:
    values = dict(model="test-model", base_url=stub.base_url, mode="sync", batch_poll_interval_s=0.01,
                  retry_initial_s=0.01, retry_max_s=0.05, concurrency=2)
    values.update(overrides)
    return LLMSettings(**values)


@pytest.fixture
def stub(openai_stub):
    return openai_stub(KEY)


def echo(result) -> str:
    return result.parsed["echo"]


def test_sync_answers_in_order_and_second_run_is_served_from_cache(stub, tmp_path):
    requests = requests_for(4)
    client = LLMClient(settings(stub), tmp_path / "cache", api_key=KEY)
    results = client.run(requests, desc="first")
    assert [r.custom_id for r in results] == [r.custom_id for r in requests]
    assert [echo(r) for r in results] == [f"item number {i}" for i in range(4)]
    assert not any(r.cached for r in results)
    sent = stub.total_requests
    assert stub.counts["POST /v1/chat/completions"] == 4
    # the reasoning settings travel in the body of every request
    entries = sorted((tmp_path / "cache" / "responses").rglob("*.json"))
    assert len(entries) == 4
    entry = json.loads(entries[0].read_text())
    assert (entry["request"]["reasoning_effort"] == "medium"
            and entry["request"]["response_format"] == {"type": "json_object"})
    assert entry["meta"] == {"prompt_sha256": "abc123"}
    assert entry["request_hash"] == request_hash(entry["request"]) == entries[0].stem

    again = LLMClient(settings(stub), tmp_path / "cache", api_key=KEY).run(requests, desc="second")
    assert stub.total_requests == sent  # zero HTTP requests
    assert all(r.cached for r in again)
    assert [echo(r) for r in again] == [echo(r) for r in results]


def test_identical_bodies_are_sent_once(stub, tmp_path):
    base = requests_for(1)[0]
    twin = ChatRequest("twin", base.model, base.messages, extra=base.extra)
    results = LLMClient(settings(stub), tmp_path, api_key=KEY).run([base, twin])
    assert stub.counts["POST /v1/chat/completions"] == 1
    assert [r.custom_id for r in results] == ["r0", "twin"] and echo(results[0]) == echo(results[1])


def test_retries_after_injected_429_and_500(stub, tmp_path):
    stub.fail_statuses.extend([429, 500])
    results = LLMClient(settings(stub, max_retries=3), tmp_path, api_key=KEY).run(requests_for(1))
    assert results[0].ok and echo(results[0]) == "item number 0"
    assert stub.counts["POST /v1/chat/completions"] == 3


def test_exhausted_retries_give_an_error_result_that_is_not_cached(stub, tmp_path):
    stub.fail_statuses.extend([500, 500, 500])
    results = LLMClient(settings(stub, max_retries=1), tmp_path, api_key=KEY).run(requests_for(1))
    assert not results[0].ok and "500" in results[0].error
    assert stub.counts["POST /v1/chat/completions"] == 2
    assert not (tmp_path / "responses").exists()


def test_invalid_json_is_reported_and_kept_apart_from_the_cache(tmp_path, openai_stub):
    stub = openai_stub(KEY, responder=lambda body: "this is not json")
    results = LLMClient(settings(stub), tmp_path, api_key=KEY).run(requests_for(2))
    assert all(not r.ok and "not valid JSON" in r.error for r in results)
    assert not (tmp_path / "responses").exists()
    assert len(list((tmp_path / "invalid").glob("*.json"))) == 2


def test_batch_splits_files_matches_shuffled_output_by_custom_id_and_resubmits_failures(tmp_path, openai_stub):
    stub = openai_stub(KEY, batch_fail_once={"r4"}, batch_polls_before_done=2)
    client = LLMClient(settings(stub, mode="batch", batch_max_requests=3), tmp_path, api_key=KEY)
    requests = requests_for(7)
    results = client.run(requests, desc="judge test")
    # three input files in round 0 (3 + 3 + 1), then only the failed request again
    assert stub.batch_inputs == [["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"], ["r4"]]
    assert stub.counts["POST /v1/chat/completions"] == 0
    assert [r.custom_id for r in results] == [f"r{i}" for i in range(7)]
    assert all(r.ok for r in results)
    assert [echo(r) for r in results] == [f"item number {i}" for i in range(7)]  # matched by custom_id, not order
    job = Path(client.last_report.batch_dir)
    names = sorted(p.name for p in job.iterdir())
    assert {"r0_input_000.jsonl", "r0_input_001.jsonl", "r0_input_002.jsonl", "r0_errors_001.jsonl",
            "r0_output_000.jsonl", "r1_input_000.jsonl", "r1_output_000.jsonl", "state.json"} <= set(names)
    error_line = json.loads((job / "r0_errors_001.jsonl").read_text().splitlines()[0])
    assert error_line["custom_id"] == "r4"
    output_ids = [json.loads(line)["custom_id"] for line in (job / "r0_output_000.jsonl").read_text().splitlines()]
    assert sorted(output_ids) == ["r0", "r1", "r2"]
    assert len(list((tmp_path / "responses").rglob("*.json"))) == 7


def test_dry_run_writes_batch_files_within_the_limits_and_sends_nothing(stub, tmp_path):
    requests = requests_for(9)
    one_line = len(json.dumps({"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions",
                               "body": requests[0].body()}))
    limit = 2 * one_line + 40  # room for two lines per file, not three
    client = LLMClient(settings(stub, mode="dry_run", batch_max_bytes=limit), tmp_path, api_key=KEY)
    results = client.run(requests, desc="dry")
    assert stub.total_requests == 0
    assert all(r.error.startswith("dry run") for r in results)
    files = sorted(Path(client.last_report.batch_dir).glob("r0_input_*.jsonl"))
    assert len(files) == 5
    seen = []
    for path in files:
        assert path.stat().st_size <= limit
        for line in path.read_text().splitlines():
            row = json.loads(line)
            assert row["method"] == "POST" and row["url"] == "/v1/chat/completions"
            seen.append(row["custom_id"])
    assert sorted(seen) == sorted(r.custom_id for r in requests)


def test_replay_miss_names_the_custom_id_and_hash(tmp_path):
    client = LLMClient(LLMSettings(model="test-model", mode="replay"), tmp_path, api_key=None)
    request = requests_for(1)[0]
    with pytest.raises(ReplayMiss, match=f"custom_id=r0 request_hash={request.request_hash}"):
        client.run([request])


def test_partial_replay_answers_misses_as_flagged_errors_and_counts_them(stub, tmp_path):
    requests = requests_for(3)
    LLMClient(settings(stub), tmp_path / "online", api_key=KEY).run(requests[:2], desc="record two")
    replayer = LLMClient(LLMSettings(model="test-model", mode="replay"), tmp_path / "replayer", api_key=None,
                         replay_dirs=[tmp_path / "online"])
    extra = requests[2:] + [ChatRequest("dup", "test-model", requests[2].messages, extra=requests[2].extra)]
    results = replayer.run(requests + extra[1:], allow_replay_misses=True)
    assert [r.replay_miss for r in results] == [False, False, True, True]  # the duplicate body misses too
    assert [echo(r) for r in results[:2]] == ["item number 0", "item number 1"]
    assert results[2].parsed is None and results[2].request_hash in results[2].error
    assert replayer.last_report.n_replay_misses == 1  # one unique body
    assert replayer.last_report.answered_by == ["test-model"] and results[0].model == "test-model"


def test_replay_from_batch_files_and_shared_llm_cache(stub, tmp_path, monkeypatch):
    requests = requests_for(3)
    online = LLMClient(settings(stub, mode="batch"), tmp_path / "online", api_key=KEY)
    online.run(requests, desc="record")
    job = Path(online.last_report.batch_dir)
    sent = stub.total_requests

    # (a) from the downloaded batch files alone, without a key
    replayer = LLMClient(LLMSettings(model="test-model", mode="replay"), tmp_path / "replayer", api_key=None,
                         replay_files=sorted(job.glob("r0_*.jsonl")))
    assert replayer.available()[0]
    replayed = replayer.run(requests)
    assert [echo(r) for r in replayed] == [f"item number {i}" for i in range(3)] and all(r.cached for r in replayed)
    # a changed request body does not match the recorded input line, even with the same custom_id
    changed = ChatRequest("r0", "test-model", [{"role": "user", "content": "something else"}])
    with pytest.raises(ReplayMiss, match="custom_id=r0"):
        replayer.run([changed])

    # (b) from <shared>/llm_cache/ picked up by from_config; batch mode without a key falls back to replay
    shared = tmp_path / "shared"
    (shared / "llm_cache").mkdir(parents=True)
    for entry in (tmp_path / "online" / "responses").rglob("*.json"):
        (shared / "llm_cache" / entry.name).write_text(entry.read_text())
    monkeypatch.setenv("RATIO_OUTPUT_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("RATIO_SHARED", str(shared))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = LLMClient.from_config(load_config(overrides={"llm": {"model": "test-model"}}))
    ok, why = client.available()
    assert ok and "llm_cache" in why
    assert [echo(r) for r in client.run(requests)] == [f"item number {i}" for i in range(3)]
    assert stub.total_requests == sent


def test_offline_without_key_or_recordings_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = LLMClient(LLMSettings(model="m"), tmp_path)
    ok, why = client.available()
    assert not ok and "OPENAI_API_KEY" in why
    with pytest.raises(LLMUnavailable):
        client.run(requests_for(1))


def test_budget_is_checked_before_anything_is_sent(stub, tmp_path):
    client = LLMClient(settings(stub, max_requests=2), tmp_path, api_key=KEY)
    with pytest.raises(BudgetExceeded, match="max_requests=2"):
        client.run(requests_for(3))
    assert stub.total_requests == 0


def test_cost_accounting_uses_usage_and_the_batch_discount(stub, tmp_path, capsys):
    prices = {"test-model": {"input": 2.0, "output": 8.0}}
    client = LLMClient(settings(stub, mode="batch", prices=prices), tmp_path, api_key=KEY)
    results = client.run(requests_for(3), desc="priced")
    report = client.last_report
    used_in = sum(r.usage["prompt_tokens"] for r in results)
    used_out = sum(r.usage["completion_tokens"] for r in results)
    assert (report.input_tokens, report.output_tokens, report.reasoning_tokens) == (used_in, used_out, 18)
    assert report.cost_usd == pytest.approx((used_in * 2.0 + used_out * 8.0) / 1e6 * 0.5)
    assert report.est_cost_usd == pytest.approx((report.est_input_tokens * 2.0 + report.est_output_tokens * 8.0)
                                                / 1e6 * 0.5)
    printed = capsys.readouterr().out
    assert "priced: 3 request(s)" in printed and "estimate" in printed and "used" in printed


def test_a_missing_price_is_said_once_per_run_with_the_setting_that_fixes_it(stub, tmp_path, monkeypatch, capsys):
    from ratio_utils.pipeline import RUN_DIR_ENV

    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    first = LLMClient(settings(stub, mode="dry_run"), tmp_path / "a", api_key=KEY)
    first.run(requests_for(2), desc="first")
    first.run(requests_for(2, "again"), desc="second")
    # Another notebook of the same run (another client, another process in the pipeline) stays quiet too.
    LLMClient(settings(stub, mode="dry_run"), tmp_path / "b", api_key=KEY).run(requests_for(2, "b"), desc="third")
    printed = capsys.readouterr().out
    assert printed.count("llm.prices has no price") == 1 and "set llm.prices" in printed and "test-model" in printed
    assert "unknown" not in printed and all(f"{d}: 2 request(s)" in printed for d in ("first", "second", "third"))
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "next run"))
    first.run(requests_for(1, "next"), desc="next")
    assert capsys.readouterr().out.count("llm.prices has no price") == 1


def test_api_key_never_written_printed_or_raised(tmp_path, capsys, openai_stub):
    stub = openai_stub(KEY, batch_fail_once={"b1"}, echo_auth_in_errors=True)
    client = LLMClient(settings(stub, max_retries=0), tmp_path, api_key=KEY)
    stub.fail_statuses.append(500)  # its message quotes the Authorization header
    failed = client.run(requests_for(1, "e"))
    client.run(requests_for(3), mode="sync")
    client.run(requests_for(3, "b"), mode="batch")
    client.run(requests_for(2, "d"), mode="dry_run")
    assert any({k.lower(): v for k, v in h.items()}.get("authorization") == f"Bearer {KEY}"
               for h in stub.headers_seen)  # it was sent...
    assert "***" in failed[0].error and KEY not in failed[0].error  # ...and scrubbed from the error
    texts = [repr(client), json.dumps(client.describe()), capsys.readouterr().out]
    with pytest.raises(ReplayMiss) as miss:
        LLMClient(LLMSettings(model="x", mode="replay"), tmp_path / "empty", api_key=KEY).run(requests_for(1, "z"))
    texts.append(str(miss.value))
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name.startswith("r0_errors") for p in written) and len(written) >= 12
    for path in written:
        assert KEY.encode() not in path.read_bytes(), path
    for text in texts:
        assert KEY not in text


def test_interrupted_batch_is_resumed_not_resubmitted(tmp_path, openai_stub):
    stub = openai_stub(KEY, batch_polls_before_done=3)
    requests = requests_for(2)
    impatient = LLMClient(settings(stub, mode="batch", batch_timeout_s=0.0), tmp_path, api_key=KEY)
    with pytest.raises(BatchTimeout, match="rerun to resume"):
        impatient.run(requests, desc="resume")
    assert stub.counts["POST /v1/batches"] == 1
    results = LLMClient(settings(stub, mode="batch"), tmp_path, api_key=KEY).run(requests, desc="resume")
    assert stub.counts["POST /v1/batches"] == 1 and stub.counts["POST /v1/files"] == 1  # polled, not resubmitted
    assert [echo(r) for r in results] == ["item number 0", "item number 1"]


def test_dry_run_does_not_use_the_request_budget(stub, tmp_path):
    client = LLMClient(settings(stub, mode="dry_run", max_requests=3), tmp_path, api_key=KEY)
    client.run(requests_for(3))
    assert client.requests_sent == 0
    with pytest.raises(BudgetExceeded):
        client.run(requests_for(4, "x"))


def test_requests_that_failed_in_every_round_are_retried_by_a_rerun(tmp_path, openai_stub):
    answers = iter(["not json", "not json", json.dumps({"accept": True})])
    stub = openai_stub(KEY, responder=lambda body: next(answers))
    client = LLMClient(settings(stub, mode="batch", batch_max_resubmits=1), tmp_path, api_key=KEY)
    first = client.run(requests_for(1), desc="flaky")
    assert not first[0].ok and stub.counts["POST /v1/batches"] == 2  # sent, then resubmitted once
    second = client.run(requests_for(1), desc="flaky")
    assert second[0].ok and stub.counts["POST /v1/batches"] == 3
    assert Path(client.last_report.batch_dir).name.endswith("-2")
