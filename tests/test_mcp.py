"""`ratio-mcp` (ratio_utils.apps.mcp) started as a subprocess and driven through the official SDK's client: over stdio
the four tools are listed with input and output schemas, each is called on a tiny fixture index (all-MiniLM-L6-v2 over
two invented papers) and its structured answer checked, bad input comes back as a one-sentence tool error, and
rerank=True goes through the local OpenAI-compatible stub; over HTTP a request without the bearer token (or with
another one, or for another Host) is refused, and without an LLM key reranking says it is unavailable."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install '.[mcp]')")
pytestmark = pytest.mark.models

from mcp import Client, StdioServerParameters  # noqa: E402

from ratio_utils.apps import search  # noqa: E402

MODEL = "all-MiniLM-L6-v2"
STUB_KEY = "sk-mcp-test"
TOOLS = {"find_inspirations", "describe_moves", "get_paper", "list_indexes"}
# (paper, para, sent, text) — invented for the test.
_SENTENCES = [
    ("P1", 0, 0, "Neural parsers need large treebanks."),
    ("P1", 0, 1, "Dropout between recurrent layers reduces overfitting in parsers."),
    ("P1", 0, 2, "We evaluate on the Penn Treebank."),
    ("P2", 0, 0, "Gazetteers bootstrap named entity labels cheaply."),
    ("P2", 0, 1, "Seed rules bootstrap named entity labels from gazetteers."),
    ("P2", 0, 2, "Distant supervision labels entities from a knowledge base."),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(output root, index folder): the fixture corpus indexed with MiniLM by `ratio-search index`."""
    root = tmp_path_factory.mktemp("mcp_root")
    corpus = root / "corpus"
    corpus.mkdir()
    pd.DataFrame(_SENTENCES, columns=["paper_id", "para", "sent", "text"]).to_parquet(corpus / "sentences.parquet")
    pd.DataFrame({"paper_id": ["P1", "P2"], "title": ["Regularising parsers", "Cheap NER labels"],
                  "year": [2011, 2019], "venue": ["ACL", "EMNLP"],
                  "source": ["invented", "invented"]}).to_parquet(corpus / "papers.parquet")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RATIO_OUTPUT_ROOT", str(root))
        assert search.main(["index", "--model", MODEL, "--corpus", str(corpus), "--out",
                            str(root / "indexes" / MODEL)]) == 0
    return root, root / "indexes"


def _env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    return env | {"RATIO_OUTPUT_ROOT": str(root), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                  "TOKENIZERS_PARALLELISM": "false", "RATIO_EMBEDDING_CACHE": "off"} | extra


def _server_args(indexes: Path) -> list[str]:
    return ["-m", "ratio_utils.apps.mcp", "--model", MODEL, "--indexes", str(indexes)]


def _error(result) -> str:
    assert result.is_error, result
    return result.content[0].text


async def _stdio_session(root: Path, indexes: Path, stub_url: str) -> dict:
    params = StdioServerParameters(command=sys.executable, args=_server_args(indexes), cwd=str(root),
                                   env=_env(root, OPENAI_API_KEY=STUB_KEY, OPENAI_BASE_URL=stub_url))
    seen: dict = {}
    async with Client(params, read_timeout_seconds=120) as client:
        seen["tools"] = (await client.list_tools()).tools
        call = client.call_tool
        seen["find"] = await call("find_inspirations", {"statement": "Annotating entities by hand is expensive.",
                                                        "k": 2})
        seen["year"] = await call("find_inspirations", {"statement": "Parsers overfit small treebanks.",
                                                        "moves": ["specify"], "k": 3, "from_year": 2015})
        seen["rerank"] = await call("find_inspirations", {"statement": "Parsers overfit small treebanks.",
                                                          "moves": ["address"], "k": 3, "rerank": True})
        seen["moves"] = await call("describe_moves", {})
        seen["indexes"] = await call("list_indexes", {})
        hit = seen["find"].structured_content["moves"][0]["inspirations"][0]
        seen["hit"] = hit
        seen["paper"] = await call("get_paper", {"paper_id": hit["paper_id"], "docid": hit["docid"], "window": 1})
        seen["errors"] = [await call("find_inspirations", args) for args in (
            {"statement": "   "}, {"statement": "x" * 1001}, {"statement": "ok", "moves": ["analogy"]},
            {"statement": "ok", "k": 0}, {"statement": "ok", "k": "ten"}, {"statement": "ok", "model": "unified"},
            {"statement": "ok", "model": "no-such-index"})]
        seen["paper_errors"] = [await call("get_paper", args) for args in (
            {"paper_id": "P9"}, {"paper_id": "P1", "docid": "nope"}, {"paper_id": "P1", "window": 99})]
        seen["still_answers"] = await call("find_inspirations", {"statement": "Entities are costly to label.", "k": 1})
    return seen


def test_stdio_lists_four_tools_and_answers_each_with_structured_content(built, openai_stub):
    root, indexes = built
    asked = []

    def answer(body):
        asked.append(body)
        return json.dumps({"ranking": [3, 2, 1]})

    stub = openai_stub(STUB_KEY, responder=answer)
    seen = asyncio.run(asyncio.wait_for(_stdio_session(root, indexes, stub.base_url), 240))

    tools = {tool.name: tool for tool in seen["tools"]}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.output_schema and tool.output_schema["type"] == "object" and len(tool.description) > 200
        assert tool.input_schema["type"] == "object"
    find_schema = tools["find_inspirations"].input_schema["properties"]
    assert find_schema["k"]["maximum"] == 50 and find_schema["moves"]["anyOf"][0]["items"]["enum"] == [
        "address", "broaden", "specify"]

    answer = seen["find"].structured_content
    assert not seen["find"].is_error and [m["move"] for m in answer["moves"]] == ["address", "broaden", "specify"]
    for move in answer["moves"]:
        assert move["retriever"] == MODEL and move["index_sentences"] == 6 and move["rerank"] is None
        assert [h["rank"] for h in move["inspirations"]] == [1, 2]
    top = answer["moves"][0]["inspirations"][0]
    assert top["paper_id"] == "P2" and (top["title"], top["year"], top["venue"]) == ("Cheap NER labels", 2019, "EMNLP")
    assert top["sentence"] in {t for p, _, _, t in _SENTENCES if p == "P2"} and top["reranker"] is None
    # the answer agrees with ratio-search over the same index (same model, same generic prefix)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RATIO_OUTPUT_ROOT", str(root))
        direct = search.inspire("Annotating entities by hand is expensive.", "address", model=MODEL,
                                index_dir=indexes / MODEL, top=2)
    assert [h["docid"] for h in answer["moves"][0]["inspirations"]] == list(direct["docid"])
    assert [round(h["score"], 5) for h in answer["moves"][0]["inspirations"]] == [round(s, 5) for s in direct["score"]]

    year_hits = seen["year"].structured_content["moves"][0]["inspirations"]
    assert len(year_hits) == 3 and {h["paper_id"] for h in year_hits} == {"P2"}  # P1 is from 2011

    reranked = seen["rerank"].structured_content["moves"][0]
    assert reranked["rerank"]["status"] == "reranked" and len(asked) == 1
    assert [h["first_stage_rank"] for h in reranked["inspirations"]] == [3, 2, 1]
    assert all(h["reranker"] == "gpt-5-mini" for h in reranked["inspirations"])
    assert asked[0]["messages"][1]["content"].startswith("Query: Parsers overfit small treebanks.")

    moves = seen["moves"].structured_content["moves"]
    assert [m["move"] for m in moves] == ["address", "broaden", "specify"]
    assert moves[1]["relation"].startswith("The move is Broaden") and "Instruct" not in moves[1]["instruction"]

    listed = seen["indexes"].structured_content["indexes"]
    assert len(listed) == 1 and listed[0]["name"] == MODEL and listed[0]["usable"]
    assert (listed[0]["papers"], listed[0]["sentences"], listed[0]["years"]) == (2, 6, [2011, 2019])
    assert listed[0]["index_type"] == "flat" and len(listed[0]["model_fingerprint"]) == 64

    paper = seen["paper"].structured_content
    assert (paper["paper_id"], paper["venue"], paper["sentences_indexed"]) == ("P2", "EMNLP", 3)
    requested = [s for s in paper["sentences"] if s["is_requested"]]
    assert len(requested) == 1 and requested[0]["docid"] == seen["hit"]["docid"] and 2 <= len(paper["sentences"]) <= 3

    messages = [_error(r) for r in seen["errors"]]
    for message, expected in zip(messages, ("statement is empty", "at most 1000 characters", "unknown move 'analogy'",
                                            "k is a whole number from 1 to 50", "k is a whole number",
                                            "no unified retriever", "no index named 'no-such-index'")):
        assert expected in message and "\n" not in message and "Traceback" not in message
    for result, expected in zip(seen["paper_errors"], ("no paper 'P9'", "no sentence 'nope'", "window is a whole")):
        assert expected in _error(result)
    assert not seen["still_answers"].is_error  # the server survived every bad call


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _post(url: str, headers: dict[str, str]) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def _http_session(url: str, token: str) -> tuple:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as client:
            tools = (await client.list_tools()).tools
            found = await client.call_tool("find_inspirations", {"statement": "Parsers overfit.", "moves": ["broaden"],
                                                                 "k": 2, "rerank": True})
    return tools, found


def test_http_needs_the_bearer_token_and_says_rerank_is_unavailable_without_a_key(built, tmp_path):
    root, indexes = built
    port, token = _free_port(), "test-token-" + os.urandom(8).hex()
    url = f"http://127.0.0.1:{port}/mcp"
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([sys.executable, *_server_args(indexes), "--http", "--port", str(port)], cwd=root,
                              env=_env(root, RATIO_MCP_TOKEN=token), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status = _post(url, {})
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.3)
        assert status == 401  # no token
        assert _post(url, {"Authorization": "Bearer wrong"}) == 401
        assert _post(url, {"Authorization": token}) == 401  # not a bearer header
        assert _post(url, {"Authorization": f"Bearer {token}", "Host": "evil.example"}) in (400, 403, 421)
        tools, found = asyncio.run(asyncio.wait_for(_http_session(url, token), 180))
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    assert {tool.name for tool in tools} == TOOLS
    move = found.structured_content["moves"][0]
    assert move["rerank"]["status"] == "unavailable" and "no API key in $OPENAI_API_KEY" in move["rerank"]["message"]
    assert ([h["rank"] for h in move["inspirations"]] == [1, 2]
            and all(h["reranker"] is None for h in move["inspirations"]))
