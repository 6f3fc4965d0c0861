"""The marker lexicon: one definition of a marker that every later stage imports (notebooks 01–04).

Reads the authors' released lexicon (`<shared>/lexicon/all_query_terms5.csv`, or a download from the
pinned URL when `<shared>` is absent, checked against the pinned SHA-256 in `data/lexicon/`),
validates it row by row, and writes the lexicon artefact `cfg.paths.curated_lexicon` (parquet) plus a CSV
and a JSON report beside it, with exactly `schema.LEXICON_COLUMNS`, one row per normalised marker.
Notebook 04 adds its pattern markers into a second file, `cfg.paths.final_lexicon`, which is the only
lexicon the mining stage reads, keyed on `marker`.

Also here: the reviewers' decision rule of manual curation (paper §4.1, Appendix A) and Table 4.

Decisions taken on the released file (each counted in the report, none silent):
- `query_type` "manual`" is a typo of "manual" (one row); read as manual and listed.
- A phrase with a clause after an inner comma (`to address these limitations, we propose`, 1,155
  rows, nearly all LLM-generated) keeps the whole phrase as its marker, as `schema.normalize_marker` gives it.
  Cutting it at the comma would be the paper's notion of an opener (§4.1: the comma separates the marker from
  the content), but here the clause is what makes the phrase a marker: the part before the comma is
  often a phrase the experts rejected (`for this reason,`, `to this end,` are BLACKLIST rows while
  `for this reason, we propose` is a strong-true Address row), so cutting would turn rejected
  openers into markers. The report counts these rows and the status of their openers.
- After normalisation a marker in two move lexicons is an error naming both rows (the lexicons
  must be disjoint; we do not choose). A marker in a move and also in a distractor category or in
  BLACKLIST stays a marker of its move: the curated move decision outranks a rejection that an
  LLM label or a comma-less variant produced. A distractor that is also in BLACKLIST stays a
  distractor. Each such resolution is listed in the report with both lines.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..config import Config, packaged
from ..io import InputError, atomic_path, require_columns, sha256_file, write_json_atomic, write_parquet_atomic
from ..paper_values import paper_section
from ..param_sections import LexiconParams
from ..schema import (
    DISTRACTOR_CATEGORIES,
    GROUP_TO_MOVE,
    LEXICON_COLUMNS,
    MOVES,
    REJECTED_GROUP,
    MarkerKind,
    MarkerSource,
    Move,
    normalize_marker,
)

RELEASED_LEXICON_NAME = "all_query_terms5.csv"
PINNED_LEXICON_FILE = packaged("data/lexicon/released_lexicon.json")  # shipped with the package

REQUIRED_COLUMNS = ("word", "special_word", "group", "query_type")
OPTIONAL_COLUMNS = ("raw_word", "category", "strength")
KNOWN_GROUPS = (*GROUP_TO_MOVE, *DISTRACTOR_CATEGORIES, REJECTED_GROUP)
QUERY_TYPE_TO_SOURCE = {
    "manual": MarkerSource.MANUAL,
    "special_word": MarkerSource.EXTENDABLE,
    "LLMgenerated": MarkerSource.LLM,
    "combo": MarkerSource.PATTERN,
}
# Known misspellings in the released file, read as the value on the right and counted.
QUERY_TYPE_TYPOS = {"manual`": "manual"}
STRENGTH_LABELS = ("STRONG-TRUE", "WEAK-TRUE", "FALSE")
# When one marker has several rows of the same group, the row from the earliest stage of the
# paper's pipeline names its source (pattern expansion "added 297 new markers" = not produced by
# an earlier source, Appendix A).
SOURCE_PRECEDENCE = (MarkerSource.MANUAL, MarkerSource.EXTENDABLE, MarkerSource.LLM, MarkerSource.PATTERN)
KIND_PRECEDENCE = (MarkerKind.MOVE, MarkerKind.DISTRACTOR, MarkerKind.REJECTED)
# A text after a comma that opens with one of these words and has a verb after it is a clause
# with its own subject (`we propose`, `the same result holds for`), i.e. sentence content.
CLAUSE_SUBJECTS = frozenset({"we", "i", "they", "it", "this", "these", "that", "those", "the", "our", "such", "one"})

# The paper's figures (§4.1, Appendix A), for side-by-side comparison, from their one home
# (ratio_utils/paper_values.toml).
_PAPER = paper_section("lexicon")
PAPER_MANUAL = {Move(move): n for move, n in _PAPER["manual_markers"].items()}
PAPER_LLM_LABELS = dict(_PAPER["llm_labels"])
PAPER_PATTERN_NEW = {Move(move): n for move, n in _PAPER["pattern_new_markers"].items()}
PAPER_TOTAL_MARKERS = _PAPER["total_markers"]
PAPER_MARKERS_IN_DATA = _PAPER["markers_in_data"]


def lexicon_params(cfg: Config) -> LexiconParams:
    params = cfg.section("lexicon", LexiconParams)
    for name in ("reviewers", "generation_models", "generation_moves", "template_ids"):
        setattr(params, name, tuple(getattr(params, name)))
    return params


# --- locating the released file ---------------------------------------------------------------


@dataclass(frozen=True)
class PinnedFile:
    url: str
    sha256: str
    name: str = RELEASED_LEXICON_NAME

    @classmethod
    def load(cls, path: Path = PINNED_LEXICON_FILE) -> "PinnedFile":
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(url=data["url"], sha256=data["sha256"], name=data.get("name", RELEASED_LEXICON_NAME))


def released_lexicon_path(cfg: Config, params: LexiconParams | None = None, pinned: PinnedFile | None = None) -> Path:
    """The released CSV: from the shared folder when present, else downloaded (once) and checked."""
    params = params or lexicon_params(cfg)
    shared_copy = cfg.paths.from_params(params.released_csv)
    if shared_copy.exists():
        return shared_copy
    from ..corpora.download import Checksums, download_file

    pinned = pinned or PinnedFile.load()
    # download_file reuses a verified local copy and keeps nothing whose SHA-256 differs from the pin.
    return download_file(pinned.url, cfg.paths.downloads / "lexicon" / pinned.name,
                         expected=Checksums(sha256=pinned.sha256)).path


# --- reading and validating -------------------------------------------------------------------


@dataclass(frozen=True)
class LexiconRow:
    """One row of the released file, validated; `line` is its line number in the file."""

    line: int
    raw: str
    marker: str
    group: str
    source: MarkerSource
    extendable: bool
    category: str | None
    strength: str | None
    seed: str | None

    @property
    def kind(self) -> MarkerKind:
        if self.group in GROUP_TO_MOVE:
            return MarkerKind.MOVE
        if self.group == REJECTED_GROUP:
            return MarkerKind.REJECTED
        return MarkerKind.DISTRACTOR

    @property
    def move(self) -> Move | None:
        return GROUP_TO_MOVE.get(self.group)


def split_trailing_clause(marker: str) -> tuple[str, str | None]:
    """(opener, clause) when the text after the first comma is a clause with its own subject.

    `to address these limitations, we propose` -> ('to address these limitations', 'we propose');
    `accordingly, to address this` and `at a macro scale, this` have no such clause and come back whole.
    """
    if "," not in marker:
        return marker, None
    head, tail = (part.strip() for part in marker.split(",", 1))
    words = tail.split()
    if head and len(words) >= 2 and words[0] in CLAUSE_SUBJECTS:
        return head, tail
    return marker, None


def _parse_bool(value: str, path: Path, line: int) -> bool:
    text = value.strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0", ""):
        return False
    raise InputError(path, f"special_word must be True or False, got {value!r}", line)


def read_released_lexicon(path: "str | Path") -> tuple[list[LexiconRow], dict[str, Any]]:
    """Read and validate every row; returns the rows and the per-row findings (typos, clauses, ...).

    Raises InputError naming the file and line for a missing column, an unknown group or
    query_type, an empty phrase, a bad special_word or strength value, or a row that repeats
    another row's phrase with a different group.
    """
    path = Path(path)
    findings: dict[str, Any] = {"query_type_typos": [], "trailing_clauses": [], "exact_duplicates": []}
    rows: list[LexiconRow] = []
    seen_raw: dict[str, tuple[int, str]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise InputError(path, f"missing required column(s) {missing}; header is {header}", 1)
        for record in reader:
            line = reader.line_num
            if None in record:  # more fields than the header names
                raise InputError(path, f"row has {len(header) + len(record[None])} fields, header has {len(header)}",
                                 line)
            raw = record["word"] or ""
            marker = normalize_marker(raw)
            if not marker:
                raise InputError(path, "empty marker phrase in column 'word'", line)
            group = (record["group"] or "").strip()
            if group not in KNOWN_GROUPS:
                raise InputError(path, f"unknown group {group!r}; known groups: {list(KNOWN_GROUPS)}", line)
            query_type = (record["query_type"] or "").strip()
            if query_type in QUERY_TYPE_TYPOS:
                findings["query_type_typos"].append({"line": line, "value": query_type,
                                                     "read_as": QUERY_TYPE_TYPOS[query_type]})
                query_type = QUERY_TYPE_TYPOS[query_type]
            if query_type not in QUERY_TYPE_TO_SOURCE:
                raise InputError(path, f"unknown query_type {query_type!r}; known: {list(QUERY_TYPE_TO_SOURCE)}", line)
            extendable = _parse_bool(record["special_word"] or "", path, line)
            source = QUERY_TYPE_TO_SOURCE[query_type]
            if extendable != (source is MarkerSource.EXTENDABLE):
                raise InputError(path, f"special_word={extendable} contradicts query_type {query_type!r}", line)
            strength = (record.get("strength") or "").strip() or None
            if strength is not None and strength not in STRENGTH_LABELS:
                raise InputError(path, f"unknown strength label {strength!r}; known: {list(STRENGTH_LABELS)}", line)
            key = raw.strip()
            if key in seen_raw:
                first_line, first_group = seen_raw[key]
                if first_group != group:
                    raise InputError(
                        path, f"phrase {key!r} repeats line {first_line} with group {group!r} instead of "
                        f"{first_group!r}", line
                    )
                findings["exact_duplicates"].append({"line": line, "first_line": first_line, "raw": key})
                continue
            seen_raw[key] = (line, group)
            opener, clause = split_trailing_clause(marker)
            if clause is not None:
                findings["trailing_clauses"].append({"line": line, "raw": raw, "opener": opener, "clause": clause,
                                                     "group": group})
            rows.append(
                LexiconRow(
                    line=line,
                    raw=raw,
                    marker=marker,
                    group=group,
                    source=source,
                    extendable=extendable,
                    category=(record.get("category") or "").strip() or None,
                    strength=strength,
                    seed=(record.get("raw_word") or "").strip() or None,
                )
            )
    return rows, findings


@dataclass
class Lexicon:
    """The validated lexicon: one row per marker (`frame`) and what validation found (`report`)."""

    frame: pd.DataFrame
    report: dict[str, Any] = field(default_factory=dict)

    def markers(self, move: Move | str | None = None, kind: MarkerKind = MarkerKind.MOVE) -> set[str]:
        rows = self.frame[self.frame["kind"] == kind.value]
        if move is not None:
            rows = rows[rows["move"] == Move.parse(move).value]
        return set(rows["marker"])

    def extendable_connectives(self) -> pd.DataFrame:
        return self.frame[self.frame["extendable"]].reset_index(drop=True)


def _row_rank(row: LexiconRow) -> tuple[int, int, int]:
    return (KIND_PRECEDENCE.index(row.kind), SOURCE_PRECEDENCE.index(row.source), row.line)


def build_lexicon(rows: list[LexiconRow], path: "str | Path") -> Lexicon:
    """Merge rows into one row per marker, enforcing the disjointness of the three move lexicons.

    Raises InputError (naming both lines) when one marker belongs to two moves or to two
    distractor categories; every other merge is recorded in `report['conflicts']`/`['merged']`.
    """
    by_marker: dict[str, list[LexiconRow]] = defaultdict(list)
    for row in rows:
        by_marker[row.marker].append(row)
    records, conflicts, merged = [], [], 0
    for marker, group_rows in by_marker.items():
        group_rows.sort(key=_row_rank)
        best = group_rows[0]
        for kind in (MarkerKind.MOVE, MarkerKind.DISTRACTOR):
            groups = {r.group: r for r in group_rows if r.kind is kind}
            if len(groups) > 1:
                where = ", ".join(f"line {r.line} ({g})" for g, r in groups.items())
                first, second = sorted(groups.values(), key=lambda r: r.line)[:2]
                raise InputError(
                    path,
                    f"marker {marker!r} is in {len(groups)} {kind.value} groups ({where}); "
                    f"the {kind.value} lexicons must be disjoint after normalisation "
                    f"(first seen at line {first.line})",
                    second.line,
                )
        others = [r for r in group_rows[1:] if r.group != best.group]
        if others:
            conflicts.append(
                {
                    "marker": marker,
                    "kept": {"line": best.line, "raw": best.raw, "group": best.group, "kind": best.kind.value},
                    "overridden": [{"line": r.line, "raw": r.raw, "group": r.group, "kind": r.kind.value}
                                   for r in others],
                    "type": f"{best.kind.value}_vs_" + "+".join(sorted({r.kind.value for r in others})),
                }
            )
        merged += len(group_rows) - 1
        same = [r for r in group_rows if r.group == best.group]
        records.append(
            {
                "marker": marker,
                "raw": best.raw,
                "kind": best.kind.value,
                "move": best.move.value if best.move else None,
                "category": best.group if best.kind is MarkerKind.DISTRACTOR else best.category,
                "group": best.group,
                "source": best.source.value,
                # A connective stays extendable if any same-group row says so.
                "extendable": any(r.extendable for r in same),
                "strength": best.strength,
                "_line": best.line,
            }
        )
    frame = pd.DataFrame.from_records(records).sort_values("_line").drop(columns="_line").reset_index(drop=True)
    frame = frame.astype({"extendable": bool})[list(LEXICON_COLUMNS)]
    return Lexicon(frame=frame, report={"conflicts": conflicts, "rows_merged_into_another": merged})


def load_released_csv(path: "str | Path") -> Lexicon:
    """Read, validate and merge the released CSV (or any file in its format)."""
    path = Path(path)
    rows, findings = read_released_lexicon(path)
    lexicon = build_lexicon(rows, path)
    frame = lexicon.frame
    conflicts = lexicon.report["conflicts"]
    lexicon.report = {
        "source": str(path),
        "sha256": sha256_file(path),
        "rows_in_file": len(rows) + len(findings["exact_duplicates"]),
        "markers": len(frame),
        "move_rows_in_file": sum(r.kind is MarkerKind.MOVE for r in rows),
        "by_kind": frame["kind"].value_counts().to_dict(),
        "by_move_and_source": {
            f"{m}/{s}": int(n)
            for (m, s), n in frame[frame["kind"] == "move"].groupby(["move", "source"]).size().items()
        },
        "extendable_connectives": frame.loc[frame["extendable"], "marker"].tolist(),
        "query_type_typos": findings["query_type_typos"],
        "exact_duplicate_rows": findings["exact_duplicates"],
        "trailing_clause_rows": len(findings["trailing_clauses"]),
        "trailing_clause_openers": trailing_clause_openers(findings["trailing_clauses"], frame),
        "trailing_clause_examples": findings["trailing_clauses"][:10],
        "rows_merged_into_another": lexicon.report["rows_merged_into_another"],
        "conflicts_by_type": dict(Counter(c["type"] for c in conflicts)),
        "conflicts": conflicts,
    }
    return lexicon


def trailing_clause_openers(clauses: list[dict], frame: pd.DataFrame) -> dict[str, int]:
    """How the opener (text before the comma) of each trailing-clause row stands in the lexicon.

    `same_move`: the opener is itself a marker of the row's move; `rejected`/`distractor`/
    `other_move`: cutting at the comma would contradict the lexicon; `absent`: the opener has no row.
    """
    status = frame.set_index("marker")[["kind", "group"]]
    counts: Counter = Counter()
    for clause in clauses:
        if clause["opener"] not in status.index:
            counts["absent"] += 1
            continue
        kind, group = status.loc[clause["opener"]]
        if kind == MarkerKind.MOVE.value:
            counts["same_move" if group == clause["group"] else "other_move"] += 1
        else:
            counts[kind] += 1
    return dict(counts)


def conflict_table(lexicon: Lexicon) -> pd.DataFrame:
    """One line per marker whose rows disagreed on its group, with the resolution."""
    rows = []
    for c in lexicon.report.get("conflicts", []):
        rows.append(
            {
                "marker": c["marker"],
                "kept": f"{c['kept']['group']} (line {c['kept']['line']})",
                "overridden": "; ".join(f"{o['group']} (line {o['line']}: {o['raw'].strip()!r})"
                                        for o in c["overridden"]),
                "type": c["type"],
            }
        )
    return pd.DataFrame(rows, columns=["marker", "kept", "overridden", "type"])


def write_lexicon(lexicon: Lexicon, target: "str | Path") -> dict[str, Path]:
    """The artefact: parquet at `target`, CSV beside it, and `<stem>.report.json` (source version, findings)."""
    target = Path(target)
    written = {"parquet": write_parquet_atomic(lexicon.frame, target)}
    with atomic_path(target.with_suffix(".csv")) as tmp:
        lexicon.frame.to_csv(tmp, index=False)
    written["csv"] = target.with_suffix(".csv")
    written["report"] = write_json_atomic(target.with_name(f"{target.stem}.report.json"), lexicon.report)
    return written


def read_artefact_frame(path: "str | Path") -> pd.DataFrame:
    frame = pd.read_parquet(path)
    return require_columns(frame, LEXICON_COLUMNS, path)


def add_markers(lexicon: Lexicon, extra: pd.DataFrame, source: MarkerSource) -> tuple[Lexicon, pd.DataFrame]:
    """Add our own markers (e.g. pattern expansions) that the lexicon lacks; returns the new rows.

    `extra` has columns marker, raw, move, category. A marker already present keeps its row.
    """
    known = set(lexicon.frame["marker"])
    new = extra[~extra["marker"].isin(known)].drop_duplicates("marker").copy()
    new["kind"] = MarkerKind.MOVE.value
    new["group"] = new["move"].map(lambda m: {v.value: k for k, v in GROUP_TO_MOVE.items()}[m])
    new["source"] = source.value
    new["extendable"] = False
    new["strength"] = None
    new = new[list(LEXICON_COLUMNS)]
    frame = pd.concat([lexicon.frame, new], ignore_index=True)
    report = dict(lexicon.report, added={source.value: len(new)})
    return Lexicon(frame=frame, report=report), new


# --- manual curation: the reviewers' decision rule ----------------------------------------------

REJECT = "reject"


def apply_review_rule(sheet: pd.DataFrame, reviewers: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """The paper's rule: a span becomes a marker of move m only if every reviewer chose m in every pair.

    `sheet` has one row per (span, pair) and a column `decision_<reviewer>` per reviewer holding a
    move name, 'reject', or nothing (not yet reviewed). Returns one row per span: the accepted move
    (or None), whether the review is complete, and how many pairs were reviewed.
    """
    columns = [f"decision_{r}" for r in reviewers]
    require_columns(sheet, columns, "review sheet")
    out = []
    for span, rows in sheet.groupby("span", sort=False):
        values = [_parse_decision(v) for column in columns for v in rows[column].tolist()]
        complete = all(v is not None for v in values)
        distinct = set(values)
        move = None
        if complete and len(distinct) == 1 and next(iter(distinct)) != REJECT:
            move = next(iter(distinct))
        out.append({"span": span, "pairs": len(rows), "complete": complete, "accepted_move": move})
    return pd.DataFrame(out, columns=["span", "pairs", "complete", "accepted_move"])


def _parse_decision(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    text = str(value).strip().lower()
    if not text:
        return None
    if text == REJECT:
        return REJECT
    return Move.parse(text).value


def read_review_decisions(directory: "str | Path", reviewers: tuple[str, ...] | list[str]) -> pd.DataFrame | None:
    """Every `*.csv` review sheet with decisions under `directory`, concatenated (None if there is none)."""
    directory = Path(directory)
    files = sorted(directory.glob("*.csv")) if directory.is_dir() else []
    if not files:
        return None
    frames = []
    for path in files:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        needed = ["span"] + [f"decision_{r}" for r in reviewers]
        require_columns(frame, needed, path)
        for i, row in enumerate(frame.itertuples(index=False), start=2):
            for column in needed[1:]:
                try:
                    _parse_decision(getattr(row, column))
                except ValueError as exc:
                    raise InputError(path, f"{column}: {exc}", i) from None
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


# --- Table 4 ------------------------------------------------------------------------------------

SOURCE_LABELS = {
    MarkerSource.MANUAL.value: "Manual curation",
    MarkerSource.EXTENDABLE.value: "Extendable connective",
    MarkerSource.LLM.value: "LLM generation",
    MarkerSource.PATTERN.value: "Pattern expansion",
}
# Per-source totals the paper's text gives or implies (§4.1, Appendix A; the derivation is in paper_values.toml).
PAPER_LEXICON_BY_SOURCE = dict(_PAPER["lexicon_by_source"])


def table4(lexicon: pd.DataFrame, pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Markers by source × move: Lexicon (markers in the lexicon) and Data (markers in ≥1 mined pair).

    `lexicon` is the artefact (LEXICON_COLUMNS); only kind=move rows count. Each extendable
    connective is one row of the artefact, hence one marker however many extensions it has.
    `pairs` has columns `marker` (the lexicon key that matched; for an extendable connective the
    connective itself) and `move`; None leaves the Data columns empty. A pair whose marker is not
    a move marker of the lexicon, or whose move differs from the lexicon's, is an error.
    """
    moves_lex = lexicon[lexicon["kind"] == MarkerKind.MOVE.value]
    if moves_lex["marker"].duplicated().any():
        dup = moves_lex.loc[moves_lex["marker"].duplicated(), "marker"].head(5).tolist()
        raise ValueError(f"lexicon has duplicated move markers, e.g. {dup}")
    occurring: set[str] | None = None
    if pairs is not None:
        used = pairs[["marker", "move"]].drop_duplicates()
        joined = used.merge(moves_lex[["marker", "move"]], on="marker", how="left", suffixes=("", "_lexicon"))
        unknown = joined[joined["move_lexicon"].isna()]
        if len(unknown):
            raise ValueError(f"{len(unknown)} pair marker(s) are not move markers of the lexicon, e.g. "
                             f"{unknown['marker'].head(5).tolist()}")
        wrong = joined[joined["move"] != joined["move_lexicon"]]
        if len(wrong):
            raise ValueError(f"{len(wrong)} pair marker(s) carry a move other than the lexicon's, e.g. "
                             f"{wrong.head(3).to_dict('records')}")
        occurring = set(used["marker"])
    rows = []
    for source in [s.value for s in SOURCE_PRECEDENCE] + ["total"]:
        part = moves_lex if source == "total" else moves_lex[moves_lex["source"] == source]
        row: dict[str, Any] = {"source": SOURCE_LABELS.get(source, "Total")}
        for move in MOVES:
            in_move = part[part["move"] == move.value]
            row[f"{move.value}_lexicon"] = len(in_move)
            row[f"{move.value}_data"] = None if occurring is None else int(in_move["marker"].isin(occurring).sum())
        row["total_lexicon"] = len(part)
        row["total_data"] = None if occurring is None else int(part["marker"].isin(occurring).sum())
        row["paper_lexicon"] = PAPER_TOTAL_MARKERS if source == "total" else PAPER_LEXICON_BY_SOURCE[source]
        row["paper_data"] = PAPER_MARKERS_IN_DATA if source == "total" else None
        rows.append(row)
    table = pd.DataFrame(rows)
    data_cols = [c for c in table.columns if c.endswith("_data")]
    table[data_cols] = table[data_cols].astype("Int64")
    return table


def table4_notes(table: pd.DataFrame) -> list[str]:
    """The reconciliation of Table 4's LLM and pattern rows with the paper's counts, computed from the table.

    The released file files the paper's Address pattern markers under LLM generation (it has no
    Address pattern rows), so our LLM row holds them and our pattern row has Broaden's only; the
    rest of the gap is rows merged here because they repeat a marker up to case or a trailing comma.
    """
    by_source = table.set_index("source")
    llm, pattern = (by_source.loc[SOURCE_LABELS[MarkerSource.LLM.value]],
                    by_source.loc[SOURCE_LABELS[MarkerSource.PATTERN.value]])
    ours_llm, ours_pattern = int(llm["total_lexicon"]), int(pattern["total_lexicon"])
    paper_llm, paper_pattern = PAPER_LEXICON_BY_SOURCE["llm"], PAPER_LEXICON_BY_SOURCE["pattern"]
    address_pattern = PAPER_PATTERN_NEW[Move.ADDRESS]
    together, paper_together = ours_llm + ours_pattern, paper_llm + paper_pattern
    return [
        f"LLM generation {ours_llm:,} vs the paper's {paper_llm:,}, pattern expansion {ours_pattern:,} vs "
        f"{paper_pattern:,}: the released file files the paper's {address_pattern} Address pattern markers as "
        f"LLM-generated (it has no Address pattern rows), so they sit in our LLM row ({ours_llm:,} - "
        f"{address_pattern} = {ours_llm - address_pattern:,}) and our pattern row holds Broaden's "
        f"{int(pattern['broaden_lexicon'])} only (the paper: {address_pattern} Address + "
        f"{PAPER_PATTERN_NEW[Move.BROADEN]} Broaden).",
        f"LLM + pattern together: {together:,} here vs {paper_together:,} in the paper; the "
        f"{paper_together - together:,} "
        "missing are released rows that repeat a marker up to case or a trailing comma and are merged into one marker "
        "here (tables/table4_lexicon notes). tables/llm_marker_labels rebuilds the paper's 3,779 strong-true LLM "
        "markers from the file's rows; tables/pattern_regeneration shows which pattern rows our templates regenerate.",
    ]


def manual_count_notes(table: pd.DataFrame, released_rows: pd.DataFrame) -> list[str]:
    """Why a move's manual-curation count differs from the paper's (84 + 13 + 72), from the released file's rows.

    `released_rows` is `read_released_csv_rows` of the released file: its manual rows of a move, and the
    distinct markers they give, say whether the difference is in the release or in our reading of it.
    """
    by_source = table.set_index("source")
    manual = by_source.loc[SOURCE_LABELS[MarkerSource.MANUAL.value]]
    extendable = (by_source.loc[SOURCE_LABELS[MarkerSource.EXTENDABLE.value]]
                  if SOURCE_LABELS[MarkerSource.EXTENDABLE.value] in by_source.index else None)
    notes = []
    for move, paper in PAPER_MANUAL.items():
        ours = int(manual[f"{move.value}_lexicon"])
        if ours == paper:
            continue
        rows = released_rows[(released_rows["move"] == move.value)
                             & (released_rows["source"] == MarkerSource.MANUAL.value)]
        distinct = rows["marker"].nunique()
        n_extendable = 0 if extendable is None else int(extendable[f"{move.value}_lexicon"])
        reason = (f"the released file has {len(rows)} {move.value.capitalize()} rows with query_type manual, "
                  f"{distinct} distinct markers after normalisation")
        if distinct == ours:
            reason += (f": the release itself holds {ours}, so the {abs(paper - ours)} "
                       f"{'missing are not in it' if ours < paper else 'extra are in it'} (nothing is lost or added "
                       "here)")
            if n_extendable and ours < paper:
                short = paper - ours - n_extendable
                reason += (f" (with its {n_extendable} {move.value.capitalize()} extendable connectives, counted in "
                           f"their own row, {ours + n_extendable} is still {short} "
                           f"{'short of' if short > 0 else 'beyond'} {paper})"
                           if short else f" (the paper may count its {n_extendable} extendable connectives as manual)")
        notes.append(f"Manual curation {move.value.capitalize()}: {ours} here vs the paper's {paper}: {reason}.")
    return notes


def read_released_csv_rows(path: "str | Path") -> pd.DataFrame:
    """The released file's rows as read (validated), with line numbers, for per-row comparisons."""
    rows, _ = read_released_lexicon(path)
    return pd.DataFrame([dataclasses.asdict(r) | {"kind": r.kind.value, "move": r.move.value if r.move else None}
                         for r in rows])


def read_artefact(path: "str | Path") -> Lexicon:
    """The artefact and its report, as `write_lexicon` left them."""
    path = Path(path)
    if not path.exists():  # e.g. outputs of a run from before the curated lexicon had its own file
        raise FileNotFoundError(f"{path}: no lexicon artefact; notebook 01 writes the curated lexicon, 04 the final "
                                "one")
    report_path = path.with_name(f"{path.stem}.report.json")
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    return Lexicon(frame=read_artefact_frame(path), report=report)


def report_summary(lexicon: Lexicon) -> pd.DataFrame:
    """The validation report as a two-column table (what a notebook shows)."""
    r = lexicon.report
    items = [
        ("source file", r.get("source")),
        ("SHA-256", r.get("sha256")),
        ("rows in the file", r.get("rows_in_file")),
        ("markers after normalisation", r.get("markers")),
        ("markers by kind", r.get("by_kind")),
        ("move markers by move/source", r.get("by_move_and_source")),
        ("extendable connectives", len(r.get("extendable_connectives", []))),
        ("query_type typos read as 'manual'",
         [f"line {t['line']}: {t['value']!r}" for t in r.get("query_type_typos", [])]),
        ("exact duplicate rows dropped", len(r.get("exact_duplicate_rows", []))),
        ("rows folded into a marker of another row", r.get("rows_merged_into_another")),
        ("rows with a clause after an inner comma (kept whole)", r.get("trailing_clause_rows")),
        ("  their openers in the lexicon", r.get("trailing_clause_openers")),
        ("markers whose rows disagree on the group", r.get("conflicts_by_type")),
    ]
    return pd.DataFrame([(k, str(v)) for k, v in items], columns=["item", "value"])
