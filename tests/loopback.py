"""A threaded HTTP server on 127.0.0.1 for the tests and benchmarks that talk to a stand-in service
(the static file server of tests/conftest.py, the S2 Datasets API stub of tests/s2_stub.py)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def loopback_http(handler) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (random port) answering with `handler` in a thread; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
