"""The on-disk response store: parsing a chat-completions response into a `ChatResult`, the
writable cache (`<llm.cache_dir>/responses/<hash[:2]>/<hash>.json`, unusable answers under
`invalid/`) and the read-only replay sources (other caches, batch input/output JSONL files).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from pathlib import Path

from ..io import iter_jsonl, write_json_atomic
from .types import ChatRequest, ChatResult, request_hash

# --------------------------------------------------------------------------------------------
# responses: parsing, the on-disk store
# --------------------------------------------------------------------------------------------


def result_from_response(custom_id: str, rhash: str, response: dict, json_expected: bool, cached: bool) -> ChatResult:
    """A ChatResult from a chat-completions response body."""
    usage = response.get("usage") or {}
    model = response.get("model") if isinstance(response, dict) else None
    try:
        choice = response["choices"][0]
        content = choice["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return ChatResult(custom_id, None, None, "response has no choices[0].message", usage, cached, rhash, model)
    if content is None or content == "":
        reason = choice.get("finish_reason")
        return ChatResult(custom_id, content, None, f"empty content (finish_reason={reason})", usage, cached, rhash,
                          model)
    parsed = None
    if json_expected:
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError as exc:
            return ChatResult(custom_id, content, None, f"content is not valid JSON: {exc.msg}", usage, cached, rhash,
                              model)
        if not isinstance(parsed, dict):
            return ChatResult(custom_id, content, None, f"content is JSON but not an object ({type(parsed).__name__})",
                              usage, cached, rhash, model)
    return ChatResult(custom_id, content, parsed, None, usage, cached, rhash, model)


class ResponseStore:
    """Recorded responses: a writable cache plus read-only replay sources.

    Read-only sources are folders (cache entries `<hash>.json`, flat or under `<hash[:2]>/`, and
    batch JSONL files) and batch JSONL files. A batch output line is matched by custom_id; when a
    batch input file with the same custom_id is known, its body must hash to the request's hash.
    """

    def __init__(self, cache_dir: Path, replay_dirs: Sequence[Path] = (), replay_files: Sequence[Path] = ()):
        self.cache_dir = Path(cache_dir)
        self.replay_dirs = [Path(p) for p in replay_dirs]
        self.replay_files = [Path(p) for p in replay_files]
        self._batch_outputs: dict[str, tuple[dict, str]] | None = None  # custom_id -> (response body, file)
        self._batch_inputs: dict[str, str] = {}  # custom_id -> request hash

    @property
    def responses_dir(self) -> Path:
        return self.cache_dir / "responses"

    def entry_path(self, rhash: str) -> Path:
        return self.responses_dir / rhash[:2] / f"{rhash}.json"

    def describe_sources(self) -> str:
        parts = [self.responses_dir, *self.replay_dirs, *self.replay_files]
        return ", ".join(os.path.relpath(p) for p in parts)  # relative: shown in notebooks and table notes

    def has_replay_source(self) -> bool:
        """True if any recorded response exists anywhere this store looks."""
        if self.responses_dir.is_dir() and any(self.responses_dir.rglob("*.json")):
            return True
        for folder in self.replay_dirs:
            if folder.is_dir() and (any(folder.rglob("*.json")) or any(folder.rglob("*.jsonl"))):
                return True
        return any(path.is_file() for path in self.replay_files)

    def recorded_models(self) -> list[str]:
        """The `model` field of every recorded batch answer in the replay sources (who would answer a replay)."""
        return sorted({body.get("model") for body, _ in self._load_batch_files().values() if body.get("model")})

    def lookup(self, custom_id: str, rhash: str) -> tuple[dict, str] | None:
        """(response body, where it came from) or None."""
        own = self.entry_path(rhash)
        if own.exists():
            return json.loads(own.read_text(encoding="utf-8"))["response"], str(own)
        for folder in self.replay_dirs:
            for candidate in (folder / rhash[:2] / f"{rhash}.json", folder / f"{rhash}.json",
                              folder / "responses" / rhash[:2] / f"{rhash}.json"):
                if candidate.exists():
                    entry = json.loads(candidate.read_text(encoding="utf-8"))
                    if entry.get("request_hash", rhash) == rhash:
                        return entry["response"], str(candidate)
        outputs = self._load_batch_files()
        if custom_id in outputs:
            known = self._batch_inputs.get(custom_id)
            if known is None or known == rhash:
                return outputs[custom_id]
        return None

    def store(self, request: ChatRequest, rhash: str, response: dict, source: str) -> Path:
        entry = {
            "request_hash": rhash,
            "custom_id": request.custom_id,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source": source,
            "meta": request.meta,
            "request": request.body(),
            "response": response,
        }
        return write_json_atomic(self.entry_path(rhash), entry)

    def store_invalid(self, request: ChatRequest, rhash: str, response: dict, error: str, source: str) -> Path:
        entry = {"request_hash": rhash, "custom_id": request.custom_id, "error": error, "source": source,
                 "meta": request.meta, "request": request.body(), "response": response}
        return write_json_atomic(self.cache_dir / "invalid" / f"{rhash}.json", entry)

    def _load_batch_files(self) -> dict[str, tuple[dict, str]]:
        if self._batch_outputs is not None:
            return self._batch_outputs
        outputs: dict[str, tuple[dict, str]] = {}
        files = list(self.replay_files)
        for folder in self.replay_dirs:
            if folder.is_dir():
                files += sorted(folder.rglob("*.jsonl"))
        for path in files:
            if not path.is_file():
                raise FileNotFoundError(f"replay batch file not found: {path}")
            for _, line in iter_jsonl(path, required=("custom_id",)):
                if "body" in line and "method" in line:  # a batch input line
                    self._batch_inputs[line["custom_id"]] = request_hash(line["body"])
                    continue
                response = line.get("response") or {}
                if response.get("status_code") == 200 and not line.get("error"):
                    outputs[line["custom_id"]] = (response.get("body") or {}, f"{path}")
        self._batch_outputs = outputs
        return outputs
