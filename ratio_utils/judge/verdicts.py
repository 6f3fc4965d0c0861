"""Asking the judge: one request per (pair, prompt), verdicts parsed from the JSON answers, the
verdict matrix, the silver rule (every retained prompt accepts; a pair with an unanswered request is not
judged) and prompt selection by F1 against the calibration annotator (or prompts fixed in params). Every call
goes through `ratio_utils.llm.LLMClient` (cached, replayable); this module writes nothing itself.
"""

from __future__ import annotations

import pandas as pd

from ..llm import ChatRequest, ChatResult, LLMClient
from ..llm.prompts import PromptFile, _relative
from ..param_sections import JudgeParams
from ..schema import MOVES, Move
from .agreement_stats import single_annotator_agreement
from .labels import _FALSE, _TRUE

# --------------------------------------------------------------------------------------------
# asking the judge
# --------------------------------------------------------------------------------------------


def judge_requests(pairs: pd.DataFrame, prompt: PromptFile, model: str, params: JudgeParams) -> list[ChatRequest]:
    extra = {k: v for k, v in (("reasoning_effort", params.reasoning_effort), ("verbosity", params.verbosity))
             if v is not None}
    extra.update(params.extra)
    meta = {"prompt": prompt.label, "prompt_file": _relative(prompt.path), "prompt_sha256": prompt.sha256,
            "prompt_version": prompt.version, "move": prompt.move.value}
    return [
        ChatRequest(
            custom_id=f"{prompt.move.value}-{prompt.label}-{prompt.sha256[:8]}-{pid}",
            model=model,
            messages=[{"role": "system", "content": prompt.text}, {"role": "user", "content": text}],
            response_format_json=True,
            extra=extra,
            meta={**meta, "pair_id": pid},
        )
        for pid, text in zip(pairs["pair_id"], pairs["judge_text"])
    ]


def parse_verdict(result: ChatResult) -> tuple[bool | None, str | None, str | None]:
    """(accept, reason, error) from a judge answer; accept is None when the answer is unusable."""
    if not result.ok or result.parsed is None:
        return None, None, result.error or "no JSON answer"
    value = result.parsed.get("accept")
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        value = value.strip().lower() in _TRUE
    if not isinstance(value, bool):
        return None, None, f"answer has no boolean 'accept' field: {result.content!r}"[:300]
    reason = result.parsed.get("reason")
    return value, (str(reason) if reason is not None else None), None


def judge_plan(pairs_by_move: dict[Move, pd.DataFrame], prompts: dict[Move, list[PromptFile]], model: str,
               params: JudgeParams) -> tuple[list[tuple[str, str, PromptFile]], list[ChatRequest]]:
    """The judge's requests for every (pair, prompt), move by move, prompt by prompt, and their (move, pair,
    prompt)."""
    requests: list[ChatRequest] = []
    keys: list[tuple[str, str, PromptFile]] = []
    for move, frame in pairs_by_move.items():
        for prompt in prompts.get(move, []):
            requests += judge_requests(frame, prompt, model, params)
            keys += [(move.value, pid, prompt) for pid in frame["pair_id"]]
    return keys, requests


def unanswered_requests(judgements: pd.DataFrame, pairs_by_move: dict[Move, pd.DataFrame],
                        prompts: dict[Move, list[PromptFile]], model: str, params: JudgeParams) -> list[ChatRequest]:
    """The requests of `judge_pairs` that replay could not answer (`replay_miss`), to write as request files."""
    missed = set(judgements.loc[judgements["replay_miss"].astype(bool), "custom_id"])
    return [r for r in judge_plan(pairs_by_move, prompts, model, params)[1] if r.custom_id in missed]


def write_requests(client: LLMClient, requests: list[ChatRequest], *, desc: str) -> str | None:
    """Requests nothing answered written as Batch API request files (a dry run) for the maintainers to send; the
    folder, or None when there is nothing to write."""
    if not requests:
        return None
    client.run(requests, mode="dry_run", desc=desc)
    return client.last_report.batch_dir


def judge_pairs(client: LLMClient, pairs_by_move: dict[Move, pd.DataFrame], prompts: dict[Move, list[PromptFile]],
                params: JudgeParams, *, desc: str) -> pd.DataFrame:
    """Every (pair, prompt) verdict, long format; one client run for all moves (one batch job)."""
    keys, requests = judge_plan(pairs_by_move, prompts, params.model or client.settings.model, params)
    # Partial replay is normal (a prompt or the data changed since the answers were recorded): a
    # request without a recorded response becomes a verdict-less row flagged `replay_miss`.
    results = client.run(requests, desc=desc, allow_replay_misses=True) if requests else []
    rows = []
    for (move, pid, prompt), request, result in zip(keys, requests, results):
        accept, reason, error = parse_verdict(result)
        rows.append({"move": move, "pair_id": pid, "prompt": prompt.label, "prompt_sha256": prompt.sha256,
                     "custom_id": request.custom_id, "request_hash": result.request_hash,
                     "accept": accept, "reason": reason, "error": error, "cached": result.cached,
                     "replay_miss": result.replay_miss, "answered_by": result.model})
    frame = pd.DataFrame(rows, columns=["move", "pair_id", "prompt", "prompt_sha256", "custom_id", "request_hash",
                                        "accept", "reason", "error", "cached", "replay_miss", "answered_by"])
    frame["accept"] = frame["accept"].astype("boolean")
    return frame


def verdict_matrix(judgements: pd.DataFrame, move: Move) -> pd.DataFrame:
    """Rows: pairs of one move; columns: prompt labels (kept even if every verdict is missing);
    values: True/False/NA."""
    part = judgements[judgements["move"] == move.value]
    return part.pivot(index="pair_id", columns="prompt", values="accept").astype("boolean")


def both_rule(verdicts: pd.DataFrame, prompts: list[str]) -> pd.Series:
    """The silver rule: accepted only if every retained prompt accepts (Kleene AND: a rejection decides)."""
    out = verdicts[prompts[0]].astype("boolean")
    for name in prompts[1:]:
        out = out & verdicts[name].astype("boolean")
    return out


def select_prompts(judgements: pd.DataFrame, calibration: pd.Series, move: Move, n_keep: int) -> pd.DataFrame:
    """Each prompt of a move against the calibration annotator; the `n_keep` best by F1 (then κ) are retained."""
    verdicts = verdict_matrix(judgements, move)
    rows = []
    for prompt in verdicts.columns:
        stats = single_annotator_agreement(calibration,
                                           verdicts[prompt].astype("object").where(verdicts[prompt].notna(), None))
        rows.append({"move": move.value, "prompt": prompt, **stats})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.sort_values(["single_F1", "single_kappa", "prompt"], ascending=[False, False, True],
                              na_position="last")
    # a prompt without a usable F1 (no answers) is never retained
    table["retained"] = [i < n_keep and pd.notna(f1) for i, f1 in enumerate(table["single_F1"])]
    return table.reset_index(drop=True)


FIXED_IN_PARAMS = "fixed in params (judge.retained)"  # a prompt used without selection by calibration F1
SELECTION_COLUMNS = ["move", "prompt", "retained", "single_P", "single_R", "single_F1", "single_kappa", "single_Agr",
                     "n_single"]


def fixed_prompts(retained: dict[str, list[str]], prompts: dict[Move, list[PromptFile]]) -> dict[Move, list[str]]:
    """The prompt labels `judge.retained` fixes per move (by name or label); an unknown name raises."""
    fixed = {}
    for move, names in ((Move.parse(m), list(names)) for m, names in retained.items()):
        known = {p.label for p in prompts[move]} | {p.name for p in prompts[move]}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"judge.retained.{move.value} names unknown prompt(s) {unknown}; have {sorted(known)}")
        fixed[move] = [next(p.label for p in prompts[move] if n in (p.name, p.label)) for n in names]
    return fixed


def prompt_selection(judgements: pd.DataFrame | None, references: dict[Move, pd.Series],
                     prompts: dict[Move, list[PromptFile]], retained: dict[Move, list[str]], n_keep: int,
                     fixed: set[Move]) -> tuple[pd.DataFrame, dict[Move, list[str]]]:
    """Every prompt against the calibration annotator (`select_prompts`, where there are judgements and labels)
    and the prompts retained per move: those of `retained` (fixed in params), else the `n_keep` best. A fixed
    move's rows say where the choice came from (FIXED_IN_PARAMS)."""
    retained = dict(retained)
    tables = []
    for move in MOVES:
        reference = references.get(move, pd.Series(dtype="object"))
        if judgements is not None and len(reference):
            table = select_prompts(judgements, reference, move, n_keep)
            if move not in retained and not table.empty:
                retained[move] = table.loc[table["retained"], "prompt"].tolist()
        else:
            table = pd.DataFrame({"move": move.value, "prompt": [p.label for p in prompts[move]]})
        table["retained"] = table["prompt"].isin(retained.get(move, []))
        if move in fixed:  # not chosen by calibration F1 here: say where the choice came from
            table["retained"] = table["retained"].map({True: FIXED_IN_PARAMS, False: ""})
        tables.append(table)
    selection = pd.concat(tables, ignore_index=True).reindex(columns=SELECTION_COLUMNS)
    if selection["retained"].isin([FIXED_IN_PARAMS]).any():
        selection = selection.rename(columns={"retained": "used by the judge"})
    return selection, retained


def unanswered_ids(judgements: pd.DataFrame, move: Move) -> set[str]:
    """The sampled pairs of `move` with a judge request that nothing answered (a replay miss)."""
    part = judgements[(judgements["move"] == move.value) & judgements["replay_miss"].astype(bool)]
    return set(part["pair_id"])


def silver_verdicts(judgements: pd.DataFrame, samples: dict[Move, pd.DataFrame],
                    retained: dict[Move, list[str]]) -> pd.DataFrame:
    """One row per sampled pair: its sample columns, each retained prompt's verdict (`accept[<prompt>]`) and the
    silver decision (`accepted`: every retained prompt accepts, `both_rule`). A pair with an unanswered request
    (`unanswered`, only when there is one) has no decision: it is not judged, never counted as rejected."""
    rows = []
    for move in MOVES:
        verdicts = verdict_matrix(judgements, move).reindex(samples[move]["pair_id"])
        accepted = both_rule(verdicts, retained[move]) if len(verdicts.columns) else pd.Series(dtype="boolean")
        unanswered = unanswered_ids(judgements, move)
        if unanswered:
            accepted = accepted.where(~accepted.index.isin(unanswered), pd.NA)
        frame = samples[move].set_index("pair_id")
        frame = frame.assign(move=move.value, **{f"accept[{p}]": verdicts[p] for p in retained[move]},
                             accepted=accepted)
        if unanswered:
            frame["unanswered"] = frame.index.isin(unanswered)
        rows.append(frame.reset_index())
    return pd.concat(rows, ignore_index=True)


def accepted_ids(verdicts: pd.DataFrame, move: Move) -> list[str]:
    """The silver pairs of `move`: accepted by every retained prompt."""
    part = verdicts[verdicts["move"] == move.value]
    return part.loc[part["accepted"].fillna(False).astype(bool), "pair_id"].tolist()
