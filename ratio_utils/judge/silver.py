"""The silver set and the rows of notebook 07's tables: the silver pairs written from the judge's verdicts (or a
stale set removed), who judged them (the label source), what replay left unanswered, the silver summary and
Table 9 (prompt–human and human–human agreement), and the paper's Table 9 values, shown beside ours in separate
tables. `ratio_utils.stages.silver_filter` runs the steps in the notebook's order and writes the tables.

Reads nothing itself; writes `<benchmark>/data/<move>/silver.parquet` and the silver set's label source
(`write_silver`), or removes them (`remove_stale_silver`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..dataset.benchmark import pairs_path, write_pairs
from ..paper_values import paper_section
from ..publish.label_sources import REPLAYED_FROM, LabelSource, remove_silver_source, write_silver_source
from ..schema import MOVES, PAIR_COLUMNS, Move, Split
from .agreement_stats import human_panel_agreement, rater_panel_agreement, single_annotator_agreement
from .labels import calibration_reference, panel_labels
from .sampling import has_explicit_anaphor, pair_ids
from .verdicts import FIXED_IN_PARAMS, accepted_ids, both_rule, verdict_matrix

# (move, statistic, value as printed in §4.3 / Appendix E), from their one home, ratio_utils/paper_values.toml
PAPER_TABLE9_TEXT = [(row["move"], row["statistic"], row["value"]) for row in paper_section("table9")["rows"]]

TABLE9_COLUMNS = ["move", "rater", "panel_F1", "panel_Agr", "panel_F1_majority", "panel_F1_unanimous",
                  "single_P", "single_R", "single_F1", "single_kappa", "single_Agr", "n_panel", "n_single"]


TABLE9_NOTES = [
    "Left (panel_*): held-out pairs labelled by every panel annotator; Human = mean over pairs of annotators, "
    "prompt rows = mean over prompt–annotator pairs; majority/unanimous = F1 against the panel's majority "
    "label / on the pairs the panel agrees on. Right (single_*): against the calibration annotator. Agr in %.",
    "The paper's values are in table9_paper_reference (kept apart: they are not ours).",
]


def paper_table9() -> pd.DataFrame:
    return pd.DataFrame(PAPER_TABLE9_TEXT, columns=["move", "statistic", "paper value"])


# -- Table 9 ---------------------------------------------------------------------------------------------------
def table9_rows(labels: pd.DataFrame, retained: dict[Move, list[str]], judgements: pd.DataFrame | None,
                n_retained: int, calibration_annotator: str | None) -> pd.DataFrame:
    """Per move: the panel's human–human agreement, and each retained prompt and their conjunction ("Both (AND)")
    against the panel and against the calibration annotator (from the calibration judgements)."""
    rows = []
    for move in MOVES:
        panel = panel_labels(labels, move) if not labels.empty else pd.DataFrame()
        reference = (calibration_reference(labels, move, calibration_annotator) if not labels.empty
                     else pd.Series(dtype="object"))
        human = {"move": move.value, "rater": "Human", "n_panel": len(panel)}
        if panel.shape[1] >= 2:
            human.update(human_panel_agreement(panel))
        rows.append(human)
        names = retained.get(move) or [f"retained prompt {i + 1} (not selected here)" for i in range(n_retained)]
        verdicts = verdict_matrix(judgements, move) if judgements is not None else pd.DataFrame()
        raters = {name: verdicts[name] for name in names if name in verdicts.columns}
        if len(raters) == len(names) and raters:
            raters["Both (AND)"] = both_rule(verdicts, names)
        for name in names + ["Both (AND)"]:
            row = {"move": move.value, "rater": name, "n_panel": len(panel)}
            if name in raters:
                rater = raters[name].astype("object").where(raters[name].notna(), None)
                if len(panel):
                    row.update(rater_panel_agreement(panel, rater))
                if len(reference):
                    row.update(single_annotator_agreement(reference, rater))
            rows.append(row)
    return pd.DataFrame(rows).reindex(columns=TABLE9_COLUMNS)


# -- the silver set ----------------------------------------------------------------------------------------------
def silver_summary(test_pairs: dict[Move, pd.DataFrame], samples: dict[Move, pd.DataFrame],
                   retained: dict[Move, list[str]], verdicts: pd.DataFrame | None,
                   replay_misses: dict[str, int]) -> pd.DataFrame:
    """Per move: test pairs, sampled, judged (a usable verdict from every retained prompt), each prompt's accept
    rate, pairs without a verdict, replay misses and the silver pairs; `verdicts` None: nothing judged here."""
    rows = []
    for move in MOVES:
        sample = samples.get(move, pd.DataFrame())
        row = {"move": move.value, "test pairs": len(test_pairs.get(move, [])), "sampled": len(sample),
               "judged": 0, "retained prompts": ", ".join(retained.get(move, [])) or "—"}
        if verdicts is not None:
            part = verdicts[verdicts["move"] == move.value]
            row["judged"] = int(part[[f"accept[{p}]" for p in retained[move]]].notna().all(axis=1).sum())
            for p in retained[move]:
                # over the pairs this prompt judged (replay misses and errors left out)
                row[f"accepted by prompt {retained[move].index(p) + 1} %"] = (
                    100 * part[f"accept[{p}]"].astype("boolean").mean())
            row["no verdict"] = int(part["accepted"].isna().sum())
            row["replay misses"] = replay_misses.get(move.value, 0)
            row["silver"] = int(part["accepted"].fillna(False).astype(bool).sum())
            row["silver written"] = True
        else:
            row["silver"] = np.nan
            row["silver written"] = False
        rows.append(row)
    return pd.DataFrame(rows)


def with_release_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Pairs read from the official release may lack our extra columns; fill what can be derived."""
    frame = frame.copy()
    if "marker_has_anaphor" not in frame.columns:
        frame["marker_has_anaphor"] = frame["queryTerm"].map(has_explicit_anaphor)
    for column in PAIR_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.NA
    return frame


def write_silver(benchmark_dir: Path, test_pairs: dict[Move, pd.DataFrame], verdicts: pd.DataFrame,
                 source: LabelSource) -> None:
    """`<benchmark>/data/<move>/silver.parquet`: the test pairs every retained prompt accepts, and who judged them."""
    for move in MOVES:
        accepted = set(accepted_ids(verdicts, move))
        silver = test_pairs[move].loc[pair_ids(test_pairs[move]).isin(accepted)]
        write_pairs(with_release_columns(silver.drop_duplicates(["query_id", "gold_id"])), benchmark_dir, move,
                    Split.SILVER)
    write_silver_source(benchmark_dir, source)


def remove_stale_silver(benchmark_dir: Path) -> list[Path]:
    """Remove a silver set (and its label source) this run cannot reproduce; the files removed."""
    remove_silver_source(benchmark_dir)
    removed = []
    for move in MOVES:
        path = pairs_path(benchmark_dir, move, Split.SILVER)
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed


def judge_label_source(verdicts: pd.DataFrame, judgements: pd.DataFrame, retained: dict[Move, list[str]],
                       fixed_in_params: bool, configured: str, replayed: bool) -> LabelSource:
    """Who judged this silver set, with which prompts, and how many sampled pairs got no verdict."""
    detail = {
        "prompts": {m.value: list(retained[m]) for m in MOVES},
        "prompts chosen by": FIXED_IN_PARAMS if fixed_in_params else "calibration F1",
        "rule": "a pair is silver when every retained prompt accepts it",
        "sampled pairs": {m.value: int((verdicts["move"] == m.value).sum()) for m in MOVES},
        "pairs without a verdict": {m.value: int(verdicts.loc[verdicts["move"] == m.value, "accepted"].isna().sum())
                                    for m in MOVES},
        "silver pairs": {m.value: len(accepted_ids(verdicts, m)) for m in MOVES},
    }
    return LabelSource(role="judge", configured=configured,
                       answered_by=tuple(sorted(set(judgements["answered_by"].dropna()))),
                       replayed_from=REPLAYED_FROM if replayed else None, detail=detail)


# -- notes -------------------------------------------------------------------------------------------------------
def provenance_notes(judgements: pd.DataFrame, configured: str, replayed: bool, dry_run: bool) -> list[str]:
    """Who answered (the responses' `model` field, beside the configured one) and what replay missed."""
    notes = []
    answered = sorted(set(judgements["answered_by"].dropna()))
    if not dry_run and answered:
        where = (f"answers replayed from {REPLAYED_FROM}" if replayed
                 else "answers from the endpoint or the response cache")
        notes.append(f"judge: {configured} configured; {where}, produced by {', '.join(answered)}.")
    misses = judgements[judgements["replay_miss"]]
    if len(misses):
        per_move = misses.groupby("move")["pair_id"].agg(["size", "nunique"])
        detail = "; ".join(f"{m}: {int(r['size'])} request(s), {int(r['nunique'])} pair(s)"
                           for m, r in per_move.iterrows())
        notes.append(f"Partial replay: {len(misses)} of {len(judgements)} judge request(s) have no recorded "
                     f"response ({detail}); a pair with a missing verdict is not silver (replay_miss in "
                     "judgements.parquet names them).")
    return notes


def no_judge_note(why: str, labels_dir: Path | None = None) -> str:
    """Why nothing was judged here, and (with `labels_dir`) how to run for real."""
    note = (f"No LLM judge here ({why}): judge cells are empty, no label was invented and the silver set was not "
            "written (later stages use the unfiltered test set).")
    if labels_dir is None:
        return note
    return (note + " To run for real, set llm.base_url and llm.model, export the key named by llm.api_key_env "
            f"(default OPENAI_API_KEY), keep llm.mode: batch, and put label files in {labels_dir}.")


def unanswered_note(verdicts: pd.DataFrame, request_files: str | None) -> str | None:
    """How many judged pairs have no answer (per move, per wave of a nested sample): left out of the silver set,
    never counted as rejected; None when every pair was answered."""
    if "unanswered" not in verdicts.columns:
        return None
    part = verdicts[verdicts["unanswered"].fillna(False).astype(bool)]
    if part.empty:
        return None
    per_move = "; ".join(
        f"{m}: {len(g)} of {int((verdicts['move'] == m).sum())}"
        + (f" (wave {', '.join(f'{w}: {n}' for w, n in g['wave'].value_counts().sort_index().items())})"
           if verdicts.loc[verdicts["move"] == m, "wave"].max() > 1 else "")
        for m, g in part.groupby("move", sort=True))
    where = f" written as Batch API request files to {request_files} (a dry run)" if request_files else ""
    return (f"{len(part)} judged pair(s) are unanswered (no recorded answer for a retained prompt; {per_move}):"
            f"{where}; they are left out of the silver set and never counted as rejected.")


def portable(notes: list[str], places: dict[str, str]) -> list[str]:
    """Notes as written into tables: each absolute path of `places` (longest first) replaced by how it is shown
    (`.`, `../shared`), so that no machine path is written."""
    out = []
    for note in notes:
        for absolute, shown in sorted(places.items(), key=lambda item: -len(item[0])):
            note = note.replace(absolute + "/", shown + "/").replace(absolute, shown)
        out.append(note)
    return out
