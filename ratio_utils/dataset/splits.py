"""Stage 06's temporal split: which split (or which exclusion reason) each paper gets.

Split windows are inclusive at both ends. Two kinds of window, never mixed in one config:
* `split_by: date` — windows of ISO dates (`2015-01-01` … `2025-09-30`). A paper with a year but no
  date is assigned only when its whole year lies inside one window (`year_only: whole_year`), or is
  excluded (`year_only: exclude`);
* `split_by: year` — windows of years (`end: 2006` takes every paper of 2006); a paper's year is its
  `year`, or the year of its `date` when `year` is missing.
Papers that no window takes are excluded and counted by reason (`no_date`, `year_only_ambiguous`,
`outside_windows`, `outside_fractions`).

Windows never overlap, with one exception: splits that share one window, each with a `fraction`, divide
that window's papers by a seeded hash of the paper id (`hash_seed`, `schema.seeded_hash`: SHA-1, so a paper
lands in the same split on every run and machine, whatever the order of the papers or PYTHONHASHSEED):

    validation: {start: 2025, end: 2025, fraction: 1/3}   # a number or a ratio "a/b"
    test:       {start: 2025, end: 2025, fraction: 2/3}

Every split of such a group names the same start and end; the fractions sum to at most 1, and the
papers the fractions leave over are excluded (`outside_fractions`). The window is checked first, as for
any split (a 2024 paper is `outside_windows` here), and the paper's hash position in [0, 1) then picks
the split whose share of the cumulative fractions it falls in, in the order train, validation, test.
Without a `fraction`, the paper id plays no part in the assignment.
"""

from __future__ import annotations

import datetime as _dt
from fractions import Fraction

import pandas as pd

from ..param_sections import DatasetParams, SplitWindow
from ..schema import SEEDED_HASH_RANGE, seeded_hash


def hash_position(paper_id: str, seed: int) -> Fraction:
    """Where a paper falls in [0, 1) for the fraction split, exactly: schema.seeded_hash of its id."""
    return Fraction(seeded_hash(seed, paper_id), SEEDED_HASH_RANGE)


def _pick_by_fraction(group: list["SplitWindow"], paper_id, seed: int) -> tuple[str | None, str | None]:
    """The split of a paper inside a window shared by fraction, or (None, "outside_fractions")."""
    if paper_id is None:
        raise ValueError(f"splits {[w.name for w in group]} divide a window by paper id: "
                         "assign_split needs the paper_id")
    position = hash_position(str(paper_id), seed)
    upper = Fraction(0)
    for window in group:
        upper += window.fraction
        if position < upper:
            return window.name, None
    return None, "outside_fractions"


def _as_date(value) -> _dt.date | None:
    if value is None:
        return None
    stamp = pd.to_datetime(value, errors="coerce")
    return None if pd.isna(stamp) else stamp.date()


def _as_year(value) -> int | None:
    if value is None or pd.isna(value):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def assign_split(year, date, params: DatasetParams, windows: list[SplitWindow] | None = None,
                 paper_id: str | None = None) -> tuple[str | None, str | None]:
    """(split, None) for a paper, or (None, reason) when no window takes it. `paper_id` is needed only
    where splits divide a window by fraction (it decides nothing otherwise)."""
    windows = windows if windows is not None else params.windows()
    day = _as_date(date)
    year = _as_year(year)
    if params.split_by == "year":
        year = year if year is not None else (day.year if day else None)
        if year is None:
            return None, "no_date"
        found = [w for w in windows if w.contains(year)]
    elif day is not None:
        found = [w for w in windows if w.contains(day)]
    elif year is None:
        return None, "no_date"
    elif params.year_only == "exclude":
        return None, "year_only_ambiguous"
    else:
        first, last = _dt.date(year, 1, 1), _dt.date(year, 12, 31)
        found = [w for w in windows if w.contains(first) and w.contains(last)]
        if not found:
            touched = any(w.contains(first) or w.contains(last) for w in windows)
            return None, ("year_only_ambiguous" if touched else "outside_windows")
    if not found:
        return None, "outside_windows"
    if found[0].fraction is None:  # windows without a fraction never overlap (DatasetParams.window_groups)
        return found[0].name, None
    return _pick_by_fraction(found, paper_id, params.hash_seed)


def paper_splits(frames: list[pd.DataFrame], params: DatasetParams) -> pd.DataFrame:
    """One row per paper (corpus, paper_id) seen in any frame: year, date, split, excluded_reason."""
    columns = ["corpus", "paper_id", "year", "date"]
    papers = (pd.concat([f[columns] for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames)
              else pd.DataFrame(columns=columns))
    papers = papers.drop_duplicates(["corpus", "paper_id"]).reset_index(drop=True)
    windows = params.windows()
    decided = [assign_split(y, d, params, windows, paper_id=p)
               for y, d, p in zip(papers["year"], papers["date"], papers["paper_id"])]
    papers["split"] = [s for s, _ in decided]
    papers["excluded_reason"] = [r for _, r in decided]
    return papers

