"""Serving a stand-in service on 127.0.0.1 from a thread, for the tests and benchmarks that talk to one (the static
file server of tests/conftest.py, the S2 Datasets API stub of tests/s2_stub.py, the OpenAI-compatible stub of
tests/openai_stub_server.py, the forwarders of tests/forwarder.py, the annotation app and the explorer)."""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator

# How often the serving thread looks for a shutdown request: leaving `serving` waits up to this long, once per
# server, and many tests start one.
POLL_INTERVAL_S = 0.02


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[str]:
    """Serve requests in a daemon thread; yields the server's address as `http://HOST:PORT`; afterwards shuts the
    server down and closes its socket.

    server: bound (port 0 for a free one), not serving yet; e.g. `ThreadingHTTPServer(("127.0.0.1", 0), handler)`.
    """
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S}, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
