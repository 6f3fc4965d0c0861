"""A stand-in for the Semantic Scholar Datasets API and the S3 bucket behind its pre-signed URLs, on 127.0.0.1.

Used by tests/test_s2orc.py (the client and the downloader) and benchmarks/rehearsal.py (the download of
notebook 00's synthetic release). `files` maps a bucket path (`/bucket/<dataset>/<shard>`) to its bytes;
`GET {base}/datasets/v1/release/<release>/dataset/<dataset>` lists that dataset's files as signed URLs
and needs the `x-api-key` header `API_KEY`.
"""

from __future__ import annotations

import hashlib
import http.server
import json

from loopback import serving

API_KEY = "test-key-0123456789"
SIGNATURE = "X-Amz-Signature=deadbeefsecret"


class FakeS3AndApi:
    """Serves `files` (path -> bytes) with Range support and MD5 ETags, and the Datasets API.

    Like the real service it can also answer 429/503 (`fail`: path -> statuses to send first),
    expire pre-signed URLs (each listing signs URLs with a new generation; `expire()` makes every URL
    listed so far answer 403, or `expired_answer` instead: e.g. 400 with an ExpiredToken XML body), break a
    transfer off after some bytes (`break_after`: path -> bytes, once), and send multipart ETags (`etags`).
    """

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.etags: dict[str, str] = {}  # override: a wrong ETag simulates corruption in transit
        self.ignore_range = False
        self.requests: list[tuple[str, dict]] = []
        self.fail: dict[str, list[int]] = {}
        self.break_after: dict[str, int] = {}
        self.generation = 0  # signature generation of the latest listing
        self.valid_from = 0  # URLs signed before this generation have expired
        self.expired_answer: tuple[int, bytes] = (403, b"")  # S3's usual answer to an expired pre-signed URL
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                outer.requests.append((self.path, dict(self.headers)))
                if outer.fail.get(path):
                    self.send_response(outer.fail[path].pop(0))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if path.startswith("/datasets/v1/release/"):
                    return self._api(path)
                if "gen=" in self.path and int(self.path.split("gen=")[1].split("&")[0]) < outer.valid_from:
                    status, body = outer.expired_answer
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                body = outer.files.get(path)
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                etag = outer.etags.get(path, hashlib.md5(body).hexdigest())
                start = 0
                if "Range" in self.headers and not outer.ignore_range:
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.send_header("ETag", f'"{etag}"')
                self.end_headers()
                if path in outer.break_after:  # send a few bytes, then drop the connection
                    self.wfile.write(body[start:start + outer.break_after.pop(path)])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body[start:])

            def _api(self, path):
                if self.headers.get("x-api-key") != API_KEY:
                    self.send_response(403)
                    self.end_headers()
                    return
                dataset = path.rstrip("/").rsplit("/", 1)[1]
                outer.generation += 1
                urls = [f"{outer.base}{p}?gen={outer.generation}&{SIGNATURE}" for p in sorted(outer.files)
                        if p.startswith(f"/bucket/{dataset}/")]
                payload = json.dumps({"name": dataset, "description": "fixture", "README": "", "files": urls}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._handler = Handler

    def expire(self) -> None:
        self.valid_from = self.generation + 1

    def __enter__(self):
        self._serving = serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler))
        self.base = self._serving.__enter__()
        return self

    def __exit__(self, *exc):
        self._serving.__exit__(*exc)
