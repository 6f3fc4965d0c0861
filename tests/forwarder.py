"""Stand-ins for the ways a reviewer on a remote server opens the local pages (docs/tunnels.md), for the browser
tests of the annotation app and the explorer. Both listen on 127.0.0.1 only and forward to 127.0.0.1 only.

- `tcp_forward(port)`: a port forward like `ssh -L 9000:localhost:8765`: bytes copied both ways, so the browser's
  Host and Origin name the forwarder's port, not the server's.
- `prefix_proxy()`: a path-prefix proxy like jupyter-server-proxy under JupyterHub: `/user/NAME/proxy/<port>/x` is
  forwarded to `http://127.0.0.1:<port>/x` with the request's headers as they came (Host, Origin included).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import re
import socket
import socketserver
import threading
from collections.abc import Iterator

from loopback import serving

PROXY_PATH = re.compile(r"/user/[^/]+/proxy/(\d+)(/.*)?")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes from `source` to `sink` until either side closes; then close the sink's writing half."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


class _PortForward(socketserver.ThreadingTCPServer):
    """A listener on 127.0.0.1 (random port) joining each connection to a new one to 127.0.0.1:`target_port`."""

    daemon_threads = True

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.open_sockets: list[socket.socket] = []
        super().__init__(("127.0.0.1", 0), _ForwardedConnection)

    def server_close(self) -> None:
        """Close the listener and every forwarded connection still open (a browser keeps its connections alive)."""
        super().server_close()
        for sock in self.open_sockets:
            with contextlib.suppress(OSError):
                sock.close()


class _ForwardedConnection(socketserver.BaseRequestHandler):
    """One connection to the forwarder: bytes copied both ways, one thread each, until both sides have closed."""

    def handle(self) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.server.target_port), timeout=10)
        except OSError:
            return
        upstream.settimeout(None)
        self.server.open_sockets.extend((self.request, upstream))
        back = threading.Thread(target=_pump, args=(upstream, self.request), daemon=True)
        back.start()
        _pump(self.request, upstream)
        back.join()


@contextlib.contextmanager
def tcp_forward(target_port: int) -> Iterator[int]:
    """A TCP port forward 127.0.0.1:<yielded port> -> 127.0.0.1:target_port, one pair of threads per connection."""
    forward = _PortForward(target_port)
    with serving(forward):
        yield forward.server_address[1]


class _PrefixProxy(http.server.BaseHTTPRequestHandler):
    """jupyter-server-proxy's `/proxy/<port>/` route: strip the prefix, forward to 127.0.0.1:<port>, headers kept."""

    def log_message(self, format, *args) -> None:  # noqa: A002 - quiet
        pass

    def _forward(self) -> None:
        path, _, query = self.path.partition("?")
        match = PROXY_PATH.fullmatch(path)
        if match is None:
            body = b"not under /user/NAME/proxy/<port>/\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        port, rest = int(match.group(1)), match.group(2) or "/"
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            upstream.request(self.command, rest + (f"?{query}" if query else ""), body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            self.send_response(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in HOP_BY_HOP | {"content-length", "date", "server"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        finally:
            upstream.close()

    do_GET = do_POST = _forward  # noqa: N815 - http.server's names


@contextlib.contextmanager
def prefix_proxy() -> Iterator[str]:
    """A path-prefix proxy on 127.0.0.1; yields its base URL (`<base>/user/NAME/proxy/<port>/` reaches <port>)."""
    with serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PrefixProxy)) as base:
        yield base
