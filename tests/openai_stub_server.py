"""A small OpenAI-compatible HTTP server on 127.0.0.1 for the LLM tests (real HTTP, random port).

Serves the endpoints `ratio_utils.llm` uses:
    POST /v1/chat/completions        a JSON answer from `responder(body)`; injected error statuses first
    POST /v1/files                   multipart upload (purpose=batch)
    GET  /v1/files/{id}, /v1/files/{id}/content
    POST /v1/batches, GET /v1/batches/{id}
A batch is answered when it is created but reported `in_progress` for `batch_polls_before_done`
retrieve calls. Its output lines come back shuffled (order must never matter), and the custom_ids
in `batch_fail_once` land in the error file the first time they are seen. With
`echo_auth_in_errors`, injected errors quote the Authorization header (to test key scrubbing). Every request is counted
per route, and every request's headers are kept so tests can check what the client sent.
"""

from __future__ import annotations

import collections
import email.parser
import email.policy
import itertools
import json
import random
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loopback import serving


def default_responder(body: dict) -> str:
    """Echo the last user message back as a JSON object."""
    user = [m["content"] for m in body["messages"] if m["role"] == "user"]
    return json.dumps({"accept": True, "echo": user[-1] if user else ""})


class StubOpenAI:
    def __init__(
        self,
        api_key: str,
        responder: Callable[[dict], str] = default_responder,
        *,
        batch_polls_before_done: int = 1,
        batch_fail_once: set[str] | frozenset[str] = frozenset(),
        shuffle_seed: int = 7,
        echo_auth_in_errors: bool = False,
    ):
        self.api_key = api_key
        self.responder = responder
        self.batch_polls_before_done = batch_polls_before_done
        self.batch_fail_once = set(batch_fail_once)
        # A careless server may echo the credentials in an error; the client must scrub them.
        self.echo_auth_in_errors = echo_auth_in_errors
        self.fail_statuses: collections.deque[int] = collections.deque()  # statuses to answer chat calls with first
        self.counts: collections.Counter[str] = collections.Counter()
        self.headers_seen: list[dict[str, str]] = []
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.batch_inputs: list[list[str]] = []  # custom_ids of each submitted batch, in order
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._rng = random.Random(shuffle_seed)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._serving = serving(self._server)

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> "StubOpenAI":
        self._serving.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._serving.__exit__(*exc)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def total_requests(self) -> int:
        return sum(self.counts.values())

    # -- behaviour -------------------------------------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}-{next(self._ids)}"

    def completion(self, body: dict) -> dict:
        content = self.responder(body)
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body["messages"])
        return {
            "id": self._new_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": 10,
                "total_tokens": prompt_chars // 4 + 10,
                "completion_tokens_details": {"reasoning_tokens": 6},
            },
        }

    def _store_file(self, name: str, data: bytes, purpose: str) -> dict:
        meta = {"id": self._new_id("file"), "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": name, "purpose": purpose, "status": "processed"}
        self.files[meta["id"]] = {"meta": meta, "data": data}
        return meta

    def create_batch(self, request: dict) -> dict:
        lines = self.files[request["input_file_id"]]["data"].decode("utf-8").splitlines()
        outputs, errors, ids = [], [], []
        for raw in lines:
            if not raw.strip():
                continue
            line = json.loads(raw)
            cid = line["custom_id"]
            ids.append(cid)
            if cid in self.batch_fail_once:
                self.batch_fail_once.discard(cid)
                errors.append({"id": self._new_id("batch_req"), "custom_id": cid,
                               "response": {"status_code": 500, "body": {"error": {"message": "injected failure",
                                                                                   "type": "server_error"}}},
                               "error": None})
                continue
            outputs.append({"id": self._new_id("batch_req"), "custom_id": cid,
                            "response": {"status_code": 200, "request_id": self._new_id("req"),
                                         "body": self.completion(line["body"])},
                            "error": None})
        self.batch_inputs.append(ids)
        self._rng.shuffle(outputs)  # the real service gives no order guarantee either
        batch = {"id": self._new_id("batch"), "object": "batch", "endpoint": request["endpoint"], "errors": None,
                 "input_file_id": request["input_file_id"], "completion_window": request["completion_window"],
                 "status": "in_progress", "created_at": int(time.time()), "output_file_id": None,
                 "error_file_id": None,
                 "request_counts": {"total": len(ids), "completed": 0, "failed": 0}, "_polls": 0}
        payload = lambda rows: ("\n".join(json.dumps(r) for r in rows) + "\n").encode() if rows else None  # noqa: E731
        batch["_files"] = (payload(outputs), payload(errors))
        batch["_counts"] = {"total": len(ids), "completed": len(outputs), "failed": len(errors)}
        self.batches[batch["id"]] = batch
        return self._public(batch)

    def retrieve_batch(self, batch_id: str) -> dict:
        batch = self.batches[batch_id]
        batch["_polls"] += 1
        if batch["status"] != "completed" and batch["_polls"] > self.batch_polls_before_done:
            out, err = batch["_files"]
            batch["output_file_id"] = self._store_file("output.jsonl", out, "batch_output")["id"] if out else None
            batch["error_file_id"] = self._store_file("errors.jsonl", err, "batch_output")["id"] if err else None
            batch["status"] = "completed"
            batch["request_counts"] = batch["_counts"]
        return self._public(batch)

    @staticmethod
    def _public(batch: dict) -> dict:
        return {k: v for k, v in batch.items() if not k.startswith("_")}

    # -- HTTP ------------------------------------------------------------------------------------
    def _handler_class(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict | bytes, content_type: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorised(self) -> bool:
                stub.headers_seen.append(dict(self.headers))
                if self.headers.get("Authorization") != f"Bearer {stub.api_key}":
                    self._send(401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
                    return False
                return True

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                body = self._body()
                with stub._lock:
                    stub.counts[f"POST {self.path}"] += 1
                if not self._authorised():
                    return
                if self.path == "/v1/chat/completions":
                    with stub._lock:
                        status = stub.fail_statuses.popleft() if stub.fail_statuses else None
                    if status:
                        echo = f" (sent {self.headers.get('Authorization')})" if stub.echo_auth_in_errors else ""
                        self._send(status, {"error": {"message": f"injected {status}{echo}", "type": "server_error"}})
                        return
                    self._send(200, stub.completion(json.loads(body)))
                elif self.path == "/v1/files":
                    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                        f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
                    fields, upload = {}, None
                    for part in message.iter_parts():
                        if part.get_filename():
                            upload = (part.get_filename(), part.get_payload(decode=True))
                        else:
                            fields[part.get_param("name", header="content-disposition")] = part.get_content().strip()
                    if upload is None:
                        self._send(400, {"error": {"message": "no file part"}})
                        return
                    self._send(200, stub._store_file(upload[0], upload[1], fields.get("purpose", "")))
                elif self.path == "/v1/batches":
                    self._send(200, stub.create_batch(json.loads(body)))
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_GET(self) -> None:  # noqa: N802
                parts = self.path.strip("/").split("/")
                with stub._lock:
                    stub.counts[f"GET /{'/'.join(parts[:2])}"] += 1
                if not self._authorised():
                    return
                if parts[:2] == ["v1", "batches"] and len(parts) == 3 and parts[2] in stub.batches:
                    self._send(200, stub.retrieve_batch(parts[2]))
                elif parts[:2] == ["v1", "files"] and len(parts) >= 3 and parts[2] in stub.files:
                    entry = stub.files[parts[2]]
                    if len(parts) == 4 and parts[3] == "content":
                        self._send(200, entry["data"], "application/octet-stream")
                    else:
                        self._send(200, entry["meta"])
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

        return Handler
