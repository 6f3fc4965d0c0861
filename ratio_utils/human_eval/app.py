"""The annotation app of the inspiration study (paper §5.3, Appendix G): one command, served on 127.0.0.1.

    python -m ratio_utils.human_eval.app --packets data/human_eval/packets --annotator annotator1 [--port 8765]

Reads a packet folder of notebook 12 (ratio_utils.human_eval.packets.load_packet) and serves the annotator's
queries: both lists side by side, useful / not useful per candidate, a preference, a comment.
Writes <labels>/<annotator>.jsonl (default <packets>/labels/), rewritten atomically after every answer,
so a closed tab or a killed server loses nothing; the format is in docs/human_eval.md.

Standard library http.server plus a static page (ratio_utils/human_eval/app_static/): the app has two
JSON endpoints and one page, so a web framework would add a dependency and nothing else.

Safety (docs/human_eval.md, "Security"):
- Only this machine's own page can read or write: the server listens on 127.0.0.1, answers only
  requests whose Host is 127.0.0.1 or localhost on its port (no DNS rebinding), takes answers only as
  application/json from its own Origin, and every state read and answer carries a random token that
  the page gets with its HTML and other origins cannot read.
- It refuses to start when an unblinding key lies inside or beside the packets it would serve.
- One server per annotator and packet folder (a lock in the temporary folder, whatever --labels
  says), and every answer carries the version (hash) of the label file the page last saw; a stale
  version (another tab) is refused with 409 and nothing is written. A label file edited by hand is
  taken up again when the page reloads.
- A start that fails (bad packets, bad label file, busy port) leaves the packet folder as it was.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import hmac
import json
import os
import secrets
import sys
import tempfile
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from filelock import FileLock, Timeout

from ..io import InputError, atomic_path
from ..param_sections import ANNOTATOR_NAME
from .labels import now, read_label_file
from .packets import LABEL_FIELDS, LABELS, LISTS, MAX_COMMENT, PREFERENCES, Packet, exposed_keys, load_packet

STATIC = Path(__file__).parent / "app_static"
MAX_BODY = 64 * 1024  # bytes of one answer; a comment of MAX_COMMENT characters fits
TOKEN_HEADER = "X-Annotate-Token"
TOKEN_SLOT = "{{token}}"  # in index.html, replaced by the server's token
# The fields of each kind of answer, besides etag, kind and item.
ANSWER_FIELDS = {"label": ("list", "rank", "value"), "preference": ("value",), "comment": ("value",)}
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # no other page may frame this one (keystrokes could be steered into it) or run scripts in it
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
}


class AnnotateError(Exception):
    """A request or start-up problem with a message for the person at the screen."""

    status = HTTPStatus.BAD_REQUEST


class Conflict(AnnotateError):
    status = HTTPStatus.CONFLICT


class Forbidden(AnnotateError):
    status = HTTPStatus.FORBIDDEN


class NotFound(AnnotateError):
    status = HTTPStatus.NOT_FOUND


class UnsupportedType(AnnotateError):
    status = HTTPStatus.UNSUPPORTED_MEDIA_TYPE


class TooLarge(AnnotateError):
    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE


class LengthRequired(AnnotateError):
    status = HTTPStatus.LENGTH_REQUIRED


def lock_path(packets_root: Path, annotator: str) -> Path:
    """The lock of one annotator on one packet folder, whatever folder the labels go to. It lives in the
    temporary folder, so that a start that fails leaves the packet folder untouched."""
    study = hashlib.sha256(str(Path(packets_root).resolve()).encode("utf-8")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"ratio-annotate-{study}-{annotator}.lock"


def _etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _is_rank(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def checked_answer(change: object, assigned: dict[str, dict], annotator: str) -> dict:
    """`change` if it is a well-formed answer for an assigned item, else AnnotateError saying what is wrong."""
    if not isinstance(change, dict):
        raise AnnotateError("an answer is a JSON object")
    kind = change.get("kind")
    if not isinstance(kind, str) or kind not in ANSWER_FIELDS:
        raise AnnotateError(f"unknown kind of answer {kind!r} ({', '.join(ANSWER_FIELDS)})")
    expected = {"etag", "kind", "item", *ANSWER_FIELDS[kind]}
    if set(change) != expected:
        raise AnnotateError(f"an answer of kind {kind!r} has the fields {sorted(expected)}, got {sorted(change)}")
    if not isinstance(change["etag"], str):
        raise AnnotateError("etag must be text")
    item = assigned.get(change["item"]) if isinstance(change["item"], str) else None
    if item is None:
        raise AnnotateError(f"item {change['item']!r} is not assigned to {annotator!r}")
    value = change["value"]
    if kind == "label":
        name, rank = change["list"], change["rank"]
        if not (isinstance(name, str) and name in LISTS and _is_rank(rank) and 1 <= rank <= len(item["lists"][name])):
            raise AnnotateError(f"no candidate at list {name!r}, rank {rank!r}")
        if not (value is None or (isinstance(value, str) and value in LABELS)):
            raise AnnotateError(f"label must be one of {LABELS} or null, got {value!r}")
    elif kind == "preference":
        if not (value is None or (isinstance(value, str) and value in PREFERENCES)):
            raise AnnotateError(f"preference must be one of {PREFERENCES} or null, got {value!r}")
    elif not (value is None or isinstance(value, str)) or len(value or "") > MAX_COMMENT:
        raise AnnotateError(f"a comment is text of at most {MAX_COMMENT} characters")
    return change


class LabelStore:
    """One annotator's answers: in memory, mirrored to <labels_dir>/<annotator>.jsonl after every change."""

    def __init__(self, packet: Packet, annotator: str, labels_dir: Path):
        if not ANNOTATOR_NAME.match(annotator) or annotator not in packet.assignments:
            raise AnnotateError(f"unknown annotator {annotator!r}; the packet in {packet.root} has "
                                f"{', '.join(sorted(packet.assignments)) or 'no annotators'}")
        self.packet, self.annotator = packet, annotator
        self.items = packet.for_annotator(annotator)
        self._assigned = {item["item"]: item for item in self.items}
        self.path = Path(labels_dir) / f"{annotator}.jsonl"
        self._lock = FileLock(str(lock_path(packet.root, annotator)))
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise AnnotateError(f"the labels of {annotator!r} on {packet.root} are open in another annotate server; "
                                "close it first (one server per annotator and packet folder)") from None
        self._mutex = threading.Lock()
        try:
            self.answers, self.etag = self._read()
        except BaseException:
            self._lock.release()
            raise

    def close(self) -> None:
        self._lock.release()

    # -- reading and writing the label file --
    def _empty(self, item: dict) -> dict:
        return {"labels": {n: [None] * len(item["lists"][n]) for n in LISTS},
                "labelled_at": {n: [None] * len(item["lists"][n]) for n in LISTS},
                "preference": None, "preference_at": None, "comment": "", "comment_at": None}

    def _read(self) -> tuple[dict[str, dict], str]:
        """The answers in the label file and the file's version; InputError (file:line) for a bad file."""
        if not self.path.exists():
            return {}, _etag(b"")
        etag = _etag(self.path.read_bytes())
        answers: dict[str, dict] = {}
        for lineno, row in enumerate(read_label_file(self.path, self.packet.candidate_id), start=1):
            if row["annotator"] != self.annotator or row["item"] not in self._assigned:
                raise InputError(self.path, f"row for annotator {row['annotator']!r}, item {row['item']!r}: "
                                 f"not an item assigned to {self.annotator!r}", lineno)
            answer = answers.setdefault(row["item"], self._empty(self._assigned[row["item"]]))
            answer["labels"][row["list"]][row["rank"] - 1] = row["label"]
            answer["labelled_at"][row["list"]][row["rank"] - 1] = row["labelled_at"]
            for field in ("preference", "preference_at", "comment_at"):
                answer[field] = row[field]
            answer["comment"] = row["comment"] or ""
        return answers, etag

    def _disk_etag(self) -> str:
        return _etag(self.path.read_bytes() if self.path.exists() else b"")

    def _rows(self, answers: dict[str, dict]) -> list[dict]:
        rows = []
        for item in self.items:
            answer = answers.get(item["item"])
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

    def _save(self, answers: dict[str, dict]) -> None:
        text = "".join(json.dumps({f: r[f] for f in LABEL_FIELDS}, ensure_ascii=False) + "\n" for r in self._rows(answers))
        with atomic_path(self.path) as tmp:
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())  # on disk before the rename, so a crash leaves the old or the new file
        self.etag = _etag(text.encode("utf-8"))

    def _take_up_disk(self) -> None:
        """Read the label file again if it changed since this server wrote it (edited by hand)."""
        if self._disk_etag() == self.etag:
            return
        try:
            self.answers, self.etag = self._read()
        except InputError as exc:
            raise Conflict(f"the label file was changed outside this app and no longer reads ({exc}); restore or "
                           "fix it.") from None

    # -- the API --
    def progress(self) -> dict:
        complete = sum(1 for item in self.items if self.is_complete(item["item"]))
        return {"complete": complete, "assigned": len(self.items)}

    def is_complete(self, item_id: str) -> bool:
        answer = self.answers.get(item_id)
        return bool(answer) and all(v is not None for n in LISTS for v in answer["labels"][n])

    def state(self) -> dict:
        with self._mutex:
            self._take_up_disk()
            return {"annotator": self.annotator, "study": self.packet.study, "queries": self.items,
                    "answers": {k: {f: v[f] for f in ("labels", "preference", "comment")} for k, v in self.answers.items()},
                    "etag": self.etag, "progress": self.progress(), "limits": {"comment": MAX_COMMENT}}

    def answer(self, change: object) -> dict:
        change = checked_answer(change, self._assigned, self.annotator)
        item = self._assigned[change["item"]]
        with self._mutex:
            if change["etag"] != self.etag or self._disk_etag() != self.etag:
                raise Conflict("your labels were changed elsewhere (another tab or window, or the label file itself); "
                               "nothing that was saved has been lost.")
            answer = copy.deepcopy(self.answers.get(item["item"]) or self._empty(item))
            value = change["value"]
            stamp = now() if value else None  # a cleared label or an emptied comment has no time
            if change["kind"] == "label":
                answer["labels"][change["list"]][change["rank"] - 1] = value
                answer["labelled_at"][change["list"]][change["rank"] - 1] = stamp
            elif change["kind"] == "preference":
                answer["preference"], answer["preference_at"] = value, stamp
            else:
                answer["comment"], answer["comment_at"] = value or "", stamp
            answers = {**self.answers, item["item"]: answer}
            self._save(answers)  # memory follows only once the file holds the answer
            self.answers = answers
            return {"etag": self.etag, "progress": self.progress(), "complete": self.is_complete(item["item"])}


class _Handler(BaseHTTPRequestHandler):
    server: "AnnotateServer"
    timeout = 30  # seconds a connection may idle, so a body shorter than its Content-Length cannot hold a thread

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet unless asked
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: dict) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

    def _check_host(self) -> None:
        host = self.headers.get("Host", "")
        if host not in self.server.hosts:
            raise Forbidden(f"this server answers only requests for {self.server.url} (Host: {host!r})")

    def _check_token(self) -> None:
        token = self.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(token.encode("utf-8"), self.server.token.encode("utf-8")):
            raise Forbidden("this request does not carry the page's token: open the address the server printed")

    def _check_write(self) -> None:
        origin = self.headers.get("Origin")
        if origin != f"http://{self.headers['Host']}":
            raise Forbidden(f"answers are taken only from this server's own page (Origin: {origin!r})")
        if self.headers.get_content_type() != "application/json":
            raise UnsupportedType(f"answers are sent as application/json, not {self.headers.get('Content-Type')!r}")
        self._check_token()

    def _body(self) -> object:
        length = self.headers.get("Content-Length")
        if length is None:
            raise LengthRequired("an answer needs a Content-Length")
        if not (length.isascii() and length.isdigit()):
            raise AnnotateError(f"bad Content-Length {length!r}")
        if int(length) > MAX_BODY:
            raise TooLarge(f"an answer is at most {MAX_BODY} bytes")
        try:
            return json.loads(self.rfile.read(int(length)).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AnnotateError(f"the answer is not JSON ({exc})") from None

    def _respond(self, handle) -> None:
        """Run `handle` after the Host check; every failure is answered in JSON, never with a dropped connection."""
        try:
            self._check_host()
            handle()
        except AnnotateError as exc:
            self._json(exc.status, {"error": str(exc)})
        except OSError as exc:
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"could not save the labels ({exc}); nothing was changed"})
        except Exception as exc:  # a defect of the app: say so on the page, and the traceback in the terminal
            traceback.print_exc()
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"the annotation server failed ({exc!r}); nothing was changed"})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._respond(self._get)

    def do_POST(self) -> None:  # noqa: N802
        self._respond(self._post)

    def _get(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/api/state":
            self._check_token()
            return self._json(HTTPStatus.OK, self.server.store.state())
        if path == "/":
            return self._send(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8")
        files = {"/static/app.js": ("app.js", "text/javascript"), "/static/app.css": ("app.css", "text/css")}
        if path not in files:
            raise NotFound(f"no such page: {path}")
        name, kind = files[path]
        self._send(HTTPStatus.OK, (STATIC / name).read_bytes(), f"{kind}; charset=utf-8")

    def _post(self) -> None:
        if self.path != "/api/answer":
            raise NotFound(f"no such endpoint: {self.path}")
        self._check_write()
        self._json(HTTPStatus.OK, self.server.store.answer(self._body()))


class AnnotateServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: LabelStore, port: int = 8765, verbose: bool = False):
        super().__init__(("127.0.0.1", port), _Handler)
        self.store, self.verbose = store, verbose
        self.token = secrets.token_urlsafe(32)
        bound = self.server_address[1]
        self.hosts = {f"127.0.0.1:{bound}", f"localhost:{bound}"}
        self.page = (STATIC / "index.html").read_text(encoding="utf-8").replace(TOKEN_SLOT, self.token).encode("utf-8")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


def open_store(packets: str | Path, annotator: str, labels: str | Path | None = None) -> LabelStore:
    """The label store of `annotator` on a checked packet folder; refused while an unblinding key lies
    inside or beside the folder, where the annotator could open it."""
    packet = load_packet(packets)
    keys = exposed_keys(packets)
    if keys:
        raise AnnotateError(f"an unblinding key lies inside or beside {packets}: {', '.join(map(str, keys))}. Annotators get "
                            "the packets folder only: move the key to a folder of its own (notebook 12 writes it to "
                            "data/human_eval_key/) and start again")
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
