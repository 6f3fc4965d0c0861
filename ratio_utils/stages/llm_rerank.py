"""Notebook 10_llm_rerank: listwise LLM reranking of first-stage runs (paper §5.2, Appendix C, H.3).

For every first-stage system of `rerank.systems` and every move, the queries of the split (silver; the
unfiltered test split where a move has no silver split), all or a seeded sample, are reranked with
`ratio_utils.retrieval.rerank` (one query's request and answer) and `ratio_utils.retrieval.rerank_jobs` (the jobs,
their requests, answers, run files and report) through `ratio_utils.llm` (cost estimate, Batch API, cache, replay,
dry run); the gold-promotion columns are `ratio_utils.evaluation.rerank_promotion`.

Reads:  the benchmark; cfg.paths.retrieval_runs/<system>/<move>/<split>.parquet + .run.json (notebooks 08/09).
Writes: cfg.paths.retrieval_runs/<system> + rerank/<move>/<split>.parquet/.trec/.run.json (only with answers),
        cfg.paths.rerank_report (counts), tables/rerank_summary (+ provenance), request files (dry run)
        under the LLM cache.

With a key, the requests are sent. Without one, recorded answers are replayed and the requests with no
recorded answer are written as Batch API request files (a dry run); a (system, move) with no answer at
all gets no run file (a stale one is removed), so the table assembler leaves its rows empty with a note.
"""

from __future__ import annotations

import pandas as pd

from ..config import Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..evaluation.rerank_promotion import promotion_cells, promotion_note
from ..io import write_json_atomic
from ..llm import LLMClient
from ..param_sections import RerankParams
from ..publish.display import Stage
from ..publish.label_sources import rerank_source, silver_sources
from ..publish.published import write_table
from ..reporting import paper_tables
from ..retrieval.rerank import REPAIR_RULES, load_rerank_prompt
from ..retrieval.rerank_jobs import (
    COUNTS_NOTE,
    Asked,
    Job,
    ask,
    build_requests,
    counts_table,
    finish_jobs,
    plan_job,
    portable_notes,
    rerank_report,
    reranker_record,
    shown_path,
    split_for,
)
from ..schema import Move

__all__ = ["COUNTS_NOTE", "Job", "LLMRerankStage"]


class LLMRerankStage(Stage):
    """Notebook 10 step by step; each method returns what the notebook displays."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = cfg.section("rerank", RerankParams)
        self.client = LLMClient.from_config(cfg)
        self.model = self.params.model or self.client.settings.model
        self.prompts_dir = cfg.paths.from_params(self.params.prompts_dir)
        self.prompts = {m: load_rerank_prompt(self.prompts_dir, m, self.params.prompt, self.params.k)
                        for m in (Move.parse(x) for x in self.params.moves)}
        self.live = self.client.has_key and self.client.settings.mode in ("sync", "batch")
        self.notes: list[str] = []
        self.jobs: list[Job] = []
        self.asked: Asked | None = None  # once run
        self._bench: Benchmark | None = None
        self._tables: paper_tables.PaperTables | None = None

    @property
    def bench(self) -> Benchmark:
        if self._bench is None:
            self._bench = load_benchmark(self.cfg.paths.benchmark)
        return self._bench

    @property
    def mode(self) -> str:
        """live | replay | dry_run | nothing to send, once run ('' before)."""
        return self.asked.mode if self.asked else ""

    @property
    def answered_by(self) -> list[str]:
        return self.asked.answered_by if self.asked else []

    @property
    def request_files(self) -> str | None:
        return shown_path(self.asked.request_files, self.cfg.paths.root) if self.asked else None

    # -- step 1 ------------------------------------------------------------------------------------
    def status(self) -> pd.DataFrame:
        how = ("requests are sent to the endpoint" if self.live else
               "no key: recorded answers are replayed; requests without one are written as request files (dry run)"
               if self.client.settings.mode != "dry_run" else "llm.mode is dry_run: request files only")
        print(f"LLM reranker: {self.model}; {how}")
        info = {"reranker model (configured)": self.model, "what happens": how,
                "first-stage systems": self.params.systems, "split": self.params.split, "moves": self.params.moves,
                "queries per move": (f"a seeded sample of {self.params.max_queries} (seed {self.cfg.seed})"
                                     if self.params.max_queries else "all"),
                "top_n": self.params.top_n, "k": self.params.k,
                "prompts": {m.value: f"{p.label} ({p.sha256[:12]})" for m, p in self.prompts.items()},
                "key": self.client.describe()["key"], "llm mode": self.client.settings.mode}
        return pd.DataFrame({"setting": list(info), "value": [str(v) for v in info.values()]})

    # -- step 2: which queries are sent ------------------------------------------------------------
    def plan(self) -> pd.DataFrame:
        self.jobs = []
        for system in self.params.systems:
            for move in self.prompts:
                split, note = split_for(self.bench, move, self.params.split)
                if note and note not in self.notes:
                    self.notes.append(note)
                job = plan_job(self.bench, system, move, split, self.cfg.paths.retrieval_runs, self.params,
                               self.cfg.seed)
                if job.why_not_written:
                    self.notes.append(f"{system} / {move.value}: {job.why_not_written}; nothing reranked.")
                self.jobs.append(job)
        return counts_table(self.jobs, self.cfg.paths.root)

    # -- step 3: ask the model, write the runs -------------------------------------------------------
    def requests(self):
        """(job, qid, request) for every query to send."""
        return build_requests(self.bench, self.jobs, self.prompts, self.model, self.params)

    def run(self) -> pd.DataFrame:
        """Send (or replay, or write request files for) every request; write the reranked runs and the report."""
        if not self.jobs:
            self.plan()
        planned = self.requests()
        requests = [r for _, _, r in planned]
        if requests:
            self.asked = ask(self.client, requests, self.live)
            if self.asked.request_files:
                n = sum(1 for r in self.asked.results if not r.content)
                self.notes.append(f"{n} reranking request(s) had no answer here (no key, nothing recorded): "
                                  f"written as Batch API request files to {self.request_files} (a dry run); send "
                                  "them with llm.mode: batch and a key.")
        else:
            self.asked = Asked([], "nothing to send", [], None)
            self.notes.append("No query to send: no first-stage run, or no gold sentence in any first-stage top "
                              f"{self.params.top_n}.")
        for path in finish_jobs(self.jobs, planned, self.asked, self.cfg.paths.retrieval_runs, self.model,
                                self.prompts, self.params):
            print(f"removed stale {shown_path(path, self.cfg.paths.root)}: this run has no reranked answers for it")
        write_json_atomic(self.cfg.paths.rerank_report, rerank_report(
            self.jobs, self.asked, self.mode, self.model, self.params, self.client.last_report, self.notes,
            self.cfg.paths.root))
        table = self.summary_table()
        reranker = rerank_source(reranker_record(self.model, self.asked)) if self.answered_by else None
        write_table(table, "rerank_summary", self.cfg,
                    caption="LLM reranking (notebook 10): queries to rerank, what happened to their requests, "
                            "answers, repairs, and the gold promotion beside the first stage's recall and the "
                            "paper's rate",
                    notes=portable_notes([*self.notes, COUNTS_NOTE, promotion_note(self.params.top_n, self.params.k)],
                                         self.cfg.paths.root),
                    inputs=[self.prompts_dir], float_format="{:.0f}", labels=[*silver_sources(self.bench), reranker])
        return table

    def summary_table(self) -> pd.DataFrame:
        """The counts of every (first stage, move) and the reranker's own statistic (gold promotion to the top k of
        the answered queries whose gold is in the first-stage top n, the first stage's recall@n, the paper's rate)."""
        table = counts_table(self.jobs, self.cfg.paths.root)
        cells = [promotion_cells(j.move.value, list(j.recall_at_n.values()), list(j.promoted.values()),
                                 top_n=self.params.top_n, k=self.params.k, seed=self.cfg.seed) for j in self.jobs]
        return pd.concat([table, pd.DataFrame(cells, index=table.index)], axis=1) if cells else table

    def repair_rules(self) -> pd.DataFrame:
        return pd.DataFrame({"rule": list(REPAIR_RULES), "what is done": list(REPAIR_RULES.values())})

    def show_table(self, name: str):
        """One of Tables 1, 7, 8 or the rerank comparison, assembled once every row of 08, 09 and this notebook can be
        filled (paper_tables.assemble_tables writes them all)."""
        if self._tables is None:
            self._tables = paper_tables.assemble_tables(self.cfg, self.bench)
        return self._tables.show(name)
