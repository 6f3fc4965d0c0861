"""LLM generation and labelling of Address and Broaden markers (notebook 03; paper §4.1, Appendix A).

The loop: several model families propose markers over several rounds, each request seeded with
curated markers (and, from round 2, a seeded sample of what earlier rounds proposed) and one move
subcategory (`data/lexicon/move_subcategories.yaml`); a labeller then assigns STRONG-TRUE,
WEAK-TRUE or FALSE to every distinct candidate, and only STRONG-TRUE candidates are kept.
Prompts are files under `prompts/lexicon/`, the move's definition in them from `prompts/moves.toml`.
Every call goes through `ratio_utils.llm.LLMClient`.

The request builders and answer parsers here are pure functions. Without an endpoint (or
recorded responses), `released_label_counts` replays the labels of the released lexicon instead.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ..config import packaged
from ..schema import MOVE_TO_GROUP, Move, move_text, normalize_marker
from .markers import PAPER_LLM_LABELS, PAPER_PATTERN_NEW, STRENGTH_LABELS

# shipped with the package (ratio_utils/resources, the checkout's prompts/ and data/lexicon/)
PROMPT_DIR = packaged("prompts/lexicon")
SUBCATEGORIES_FILE = packaged("data/lexicon/move_subcategories.yaml")
KEEP_LABEL = "STRONG-TRUE"

@dataclass(frozen=True)
class Prompts:
    generate_system: string.Template
    generate_user: string.Template
    label_system: string.Template

    @classmethod
    def load(cls, directory: Path = PROMPT_DIR) -> "Prompts":
        def read(name: str) -> string.Template:
            return string.Template((directory / name).read_text(encoding="utf-8"))

        return cls(read("generate_system.txt"), read("generate_user.txt"), read("label_system.txt"))


def load_subcategories(path: Path = SUBCATEGORIES_FILE) -> dict[Move, dict[str, str]]:
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    return {Move.parse(move): dict(items) for move, items in data.items()}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _move_fields(move: Move) -> dict[str, str]:
    """The move's placeholders of the prompt files: its name and its definition as the paper gives it (§3, §4.1),
    in the words given to the models (prompts/moves.toml)."""
    return {"move_name": move.value.capitalize(), "move_definition": move_text(move, "definition")}


def generation_requests(
    *,
    round_no: int,
    models: tuple[str, ...],
    moves: tuple[Move, ...],
    subcategories: dict[Move, dict[str, str]],
    seeds: dict[Move, list[str]],
    proposed: pd.DataFrame | None,
    n_markers: int,
    n_seeds: int,
    seed: int,
    prompts: Prompts,
) -> list[Any]:
    """The requests of one generation round: one per (model, move, subcategory).

    Seeds are the curated markers of the move; from round 2 on, half of the seed slots go to a
    seeded sample of the candidates earlier rounds proposed for that subcategory, so later rounds
    build on earlier ones. Custom ids: `lexgen-r<round>-<model>-<move>-<subcategory>`.
    """
    from ..llm import ChatRequest

    requests = []
    for move in moves:
        system = prompts.generate_system.substitute(_move_fields(move))
        for subcategory, description in subcategories[move].items():
            rng = random.Random(f"{seed}|{round_no}|{move.value}|{subcategory}")
            curated = sorted(seeds[move])
            earlier: list[str] = []
            if proposed is not None and len(proposed):
                mask = (proposed["move"] == move.value) & (proposed["subcategory"] == subcategory)
                earlier = sorted(set(proposed.loc[mask, "marker"]))
            n_earlier = min(len(earlier), n_seeds // 2)
            chosen = rng.sample(earlier, n_earlier) + rng.sample(curated, min(len(curated), n_seeds - n_earlier))
            user = prompts.generate_user.substitute(
                _move_fields(move), subcategory=subcategory, subcategory_description=description,
                seeds="\n".join(f"- {s}" for s in chosen), n=n_markers,
            )
            for model in models:
                requests.append(
                    ChatRequest(
                        custom_id=f"lexgen-r{round_no}-{_slug(model)}-{move.value}-{_slug(subcategory)}",
                        model=model,
                        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                        response_format_json=True,
                        extra={},
                        meta={"prompt": "prompts/lexicon/generate_*.txt", "round": round_no, "move": move.value,
                              "subcategory": subcategory},
                    )
                )
    return requests


def parse_generated(parsed: dict | None) -> list[str]:
    """The marker phrases of one generation answer, normalised; anything but a list of strings is ignored."""
    if not isinstance(parsed, dict) or not isinstance(parsed.get("markers"), list):
        return []
    phrases = [normalize_marker(p) for p in parsed["markers"] if isinstance(p, str)]
    return list(dict.fromkeys(p for p in phrases if p))


def collect_candidates(requests: list[Any], results: list[Any]) -> tuple[pd.DataFrame, int]:
    """Candidates from one round's results (marker, move, subcategory, model, round) and the count of failed
    answers."""
    by_id = {r.custom_id: r for r in requests}
    rows, failed = [], 0
    for result in results:
        request = by_id[result.custom_id]
        phrases = parse_generated(result.parsed) if result.error is None else []
        if not phrases:
            failed += 1
        move = request.meta["move"]
        for phrase in phrases:
            rows.append({"marker": phrase, "move": move, "subcategory": request.meta["subcategory"],
                         "model": request.model, "round": request.meta["round"]})
    return pd.DataFrame(rows, columns=["marker", "move", "subcategory", "model", "round"]), failed


def label_requests(candidates: pd.DataFrame, model: str, batch_size: int, prompts: Prompts) -> list[Any]:
    """One labelling request per batch of distinct candidates of one move.

    The custom id carries a hash of the batch's phrases, so a batch's answer is reused only for
    the same phrases: `lexlabel-<move>-<batch no>-<hash8>`.
    """
    from ..llm import ChatRequest

    requests = []
    for move_value, part in candidates.groupby("move", sort=True):
        move = Move.parse(move_value)
        phrases = sorted(set(part["marker"]))
        system = prompts.label_system.substitute(_move_fields(move))
        for start in range(0, len(phrases), batch_size):
            batch = phrases[start : start + batch_size]
            digest = hashlib.sha1("\n".join(batch).encode()).hexdigest()[:8]
            requests.append(
                ChatRequest(
                    custom_id=f"lexlabel-{move.value}-{start // batch_size:04d}-{digest}",
                    model=model,
                    messages=[{"role": "system", "content": system},
                              {"role": "user", "content": json.dumps({"phrases": batch}, ensure_ascii=False)}],
                    response_format_json=True,
                    extra={},
                    meta={"prompt": "prompts/lexicon/label_system.txt", "move": move.value, "phrases": batch},
                )
            )
    return requests


def parse_labels(parsed: dict | None, asked: list[str]) -> tuple[dict[str, str], list[str]]:
    """({phrase: label}, problems) for one labelling answer.

    Only phrases that were asked count; a label outside STRONG-TRUE/WEAK-TRUE/FALSE, a phrase
    not asked, or a phrase left out is a problem (reported; the phrase stays unlabelled).
    """
    labels: dict[str, str] = {}
    problems: list[str] = []
    items = parsed.get("labels") if isinstance(parsed, dict) else None
    if not isinstance(items, list):
        return labels, [f"answer has no 'labels' list ({len(asked)} phrases unlabelled)"]
    asked_set = set(asked)
    for item in items:
        if not isinstance(item, dict):
            problems.append(f"label entry is not an object: {item!r}")
            continue
        phrase, label = normalize_marker(str(item.get("phrase", ""))), str(item.get("label", "")).strip().upper()
        if phrase not in asked_set:
            problems.append(f"label for a phrase not asked: {phrase!r}")
        elif label not in STRENGTH_LABELS:
            problems.append(f"unknown label {label!r} for {phrase!r}")
        else:
            labels[phrase] = label
    missing = [p for p in asked if p not in labels]
    if missing:
        problems.append(f"{len(missing)} phrase(s) left unlabelled, e.g. {missing[:3]}")
    return labels, problems


def collect_labels(requests: list[Any], results: list[Any]) -> tuple[pd.DataFrame, list[str]]:
    by_id = {r.custom_id: r for r in requests}
    rows, problems = [], []
    for result in results:
        request = by_id[result.custom_id]
        move = request.meta["move"]
        if result.error is not None:
            problems.append(f"{result.custom_id}: {result.error}")
            continue
        labels, issues = parse_labels(result.parsed, request.meta["phrases"])
        problems += [f"{result.custom_id}: {p}" for p in issues]
        rows += [{"marker": p, "move": move, "strength": labels.get(p)} for p in request.meta["phrases"]]
    return pd.DataFrame(rows, columns=["marker", "move", "strength"]), problems


# --- offline: replay the released labels ---------------------------------------------------------


def released_label_counts(released: pd.DataFrame) -> pd.DataFrame:
    """The strength labels of the released LLM rows, by group: one row per group, one column per label.

    `released` is `lexicon.read_released_csv_rows(...)`; only rows whose query_type is LLMgenerated
    (source llm) count. 'unlabelled' counts rows with no strength.
    """
    llm = released[released["source"].map(lambda s: getattr(s, "value", s)) == "llm"]
    table = pd.crosstab(llm["group"], llm["strength"].fillna("unlabelled"))
    for label in (*STRENGTH_LABELS, "unlabelled"):
        if label not in table.columns:
            table[label] = 0
    table = table[[*STRENGTH_LABELS, "unlabelled"]]
    table.loc["total"] = table.sum()
    table["rows"] = table.sum(axis=1)
    return table.reset_index().rename(columns={"index": "group"}).rename_axis(columns=None)


def reconcile_with_paper(counts: pd.DataFrame) -> pd.DataFrame:
    """The paper's label counts beside what the released file gives, with how each number is made up.

    The paper keeps the 3,779 strong-true candidates (Address + Broaden). The file files every
    kept LLM phrase under its move group: 3,773 Address rows (all STRONG-TRUE) and 263 Broaden rows
    (no label recorded). The paper's pattern expansion added 257 new Address markers, and the file
    has no Address pattern (combo) rows: they are among the Address LLMgenerated rows (the models
    were seeded with template phrases, Appendix A). Address + Broaden − 257 gives the paper's count.
    """
    by_group = counts.set_index("group")
    address = (int(by_group.loc[MOVE_TO_GROUP[Move.ADDRESS], "rows"]) if MOVE_TO_GROUP[Move.ADDRESS] in by_group.index
               else 0)
    broaden = (int(by_group.loc[MOVE_TO_GROUP[Move.BROADEN], "rows"]) if MOVE_TO_GROUP[Move.BROADEN] in by_group.index
               else 0)
    total = by_group.loc["total"]
    kept = address + broaden - PAPER_PATTERN_NEW[Move.ADDRESS]
    return pd.DataFrame(
        [
            {"label": "STRONG-TRUE (kept)", "paper": PAPER_LLM_LABELS["STRONG-TRUE"], "file": kept,
             "how the file number is made up": f"LLM rows of Address ({address}) + Broaden ({broaden}) − the paper's "
             f"{PAPER_PATTERN_NEW[Move.ADDRESS]} Address pattern markers filed as LLMgenerated; the file's "
             f"STRONG-TRUE labels number {int(total['STRONG-TRUE'])} (Broaden rows carry no label)"},
            {"label": "WEAK-TRUE", "paper": PAPER_LLM_LABELS["WEAK-TRUE"], "file": int(total["WEAK-TRUE"]),
             "how the file number is made up": "WEAK-TRUE labels of LLM rows (all in BLACKLIST)"},
            {"label": "FALSE", "paper": PAPER_LLM_LABELS["FALSE"], "file": int(total["FALSE"]),
             "how the file number is made up": "FALSE labels of LLM rows (BLACKLIST and common_irrelevant)"},
            {"label": "no label", "paper": 0, "file": int(total["unlabelled"]),
             "how the file number is made up": "LLM rows without a strength: the Broaden rows and some BLACKLIST "
             "rows"},
        ]
    )


# --- the loop (online) -------------------------------------------------------------------------------


def llm_client(cfg) -> tuple[Any | None, str]:
    """The project's LLM client and why it can or cannot answer; (None, reason) when it cannot."""
    try:
        from ..llm import LLMClient
    except ImportError as exc:  # the client module is part of the project; say so if it is missing
        return None, f"ratio_utils.llm is not importable ({exc})"
    client = LLMClient.from_config(cfg)
    ok, why = client.available()
    return (client if ok else None), why


def curated_seeds(lexicon: pd.DataFrame, moves: tuple[Move, ...]) -> dict[Move, list[str]]:
    """The hand-made markers of each move (manual curation and extendable connectives)."""
    hand = lexicon[(lexicon["kind"] == "move") & lexicon["source"].isin(["manual", "extendable"])]
    return {m: sorted(hand.loc[hand["move"] == m.value, "marker"]) for m in moves}


def run_generation(client: Any, lexicon: pd.DataFrame, params: Any, seed: int) -> dict[str, Any]:
    """Generation rounds over every model, then the labeller; returns candidates, labels and the kept markers."""
    prompts = Prompts.load()
    moves = tuple(Move.parse(m) for m in params.generation_moves)
    subcategories = load_subcategories()
    seeds = curated_seeds(lexicon, moves)
    proposed = pd.DataFrame(columns=["marker", "move", "subcategory", "model", "round"])
    failed = 0
    for round_no in range(1, params.generation_rounds + 1):
        requests = generation_requests(
            round_no=round_no, models=params.generation_models, moves=moves, subcategories=subcategories,
            seeds=seeds, proposed=proposed, n_markers=params.markers_per_request, n_seeds=params.seeds_per_request,
            seed=seed, prompts=prompts,
        )
        results = client.run(requests, desc=f"marker generation round {round_no}")
        found, n_failed = collect_candidates(requests, results)
        proposed = pd.concat([proposed, found], ignore_index=True)
        failed += n_failed
    curated = {m for markers in seeds.values() for m in markers}
    candidates = proposed[~proposed["marker"].isin(curated)].drop_duplicates(["marker", "move"])
    requests = label_requests(candidates, params.labeller_model, params.label_batch_size, prompts)
    labels, problems = collect_labels(requests, client.run(requests, desc="label markers"))
    kept = labels[labels["strength"] == KEEP_LABEL]
    return {"proposed": proposed, "candidates": candidates, "labels": labels, "kept": kept,
            "failed_generation_answers": failed, "label_problems": problems}


def label_counts(labels: pd.DataFrame) -> pd.DataFrame:
    """Our labeller's counts per move, beside the paper's totals."""
    table = pd.crosstab(labels["move"], labels["strength"].fillna("unlabelled"))
    table.loc["total"] = table.sum()
    table = table.reset_index().rename_axis(columns=None)
    paper = {"move": "paper (Address + Broaden)", **PAPER_LLM_LABELS}
    return pd.concat([table, pd.DataFrame([paper])], ignore_index=True)
