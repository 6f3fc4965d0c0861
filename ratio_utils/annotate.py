"""The annotation app of the inspiration study (paper §5.3, Appendix G): one command, served on 127.0.0.1.

    python -m ratio_utils.annotate --packets data/human_eval/packets --annotator annotator1 [--port 8765]

Reads a packet folder of notebook 12 (ratio_utils.human_eval.load_packet) and serves the annotator's
queries: both lists side by side, useful / not useful per candidate, a preference, a comment.
Writes <labels>/<annotator>.jsonl (default <packets>/labels/), rewritten atomically after every answer,
so a closed tab or a killed server loses nothing; the format is in docs/human_eval.md.

Standard library http.server plus a static page (ratio_utils/annotate_static/): the app has three
JSON endpoints and one page, so a web framework would add a dependency and nothing else.
Safety: one server per annotator (a lock file beside the labels), and every answer carries the
version (hash) of the label file the page last saw; a stale version (another tab, an edited file)
is refused with 409 and nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from filelock import FileLock, Timeout

from .human_eval import ANNOTATOR_NAME, LABEL_FIELDS, LABELS, LISTS, PREFERENCES, Packet, load_packet, now, read_label_file
from .io import InputError, atomic_path

STATIC = Path(__file__).parent / "annotate_static"
MAX_COMMENT = 5_000


class AnnotateError(Exception):
    """A request or start-up problem with a message for the person at the screen."""

    status = HTTPStatus.BAD_REQUEST


class Conflict(AnnotateError):
    status = HTTPStatus.CONFLICT


class LabelStore:
    """One annotator's answers: in memory, mirrored to <labels_dir>/<annotator>.jsonl after every change."""

    def __init__(self, packet: Packet, annotator: str, labels_dir: Path):
        if not ANNOTATOR_NAME.match(annotator) or annotator not in packet.assignments:
            raise AnnotateError(f"unknown annotator {annotator!r}; the packet in {packet.root} has "
                                f"{', '.join(sorted(packet.assignments)) or 'no annotators'}")
        self.packet, self.annotator = packet, annotator
        self.items = packet.for_annotator(annotator)
        self.path = Path(labels_dir) / f"{annotator}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.path.parent / f".{annotator}.lock"))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise AnnotateError(f"the labels of {annotator!r} ({self.path}) are open in another annotate server; "
                                "close it first (one server per annotator)") from None
        self._mutex = threading.Lock()
        try:
            self.answers = self._read()
        except Exception:
            self._lock.release()
            raise
        self.etag = self._disk_etag()

    def close(self) -> None:
        self._lock.release()

    # -- reading and writing the label file --
    def _empty(self, item: dict) -> dict:
        return {"labels": {n: [None] * len(item["lists"][n]) for n in LISTS},
                "labelled_at": {n: [None] * len(item["lists"][n]) for n in LISTS},
                "preference": None, "preference_at": None, "comment": "", "comment_at": None}

    def _read(self) -> dict[str, dict]:
        answers: dict[str, dict] = {}
        if not self.path.exists():
            return answers
        assigned = {item["item"]: item for item in self.items}
        rows = read_label_file(self.path, self.packet.candidate_id)
        for lineno, row in enumerate(rows, start=1):
            if row["annotator"] != self.annotator or row["item"] not in assigned:
                raise InputError(self.path, f"row for annotator {row['annotator']!r}, item {row['item']!r}: "
                                 f"not an item assigned to {self.annotator!r}", lineno)
            answer = answers.setdefault(row["item"], self._empty(assigned[row["item"]]))
            answer["labels"][row["list"]][row["rank"] - 1] = row["label"]
            answer["labelled_at"][row["list"]][row["rank"] - 1] = row["labelled_at"]
            for field in ("preference", "preference_at", "comment_at"):
                answer[field] = row[field]
            answer["comment"] = row["comment"] or ""
        return answers

    def _disk_etag(self) -> str:
        data = self.path.read_bytes() if self.path.exists() else b""
        return hashlib.sha256(data).hexdigest()[:16]

    def _rows(self) -> list[dict]:
        rows = []
        for item in self.items:
            answer = self.answers.get(item["item"])
            if answer is None:
                continue
            for name in LISTS:
                for candidate in item["lists"][name]:
                    i = candidate["rank"] - 1
                    rows.append({
                        "annotator": self.annotator, "item": item["item"], "move": item["move"], "query_id": item["query_id"],
                        "list": name, "rank": candidate["rank"], "candidate_id": candidate["candidate_id"],
                        "label": answer["labels"][name][i], "labelled_at": answer["labelled_at"][name][i],
                        "preference": answer["preference"], "preference_at": answer["preference_at"],
                        "comment": answer["comment"] or None, "comment_at": answer["comment_at"],
                    })
        return rows

    def _save(self) -> None:
        text = "".join(json.dumps({f: r[f] for f in LABEL_FIELDS}, ensure_ascii=False) + "\n" for r in self._rows())
        with atomic_path(self.path) as tmp:
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())  # on disk before the rename, so a crash leaves the old or the new file
        self.etag = self._disk_etag()

    # -- the API --
    def progress(self) -> dict:
        complete = sum(1 for item in self.items if self.is_complete(item["item"]))
        return {"complete": complete, "assigned": len(self.items)}

    def is_complete(self, item_id: str) -> bool:
        answer = self.answers.get(item_id)
        return bool(answer) and all(v is not None for n in LISTS for v in answer["labels"][n])

    def state(self) -> dict:
        return {"annotator": self.annotator, "study": self.packet.study, "queries": self.items,
                "answers": {k: {f: v[f] for f in ("labels", "preference", "comment")} for k, v in self.answers.items()},
                "etag": self.etag, "progress": self.progress()}

    def answer(self, change: dict) -> dict:
        with self._mutex:
            if change.get("etag") != self.etag or self._disk_etag() != self.etag:
                raise Conflict("your labels were changed elsewhere (another tab or window, or the label file itself); "
                               "reload this page to continue; nothing that was saved has been lost")
            assigned = {item["item"]: item for item in self.items}
            item = assigned.get(change.get("item"))
            if item is None:
                raise AnnotateError(f"item {change.get('item')!r} is not assigned to {self.annotator!r}")
            answer = self.answers.get(item["item"]) or self._empty(item)
            kind, stamp = change.get("kind"), now()
            if kind == "label":
                name, rank, value = change.get("list"), change.get("rank"), change.get("value")
                if name not in LISTS or not isinstance(rank, int) or not 1 <= rank <= len(item["lists"][name]):
                    raise AnnotateError(f"no candidate at list {name!r}, rank {rank!r}")
                if value not in (*LABELS, None):
                    raise AnnotateError(f"label must be one of {LABELS}, got {value!r}")
                answer["labels"][name][rank - 1] = value
                answer["labelled_at"][name][rank - 1] = stamp
            elif kind == "preference":
                if change.get("value") not in (*PREFERENCES, None):
                    raise AnnotateError(f"preference must be one of {PREFERENCES}, got {change.get('value')!r}")
                answer["preference"], answer["preference_at"] = change["value"], stamp
            elif kind == "comment":
                value = change.get("value") or ""
                if not isinstance(value, str) or len(value) > MAX_COMMENT:
                    raise AnnotateError(f"a comment is text of at most {MAX_COMMENT} characters")
                answer["comment"], answer["comment_at"] = value, stamp
            else:
                raise AnnotateError(f"unknown kind of answer {kind!r} (label, preference, comment)")
            self.answers[item["item"]] = answer
            self._save()
            return {"etag": self.etag, "progress": self.progress(), "complete": self.is_complete(item["item"])}


class _Handler(BaseHTTPRequestHandler):
    server: "AnnotateServer"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet unless asked
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?", 1)[0]
        if path == "/api/state":
            with self.server.store._mutex:
                return self._json(HTTPStatus.OK, self.server.store.state())
        files = {"/": ("index.html", "text/html"), "/static/app.js": ("app.js", "text/javascript"),
                 "/static/app.css": ("app.css", "text/css")}
        if path in files:
            name, kind = files[path]
            return self._send(HTTPStatus.OK, (STATIC / name).read_bytes(), f"{kind}; charset=utf-8")
        self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {path}"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/api/answer":
            return self._json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {self.path}"})
        try:
            length = int(self.headers.get("Content-Length", 0))
            change = json.loads(self.rfile.read(length).decode("utf-8"))
            if not isinstance(change, dict):
                raise AnnotateError("expected a JSON object")
            self._json(HTTPStatus.OK, self.server.store.answer(change))
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
            self._json(HTTPStatus.BAD_REQUEST, {"error": f"bad request: {exc}"})
        except AnnotateError as exc:
            self._json(exc.status, {"error": str(exc)})
        except OSError as exc:
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"could not save the labels: {exc}; nothing was changed"})


class AnnotateServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: LabelStore, port: int = 8765, verbose: bool = False):
        super().__init__(("127.0.0.1", port), _Handler)
        self.store, self.verbose = store, verbose

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


def open_store(packets: str | Path, annotator: str, labels: str | Path | None = None) -> LabelStore:
    packet = load_packet(packets)
    return LabelStore(packet, annotator, Path(labels) if labels else Path(packets) / "labels")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Annotate a packet of the inspiration study in the browser.")
    parser.add_argument("--packets", required=True, help="packet folder written by notebook 12")
    parser.add_argument("--annotator", required=True, help="your name as in the packet's assignments.json")
    parser.add_argument("--labels", help="folder of the label files (default: <packets>/labels)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    try:
        store = open_store(args.packets, args.annotator, args.labels)
    except (AnnotateError, InputError) as exc:
        print(f"annotate: {exc}", file=sys.stderr)
        return 2
    try:
        server = AnnotateServer(store, args.port, args.verbose)
    except OSError as exc:
        store.close()
        print(f"annotate: cannot listen on 127.0.0.1:{args.port} ({exc}); try another --port", file=sys.stderr)
        return 2
    progress = store.progress()
    print(f"Annotating as {args.annotator}: {progress['complete']} of {progress['assigned']} queries complete.\n"
          f"Open {server.url} in your browser; labels are saved to {store.path} after every answer. Ctrl+C stops.")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
