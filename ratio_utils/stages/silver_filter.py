"""Notebook 07_silver_filter: the LLM judge and the silver test set (paper §4.3, Appendix E, Table 9).

Reads the benchmark's test pairs, `judge.prompts_dir` and `judge.labels_dir`; writes annotation sheets, judgements and
silver verdicts (`judge.out_dir`), the silver set (only with a judge), request files for unanswered judge requests,
the dataset card with the silver configs (ratio_utils.dataset.card) and tables/judge_prompt_selection,
judge_silver_summary, table9_judge_agreement, table9_paper_reference, judge_anaphora, through `ratio_utils.judge`.
"""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from .. import judge
from ..config import Config
from ..dataset.benchmark import load_benchmark
from ..dataset.card import write_run_card
from ..io import write_parquet_atomic
from ..llm import LLMClient
from ..param_sections import JudgeParams
from ..publish.display import Stage
from ..publish.published import write_table
from ..schema import MOVES, Move, Split


class SilverFilterStage(Stage):
    """Notebook 07 step by step; `judge_notes` collects what could not be done here and why (every table carries
    them)."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = cfg.section("judge", JudgeParams)
        self.client = LLMClient.from_config(cfg)
        self.prompts_dir, self.labels_dir, self.out_dir = (
            cfg.paths.from_params(p) for p in (self.params.prompts_dir, self.params.labels_dir, self.params.out_dir))
        self.benchmark_dir = cfg.paths.benchmark
        self.prompts = judge.load_prompts(self.prompts_dir)
        self.online, self.why = self.client.available()
        self.dry_run = self.client.settings.mode == "dry_run"
        self.judge_notes: list[str] = []
        self.test_pairs, self.samples = {}, {}  # move -> its test pairs; the pairs sampled for the judge (with waves)
        self.labels = pd.DataFrame(columns=judge.LABEL_COLUMNS)
        self.calibration_judgements = self.silver_verdicts = None  # DataFrames, once judged
        self.retained: dict[Move, list[str]] = {}
        self.replay_misses: dict[str, int] = {}  # move -> judge requests replay could not answer
        self.request_files: str | None = None  # where unanswered judge requests were written
        if not self.online:
            self.judge_notes.append(judge.no_judge_note(self.why, self.labels_dir))

    def _write(self, table: pd.DataFrame, name: str, caption: str, notes: list[str], inputs: list,
               digits: int) -> None:
        places = {str(self.cfg.paths.root): ".", str(self.cfg.paths.params_base): ".",
                  str(self.cfg.paths.shared): "../shared"}
        write_table(table, name, self.cfg, caption=caption, notes=judge.portable(notes, places), inputs=inputs,
                    float_format=f"{{:.{digits}f}}")

    # -- step 1: what runs here ------------------------------------------------------------------
    def status(self) -> pd.DataFrame:
        info = {"judge available": self.online, "why": self.why, **self.client.describe(),
                "prompts": {m.value: len(p) for m, p in self.prompts.items()}, "labels dir": str(self.labels_dir)}
        recorded = info.get("recorded answers by", "-")
        answers = f" (configured {info['model']}; recorded answers by {recorded})" if recorded != "-" else ""
        print(("LLM judge: " if self.online else "LLM judge NOT available: ") + self.why + answers)
        return pd.DataFrame({"setting": list(info), "value": [str(v) for v in info.values()]})

    def prompt_table(self) -> pd.DataFrame:
        return judge.prompt_table(self.prompts)

    # -- step 2: the pairs to judge (a nested sample in waves where judge.sample_sizes lists sizes) -------------
    def sample(self) -> pd.DataFrame:
        benchmark = load_benchmark(self.benchmark_dir)
        self.test_pairs = {m: benchmark.queries(m, Split.TEST) for m in MOVES}
        self.samples = judge.sample_for_judging(self.test_pairs, self.params.sample_sizes, self.cfg.seed)
        return judge.sample_overview(self.test_pairs, self.samples, self.params.sample_sizes)

    # -- step 3: annotation sheets (from wave 1: labels made on them stay valid as waves are added) ------------
    def write_annotation_sheets(self) -> pd.DataFrame:
        sheets, notes = judge.write_annotation_sheets(
            self.samples, self.prompts, self.params.guideline_prompt, self.params.n_calibration, self.params.n_panel,
            self.cfg.seed, self.out_dir / "annotation")
        self.judge_notes += notes
        return sheets

    # -- step 4: human labels --------------------------------------------------------------------
    def load_labels(self) -> pd.DataFrame:
        self.labels, counts = judge.load_label_files(self.labels_dir)
        if counts["files"] == 0:
            self.judge_notes.append(f"No human label files in {self.labels_dir}: agreement with annotators cannot be "
                                    "computed.")
            print(f"no label files in {self.labels_dir}")
        else:
            print(f"{counts['labels']} labels from {counts['files']} file(s); {counts['blank']} blank row(s) skipped")
        return judge.label_summary(self.labels)

    # -- step 5: calibration: every prompt on the labelled pairs, the two best per move ----------
    def calibrate(self) -> pd.DataFrame:
        fixed = judge.fixed_prompts(self.params.retained, self.prompts)
        self.retained.update(fixed)
        if fixed:
            self.judge_notes.append("Retained prompts fixed in params (judge.retained): "
                                    + "; ".join(f"{m.value}: {', '.join(names)}" for m, names in self.retained.items())
                                    + ".")
        references = {}
        if not self.labels.empty:
            if self.online:
                labelled = {m: judge.labelled_pairs(self.labels, self.test_pairs[m], m, self.judge_notes)
                            for m in MOVES}
                self.calibration_judgements = judge.judge_pairs(self.client, labelled, self.prompts, self.params,
                                                                desc="judge calibration")
            references = {m: judge.calibration_reference(self.labels, m, self.params.calibration_annotator)
                          for m in MOVES}
        selection, self.retained = judge.prompt_selection(self.calibration_judgements, references, self.prompts,
                                                          self.retained, self.params.n_retained, set(fixed))
        if not self.retained:
            self.judge_notes.append("No prompts retained: prompt selection needs the judge's answers and calibration "
                                    "labels (or judge.retained in the params).")
        self._write(selection, "judge_prompt_selection", "Judge prompt variants against the calibration annotator",
                    self.judge_notes, [self.prompts_dir, self.labels_dir], 2)
        return selection

    # -- step 6: the silver set ------------------------------------------------------------------
    def filter(self) -> pd.DataFrame:
        """Judge the sampled test pairs with the retained prompts; write silver.parquet per move."""
        if not (self.online and all(len(self.retained.get(m, [])) >= 1 for m in MOVES)):
            return self._no_silver(self.why if not self.online else "no retained prompts for every move")
        prompts = {m: [p for p in self.prompts[m] if p.label in self.retained[m]] for m in MOVES}
        judgements = judge.judge_pairs(self.client, self.samples, prompts, self.params, desc="judge silver")
        if len(judgements) and judgements["replay_miss"].all():  # nothing recorded: the offline branch
            self.online, self.why = False, (f"replay found no recorded response for any of the {len(judgements)} "
                                            "judge request(s) (a prompt or the data differ from the recorded run)")
            self.judge_notes.append(judge.no_judge_note(self.why))
            return self._no_silver(self.why)
        report = self.client.last_report
        replayed, configured = (report is not None and report.mode == "replay",
                                self.params.model or self.client.settings.model)
        write_parquet_atomic(judgements, self.out_dir / "judgements.parquet")
        self.replay_misses = judgements[judgements["replay_miss"]].groupby("move").size().astype(int).to_dict()
        self.judge_notes += judge.provenance_notes(judgements, configured, replayed, self.dry_run)
        if self.replay_misses and not self.dry_run:  # e.g. a wave of the nested sample not answered yet
            self.request_files = judge.write_requests(self.client, judge.unanswered_requests(
                judgements, self.samples, prompts, configured, self.params), desc="judge silver (request files)")
        self.silver_verdicts = judge.silver_verdicts(judgements, self.samples, self.retained)
        if not self.dry_run and (note := judge.unanswered_note(self.silver_verdicts, self.request_files)):
            self.judge_notes.append(note)
        if self.dry_run:
            self.judge_notes.append("llm.mode is dry_run: request files were written, nothing was judged, "
                                    "no silver set written.")
            return self._no_silver(None)
        write_parquet_atomic(self.silver_verdicts.drop(columns=["judge_text"]),
                             self.out_dir / "silver_verdicts.parquet")
        judge.write_silver(self.benchmark_dir, self.test_pairs, self.silver_verdicts, judge.judge_label_source(
            self.silver_verdicts, judgements, self.retained, bool(self.params.retained), configured, replayed))
        return self._silver_summary(self.silver_verdicts)

    def _no_silver(self, why: str | None) -> pd.DataFrame:
        """No silver set here (`why`; None: a dry run): a stale one is removed, the summary says so."""
        if why:
            print(f"silver set NOT written: {why}")
        for path in judge.remove_stale_silver(self.benchmark_dir):
            print(f"removed {path}: this run cannot reproduce a silver set")
        return self._silver_summary(None)

    def _silver_summary(self, verdicts: pd.DataFrame | None) -> pd.DataFrame:
        table = judge.silver_summary(self.test_pairs, self.samples, self.retained, verdicts, self.replay_misses)
        if verdicts is not None and (missing := int(table["no verdict"].sum())):
            self.judge_notes.append(f"{missing} sampled pair(s) got no usable verdict from a retained prompt "
                                    "(replay miss, API error or malformed answer); they are not in the silver set "
                                    "(see judgements.parquet).")
        self._write(table, "judge_silver_summary", "Silver filter: judged test pairs and the silver set",
                    self.judge_notes, [self.benchmark_dir, self.prompts_dir], 1)
        return table

    # -- step 7: Table 9 -------------------------------------------------------------------------
    def table9(self) -> pd.DataFrame:
        table = judge.table9_rows(self.labels, self.retained, self.calibration_judgements, self.params.n_retained,
                                  self.params.calibration_annotator)
        self._write(table, "table9_judge_agreement", "Table 9: agreement of the judge prompts with human labels",
                    [*self.judge_notes, *judge.TABLE9_NOTES], [self.labels_dir, self.prompts_dir], 2)
        write_table(judge.paper_table9(), "table9_paper_reference", self.cfg,
                    caption="Table 9 values as reported in the paper (§4.3, Appendix E)",
                    notes=["Copied from the paper's text for comparison; the paper gives ranges over the two retained "
                           "prompts."])
        return table

    # -- step 8: anaphora analysis -------------------------------------------------------------
    def anaphora(self) -> pd.DataFrame:
        judged = self.silver_verdicts if self.silver_verdicts is not None and not self.dry_run else None
        table, shown, coverage = judge.anaphora_table(self.samples, judged)
        self._write(shown, "judge_anaphora", "Silver acceptance and explicit anaphors in the marker",
                    [*self.judge_notes, *judge.anaphora_notes(coverage)], [self.benchmark_dir], 1)
        return table

    def dataset_card(self) -> Markdown:
        """The benchmark directory's dataset card, now with the silver configs."""
        return Markdown(write_run_card(self.cfg))

    def notes(self) -> Markdown:
        """What could not be done here, and why."""
        return Markdown("\n".join(f"- {note}" for note in self.judge_notes))
