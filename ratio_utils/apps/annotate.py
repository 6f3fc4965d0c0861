"""The annotation app of the blinded inspiration study: `ratio-annotate --packets DIR --annotator NAME` serves one
packet in the browser and saves every answer (ratio_utils.human_eval.annotation_app; docs/human_eval.md). Through an
SSH tunnel or JupyterHub's proxy: `--allow-host NAME[:PORT]` (docs/tunnels.md).

Reads: the packet folder notebook 12 writes. Writes: the annotator's label file (default <packets>/labels/).
"""

from __future__ import annotations

import argparse
import sys

from ..human_eval.annotation_app import AnnotateError, AnnotateServer, open_store
from ..io import InputError
from ..local_server import add_host_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ratio-annotate", description="Annotate a packet of the inspiration study in the browser.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  ratio-annotate --packets data/human_eval/packets --annotator annotator1 --port 8765\n"
               "through a tunnel (ssh -L 9000:localhost:8765): add --allow-host localhost:9000 (docs/tunnels.md)")
    parser.add_argument("--packets", required=True, help="packet folder written by notebook 12")
    parser.add_argument("--annotator", required=True, help="your name as in the packet's assignments.json")
    parser.add_argument("--labels", help="folder of the label files (default: <packets>/labels)")
    parser.add_argument("--port", type=int, default=8765)
    add_host_arguments(parser)
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    try:
        store = open_store(args.packets, args.annotator, args.labels)
    except (AnnotateError, InputError) as exc:
        print(f"ratio-annotate: {exc}", file=sys.stderr)
        return 2
    try:
        server = AnnotateServer(store, args.port, args.verbose, allowed_hosts=args.allow_host)
    except OSError as exc:
        store.close()
        print(f"ratio-annotate: cannot listen on 127.0.0.1:{args.port} ({exc}); try another --port", file=sys.stderr)
        return 2
    progress = store.progress()
    print(f"Annotating as {args.annotator}: {progress['complete']} of {progress['assigned']} queries complete.\n"
          f"Open {server.url} in your browser; labels are saved to {store.path} after every answer. Ctrl+C stops.")
    if server.allowed_hosts:
        print(f"Also answers a page opened at {', '.join(sorted(server.allowed_hosts))} "
              "(--allow-host: a tunnel or a proxy).")
    try:
        server.serve_until_interrupted()
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
