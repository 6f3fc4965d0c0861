"""Notebook 07 step by step (`SilverFilter`): sample, annotation sheets, labels, the judge's
verdicts, prompt selection, Table 9, the silver set and the anaphora table; and the paper's
reported values, shown beside ours in separate columns.

Reads the benchmark's test pairs, the prompts and the label files; writes the silver set, the
judgements and the tables listed in the package docstring (`ratio_utils.judge`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..config import REPO_ROOT, Config
from ..dataset.benchmark import load_benchmark, pairs_path, write_pairs
from ..io import write_parquet_atomic
from ..llm import LLMClient
from ..param_sections import JudgeParams
from ..publish.label_sources import REPLAYED_FROM, LabelSource, remove_silver_source, write_silver_source
from ..publish.published import write_table
from ..schema import MOVES, PAIR_COLUMNS, Move, Split, normalize_marker
from .agreement_stats import human_panel_agreement, rater_panel_agreement, single_annotator_agreement
from .anaphora import anaphora_analysis
from .labels import annotation_pairs, load_label_files, write_annotation_sheet
from ..llm.prompts import load_prompts, prompt_table
from .sampling import has_explicit_anaphor, pair_ids, sample_for_judging, with_pair_columns
from .verdicts import both_rule, judge_pairs, select_prompts, verdict_matrix

# Values reported in the paper (Appendix E), shown in separate "paper" columns, never as ours.
PAPER_ANAPHORA = {"address": {"paper: share with anaphor %": 93.4, "paper: accept with anaphor %": 71.9,
                              "paper: accept without anaphor %": 27.7, "paper: odds ratio": 6.7}}
PAPER_TABLE9_TEXT = [  # (move, statistic, value as printed in §4.3 / Appendix E)
    ("specify", "retained prompts vs calibration annotator, F1 (100 pairs)", ".86–.88"),
    ("address", "retained prompts vs calibration annotator, F1 (100 pairs)", ".85"),
    ("broaden", "retained prompts vs calibration annotator, F1 (100 pairs)", ".77–.79"),
    ("specify", "mean pairwise annotator F1 (panel, 60 pairs)", ".90"),
    ("address", "mean pairwise annotator F1 (panel, 60 pairs)", ".87"),
    ("broaden", "mean pairwise annotator F1 (panel, 60 pairs)", ".82"),
    ("specify", "retained prompts, mean F1 against one annotator (panel)", ".87–.91"),
    ("address", "retained prompts, mean F1 against one annotator (panel)", ".73–.76"),
    ("broaden", "retained prompts, mean F1 against one annotator (panel)", ".75–.81"),
    ("specify", "retained prompts, F1 against the majority label (panel)", ".88"),
    ("address", "retained prompts, F1 against the majority label (panel)", ".83"),
    ("broaden", "retained prompts, F1 against the majority label (panel)", ".76"),
    ("specify", "retained prompts, F1 on unanimous pairs (panel)", ".96"),
    ("address", "retained prompts, F1 on unanimous pairs (panel)", ".82"),
    ("broaden", "retained prompts, F1 on unanimous pairs (panel)", ".86"),
]


# --------------------------------------------------------------------------------------------
# the notebook's steps
# --------------------------------------------------------------------------------------------

FIXED_IN_PARAMS = "fixed in params (judge.retained)"  # a prompt used without selection by calibration F1

TABLE9_COLUMNS = ["move", "rater", "panel_F1", "panel_Agr", "panel_F1_majority", "panel_F1_unanimous",
                  "single_P", "single_R", "single_F1", "single_kappa", "single_Agr", "n_panel", "n_single"]


class SilverFilter:
    """Notebook 07 step by step; each method returns the frame the notebook displays.

    State carried between steps: the prompts, the judged sample, the labels, the judge's verdicts
    and the retained prompts. `notes` collects what could not be done here and why; every table
    written carries them.
    """

    def __init__(self, cfg: Config, params: JudgeParams, client: LLMClient):
        self.cfg = cfg
        self.params = params
        self.client = client
        self.prompts_dir = cfg.paths.from_params(params.prompts_dir)
        self.labels_dir = cfg.paths.from_params(params.labels_dir)
        self.out_dir = cfg.paths.from_params(params.out_dir)
        self.benchmark_dir = cfg.paths.benchmark
        self.prompts = load_prompts(self.prompts_dir)
        self.online, self.why = client.available()
        self.dry_run = client.settings.mode == "dry_run"
        self.notes: list[str] = []
        self.test_pairs: dict[Move, pd.DataFrame] = {}
        self.samples: dict[Move, pd.DataFrame] = {}
        self.labels = pd.DataFrame(columns=["pair_id", "move", "set", "annotator", "label"])
        self.calibration_judgements: pd.DataFrame | None = None
        self.retained: dict[Move, list[str]] = {}
        self.silver_verdicts: pd.DataFrame | None = None
        self._replay_misses: dict[str, int] = {}  # move -> judge requests replay could not answer
        if not self.online:
            self.notes.append(
                f"No LLM judge here ({self.why}): judge cells are empty, no label was invented and the silver "
                "set was not written (later stages use the unfiltered test set). To run for real, set llm.base_url "
                "and llm.model, export the key named by llm.api_key_env (default OPENAI_API_KEY), keep llm.mode: "
                f"batch, and put label files in {self.labels_dir}."
            )

    @classmethod
    def from_config(cls, cfg: Config) -> "SilverFilter":
        return cls(cfg, cfg.section("judge", JudgeParams), LLMClient.from_config(cfg))

    # -- step 1: what runs here ------------------------------------------------------------------
    def status(self) -> pd.DataFrame:
        info = {"judge available": self.online, "why": self.why, **self.client.describe(),
                "prompts": {m.value: len(p) for m, p in self.prompts.items()}, "labels dir": str(self.labels_dir)}
        recorded = info.get("recorded answers by", "-")
        answers = f" (configured {info['model']}; recorded answers by {recorded})" if recorded != "-" else ""
        print(("LLM judge: " if self.online else "LLM judge NOT available: ") + self.why + answers)
        return pd.DataFrame({"setting": list(info), "value": [str(v) for v in info.values()]})

    def prompt_table(self) -> pd.DataFrame:
        return prompt_table(self.prompts)

    # -- step 2: the pairs to judge ------------------------------------------------------------
    def sample(self) -> pd.DataFrame:
        benchmark = load_benchmark(self.benchmark_dir)
        self.test_pairs = {m: benchmark.queries(m, Split.TEST) for m in MOVES}
        self.samples = sample_for_judging(self.test_pairs, self.params.sample_sizes, self.cfg.seed)
        return pd.DataFrame([
            {"move": m.value, "test pairs": len(self.test_pairs[m]), "markers": self.test_pairs[m]["queryTerm"].map(normalize_marker).nunique(),
             "sampled": len(s), "markers sampled": s["queryTerm"].map(normalize_marker).nunique(),
             "with anaphor %": 100 * s["marker_has_anaphor"].astype(bool).mean() if len(s) else np.nan,
             "sample size (param)": self.params.sample_sizes.get(m.value) or "all"}
            for m, s in self.samples.items()
        ])

    # -- step 3: annotation sheets -------------------------------------------------------------
    def write_annotation_sheets(self) -> pd.DataFrame:
        rows = []
        for move, sample in self.samples.items():
            guideline = next((p.text for p in self.prompts[move] if p.name == self.params.guideline_prompt),
                             self.prompts[move][0].text if self.prompts[move] else "")
            subsets = annotation_pairs(sample, self.params.n_calibration, self.params.n_panel, self.cfg.seed)
            if len(sample) < self.params.n_calibration + self.params.n_panel:
                self.notes.append(
                    f"{move.value}: only {len(sample)} pair(s) to annotate (fewer than judge.n_calibration + judge.n_panel = "
                    f"{self.params.n_calibration + self.params.n_panel}); shared in that ratio: {len(subsets['calibration'])} "
                    f"calibration, {len(subsets['panel'])} panel pair(s).")
            for which, pairs in subsets.items():
                for path in write_annotation_sheet(pairs, move, which, guideline, self.out_dir / "annotation"):
                    rows.append({"move": move.value, "set": which, "pairs": len(pairs), "file": str(path)})
        return pd.DataFrame(rows)

    # -- step 4: human labels --------------------------------------------------------------------
    def load_labels(self) -> pd.DataFrame:
        self.labels, counts = load_label_files(self.labels_dir)
        if counts["files"] == 0:
            self.notes.append(f"No human label files in {self.labels_dir}: agreement with annotators cannot be computed.")
            print(f"no label files in {self.labels_dir}")
        else:
            print(f"{counts['labels']} labels from {counts['files']} file(s); {counts['blank']} blank row(s) skipped")
        summary = self.labels.groupby(["move", "set"]).agg(pairs=("pair_id", "nunique"), annotators=("annotator", "nunique"),
                                                           labels=("label", "size"), accept_rate=("label", "mean"))
        return summary.reset_index()

    def _labelled_pairs(self, move: Move) -> pd.DataFrame:
        ids = set(self.labels.loc[self.labels["move"] == move.value, "pair_id"])
        frame = with_pair_columns(self.test_pairs[move])
        found = frame[frame["pair_id"].isin(ids)].drop_duplicates("pair_id")
        if len(found) < len(ids):
            self.notes.append(f"{move.value}: {len(ids) - len(found)} labelled pair(s) are not in this test set and were not judged.")
        return found

    def _calibration_reference(self, move: Move) -> pd.Series:
        part = self.labels[(self.labels["move"] == move.value) & (self.labels["set"] == "calibration")]
        annotators = sorted(part["annotator"].unique())
        if self.params.calibration_annotator:
            part = part[part["annotator"] == self.params.calibration_annotator]
        elif len(annotators) > 1:
            raise ValueError(f"{move.value}: calibration pairs were labelled by {annotators}; set judge.calibration_annotator")
        return part.set_index("pair_id")["label"].astype("object")

    def _panel(self, move: Move) -> pd.DataFrame:
        part = self.labels[(self.labels["move"] == move.value) & (self.labels["set"] == "panel")]
        return part.pivot_table(index="pair_id", columns="annotator", values="label", aggfunc="first")

    # -- step 5: calibration: every prompt on the labelled pairs, the two best per move ----------
    def calibrate(self) -> pd.DataFrame:
        fixed = {Move.parse(m): list(names) for m, names in self.params.retained.items()}
        for move, names in fixed.items():
            known = {p.label for p in self.prompts[move]} | {p.name for p in self.prompts[move]}
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(f"judge.retained.{move.value} names unknown prompt(s) {unknown}; have {sorted(known)}")
            self.retained[move] = [next(p.label for p in self.prompts[move] if n in (p.name, p.label)) for n in names]
        if fixed:
            self.notes.append(f"Retained prompts fixed in params (judge.retained): {self._retained_text()}.")
        have_labels = not self.labels.empty
        if self.online and have_labels:
            labelled = {m: self._labelled_pairs(m) for m in MOVES}
            self.calibration_judgements = judge_pairs(self.client, labelled, self.prompts, self.params, desc="judge calibration")
        tables = []
        for move in MOVES:
            reference = self._calibration_reference(move) if have_labels else pd.Series(dtype="object")
            if self.calibration_judgements is not None and len(reference):
                table = select_prompts(self.calibration_judgements, reference, move, self.params.n_retained)
                if move not in self.retained and not table.empty:
                    self.retained[move] = table.loc[table["retained"], "prompt"].tolist()
                table["retained"] = table["prompt"].isin(self.retained.get(move, []))
            else:
                table = pd.DataFrame({"move": move.value, "prompt": [p.label for p in self.prompts[move]]})
                table["retained"] = table["prompt"].isin(self.retained.get(move, []))
            if move in fixed:  # not chosen by calibration F1 here: say where the choice came from
                table["retained"] = table["retained"].map({True: FIXED_IN_PARAMS, False: ""})
            tables.append(table)
        selection = pd.concat(tables, ignore_index=True).reindex(
            columns=["move", "prompt", "retained", "single_P", "single_R", "single_F1", "single_kappa", "single_Agr", "n_single"])
        if selection["retained"].isin([FIXED_IN_PARAMS]).any():
            selection = selection.rename(columns={"retained": "used by the judge"})
        if not self.retained:
            self.notes.append("No prompts retained: prompt selection needs the judge's answers and calibration labels "
                              "(or judge.retained in the params).")
        write_table(selection, "judge_prompt_selection", self.cfg, caption="Judge prompt variants against the calibration annotator",
                    notes=self._portable(self.notes), inputs=[self.prompts_dir, self.labels_dir], float_format="{:.2f}")
        return selection

    def _retained_text(self) -> str:
        return "; ".join(f"{m.value}: {', '.join(names)}" for m, names in self.retained.items())

    # -- step 6: the silver set ------------------------------------------------------------------
    def filter(self) -> pd.DataFrame:
        """Judge the sampled test pairs with the retained prompts; write silver.parquet per move."""
        ready = self.online and all(len(self.retained.get(m, [])) >= 1 for m in MOVES)
        if not ready:
            why = self.why if not self.online else "no retained prompts for every move"
            print(f"silver set NOT written: {why}")
            self._remove_stale_silver()
            return self._silver_summary(None)
        prompts = {m: [p for p in self.prompts[m] if p.label in self.retained[m]] for m in MOVES}
        judgements = judge_pairs(self.client, self.samples, prompts, self.params, desc="judge silver")
        if len(judgements) and judgements["replay_miss"].all():
            # nothing recorded for these requests: the offline branch, as without any replay source
            why = (f"replay found no recorded response for any of the {len(judgements)} judge request(s) "
                   "(a prompt or the data differ from the recorded run)")
            self.online, self.why = False, why
            self.notes.append(f"No LLM judge here ({why}): judge cells are empty, no label was invented and the "
                              "silver set was not written (later stages use the unfiltered test set).")
            print(f"silver set NOT written: {why}")
            self._remove_stale_silver()
            return self._silver_summary(None)
        write_parquet_atomic(judgements, self.out_dir / "judgements.parquet")
        self._replay_misses = judgements[judgements["replay_miss"]].groupby("move").size().astype(int).to_dict()
        self._note_provenance(judgements)
        rows = []
        for move in MOVES:
            verdicts = verdict_matrix(judgements, move).reindex(self.samples[move]["pair_id"])
            accepted = both_rule(verdicts, self.retained[move]) if len(verdicts.columns) else pd.Series(dtype="boolean")
            frame = self.samples[move].set_index("pair_id")
            frame = frame.assign(move=move.value, **{f"accept[{p}]": verdicts[p] for p in self.retained[move]}, accepted=accepted)
            rows.append(frame.reset_index())
        self.silver_verdicts = pd.concat(rows, ignore_index=True)
        if self.dry_run:
            self.notes.append("llm.mode is dry_run: request files were written, nothing was judged, no silver set written.")
            self._remove_stale_silver()
            return self._silver_summary(self.silver_verdicts)
        write_parquet_atomic(self.silver_verdicts.drop(columns=["judge_text"]), self.out_dir / "silver_verdicts.parquet")
        for move in MOVES:
            accepted_ids = set(self._accepted(move))
            silver = self.test_pairs[move].loc[pair_ids(self.test_pairs[move]).isin(accepted_ids)]
            write_pairs(_with_release_columns(silver.drop_duplicates(["query_id", "gold_id"])), self.benchmark_dir, move, Split.SILVER)
        write_silver_source(self.benchmark_dir, self.label_source(judgements))
        return self._silver_summary(self.silver_verdicts)

    def label_source(self, judgements: pd.DataFrame) -> LabelSource:
        """Who judged this silver set, with which prompts, and how many sampled pairs got no verdict."""
        report = self.client.last_report
        replayed = report is not None and report.mode == "replay"
        verdicts = self.silver_verdicts
        detail = {
            "prompts": {m.value: list(self.retained[m]) for m in MOVES},
            "prompts chosen by": "fixed in params (judge.retained)" if self.params.retained else "calibration F1",
            "rule": "a pair is silver when every retained prompt accepts it",
            "sampled pairs": {m.value: int((verdicts["move"] == m.value).sum()) for m in MOVES},
            "pairs without a verdict": {m.value: int(verdicts.loc[verdicts["move"] == m.value, "accepted"].isna().sum())
                                        for m in MOVES},
            "silver pairs": {m.value: len(self._accepted(m)) for m in MOVES},
        }
        return LabelSource(role="judge", configured=self.params.model or self.client.settings.model,
                           answered_by=tuple(sorted(set(judgements["answered_by"].dropna()))),
                           replayed_from=REPLAYED_FROM if replayed else None, detail=detail)

    def _portable(self, notes: list[str]) -> list[str]:
        """Notes as written into tables: paths of this machine shown relative to the output root,
        the repository or the shared folder (`../shared`), never absolute."""
        places = sorted({(str(self.cfg.paths.root), "."), (str(REPO_ROOT), "."), (str(self.cfg.paths.shared), "../shared")},
                        key=lambda item: -len(item[0]))
        out = []
        for note in notes:
            for absolute, shown in places:
                note = note.replace(absolute + "/", shown + "/").replace(absolute, shown)
            out.append(note)
        return out

    def _note_provenance(self, judgements: pd.DataFrame) -> None:
        """Say who answered (the responses' `model` field, beside the configured one) and what replay missed."""
        configured = self.params.model or self.client.settings.model
        report = self.client.last_report
        answered = sorted(set(judgements["answered_by"].dropna()))
        if not self.dry_run and answered:
            where = (f"answers replayed from {REPLAYED_FROM}" if report is not None and report.mode == "replay"
                     else "answers from the endpoint or the response cache")
            self.notes.append(f"judge: {configured} configured; {where}, produced by {', '.join(answered)}.")
        misses = judgements[judgements["replay_miss"]]
        if len(misses):
            per_move = misses.groupby("move")["pair_id"].agg(["size", "nunique"])
            detail = "; ".join(f"{m}: {int(r['size'])} request(s), {int(r['nunique'])} pair(s)" for m, r in per_move.iterrows())
            self.notes.append(f"Partial replay: {len(misses)} of {len(judgements)} judge request(s) have no recorded "
                              f"response ({detail}); a pair with a missing verdict is not silver (replay_miss in "
                              "judgements.parquet names them).")

    def _accepted(self, move: Move) -> list[str]:
        part = self.silver_verdicts[self.silver_verdicts["move"] == move.value]
        return part.loc[part["accepted"].fillna(False).astype(bool), "pair_id"].tolist()

    def _remove_stale_silver(self) -> None:
        remove_silver_source(self.benchmark_dir)
        for move in MOVES:
            path = pairs_path(self.benchmark_dir, move, Split.SILVER)
            if path.exists():
                path.unlink()
                print(f"removed {path}: this run cannot reproduce a silver set")

    def _silver_summary(self, verdicts: pd.DataFrame | None) -> pd.DataFrame:
        rows = []
        for move in MOVES:
            sample = self.samples.get(move, pd.DataFrame())
            row = {"move": move.value, "test pairs": len(self.test_pairs.get(move, [])), "sampled": len(sample),
                   "judged": 0, "retained prompts": ", ".join(self.retained.get(move, [])) or "—"}
            if verdicts is not None and not self.dry_run:
                part = verdicts[verdicts["move"] == move.value]
                # judged: a usable verdict from every retained prompt
                row["judged"] = int(part[[f"accept[{p}]" for p in self.retained[move]]].notna().all(axis=1).sum())
                for p in self.retained[move]:
                    # over the pairs this prompt judged (replay misses and errors left out)
                    row[f"accepted by prompt {self.retained[move].index(p) + 1} %"] = 100 * part[f"accept[{p}]"].astype("boolean").mean()
                row["no verdict"] = int(part["accepted"].isna().sum())
                row["replay misses"] = self._replay_misses.get(move.value, 0)
                row["silver"] = int(part["accepted"].fillna(False).astype(bool).sum())
                row["silver written"] = True
            else:
                row["silver"] = np.nan
                row["silver written"] = False
            rows.append(row)
        table = pd.DataFrame(rows)
        if verdicts is not None and not self.dry_run:
            missing = int(table["no verdict"].sum())
            if missing:
                self.notes.append(f"{missing} sampled pair(s) got no usable verdict from a retained prompt (replay miss, "
                                  "API error or malformed answer); they are not in the silver set (see judgements.parquet).")
        write_table(table, "judge_silver_summary", self.cfg, caption="Silver filter: judged test pairs and the silver set",
                    notes=self._portable(self.notes), inputs=[self.benchmark_dir, self.prompts_dir], float_format="{:.1f}")
        return table

    # -- step 7: Table 9 -------------------------------------------------------------------------
    def table9(self) -> pd.DataFrame:
        rows = []
        for move in MOVES:
            panel = self._panel(move) if not self.labels.empty else pd.DataFrame()
            reference = self._calibration_reference(move) if not self.labels.empty else pd.Series(dtype="object")
            human = {"move": move.value, "rater": "Human", "n_panel": len(panel)}
            if panel.shape[1] >= 2:
                human.update(human_panel_agreement(panel))
            rows.append(human)
            names = self.retained.get(move) or [f"retained prompt {i + 1} (not selected here)" for i in range(self.params.n_retained)]
            verdicts = (verdict_matrix(self.calibration_judgements, move)
                        if self.calibration_judgements is not None else pd.DataFrame())
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
        table = pd.DataFrame(rows).reindex(columns=TABLE9_COLUMNS)
        notes = list(self.notes) + [
            "Left (panel_*): held-out pairs labelled by every panel annotator; Human = mean over pairs of annotators, "
            "prompt rows = mean over prompt–annotator pairs; majority/unanimous = F1 against the panel's majority "
            "label / on the pairs the panel agrees on. Right (single_*): against the calibration annotator. Agr in %.",
            "The paper's values are in table9_paper_reference (kept apart: they are not ours).",
        ]
        write_table(table, "table9_judge_agreement", self.cfg, caption="Table 9: agreement of the judge prompts with human labels",
                    notes=self._portable(notes), inputs=[self.labels_dir, self.prompts_dir], float_format="{:.2f}")
        reference = pd.DataFrame(PAPER_TABLE9_TEXT, columns=["move", "statistic", "paper value"])
        write_table(reference, "table9_paper_reference", self.cfg, caption="Table 9 values as reported in the paper (§4.3, Appendix E)",
                    notes=["Copied from the paper's text for comparison; the paper gives ranges over the two retained prompts."])
        return table

    # -- step 8: anaphora analysis -------------------------------------------------------------
    def anaphora(self) -> pd.DataFrame:
        base = pd.DataFrame([
            {"move": m.value, "sampled pairs": len(s), "share with anaphor %": 100 * s["marker_has_anaphor"].astype(bool).mean() if len(s) else np.nan}
            for m, s in self.samples.items()
        ])
        if self.silver_verdicts is not None and not self.dry_run:
            judged = self.silver_verdicts[self.silver_verdicts["accepted"].notna()].copy()
            judged["accepted"] = judged["accepted"].astype(bool)
            stats = anaphora_analysis(judged)
            table = base.merge(stats, on="move", how="left")
        else:
            table = base.reindex(columns=list(base.columns) + ["n_with_anaphor", "n_without_anaphor", "accept_with_anaphor_%",
                                                               "accept_without_anaphor_%", "odds_ratio", "fisher_p"])
        for column in ["paper: share with anaphor %", "paper: accept with anaphor %", "paper: accept without anaphor %", "paper: odds ratio"]:
            table[column] = table["move"].map(lambda m: PAPER_ANAPHORA.get(m, {}).get(column, np.nan))
        judged_n = table["n_with_anaphor"].astype(float) + table["n_without_anaphor"].astype(float)
        table.insert(table.columns.get_loc("n_with_anaphor"), "judged pairs", judged_n.astype("Int64"))
        shown = table.rename(columns=ANAPHORA_SHOWN_COLUMNS)
        shown["fisher_p"] = shown["fisher_p"].map(lambda p: "" if pd.isna(p) else f"{p:.2g}")
        coverage = "; ".join(f"{r['move']} {int(r['judged pairs'])} of {int(r['sampled pairs'])}"
                             for r in table.to_dict(orient="records") if pd.notna(r["judged pairs"]))
        notes = list(self.notes) + [
            "Denominators, one per column: 'sampled' columns are over the pairs drawn for the judge; 'judged' columns over "
            "the sampled pairs with a usable verdict from both retained prompts"
            + (f" ({coverage})" if coverage else "") + "; 'accepted' shares over the judged pairs with (without) an anaphor.",
            "Acceptance = accepted by both retained prompts; pairs without a usable verdict are left out. "
            "Odds ratio and p from scipy.stats.fisher_exact. 'paper:' columns are the paper's values, not ours."]
        write_table(shown, "judge_anaphora", self.cfg, caption="Silver acceptance and explicit anaphors in the marker",
                    notes=self._portable(notes), inputs=[self.benchmark_dir], float_format="{:.1f}")
        return table

# judge_anaphora as shown: each column names the pairs it counts (sampled, or judged: with a usable verdict).
ANAPHORA_SHOWN_COLUMNS = {
    "share with anaphor %": "sampled: with anaphor %",
    "judged pairs": "judged pairs",
    "n_with_anaphor": "judged: with anaphor",
    "n_without_anaphor": "judged: without anaphor",
    "accept_with_anaphor_%": "judged with anaphor: accepted %",
    "accept_without_anaphor_%": "judged without anaphor: accepted %",
}


def _with_release_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Pairs read from the official release may lack our extra columns; fill what can be derived."""
    frame = frame.copy()
    if "marker_has_anaphor" not in frame.columns:
        frame["marker_has_anaphor"] = frame["queryTerm"].map(has_explicit_anaphor)
    for column in PAIR_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.NA
    return frame
