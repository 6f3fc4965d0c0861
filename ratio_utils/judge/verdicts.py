"""Asking the judge: one request per (pair, prompt), verdicts parsed from the JSON answers, the
verdict matrix, the silver rule (every retained prompt accepts) and prompt selection by F1 against
the calibration annotator. Every call goes through `ratio_utils.llm.LLMClient` (cached, replayable);
this module writes nothing itself.
"""

from __future__ import annotations

import pandas as pd

from ..llm import ChatRequest, ChatResult, LLMClient
from ..param_sections import JudgeParams
from ..schema import Move
from .agreement_stats import single_annotator_agreement
from .labels import _FALSE, _TRUE
from ..llm.prompts import PromptFile, _relative

# --------------------------------------------------------------------------------------------
# asking the judge
# --------------------------------------------------------------------------------------------


def judge_requests(pairs: pd.DataFrame, prompt: PromptFile, model: str, params: JudgeParams) -> list[ChatRequest]:
    extra = {k: v for k, v in (("reasoning_effort", params.reasoning_effort), ("verbosity", params.verbosity)) if v is not None}
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


def judge_pairs(client: LLMClient, pairs_by_move: dict[Move, pd.DataFrame], prompts: dict[Move, list[PromptFile]],
                params: JudgeParams, *, desc: str) -> pd.DataFrame:
    """Every (pair, prompt) verdict, long format; one client run for all moves (one batch job)."""
    model = params.model or client.settings.model
    requests: list[ChatRequest] = []
    keys: list[tuple[str, str, PromptFile]] = []
    for move, frame in pairs_by_move.items():
        for prompt in prompts.get(move, []):
            batch = judge_requests(frame, prompt, model, params)
            requests += batch
            keys += [(move.value, pid, prompt) for pid in frame["pair_id"]]
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
        stats = single_annotator_agreement(calibration, verdicts[prompt].astype("object").where(verdicts[prompt].notna(), None))
        rows.append({"move": move.value, "prompt": prompt, **stats})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table = table.sort_values(["single_F1", "single_kappa", "prompt"], ascending=[False, False, True], na_position="last")
    # a prompt without a usable F1 (no answers) is never retained
    table["retained"] = [i < n_keep and pd.notna(f1) for i, f1 in enumerate(table["single_F1"])]
    return table.reset_index(drop=True)
