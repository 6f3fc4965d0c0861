"""Notebook 10's reranking jobs (paper §5.2, Appendix C, H.3): which queries of a (first-stage system, move) are
sent, their requests, who answers them (sent, replayed, or written as request files), the reranked run files, the
counts and the report. The prompts, requests and repair rules of one query are `ratio_utils.retrieval.rerank`.

Reads:  the benchmark; <retrieval_runs>/<system>/<move>/<split>.parquet + .run.json (notebooks 08/09).
Writes: <retrieval_runs>/<system> + rerank/<move>/<split>.parquet/.trec/.run.json (only with answers; a stale one
        is removed), the report dict that `ratio_utils.stages.llm_rerank` writes to cfg.paths.rerank_report, and
        request files (dry run) under the LLM cache, through `ratio_utils.llm`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..dataset.benchmark import Benchmark
from ..llm import ChatRequest, ChatResult, LLMClient
from ..llm.prompts import PromptFile
from ..param_sections import RerankParams
from ..publish.label_sources import REPLAYED_FROM
from ..schema import NOTEBOOKS, Move, Split
from .rerank import (
    REPAIR_RULES,
    QueryCounts,
    answer_status,
    custom_id,
    parse_ranking,
    ranked_run,
    rerank_request,
    reranked_order,
)
from .runs import RERANK_SUFFIX, info_path, read_run, read_run_info, reranked_system_name, run_path, write_system_run

COUNTS_NOTE = ("to_rerank: queries whose gold is in the first-stage top n (one request each); of those requests, "
               "sent: "
               "sent to the endpoint in this run; replayed: answered from recorded responses (replay or the cache); "
               "request_files: written as Batch API request files without an answer (no key, nothing recorded).")


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
    golds: dict[str, set[str]] = field(default_factory=dict)  # qid -> gold docids (queries in the first-stage run)
    recall_at_n: dict[str, float] = field(default_factory=dict)  # qid -> first-stage recall@top_n
    promoted: dict[str, bool] = field(default_factory=dict)  # answered qid -> a gold in the reranked top k

    @property
    def reranked(self) -> str:
        return reranked_system_name(self.system)


@dataclass
class Asked:
    """What happened to one run's requests: the results in request order, and how they were answered."""

    results: list[ChatResult]
    mode: str  # live | replay | dry_run
    answered_by: list[str]
    request_files: str | None  # the folder of the Batch API request files written, if any


def shown_path(path: str | Path | None, root: Path) -> str | None:
    """A path as shown in tables and reports: relative to the output root, never absolute."""
    if path is None:
        return None
    try:
        return os.path.relpath(Path(path), root)
    except ValueError:
        return Path(path).name


def portable_notes(notes: list[str], root: Path) -> list[str]:
    return [n.replace(str(root) + "/", "").replace(str(root), ".") for n in notes]


# -- planning ----------------------------------------------------------------------------------------------------
def split_for(bench: Benchmark, move: Move, split: str) -> tuple[str, str | None]:
    """The split reranked for `move` and a note when the silver split it asks for does not exist."""
    wanted = Split.parse(split)
    if wanted is Split.SILVER and bench.query_split(move) is not Split.SILVER:
        return Split.TEST.value, (f"{move.value}: no silver split (notebook 07 wrote none); the unfiltered test "
                                  "queries are reranked.")
    return wanted.value, None


def plan_job(bench: Benchmark, system: str, move: Move, split: str, runs_dir: Path, params: RerankParams,
             seed: int) -> Job:
    """The queries of one (system, move): all or a seeded sample; those whose gold is in the first-stage top n are
    sent (the others keep their first-stage ranking). `why_not_written` is set when there is no first-stage run."""
    job = Job(system, move, split, run_path(runs_dir, system, move, split))
    pairs = bench.queries(move, split)
    qids = pd.Series(pairs["query_id"].drop_duplicates().sort_values().to_numpy())
    if params.max_queries is not None and len(qids) > params.max_queries:
        qids = qids.sample(n=params.max_queries, random_state=seed).sort_values()
    job.counts.queries = len(qids)
    if not job.run_file.exists():
        job.why_not_written = "no first-stage run file (run notebook 08/09 first)"
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
        job.golds[qid] = set(golds[qid])
        found = golds[qid] & set(order[: params.top_n])
        job.recall_at_n[qid] = len(found) / len(golds[qid])
        if found:
            job.to_send.append(qid)
        else:
            job.counts.not_sent_gold_outside_top_n += 1
    job.counts.to_rerank = len(job.to_send)
    return job


def build_requests(bench: Benchmark, jobs: list[Job], prompts: dict[Move, PromptFile], model: str,
                   params: RerankParams) -> list[tuple[Job, str, ChatRequest]]:
    """One request per query to send: the query and its first-stage top n, numbered in first-stage order."""
    texts: dict[str, dict[str, str]] = {}
    out = []
    for job in jobs:
        if not job.to_send:
            continue
        if job.split not in texts:
            pool = bench.pool(job.split)
            texts[job.split] = dict(zip(pool["docid"], pool["text"]))
        queries = bench.queries(job.move, job.split).drop_duplicates("query_id").set_index("query_id")["querySentence"]
        for qid in job.to_send:
            candidates = [texts[job.split][d] for d in job.orders[qid][: params.top_n]]
            request = rerank_request(custom_id(job.system, job.move, job.split, qid), prompts[job.move], queries[qid],
                                     candidates, model, params,
                                     meta={"system": job.system, "split": job.split, "qid": qid})
            out.append((job, qid, request))
    return out


# -- asking --------------------------------------------------------------------------------------------------------
def ask(client: LLMClient, requests: list[ChatRequest], live: bool) -> Asked:
    """Send (with a key), write request files (llm.mode dry_run), or replay recorded answers and write the requests
    without one as request files."""
    request_files = None
    if live:
        mode, results = "live", client.run(requests, desc="llm rerank")
    elif client.settings.mode == "dry_run":
        mode, results = "dry_run", client.run(requests, mode="dry_run", desc="llm rerank")
        request_files = client.last_report.batch_dir
    else:
        mode = "replay"
        results = client.run(requests, mode="replay", desc="llm rerank", allow_replay_misses=True)
        missed = [r for r, res in zip(requests, results) if res.replay_miss]
        if missed:
            client.run(missed, mode="dry_run", desc="llm rerank (request files)")
            request_files = client.last_report.batch_dir
    return Asked(results, mode, sorted({r.model for r in results if r.content and r.model}), request_files)


def reranker_record(model: str, asked: Asked | None) -> dict:
    """Who reranked (label_sources.rerank_source reads it back from a run's sidecar)."""
    return {"reranker": model, "answered_by": asked.answered_by if asked else [],
            "replayed_from": REPLAYED_FROM if asked and asked.mode == "replay" else None}


def count_outcome(job: Job, result: ChatResult | None, asked: Asked) -> None:
    """Sent (live, not from the cache), replayed (a recorded or cached answer) or written as a request file."""
    if result is None:
        return
    if result.cached and result.content:
        job.counts.replayed += 1
    elif asked.mode == "live" and not result.cached:
        job.counts.sent += 1
    elif asked.request_files and (asked.mode == "dry_run" or result.replay_miss):
        job.counts.request_files += 1


def remove_stale(target: Path) -> list[Path]:
    """Remove a reranked run file (and its .trec and sidecar) that this run cannot reproduce; the paths removed."""
    removed = []
    for path in (target, target.with_suffix(".trec"), info_path(target)):
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed


# -- the reranked run ----------------------------------------------------------------------------------------------
def finish_job(job: Job, results: dict[str, ChatResult], asked: Asked, runs_dir: Path, model: str,
               prompt: PromptFile, params: RerankParams) -> list[Path]:
    """Count what happened, rerank the answered queries and write the reranked run (first-stage sidecar, reranker
    recorded); without any answer write nothing. Returns the stale files removed."""
    orders = dict(job.orders)
    for qid in job.to_send:
        result = results.get(qid)
        count_outcome(job, result, asked)
        if answer_status(result) != "answered":
            job.counts.missing += 1
            job.counts.replay_misses += int(result is not None and result.replay_miss)
            continue
        job.counts.answered += 1
        ranking = parse_ranking(result.parsed, min(params.top_n, len(job.orders[qid])), params.k)
        for rule in ranking.repairs:
            job.counts.repairs[rule] += 1
        orders[qid] = reranked_order(job.orders[qid], ranking.positions, params.top_n)
        job.promoted[qid] = bool(job.golds[qid] & set(orders[qid][: params.k]))
    target = run_path(runs_dir, job.reranked, job.move, job.split)
    if asked.mode == "dry_run" or job.counts.answered == 0:
        if not job.why_not_written:
            job.why_not_written = ("llm.mode is dry_run" if asked.mode == "dry_run" else
                                   "no query sent" if not job.to_send else "no answer (nothing sent or replayed)")
        return remove_stale(target)
    try:
        first = read_run_info(job.run_file)
    except Exception as exc:  # noqa: BLE001 - a first-stage run without sidecar: say so, write nothing
        job.why_not_written = f"first-stage run has no usable sidecar ({type(exc).__name__}); rerun notebook 08/09"
        return remove_stale(target)
    info = dataclasses.replace(
        first, setup=first.setup + RERANK_SUFFIX,
        family="llm-rerank", stage=NOTEBOOKS["10"], first_stage=first.system, max_queries=None, qids=sorted(orders),
        source=model, retriever={**reranker_record(model, asked), "prompt": prompt.label,
                                 "prompt_sha256": prompt.sha256, "top_n": params.top_n, "k": params.k},
        notes=([f"{job.counts.missing} sent quer(ies) without an answer keep their first-stage ranking"]
               if job.counts.missing else []),
    )
    job.written = write_system_run(ranked_run(orders), runs_dir, info)["parquet"]
    return []


def finish_jobs(jobs: list[Job], planned: list[tuple[Job, str, ChatRequest]], asked: Asked, runs_dir: Path, model: str,
                prompts: dict[Move, PromptFile], params: RerankParams) -> list[Path]:
    """`finish_job` for every job, each with the results of its own requests; the stale files removed."""
    by_job: dict[int, dict[str, ChatResult]] = {}
    for (job, qid, _), result in zip(planned, asked.results):
        by_job.setdefault(id(job), {})[qid] = result
    removed = []
    for job in jobs:
        removed += finish_job(job, by_job.get(id(job), {}), asked, runs_dir, model, prompts[job.move], params)
    return removed


# -- counts and report -----------------------------------------------------------------------------------------------
def counts_table(jobs: list[Job], root: Path) -> pd.DataFrame:
    """One row per (first stage, move): the query counts, the repairs and the run file written (or why not)."""
    rows = []
    for job in jobs:
        counts = job.counts.to_dict()
        repairs = counts.pop("repairs")
        rows.append({"first stage": job.system, "move": job.move.value, "split": job.split, **counts,
                     **{f"repair: {r}": n for r, n in repairs.items()},
                     "run file": (shown_path(job.written, root) if job.written
                                  else f"— ({job.why_not_written or 'not run yet'})")})
    return pd.DataFrame(rows)


def rerank_report(jobs: list[Job], asked: Asked | None, mode: str, model: str, params: RerankParams,
                  report, notes: list[str], root: Path) -> dict:
    """The report of notebook 10 (cfg.paths.rerank_report): who answered, the estimate, every job's counts."""
    return {
        "stage": NOTEBOOKS["10"], "configured_model": model, "answered_by": asked.answered_by if asked else [],
        "mode": mode, "request_files": shown_path(asked.request_files, root) if asked else None,
        "top_n": params.top_n, "k": params.k,
        "estimate": None if report is None else {"input_tokens": report.est_input_tokens,
                                                  "output_tokens": report.est_output_tokens,
                                                  "cost_usd": report.est_cost_usd},
        "repair_rules": REPAIR_RULES,
        "jobs": [{"first_stage": j.system, "system": j.reranked, "move": j.move.value, "split": j.split,
                  "run_file": shown_path(j.written, root) if j.written else None,
                  "why_not_written": j.why_not_written or None,
                  **j.counts.to_dict()} for j in jobs],
        "notes": portable_notes(notes, root),
    }
