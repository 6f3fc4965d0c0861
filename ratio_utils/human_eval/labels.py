"""Label files of the inspiration study (paper §5.3, Appendix G): `<labels_dir>/<annotator>.jsonl`, written by
the annotation app (ratio_utils.human_eval.annotation_app), checked row by row (a bad row names its file and line) and
read with the unblinding key into `StudyLabels`. The format is in docs/human_eval.md. Writes nothing.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..io import InputError, iter_jsonl
from .packets import LABEL_FIELDS, LABELS, LISTS, MAX_COMMENT, PREFERENCES


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# The fields a label row repeats for every candidate of its query.
QUERY_FIELDS = ("move", "query_id", "preference", "preference_at", "comment", "comment_at")


def _is_time(value: object) -> bool:
    """An ISO 8601 time with a UTC offset, as `now()` writes it."""
    if not isinstance(value, str):
        return False
    try:
        return _dt.datetime.fromisoformat(value).tzinfo is not None
    except ValueError:
        return False


def check_label_row(row: dict, path: Path, lineno: int, candidate_of) -> None:
    """Raise InputError (file:line) unless `row` is a well-formed label row for a shown candidate.

    `candidate_of(item, list, rank)` gives the candidate shown there (KeyError for an unknown item).
    A value and its time go together: a label, preference or comment has one, an empty one has none.
    """
    missing = [f for f in LABEL_FIELDS if f not in row]
    if missing:
        raise InputError(path, f"missing field(s) {missing}", lineno)
    if not all(isinstance(row[f], str) for f in ("annotator", "item", "move", "query_id")):
        raise InputError(path, "`annotator`, `item`, `move` and `query_id` must be text", lineno)
    if row["item"] != f"{row['move']}/{row['query_id']}":
        raise InputError(path, f"item {row['item']!r} is not <move>/<query_id> of this row", lineno)
    if (row["list"] not in LISTS or not isinstance(row["rank"], int) or isinstance(row["rank"], bool)
            or row["rank"] < 1):
        raise InputError(path, f"bad list/rank {row['list']!r}/{row['rank']!r}", lineno)
    if row["label"] not in (*LABELS, None):
        raise InputError(path, f"label must be one of {LABELS} or null, got {row['label']!r}", lineno)
    if row["preference"] not in (*PREFERENCES, None):
        raise InputError(path, f"preference must be one of {PREFERENCES} or null, got {row['preference']!r}", lineno)
    comment = row["comment"]
    if comment is not None and not (isinstance(comment, str) and 0 < len(comment) <= MAX_COMMENT):
        raise InputError(path, f"comment must be null or text of 1 to {MAX_COMMENT} characters", lineno)
    for value, stamp in (("label", "labelled_at"), ("preference", "preference_at"), ("comment", "comment_at")):
        if row[value] is None and row[stamp] is not None:
            raise InputError(path, f"{stamp} is set but {value} is null", lineno)
        if row[value] is not None and not _is_time(row[stamp]):
            raise InputError(path, f"{stamp} must be an ISO 8601 time with a UTC offset, got {row[stamp]!r}", lineno)
    try:
        shown = candidate_of(row["item"], row["list"], row["rank"])
    except (KeyError, IndexError):
        raise InputError(path, f"item {row['item']!r} list {row['list']} rank {row['rank']} "
                               "was not shown in this study", lineno) from None
    if shown != row["candidate_id"]:
        raise InputError(path, f"candidate {row['candidate_id']} differs from the one shown there ({shown}): "
                         "labels of other packets?", lineno)


def read_label_file(path: Path, candidate_of) -> list[dict]:
    """The checked rows of one label file: one row per slot, the query's fields the same on all its rows."""
    rows, seen, query_values = [], set(), {}
    for lineno, row in iter_jsonl(path):
        check_label_row(row, path, lineno, candidate_of)
        slot = (row["annotator"], row["item"], row["list"], row["rank"])
        if slot in seen:
            raise InputError(path, f"a second row for {slot}", lineno)
        seen.add(slot)
        values = {f: row[f] for f in QUERY_FIELDS}
        first = query_values.setdefault((row["annotator"], row["item"]), (lineno, values))
        differ = [f for f in QUERY_FIELDS if values[f] != first[1][f]]
        if differ:
            raise InputError(path, f"{', '.join(differ)} of item {row['item']!r} differ(s) from line {first[0]} "
                             "(a query's rows must agree)", lineno)
        rows.append(row)
    return rows


def _key_candidate(key: dict[str, dict]):
    def candidate_of(item: str, list_name: str, rank: int) -> str:
        return key[item]["lists"][list_name]["candidates"][rank - 1]["candidate_id"]
    return candidate_of


def label_files(labels_dir: str | Path | None) -> list[Path]:
    if labels_dir is None or not Path(labels_dir).is_dir():
        return []
    return sorted(Path(labels_dir).glob("*.jsonl"))


@dataclass
class StudyLabels:
    """Complete annotations, unblinded: one row per (annotator, item, setup, rank)."""

    candidates: pd.DataFrame  # annotator, item, move, setup, rank, candidate_id, useful, is_gold, same_paper
    preferences: pd.DataFrame  # annotator, item, move, preference ('baseline' | 'tuned' | 'tie' | None)
    incomplete: pd.DataFrame  # annotator, item, labelled (fewer than 2k)
    k: int = 10


def load_labels(labels_dir: str | Path, key: dict[str, dict], k: int = 10) -> StudyLabels:
    """Read every <annotator>.jsonl, check each row against the key, keep the complete annotations."""
    rows = []
    for path in label_files(labels_dir):
        rows += read_label_file(path, _key_candidate(key))
    frame = pd.DataFrame(rows, columns=list(LABEL_FIELDS))
    counts = frame.groupby(["annotator", "item"])["label"].apply(lambda s: int(s.notna().sum())).rename("labelled")
    expected = {item: sum(len(entry["lists"][n]["candidates"]) for n in LISTS) for item, entry in key.items()}
    counts = counts.reset_index()
    counts["expected"] = counts["item"].map(expected)
    complete = counts[counts["labelled"] == counts["expected"]][["annotator", "item"]]
    incomplete = (counts[counts["labelled"] < counts["expected"]][["annotator", "item", "labelled"]]
                  .reset_index(drop=True))
    frame = frame.merge(complete, on=["annotator", "item"])

    def unblind(row) -> dict:
        entry = key[row["item"]]
        candidate = entry["lists"][row["list"]]["candidates"][row["rank"] - 1]
        return {"setup": entry["lists"][row["list"]]["setup"],
                "is_gold": row["candidate_id"] in set(entry["gold_ids"]),
                "paper": candidate.get("paper"), "query_paper": entry["query_paper"]}

    extra = pd.DataFrame([unblind(r) for r in frame.to_dict("records")], index=frame.index,
                         columns=["setup", "is_gold", "paper", "query_paper"])
    frame = pd.concat([frame, extra], axis=1)
    frame["useful"] = frame["label"] == "useful"
    frame["other_paper"] = frame["paper"].notna() & (frame["paper"] != frame["query_paper"])
    candidates = frame[["annotator", "item", "move", "setup", "list", "rank", "candidate_id", "useful", "is_gold",
                        "paper", "other_paper"]].reset_index(drop=True)
    prefs = frame.drop_duplicates(["annotator", "item"])[["annotator", "item", "move", "preference"]].copy()
    setup_of = {(item, n): entry["lists"][n]["setup"] for item, entry in key.items() for n in LISTS}
    prefs["preference"] = [None if not isinstance(p, str) else "tie" if p == "tie" else setup_of[(i, p)]
                           for i, p in zip(prefs["item"], prefs["preference"])]
    return StudyLabels(candidates, prefs.reset_index(drop=True), incomplete, k)
