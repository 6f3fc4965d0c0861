"""A small JSON-over-HTTP server for one person's browser on this machine: the base of the annotation app
(`human_eval/app`, notebook 12) and the inspiration explorer (`retrieval/explorer`).

Standard library http.server: each app has one page and a few JSON endpoints, so a web framework would add a
dependency and nothing else. What both apps need from it is safety (docs/human_eval.md, "Security"):
- it listens on 127.0.0.1 unless asked otherwise, and answers only requests whose Host names the address it
  listens on (or localhost on its port), so a page of another site cannot reach it by DNS rebinding;
- it takes writes only as application/json from its own Origin, with a random token that the page gets with
  its HTML and other origins cannot read (a blind cross-origin form post is refused before it is read);
- a request body has a Content-Length and a size limit; every failure is answered in JSON, never with a
  dropped connection, and a defect prints its traceback in the terminal.

Reads the app's static folder (index.html with a `{{token}}` slot, its .js and .css); writes nothing.
"""

from __future__ import annotations

import hmac
import json
import secrets
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN_SLOT = "{{token}}"  # in index.html, replaced by the server's token
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # no other page may frame this one (keystrokes could be steered into it) or run scripts in it
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}


class RequestError(Exception):
    """A request or start-up problem with a message for the person at the screen."""

    status = HTTPStatus.BAD_REQUEST


class Conflict(RequestError):
    status = HTTPStatus.CONFLICT


class Forbidden(RequestError):
    status = HTTPStatus.FORBIDDEN


class NotFound(RequestError):
    status = HTTPStatus.NOT_FOUND


class UnsupportedType(RequestError):
    status = HTTPStatus.UNSUPPORTED_MEDIA_TYPE


class TooLarge(RequestError):
    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE


class LengthRequired(RequestError):
    status = HTTPStatus.LENGTH_REQUIRED


class LocalHandler(BaseHTTPRequestHandler):
    """Serves `/` (the page), `/static/<file>` and the app's endpoints (`get`, `post` of the server's subclass)."""

    server: "LocalServer"
    timeout = 30  # seconds a connection may idle, so a body shorter than its Content-Length cannot hold a thread

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet unless asked
        if self.server.verbose:
            super().log_message(format, *args)

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, obj: dict) -> None:
        self.send_body(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

    def check_host(self) -> None:
        host = self.headers.get("Host", "")
        if host not in self.server.hosts:
            raise Forbidden(f"this server answers only requests for {self.server.url} (Host: {host!r})")

    def check_token(self) -> None:
        token = self.headers.get(self.server.token_header, "")
        if not hmac.compare_digest(token.encode("utf-8"), self.server.token.encode("utf-8")):
            raise Forbidden("this request does not carry the page's token: open the address the server printed")

    def check_write(self) -> None:
        origin = self.headers.get("Origin")
        if origin != f"http://{self.headers['Host']}":
            raise Forbidden(f"writes are taken only from this server's own page (Origin: {origin!r})")
        if self.headers.get_content_type() != "application/json":
            raise UnsupportedType(f"writes are sent as application/json, not {self.headers.get('Content-Type')!r}")
        self.check_token()

    def json_body(self) -> object:
        length = self.headers.get("Content-Length")
        if length is None:
            raise LengthRequired("a request body needs a Content-Length")
        if not (length.isascii() and length.isdigit()):
            raise RequestError(f"bad Content-Length {length!r}")
        if int(length) > self.server.max_body:
            raise TooLarge(f"a request body is at most {self.server.max_body} bytes")
        try:
            return json.loads(self.rfile.read(int(length)).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RequestError(f"the request body is not JSON ({exc})") from None

    def _respond(self, handle) -> None:
        """Run `handle` after the Host check; every failure is answered in JSON."""
        try:
            self.check_host()
            handle()
        except RequestError as exc:
            self.send_json(exc.status, {"error": str(exc)})
        except OSError as exc:
            self.send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"could not save ({exc}); nothing was changed"})
        except Exception as exc:  # a defect of the app: say so on the page, and the traceback in the terminal
            traceback.print_exc()
            self.send_json(HTTPStatus.INTERNAL_SERVER_ERROR,
                           {"error": f"the {self.server.app_name} failed ({exc!r}); nothing was changed"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._respond(self._get)

    def do_POST(self) -> None:  # noqa: N802
        self._respond(self._post)

    def _get(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/":
            return self.send_body(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8")
        if path.startswith("/static/"):
            name = path.removeprefix("/static/")
            file = self.server.static / name
            if "/" in name or file.suffix not in STATIC_TYPES or not file.is_file():
                raise NotFound(f"no such page: {path}")
            return self.send_body(HTTPStatus.OK, file.read_bytes(), f"{STATIC_TYPES[file.suffix]}; charset=utf-8")
        if not path.startswith("/api/"):
            raise NotFound(f"no such page: {path}")
        self.check_token()
        self.send_json(HTTPStatus.OK, self.server.get(path, self))

    def _post(self) -> None:
        path = self.path.split("?", 1)[0]
        if not path.startswith("/api/"):
            raise NotFound(f"no such endpoint: {self.path}")
        self.check_write()
        self.send_json(HTTPStatus.OK, self.server.post(path, self.json_body()))


class LocalServer(ThreadingHTTPServer):
    """One app's server: its static folder, its token, the Host names it answers; `get` and `post` answer the
    app's `/api/...` endpoints with a JSON-able dict (or raise RequestError)."""

    daemon_threads = True
    app_name = "local server"
    token_header = "X-Token"
    max_body = 64 * 1024

    def __init__(self, static: Path, port: int, host: str = "127.0.0.1", verbose: bool = False):
        super().__init__((host, port), LocalHandler)
        self.static, self.verbose = Path(static), verbose
        self.token = secrets.token_urlsafe(32)
        bound = self.server_address[1]
        self.hosts = {f"{host}:{bound}", f"localhost:{bound}"} if host == "127.0.0.1" else {f"{host}:{bound}"}
        page = (self.static / "index.html").read_text(encoding="utf-8")
        self.page = page.replace(TOKEN_SLOT, self.token).encode("utf-8")

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}/"

    def serve_until_interrupted(self) -> None:
        """Serve until Ctrl+C, then close the socket."""
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self.server_close()

    def get(self, path: str, request: LocalHandler) -> dict:
        raise NotFound(f"no such endpoint: {path}")

    def post(self, path: str, body: object) -> dict:
        raise NotFound(f"no such endpoint: {path}")
