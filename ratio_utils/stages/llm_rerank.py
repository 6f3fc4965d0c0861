"""Notebook 10_llm_rerank: listwise LLM reranking of first-stage runs (paper §5.2, Appendix C, H.3).

For every first-stage system of `rerank.systems` and every move, the queries of the split (silver; the
unfiltered test split where a move has no silver split), all or a seeded sample, are reranked with
`ratio_utils.retrieval.rerank` through `ratio_utils.llm` (cost estimate, Batch API, cache, replay, dry run).

Reads:  the benchmark; cfg.paths.retrieval_runs/<system>/<move>/<split>.parquet + .run.json (notebooks 08/09).
Writes: cfg.paths.retrieval_runs/<system> + rerank/<move>/<split>.parquet/.trec/.run.json (only with answers),
        cfg.paths.rerank_report (counts), tables/rerank_summary (+ provenance), request files (dry run)
        under the LLM cache.

With a key, the requests are sent. Without one, recorded answers are replayed and the requests with no
recorded answer are written as Batch API request files (a dry run); a (system, move) with no answer at
all gets no run file (a stale one is removed), so the table assembler leaves its rows empty with a note.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..config import REPO_ROOT, Config
from ..dataset.benchmark import Benchmark, load_benchmark
from ..io import write_json_atomic
from ..llm import ChatRequest, ChatResult, LLMClient
from ..param_sections import RerankParams
from ..reporting import paper_tables
from ..publish.display import Stage
from ..publish.label_sources import REPLAYED_FROM, rerank_source, silver_sources
from ..publish.published import write_table
from ..retrieval.rerank import (
    REPAIR_RULES,
    QueryCounts,
    answer_status,
    custom_id,
    load_rerank_prompt,
    parse_ranking,
    ranked_run,
    rerank_request,
    reranked_order,
)
from ..retrieval.runs import (
    RERANK_SUFFIX,
    info_path,
    read_run,
    read_run_info,
    reranked_system_name,
    run_path,
    write_system_run,
)
from ..schema import Move, Split

STAGE = "10_llm_rerank"


@dataclass
class Job:
    """One (first-stage system, move): the queries, their first-stage lists, what is sent."""

    system: str
    move: Move
    split: str  # the split actually used
    run_file: Path
    orders: dict[str, list[str]] = field(default_factory=dict)  # qid -> first-stage docids, rank order
    to_send: list[str] = field(default_factory=list)  # qids whose gold is in the top n
    counts: QueryCounts = field(default_factory=QueryCounts)
    written: Path | None = None
    why_not_written: str = ""

    @property
    def reranked(self) -> str:
        return reranked_system_name(self.system)


COUNTS_NOTE = ("to_rerank: queries whose gold is in the first-stage top n (one request each); of those requests, sent: "
               "sent to the endpoint in this run; replayed: answered from recorded responses (replay or the cache); "
               "request_files: written as Batch API request files without an answer (no key, nothing recorded).")


class LLMRerankStage(Stage):
    """Notebook 10 step by step; each method returns what the notebook displays."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.params = cfg.section("rerank", RerankParams)
        self.client = LLMClient.from_config(cfg)
        self.model = self.params.model or self.client.settings.model
        self.prompts_dir = Path(self.params.prompts_dir) if Path(self.params.prompts_dir).is_absolute() else REPO_ROOT / self.params.prompts_dir
        self.prompts = {m: load_rerank_prompt(self.prompts_dir, m, self.params.prompt, self.params.k)
                        for m in (Move.parse(x) for x in self.params.moves)}
        self.live = self.client.has_key and self.client.settings.mode in ("sync", "batch")
        self.notes: list[str] = []
        self.jobs: list[Job] = []
        self.mode = ""  # live | replay | dry_run, once run
        self.answered_by: list[str] = []
        self.request_files: str | None = None
        self._bench: Benchmark | None = None
        self._tables: paper_tables.PaperTables | None = None

    @property
    def bench(self) -> Benchmark:
        if self._bench is None:
            self._bench = load_benchmark(self.cfg.paths.benchmark)
        return self._bench

    # -- step 1 ------------------------------------------------------------------------------------
    def status(self) -> pd.DataFrame:
        how = ("requests are sent to the endpoint" if self.live else
               "no key: recorded answers are replayed; requests without one are written as request files (dry run)"
               if self.client.settings.mode != "dry_run" else "llm.mode is dry_run: request files only")
        print(f"LLM reranker: {self.model}; {how}")
        info = {"reranker model (configured)": self.model, "what happens": how, "first-stage systems": self.params.systems,
                "split": self.params.split, "moves": self.params.moves,
                "queries per move": (f"a seeded sample of {self.params.max_queries} (seed {self.cfg.seed})"
                                     if self.params.max_queries else "all"), "top_n": self.params.top_n, "k": self.params.k,
                "prompts": {m.value: f"{p.label} ({p.sha256[:12]})" for m, p in self.prompts.items()},
                "key": self.client.describe()["key"], "llm mode": self.client.settings.mode}
        return pd.DataFrame({"setting": list(info), "value": [str(v) for v in info.values()]})

    # -- step 2: which queries are sent ------------------------------------------------------------
    def plan(self) -> pd.DataFrame:
        self.jobs = []
        for system in self.params.systems:
            for move in self.prompts:
                self.jobs.append(self._plan_job(system, move))
        return self._counts_table()

    def _split_for(self, move: Move) -> str:
        split = Split.parse(self.params.split)
        if split is Split.SILVER and self.bench.query_split(move) is not Split.SILVER:
            note = f"{move.value}: no silver split (notebook 07 wrote none); the unfiltered test queries are reranked."
            if note not in self.notes:
                self.notes.append(note)
            return Split.TEST.value
        return split.value

    def _plan_job(self, system: str, move: Move) -> Job:
        split = self._split_for(move)
        job = Job(system, move, split, run_path(self.cfg.paths.retrieval_runs, system, move, split))
        pairs = self.bench.queries(move, split)
        qids = pd.Series(pairs["query_id"].drop_duplicates().sort_values().to_numpy())
        if self.params.max_queries is not None and len(qids) > self.params.max_queries:
            qids = qids.sample(n=self.params.max_queries, random_state=self.cfg.seed).sort_values()
        job.counts.queries = len(qids)
        if not job.run_file.exists():
            job.why_not_written = "no first-stage run file (run notebook 08/09 first)"
            self.notes.append(f"{system} / {move.value}: {job.why_not_written}; nothing reranked.")
            return job
        golds = pairs.groupby("query_id")["gold_id"].agg(set)
        run = read_run(job.run_file).sort_values(["qid", "rank"])
        first_stage = run.groupby("qid", sort=False)["docid"].agg(list).to_dict()
        for qid in qids:
            order = first_stage.get(qid)
            if order is None:
                job.counts.not_in_first_stage_run += 1
                continue
            job.orders[qid] = order
            if golds[qid] & set(order[: self.params.top_n]):
                job.to_send.append(qid)
            else:
                job.counts.not_sent_gold_outside_top_n += 1
        job.counts.to_rerank = len(job.to_send)
        return job

    # -- step 3: ask the model, write the runs -------------------------------------------------------
    def requests(self) -> list[tuple[Job, str, ChatRequest]]:
        texts: dict[str, dict[str, str]] = {}
        out = []
        for job in self.jobs:
            if not job.to_send:
                continue
            if job.split not in texts:
                pool = self.bench.pool(job.split)
                texts[job.split] = dict(zip(pool["docid"], pool["text"]))
            queries = self.bench.queries(job.move, job.split).drop_duplicates("query_id").set_index("query_id")["querySentence"]
            for qid in job.to_send:
                candidates = [texts[job.split][d] for d in job.orders[qid][: self.params.top_n]]
                request = rerank_request(custom_id(job.system, job.move, job.split, qid), self.prompts[job.move], queries[qid],
                                         candidates, self.model, self.params,
                                         meta={"system": job.system, "split": job.split, "qid": qid})
                out.append((job, qid, request))
        return out

    def run(self) -> pd.DataFrame:
        """Send (or replay, or write request files for) every request; write the reranked runs and the report."""
        if not self.jobs:
            self.plan()
        planned = self.requests()
        requests = [r for _, _, r in planned]
        if not requests:
            self.mode = "nothing to send"
            self.notes.append("No query to send: no first-stage run, or no gold sentence in any first-stage top "
                              f"{self.params.top_n}.")
        results = self._ask(requests) if requests else []
        by_job: dict[int, dict[str, ChatResult]] = {}
        for (job, qid, _), result in zip(planned, results):
            by_job.setdefault(id(job), {})[qid] = result
        for job in self.jobs:
            self._finish(job, by_job.get(id(job), {}))
        self._write_report()
        table = self._counts_table()
        reranker = rerank_source(self._reranker_record()) if self.answered_by else None
        write_table(table, "rerank_summary", self.cfg,
                    caption="LLM reranking (notebook 10): queries to rerank, what happened to their requests, answers, repairs",
                    notes=self._portable([*self.notes, COUNTS_NOTE]), inputs=[self.prompts_dir], float_format="{:.0f}",
                    labels=[*silver_sources(self.bench), reranker])
        return table

    def _ask(self, requests: list[ChatRequest]) -> list[ChatResult]:
        if self.live:
            self.mode = "live"
            results = self.client.run(requests, desc="llm rerank")
        elif self.client.settings.mode == "dry_run":
            self.mode = "dry_run"
            results = self.client.run(requests, mode="dry_run", desc="llm rerank")
            self.request_files = self._shown(self.client.last_report.batch_dir)
        else:
            self.mode = "replay"
            results = self.client.run(requests, mode="replay", desc="llm rerank", allow_replay_misses=True)
            missed = [r for r, res in zip(requests, results) if res.replay_miss]
            if missed:
                self.client.run(missed, mode="dry_run", desc="llm rerank (request files)")
                self.request_files = self._shown(self.client.last_report.batch_dir)
        self.answered_by = sorted({r.model for r in results if r.content and r.model})
        if self.request_files:
            n = sum(1 for r in results if not r.content)
            self.notes.append(f"{n} reranking request(s) had no answer here (no key, nothing recorded): written as Batch "
                              f"API request files to {self.request_files} (a dry run); send them with llm.mode: batch and a key.")
        return results

    def _finish(self, job: Job, results: dict[str, ChatResult]) -> None:
        orders = dict(job.orders)
        for qid in job.to_send:
            result = results.get(qid)
            self._count_outcome(job, result)
            if answer_status(result) != "answered":
                job.counts.missing += 1
                job.counts.replay_misses += int(result is not None and result.replay_miss)
                continue
            job.counts.answered += 1
            ranking = parse_ranking(result.parsed, min(self.params.top_n, len(job.orders[qid])), self.params.k)
            for rule in ranking.repairs:
                job.counts.repairs[rule] += 1
            orders[qid] = reranked_order(job.orders[qid], ranking.positions, self.params.top_n)
        target = run_path(self.cfg.paths.retrieval_runs, job.reranked, job.move, job.split)
        if self.mode == "dry_run" or job.counts.answered == 0:
            if not job.why_not_written:
                job.why_not_written = ("llm.mode is dry_run" if self.mode == "dry_run" else
                                       "no query sent" if not job.to_send else "no answer (nothing sent or replayed)")
            self._remove_stale(target)
            return
        try:
            first = read_run_info(job.run_file)
        except Exception as exc:  # noqa: BLE001 - a first-stage run without sidecar: say so, write nothing
            job.why_not_written = f"first-stage run has no usable sidecar ({type(exc).__name__}); rerun notebook 08/09"
            self._remove_stale(target)
            return
        info = dataclasses.replace(
            first, setup=first.setup + RERANK_SUFFIX,
            family="llm-rerank", stage=STAGE, first_stage=first.system, max_queries=None, qids=sorted(orders),
            source=self.model, retriever={**self._reranker_record(), "prompt": self.prompts[job.move].label, "prompt_sha256": self.prompts[job.move].sha256,
                                          "top_n": self.params.top_n, "k": self.params.k},
            notes=[f"{job.counts.missing} sent quer(ies) without an answer keep their first-stage ranking"] if job.counts.missing else [],
        )
        job.written = write_system_run(ranked_run(orders), self.cfg.paths.retrieval_runs, info)["parquet"]

    def _count_outcome(self, job: Job, result: ChatResult | None) -> None:
        """Sent (live, not from the cache), replayed (a recorded or cached answer) or written as a request file."""
        if result is None:
            return
        if result.cached and result.content:
            job.counts.replayed += 1
        elif self.mode == "live" and not result.cached:
            job.counts.sent += 1
        elif self.request_files and (self.mode == "dry_run" or result.replay_miss):
            job.counts.request_files += 1

    def _reranker_record(self) -> dict:
        """Who reranked (label_sources.rerank_source reads it back from a run's sidecar)."""
        return {"reranker": self.model, "answered_by": self.answered_by,
                "replayed_from": REPLAYED_FROM if self.mode == "replay" else None}

    def _remove_stale(self, target: Path) -> None:
        for path in (target, target.with_suffix(".trec"), info_path(target)):
            if path.exists():
                path.unlink()
                print(f"removed stale {self._shown(path)}: this run has no reranked answers for it")

    # -- tables and report -------------------------------------------------------------------------
    def _counts_table(self) -> pd.DataFrame:
        rows = []
        for job in self.jobs:
            counts = job.counts.to_dict()
            repairs = counts.pop("repairs")
            rows.append({"first stage": job.system, "move": job.move.value, "split": job.split, **counts,
                         **{f"repair: {r}": n for r, n in repairs.items()},
                         "run file": self._shown(job.written) if job.written else f"— ({job.why_not_written or 'not run yet'})"})
        return pd.DataFrame(rows)

    def repair_rules(self) -> pd.DataFrame:
        return pd.DataFrame({"rule": list(REPAIR_RULES), "what is done": list(REPAIR_RULES.values())})

    def show_table(self, name: str):
        """One of Tables 1, 7, 8 or the rerank comparison, assembled once every row of 08, 09 and this notebook can be
        filled (paper_tables.assemble_tables writes them all)."""
        if self._tables is None:
            self._tables = paper_tables.assemble_tables(self.cfg, self.bench)
        return self._tables.show(name)

    def _write_report(self) -> None:
        report = self.client.last_report
        write_json_atomic(self.cfg.paths.rerank_report, {
            "stage": STAGE, "configured_model": self.model, "answered_by": self.answered_by, "mode": self.mode,
            "request_files": self.request_files, "top_n": self.params.top_n, "k": self.params.k,
            "estimate": None if report is None else {"input_tokens": report.est_input_tokens,
                                                      "output_tokens": report.est_output_tokens, "cost_usd": report.est_cost_usd},
            "repair_rules": REPAIR_RULES,
            "jobs": [{"first_stage": j.system, "system": j.reranked, "move": j.move.value, "split": j.split,
                      "run_file": self._shown(j.written) if j.written else None, "why_not_written": j.why_not_written or None,
                      **j.counts.to_dict()} for j in self.jobs],
            "notes": self._portable(self.notes),
        })

    def _shown(self, path: str | Path | None) -> str | None:
        """A path as shown in tables and reports: relative to the output root, never absolute."""
        if path is None:
            return None
        try:
            return os.path.relpath(Path(path), self.cfg.paths.root)
        except ValueError:
            return Path(path).name

    def _portable(self, notes: list[str]) -> list[str]:
        root = str(self.cfg.paths.root)
        return [n.replace(root + "/", "").replace(root, ".") for n in notes]
