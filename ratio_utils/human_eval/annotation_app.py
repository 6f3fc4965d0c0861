"""The annotation app of the inspiration study (paper §5.3, Appendix G): one command, served on 127.0.0.1.

    ratio-annotate --packets data/human_eval/packets --annotator annotator1 [--port 8765]

Reads a packet folder of notebook 12 (ratio_utils.human_eval.packets.load_packet) and serves the annotator's
queries: both lists side by side, useful / not useful per candidate, a preference, a comment.
Writes <labels>/<annotator>.jsonl (default <packets>/labels/), rewritten atomically after every answer,
so a closed tab or a killed server loses nothing; the format is in docs/human_eval.md.

The server is `ratio_utils.local_server` (standard library http.server) with a static page
(ratio_utils/human_eval/app_static/) and two JSON endpoints.

Safety (docs/human_eval.md, "Security"):
- Only this machine's own page can read or write (`local_server`): the server listens on 127.0.0.1, answers
  only requests whose Host is 127.0.0.1 or localhost on its port, or an address named with `--allow-host` (an
  SSH tunnel, JupyterHub's proxy: docs/tunnels.md) (no DNS rebinding), takes answers only as application/json
  from its own Origin, and every state read and answer carries a random token that the page gets with its HTML
  and other origins cannot read. The page's URLs are relative, so it works under a proxy's path prefix.
- It refuses to start when an unblinding key lies inside or beside the packets it would serve.
- One server per annotator and packet folder (a lock in the temporary folder, whatever --labels
  says), and every answer carries the version (hash) of the label file the page last saw; a stale
  version (another tab) is refused with 409 and nothing is written. A label file edited by hand is
  taken up again when the page reloads.
- A start that fails (bad packets, bad label file, busy port) leaves the packet folder as it was.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock, Timeout

from ..io import InputError, atomic_path
from ..local_server import Conflict, LocalServer, NotFound, RequestError
from ..param_sections import ANNOTATOR_NAME
from .labels import now, read_label_file
from .packets import LABEL_FIELDS, LABELS, LISTS, MAX_COMMENT, PREFERENCES, Packet, exposed_keys, load_packet

STATIC = Path(__file__).parent / "app_static"
TOKEN_HEADER = "X-Annotate-Token"
# The fields of each kind of answer, besides etag, kind and item.
ANSWER_FIELDS = {"label": ("list", "rank", "value"), "preference": ("value",), "comment": ("value",)}


class AnnotateError(RequestError):
    """A request or start-up problem of the annotation app, with a message for the person at the screen."""


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
                        "annotator": self.annotator, "item": item["item"], "move": item["move"],
                        "query_id": item["query_id"],
                        "list": name, "rank": candidate["rank"], "candidate_id": candidate["candidate_id"],
                        "label": answer["labels"][name][i], "labelled_at": answer["labelled_at"][name][i],
                        "preference": answer["preference"], "preference_at": answer["preference_at"],
                        "comment": answer["comment"] or None, "comment_at": answer["comment_at"],
                    })
        return rows

    def _save(self, answers: dict[str, dict]) -> None:
        text = "".join(json.dumps({f: r[f] for f in LABEL_FIELDS}, ensure_ascii=False) + "\n"
                       for r in self._rows(answers))
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
                    "answers": {k: {f: v[f] for f in ("labels", "preference", "comment")}
                                for k, v in self.answers.items()},
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


class AnnotateServer(LocalServer):
    app_name = "annotation server"
    token_header = TOKEN_HEADER
    max_body = 64 * 1024  # bytes of one answer; a comment of MAX_COMMENT characters fits

    def __init__(self, store: LabelStore, port: int = 8765, verbose: bool = False, allowed_hosts: Iterable[str] = ()):
        super().__init__(STATIC, port, verbose=verbose, allowed_hosts=allowed_hosts)
        self.store = store

    def get(self, path: str, request) -> dict:
        if path != "/api/state":
            raise NotFound(f"no such endpoint: {path}")
        return self.store.state()

    def post(self, path: str, body: object) -> dict:
        if path != "/api/answer":
            raise NotFound(f"no such endpoint: {path}")
        return self.store.answer(body)


def open_store(packets: str | Path, annotator: str, labels: str | Path | None = None) -> LabelStore:
    """The label store of `annotator` on a checked packet folder; refused while an unblinding key lies
    inside or beside the folder, where the annotator could open it."""
    packet = load_packet(packets)
    keys = exposed_keys(packets)
    if keys:
        raise AnnotateError(f"an unblinding key lies inside or beside {packets}: {', '.join(map(str, keys))}. "
                            "Annotators get the packets folder only: move the key to a folder of its own (notebook 12 "
                            "writes it to data/human_eval_key/) and start again")
    return LabelStore(packet, annotator, Path(labels) if labels else Path(packets) / "labels")
