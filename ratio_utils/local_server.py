"""A small JSON-over-HTTP server for one person's browser on this machine: the base of the annotation app
(`human_eval/annotation_app`, notebook 12) and the inspiration explorer (`apps/explorer`).

Standard library http.server: each app has one page and a few JSON endpoints, so a web framework would add a
dependency and nothing else. What both apps need from it is safety (docs/human_eval.md, "Security"):
- it listens on 127.0.0.1 unless asked otherwise, and answers only requests whose Host names the address it
  listens on (or localhost on its port), or an address the user named with `--allow-host NAME[:PORT]` (the
  other end of an SSH tunnel, a proxy such as JupyterHub's: docs/tunnels.md), so a page of another site cannot
  reach it by DNS rebinding;
- it takes writes only as application/json from its own Origin (the address the browser shows: the one it asked
  for, or an allowed host), with a random token that the page gets with its HTML and other origins cannot read
  (a blind cross-origin form post is refused before it is read);
- a request body has a Content-Length and a size limit; every failure is answered in JSON, never with a
  dropped connection, and a defect prints its traceback in the terminal.

The pages use relative URLs only (`static/app.js`, `api/state`), so they work under a path prefix too: a proxy
that serves the app at `/user/NAME/proxy/8765/` and strips the prefix before forwarding (jupyter-server-proxy).

Reads the app's static folder (index.html with a `{{token}}` slot, its .js and .css); writes nothing.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import re
import secrets
import traceback
from collections.abc import Iterable
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
_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*")
ALLOW_HOST_HELP = ("also answer a page opened at this address, as the browser's address bar shows it "
                   "(the local end of "
                   "an SSH tunnel, e.g. localhost:9000, or a proxy's host, e.g. hub.example.org for JupyterHub; "
                   "docs/tunnels.md); repeatable")


def allowed_host(text: str) -> str:
    """`NAME[:PORT]` as a Host header carries it, in lower case: a DNS name, an IPv4 address or a bracketed IPv6
    address, and a port unless the address has none (80 for http://, 443 for https://). ValueError otherwise."""
    given = text.strip().lower()
    if "://" in given or "/" in given:
        raise ValueError(f"{text!r}: give the address as NAME[:PORT], without http:// or a path (e.g. localhost:9000)")
    name, port = given, None
    if given.startswith("["):  # [v6] or [v6]:port
        end = given.find("]")
        name, rest = given[1:end] if end > 0 else "", given[end + 1:] if end > 0 else "x"
        if rest:
            port = rest[1:] if rest.startswith(":") else "x"
        try:
            ok = end > 0 and ipaddress.ip_address(name).version == 6
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{text!r} is not [IPv6 address][:PORT]")
        name = f"[{name}]"
    elif ":" in given:
        name, port = given.rsplit(":", 1)
    if not given.startswith("[") and not _HOST_NAME.fullmatch(name):
        raise ValueError(f"{text!r} is not NAME[:PORT] (a host name or an IP address, no wildcards)")
    if port is not None:
        if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError(f"{text!r}: the port is a number from 1 to 65535")
        return f"{name}:{int(port)}"
    return name


def _allowed_host_argument(text: str) -> str:
    try:
        return allowed_host(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_host_arguments(parser: argparse.ArgumentParser) -> None:
    """`--allow-host NAME[:PORT]` (repeatable; `args.allow_host`, a list) for a command that starts a LocalServer:
    pass it on as `allowed_hosts=args.allow_host`, or call `server.allow_hosts(args.allow_host)`."""
    parser.add_argument("--allow-host", action="append", default=[], type=_allowed_host_argument,
                        metavar="NAME[:PORT]", help=ALLOW_HOST_HELP)


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
        if host.lower() in self.server.hosts or host.lower() in self.server.allowed_hosts:
            return
        message = f"this server answers only requests for {self.server.url} (Host: {host!r})"
        try:
            hint = allowed_host(host)
        except ValueError:
            raise Forbidden(message) from None
        raise Forbidden(f"{message}; if you opened it through a tunnel or a proxy at that address, start it again "
                        f"with --allow-host {hint} (docs/tunnels.md)")

    def check_token(self) -> None:
        token = self.headers.get(self.server.token_header, "")
        if not hmac.compare_digest(token.encode("utf-8"), self.server.token.encode("utf-8")):
            raise Forbidden("this request does not carry the page's token: open the address the server printed")

    def check_write(self) -> None:
        origin = self.headers.get("Origin")
        if (origin or "").lower() not in self.server.origins(self.headers["Host"]):
            raise Forbidden(f"writes are taken only from this server's own page (Origin: {origin!r}); a page opened "
                            "through a tunnel or a proxy needs --allow-host naming the address it was opened at "
                            "(docs/tunnels.md)")
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
    """One app's server: its static folder, its token, the Host names it answers (its own address, and the
    `allowed_hosts` the user named: tunnels and proxies); `get` and `post` answer the app's `/api/...` endpoints
    with a JSON-able dict (or raise RequestError)."""

    daemon_threads = True
    app_name = "local server"
    token_header = "X-Token"
    max_body = 64 * 1024

    def __init__(self, static: Path, port: int, host: str = "127.0.0.1", verbose: bool = False,
                 allowed_hosts: Iterable[str] = ()):
        self.allowed_hosts: set[str] = set()
        self.allow_hosts(allowed_hosts)  # before binding: a bad name stops the start with the port still free
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

    def allow_hosts(self, names: Iterable[str]) -> None:
        """Also answer requests for these addresses, NAME[:PORT] each (`--allow-host`; ValueError for a bad one):
        the local end of an SSH tunnel, the host of a proxy. A page opened there may write too: its Origin is
        http:// or https:// and that address."""
        self.allowed_hosts |= {allowed_host(name) for name in names}

    def origins(self, host: str) -> set[str]:
        """The Origins of this server's own page, as the browser names them, for a request with this Host."""
        return {f"http://{host.lower()}"} | {f"{scheme}://{name}" for name in self.allowed_hosts
                                            for scheme in ("http", "https")}

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
