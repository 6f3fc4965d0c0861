"""Human annotation: the calibration/panel subsets, the annotation sheets and the label files.

Writes `<out_dir>/annotation/<move>_<set>.csv|html` (a sheet to fill in and its HTML view); reads
every label CSV under `judge.labels_dir`, failing with the file and line of a bad cell.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..io import InputError, require_columns, write_text_atomic
from ..schema import Move
from .sampling import first_wave, with_pair_columns

ANNOTATION_SETS = ("calibration", "panel")
_TRUE = {"1", "true", "yes", "y", "accept", "accepted"}
_FALSE = {"0", "false", "no", "n", "reject", "rejected"}


# --------------------------------------------------------------------------------------------
# annotation sheets and label files
# --------------------------------------------------------------------------------------------

SHEET_COLUMNS = ("pair_id", "move", "set", "annotator", "label", "comment", "judge_text",
                 "querySentence", "queryTerm", "goldSentence")


def annotation_pairs(sample: pd.DataFrame, n_calibration: int, n_panel: int, seed: int) -> dict[str, pd.DataFrame]:
    """Two disjoint random subsets of a move's sample: calibration pairs, then held-out panel pairs.

    When the sample is smaller than `n_calibration + n_panel` (e.g. a move with few test pairs), the
    pairs are shared in the ratio of the two sizes, so that the panel is not left empty and the
    judge's agreement with it can still be computed.
    """
    order = sample.sample(frac=1.0, random_state=seed)
    if len(order) < n_calibration + n_panel and n_calibration + n_panel > 0:
        n_calibration = int(round(len(order) * n_calibration / (n_calibration + n_panel)))
    return {"calibration": order.iloc[:n_calibration], "panel": order.iloc[n_calibration:n_calibration + n_panel]}


def write_annotation_sheet(pairs: pd.DataFrame, move: Move, which: str, guideline: str, out_dir: Path) -> list[Path]:
    """A CSV to fill in (label: 1 = accept, 0 = reject; annotator: your id) and an HTML view of it."""
    sheet = pd.DataFrame({
        "pair_id": pairs["pair_id"], "move": move.value, "set": which, "annotator": "", "label": "", "comment": "",
        "judge_text": pairs["judge_text"], "querySentence": pairs["querySentence"],
        "queryTerm": pairs["queryTerm"], "goldSentence": pairs["goldSentence"],
    })[list(SHEET_COLUMNS)]
    csv_path = out_dir / f"{move.value}_{which}.csv"
    write_text_atomic(csv_path, sheet.to_csv(index=False))
    rows = "\n".join(
        f"<tr><td>{i + 1}</td><td><code>{html.escape(pid)}</code></td><td>{html.escape(text)}</td>"
        f"<td>&#9744; accept &#9744; reject</td></tr>"
        for i, (pid, text) in enumerate(zip(sheet.pair_id, sheet.judge_text))
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{move.value} {which} pairs</title>"
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto}td{vertical-align:top;padding:.4em;"
        "border-bottom:1px solid #ccc}pre{white-space:pre-wrap;background:#f6f6f6;padding:1em}</style></head><body>"
        f"<h1>{move.value.capitalize()}: {which} pairs ({len(sheet)})</h1>"
        "<p>Label each pair in the CSV sheet of the same name: <b>label</b> 1 (accept) or 0 (reject), "
        "<b>annotator</b> your id. The guideline is the judging prompt below.</p>"
        f"<pre>{html.escape(guideline)}</pre><table><tr><th>#</th><th>pair_id</th><th>pair</th><th>label</th></tr>"
        f"{rows}</table></body></html>"
    )
    html_path = write_text_atomic(out_dir / f"{move.value}_{which}.html", page)
    return [csv_path, html_path]


def write_annotation_sheets(samples: dict[Move, pd.DataFrame], prompts: dict[Move, list], guideline_prompt: str,
                            n_calibration: int, n_panel: int, seed: int,
                            out_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    """Every move's calibration and panel sheets, drawn from the sample's first wave (labels made on them stay valid
    as waves are added).

    Args:
        samples: each move's pairs sampled for the judge (with their waves).
        prompts: each move's judge prompts; the one named `guideline_prompt` (else the first) is the sheet's guideline.
        guideline_prompt: the prompt shown to annotators as the guideline.
        n_calibration: calibration pairs wanted per move.
        n_panel: held-out panel pairs wanted per move.
        seed: the draw's seed.
        out_dir: where the sheets are written.

    Returns:
        (one row per sheet written: move, set, pairs, file; a note per move with fewer pairs than wanted)."""
    rows, notes = [], []
    for move, sample in samples.items():
        sample = first_wave(sample, move)
        guideline = next((p.text for p in prompts[move] if p.name == guideline_prompt),
                         prompts[move][0].text if prompts[move] else "")
        subsets = annotation_pairs(sample, n_calibration, n_panel, seed)
        if len(sample) < n_calibration + n_panel:
            notes.append(
                f"{move.value}: only {len(sample)} pair(s) to annotate (fewer than judge.n_calibration + "
                f"judge.n_panel = {n_calibration + n_panel}); shared in that ratio: {len(subsets['calibration'])} "
                f"calibration, {len(subsets['panel'])} panel pair(s).")
        for which, pairs in subsets.items():
            for path in write_annotation_sheet(pairs, move, which, guideline, out_dir):
                rows.append({"move": move.value, "set": which, "pairs": len(pairs), "file": str(path)})
    return pd.DataFrame(rows), notes


def parse_label(value: Any) -> int | None:
    """1, 0, or None for a blank cell; anything else raises ValueError."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    text = str(value).strip().lower()
    if text == "":
        return None
    if text in _TRUE:
        return 1
    if text in _FALSE:
        return 0
    raise ValueError(f"label {value!r} is not one of 1/0, yes/no, true/false, accept/reject")


def load_label_files(labels_dir: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """All label CSVs under `labels_dir` as (pair_id, move, set, annotator, label) and skip counts.

    Bad cells raise InputError naming the file and line; blank labels are counted, not kept.
    """
    columns = ["pair_id", "move", "set", "annotator", "label"]
    counts = {"files": 0, "labels": 0, "blank": 0}
    frames = []
    for path in sorted(Path(labels_dir).rglob("*.csv")) if Path(labels_dir).is_dir() else []:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        require_columns(frame, columns, path)
        counts["files"] += 1
        rows = []
        for offset, row in enumerate(frame[columns].itertuples(index=False)):
            line = offset + 2  # header is line 1
            try:
                label = parse_label(row.label)
            except ValueError as exc:
                raise InputError(path, str(exc), line=line) from None
            if label is None:
                counts["blank"] += 1
                continue
            try:
                move = Move.parse(row.move).value
            except ValueError as exc:
                raise InputError(path, str(exc), line=line) from None
            if row.set not in ANNOTATION_SETS:
                raise InputError(path, f"set {row.set!r} is not one of {ANNOTATION_SETS}", line=line)
            if not row.annotator.strip():
                raise InputError(path, "annotator is blank", line=line)
            rows.append((row.pair_id, move, row.set, row.annotator.strip(), label))
        frames.append(pd.DataFrame(rows, columns=columns))
    labels = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    labels["label"] = labels["label"].astype(int)
    conflicts = labels.groupby(["pair_id", "move", "set", "annotator"])["label"].nunique()
    if (conflicts > 1).any():
        bad = conflicts[conflicts > 1].index[:5].tolist()
        raise InputError(labels_dir, f"an annotator gave two different labels to the same pair: {bad}")
    labels = labels.drop_duplicates(["pair_id", "move", "set", "annotator"]).reset_index(drop=True)
    counts["labels"] = len(labels)
    return labels, counts


LABEL_COLUMNS = ["pair_id", "move", "set", "annotator", "label"]


def label_summary(labels: pd.DataFrame) -> pd.DataFrame:
    """Pairs, annotators, labels and the accept rate per (move, set)."""
    summary = labels.groupby(["move", "set"]).agg(pairs=("pair_id", "nunique"), annotators=("annotator", "nunique"),
                                                  labels=("label", "size"), accept_rate=("label", "mean"))
    return summary.reset_index()


def calibration_reference(labels: pd.DataFrame, move: Move, annotator: str | None) -> pd.Series:
    """The calibration annotator's labels of `move` by pair id (`annotator` names them when several labelled)."""
    part = labels[(labels["move"] == move.value) & (labels["set"] == "calibration")]
    annotators = sorted(part["annotator"].unique())
    if annotator:
        part = part[part["annotator"] == annotator]
    elif len(annotators) > 1:
        raise ValueError(f"{move.value}: calibration pairs were labelled by {annotators}; "
                         "set judge.calibration_annotator")
    return part.set_index("pair_id")["label"].astype("object")


def panel_labels(labels: pd.DataFrame, move: Move) -> pd.DataFrame:
    """The panel's labels of `move`: one row per pair, one column per annotator."""
    part = labels[(labels["move"] == move.value) & (labels["set"] == "panel")]
    return part.pivot_table(index="pair_id", columns="annotator", values="label", aggfunc="first")


def labelled_pairs(labels: pd.DataFrame, test_pairs: pd.DataFrame, move: Move, notes: list[str]) -> pd.DataFrame:
    """The test pairs of `move` that carry a label (the judge's view added); labelled pair ids that are not in this
    test set are counted in `notes`."""
    ids = set(labels.loc[labels["move"] == move.value, "pair_id"])
    frame = with_pair_columns(test_pairs)
    found = frame[frame["pair_id"].isin(ids)].drop_duplicates("pair_id")
    if len(found) < len(ids):
        notes.append(f"{move.value}: {len(ids) - len(found)} labelled pair(s) are not in this test set "
                     "and were not judged.")
    return found
