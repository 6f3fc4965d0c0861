"""The silver filter (paper §4.3, Appendix E): LLM judge prompts, their calibration, the silver set.

Serves notebook 07. Reads the test pairs of the benchmark (`ratio_utils.benchmark`), the judge
prompts (`prompts/judge/<move>/<variant>.md`, versioned by a front-matter header and hashed) and
human label files; asks the judge through `ratio_utils.llm` (Batch API by default, every answer
cached and replayable). Writes:

    <benchmark>/data/<move>/silver.parquet      pairs accepted by both retained prompts (only with a real judge)
    data/interim/judge/annotation/*.csv|html     annotation sheets (calibration and panel pairs)
    data/interim/judge/judgements.parquet        every verdict: pair, prompt, version, hash, accept, reason, error
    data/interim/judge/silver_verdicts.parquet   one row per judged test pair: both verdicts and the silver decision
    tables/table9_judge_agreement.*              Table 9 (prompt–human and human–human agreement)
    tables/judge_prompt_selection.*, judge_silver_summary.*, judge_anaphora.*, table9_paper_reference.*

With no endpoint and nothing to replay, nothing is judged: no label is invented, the silver set is
not written (later stages fall back to the unfiltered test set) and every table says so in its notes.
"""

from __future__ import annotations

import html
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from .benchmark import load_benchmark, pairs_path, write_pairs
from .config import REPO_ROOT, Config
from .io import InputError, sha256_file, write_parquet_atomic, write_text_atomic, require_columns
from .llm import ChatRequest, ChatResult, LLMClient
from .report import write_table
from .schema import MOVES, PAIR_COLUMNS, Move, Split, normalize_marker

ANNOTATION_SETS = ("calibration", "panel")
# The explicit anaphors the paper counts in Address markers (Appendix E).
_ANAPHOR = re.compile(r"\b(this|these|such|it|the above)\b", re.IGNORECASE)
_TRUE = {"1", "true", "yes", "y", "accept", "accepted"}
_FALSE = {"0", "false", "no", "n", "reject", "rejected"}


@dataclass
class JudgeParams:
    """The `judge` params section; defaults follow the paper."""

    prompts_dir: str = "prompts/judge"  # relative to the repository
    sample_sizes: dict[str, int | None] = field(
        default_factory=lambda: {"specify": 10_000, "address": None, "broaden": None}
    )  # per move; None = every test pair (Specify: stratified by marker, equal allocation)
    n_calibration: int = 100  # pairs per move labelled by the calibration annotator
    n_panel: int = 60  # held-out pairs per move labelled by the panel
    n_retained: int = 2  # prompts kept per move; a pair must be accepted by all of them
    retained: dict[str, list[str]] | None = field(default_factory=dict)  # move -> prompt names; empty/None = by calibration F1
    calibration_annotator: str | None = None  # needed only if several annotators labelled calibration pairs
    guideline_prompt: str = "minimal"  # the prompt shown to annotators on the sheets
    labels_dir: str = "data/interim/judge/labels"  # relative to the output root
    out_dir: str = "data/interim/judge"  # relative to the output root
    model: str | None = None  # None: llm.model
    reasoning_effort: str | None = "medium"
    verbosity: str | None = "low"
    extra: dict[str, Any] = field(default_factory=dict)  # further request parameters

    def __post_init__(self) -> None:
        if self.retained is None:  # `retained: null` in a params file that extends one fixing them
            self.retained = {}
        moves = {m.value for m in MOVES}
        unknown = sorted((set(self.sample_sizes) | set(self.retained)) - moves)
        if unknown:
            raise ValueError(f"judge params name unknown move(s) {unknown}; moves are {sorted(moves)}")


# --------------------------------------------------------------------------------------------
# prompts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgePrompt:
    move: Move
    name: str
    version: int
    summary: str
    text: str  # the system message
    path: Path
    sha256: str  # of the whole file, header included

    @property
    def label(self) -> str:
        return f"{self.name}-v{self.version}"


def read_prompt(path: Path) -> JudgePrompt:
    """One prompt file: a YAML header between `---` lines (name, version, move, summary), then the text."""
    raw = Path(path).read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", raw, re.DOTALL)
    if not match:
        raise InputError(path, "a judge prompt starts with a '---' header block (name, version, move)", line=1)
    header = yaml.safe_load(match.group(1)) or {}
    missing = [k for k in ("name", "version", "move") if k not in header]
    if missing:
        raise InputError(path, f"prompt header lacks {missing}", line=1)
    move = Move.parse(header["move"])
    if Path(path).parent.name != move.value:
        raise InputError(path, f"prompt declares move {move.value!r} but lives in folder {Path(path).parent.name!r}")
    text = match.group(2).strip()
    if not text:
        raise InputError(path, "prompt text is empty")
    return JudgePrompt(move, str(header["name"]), int(header["version"]), str(header.get("summary", "")),
                       text, Path(path), sha256_file(path))


def load_prompts(prompts_dir: Path) -> dict[Move, list[JudgePrompt]]:
    prompts: dict[Move, list[JudgePrompt]] = {}
    for move in MOVES:
        files = sorted((Path(prompts_dir) / move.value).glob("*.md"))
        loaded = [read_prompt(p) for p in files]
        names = [p.name for p in loaded]
        if len(set(names)) != len(names):
            raise InputError(prompts_dir / move.value, f"duplicate prompt names {names}")
        prompts[move] = loaded
    return prompts


def prompt_table(prompts: dict[Move, list[JudgePrompt]]) -> pd.DataFrame:
    rows = [
        {"move": p.move.value, "prompt": p.label, "summary": p.summary, "file": _relative(p.path), "sha256": p.sha256[:12]}
        for move_prompts in prompts.values() for p in move_prompts
    ]
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# pairs: ids, the judge's view, sampling
# --------------------------------------------------------------------------------------------


def format_pair(query: str, marker: str, gold: str) -> str:
    """The judge's view of a pair: `querySentence. Marker, goldSentence` (paper Appendix E).

    `marker` is the marker as it stood in the paper (`marker_text`), not the lexicon entry: for a
    clause-bearing entry such as `for this purpose, we propose,` the gold sentence already starts
    after the marker's first comma, and joining the entry would repeat the clause.
    """
    query = query.strip()
    if not query.endswith((".", "!", "?")):
        query += "."
    marker = normalize_marker(marker)
    marker = marker[:1].upper() + marker[1:]
    return f"{query} {marker}, {gold.strip()}"


def pair_ids(frame: pd.DataFrame) -> pd.Series:
    return frame["query_id"].astype(str) + "-" + frame["gold_id"].astype(str)


def paper_markers(frame: pd.DataFrame) -> pd.Series:
    """The marker as it stood in the paper (`marker_text`); the lexicon entry (`queryTerm`) only
    where a release lacks it."""
    if "marker_text" not in frame.columns:
        return frame["queryTerm"]
    text = frame["marker_text"].astype("object")
    return text.where(text.notna() & (text.astype(str).str.strip() != ""), frame["queryTerm"])


def has_explicit_anaphor(marker: str) -> bool:
    return bool(_ANAPHOR.search(marker or ""))


def with_pair_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Add `pair_id` and `judge_text`; fill `marker_has_anaphor` from the marker if a release lacks it."""
    frame = frame.copy()
    frame["pair_id"] = pair_ids(frame)
    frame["judge_text"] = [format_pair(q, m, g) for q, m, g in zip(frame.querySentence, paper_markers(frame), frame.goldSentence)]
    if "marker_has_anaphor" not in frame.columns:
        frame["marker_has_anaphor"] = frame["queryTerm"].map(has_explicit_anaphor)
    return frame


def stratified_equal_allocation(frame: pd.DataFrame, by: str, n: int | None, seed: int) -> pd.DataFrame:
    """Sample `n` rows so that every stratum contributes the same number, or all its rows if it has fewer.

    Water-filling: strata smaller than the common quota give all their rows; the quota is the
    largest share the rest can take; the few rows left over after an even split go, one each, to
    randomly chosen strata that still have rows. (No library offers equal allocation with caps.)
    """
    if n is None or n >= len(frame):
        return frame.copy()
    rng = np.random.default_rng(seed)
    keys = frame[by].map(normalize_marker)
    sizes = keys.value_counts()
    strata = sorted(sizes.index, key=lambda k: (sizes[k], k))
    take: dict[str, int] = {}
    remaining, left = n, len(strata)
    for pos, key in enumerate(strata):
        share = remaining // left
        if sizes[key] <= share:
            take[key] = int(sizes[key])
            remaining -= take[key]
            left -= 1
            continue
        rest = strata[pos:]
        for k in rest:
            take[k] = share
        extra = remaining - share * len(rest)
        for k in rng.choice(rest, size=extra, replace=False):
            take[k] += 1
        break
    chosen = []
    for key, count in take.items():
        index = frame.index[keys == key]
        chosen.extend(rng.choice(index, size=count, replace=False).tolist())
    return frame.loc[sorted(chosen)].copy()


def sample_for_judging(test_pairs: dict[Move, pd.DataFrame], sizes: dict[str, int | None], seed: int) -> dict[Move, pd.DataFrame]:
    """The pairs the judge sees: per move, all test pairs or a marker-stratified sample.

    A (query, gold) pair is judged once: repeated pairs would get the same verdict anyway.
    """
    samples = {}
    for move, frame in test_pairs.items():
        frame = with_pair_columns(frame)
        repeated = int(frame["pair_id"].duplicated().sum())
        if repeated:
            print(f"{move.value}: {repeated} repeated (query, gold) pair(s) are judged once")
        frame = frame.drop_duplicates("pair_id")
        samples[move] = stratified_equal_allocation(frame, "queryTerm", sizes.get(move.value), seed)
    return samples


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


# --------------------------------------------------------------------------------------------
# agreement statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """Binary agreement of a rater with a reference (positive = accept), from one 2x2 count.

    Hand-written so that all five statistics come from the same counts and the empty-class cases
    are explicit (P, R, F1 = 0 when undefined, κ = NaN when chance agreement is 1, as sklearn does
    with zero_division=0; every statistic is NaN over zero items, e.g. a panel with no unanimous
    pair); the tests check every statistic against sklearn.
    """

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float:
        if not self.n:
            return float("nan")
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        if not self.n:
            return float("nan")
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        if not self.n:
            return float("nan")
        denominator = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / denominator if denominator else 0.0

    @property
    def kappa(self) -> float:
        n = self.n
        if n == 0:
            return float("nan")
        observed = (self.tp + self.tn) / n
        expected = ((self.tp + self.fp) * (self.tp + self.fn) + (self.fn + self.tn) * (self.fp + self.tn)) / n**2
        return (observed - expected) / (1 - expected) if expected != 1 else float("nan")

    @property
    def percent_agreement(self) -> float:
        return 100.0 * (self.tp + self.tn) / self.n if self.n else float("nan")


def agreement(reference: Any, rater: Any) -> Agreement:
    """Agreement over the items both label (missing values, None/NaN/pd.NA, are left out)."""
    ref = pd.Series(reference, dtype="object").reset_index(drop=True)
    pred = pd.Series(rater, dtype="object").reset_index(drop=True)
    if len(ref) != len(pred):
        raise ValueError(f"reference has {len(ref)} labels, rater {len(pred)}")
    both = ref.notna() & pred.notna()
    r = ref[both].astype(bool).to_numpy()
    p = pred[both].astype(bool).to_numpy()
    return Agreement(tp=int((r & p).sum()), fp=int((~r & p).sum()), fn=int((r & ~p).sum()), tn=int((~r & ~p).sum()))


def majority_label(panel: pd.DataFrame) -> pd.Series:
    """Strict majority of the labels each pair got (rows: pairs, columns: annotators); NA on ties."""
    positive = panel.sum(axis=1, min_count=1)
    count = panel.notna().sum(axis=1)
    out = pd.Series(pd.NA, index=panel.index, dtype="object")
    out[positive * 2 > count] = True
    out[(count - positive) * 2 > count] = False
    return out


def unanimous_label(panel: pd.DataFrame) -> pd.Series:
    """The label of pairs on which every annotator of the panel agrees; NA elsewhere."""
    complete = panel.notna().all(axis=1)
    out = pd.Series(pd.NA, index=panel.index, dtype="object")
    out[complete & (panel == 1).all(axis=1)] = True
    out[complete & (panel == 0).all(axis=1)] = False
    return out


def human_panel_agreement(panel: pd.DataFrame) -> dict[str, float]:
    """Mean pairwise F1 and % agreement between annotators (rows: pairs, columns: annotators)."""
    pairs = list(itertools.combinations(panel.columns, 2))
    if not pairs:
        return {"panel_F1": float("nan"), "panel_Agr": float("nan")}
    scores = [agreement(panel[a], panel[b]) for a, b in pairs]
    return {"panel_F1": float(np.mean([s.f1 for s in scores])), "panel_Agr": float(np.mean([s.percent_agreement for s in scores]))}


def rater_panel_agreement(panel: pd.DataFrame, rater: pd.Series) -> dict[str, float]:
    """A prompt (or rule) against the panel: mean F1 and % agreement over annotators, F1 against
    the majority label and on the unanimous pairs. `rater` is indexed like `panel`."""
    rater = rater.reindex(panel.index)
    per_annotator = [agreement(panel[a], rater) for a in panel.columns]
    return {
        "panel_F1": float(np.mean([s.f1 for s in per_annotator])) if per_annotator else float("nan"),
        "panel_Agr": float(np.mean([s.percent_agreement for s in per_annotator])) if per_annotator else float("nan"),
        "panel_F1_majority": agreement(majority_label(panel), rater).f1,
        "panel_F1_unanimous": agreement(unanimous_label(panel), rater).f1,
    }


def single_annotator_agreement(reference: pd.Series, rater: pd.Series) -> dict[str, float]:
    s = agreement(reference, rater.reindex(reference.index))
    return {"single_P": s.precision, "single_R": s.recall, "single_F1": s.f1, "single_kappa": s.kappa,
            "single_Agr": s.percent_agreement, "n_single": s.n}


# --------------------------------------------------------------------------------------------
# asking the judge
# --------------------------------------------------------------------------------------------


def judge_requests(pairs: pd.DataFrame, prompt: JudgePrompt, model: str, params: JudgeParams) -> list[ChatRequest]:
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


def judge_pairs(client: LLMClient, pairs_by_move: dict[Move, pd.DataFrame], prompts: dict[Move, list[JudgePrompt]],
                params: JudgeParams, *, desc: str) -> pd.DataFrame:
    """Every (pair, prompt) verdict, long format; one client run for all moves (one batch job)."""
    model = params.model or client.settings.model
    requests: list[ChatRequest] = []
    keys: list[tuple[str, str, JudgePrompt]] = []
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


# --------------------------------------------------------------------------------------------
# anaphora analysis
# --------------------------------------------------------------------------------------------


def anaphora_analysis(judged: pd.DataFrame) -> pd.DataFrame:
    """Acceptance with and without an explicit anaphor in the marker, per move, with Fisher's exact test.

    `judged` has columns move, marker_has_anaphor (bool) and accepted (bool; pairs without a
    usable verdict must be removed before). The odds ratio is scipy's sample odds ratio
    (accepted/rejected with anaphor over accepted/rejected without).
    """
    from scipy.stats import fisher_exact

    rows = []
    for move, part in judged.groupby("move", sort=False):
        with_a = part[part["marker_has_anaphor"].astype(bool)]
        without = part[~part["marker_has_anaphor"].astype(bool)]
        a, b = int(with_a["accepted"].sum()), int((~with_a["accepted"].astype(bool)).sum())
        c, d = int(without["accepted"].sum()), int((~without["accepted"].astype(bool)).sum())
        row = {"move": move, "n_with_anaphor": a + b, "n_without_anaphor": c + d,
               "accept_with_anaphor_%": 100 * a / (a + b) if a + b else np.nan,
               "accept_without_anaphor_%": 100 * c / (c + d) if c + d else np.nan,
               "odds_ratio": np.nan, "fisher_p": np.nan}
        if a + b and c + d:
            result = fisher_exact([[a, b], [c, d]])
            row["odds_ratio"], row["fisher_p"] = float(result.statistic), float(result.pvalue)
        rows.append(row)
    return pd.DataFrame(rows)


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
        self.prompts_dir = _resolve(params.prompts_dir, REPO_ROOT)
        self.labels_dir = _resolve(params.labels_dir, cfg.paths.root)
        self.out_dir = _resolve(params.out_dir, cfg.paths.root)
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
        print(("LLM judge: " if self.online else "LLM judge NOT available: ") + self.why)
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
            tables.append(table)
        selection = pd.concat(tables, ignore_index=True).reindex(
            columns=["move", "prompt", "retained", "single_P", "single_R", "single_F1", "single_kappa", "single_Agr", "n_single"])
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
        return self._silver_summary(self.silver_verdicts)

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
            where = (f"answers replayed from {_REPLAY_DISPLAY}" if report is not None and report.mode == "replay"
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
        shown = table.copy()
        shown["fisher_p"] = shown["fisher_p"].map(lambda p: "" if pd.isna(p) else f"{p:.2g}")
        notes = list(self.notes) + ["Acceptance = accepted by both retained prompts; pairs without a usable verdict are left out. "
                                    "Odds ratio and p from scipy.stats.fisher_exact. 'paper:' columns are the paper's values, not ours."]
        write_table(shown, "judge_anaphora", self.cfg, caption="Silver acceptance and explicit anaphors in the marker",
                    notes=self._portable(notes), inputs=[self.benchmark_dir], float_format="{:.1f}")
        return table

# How table notes name the shared replay source (never an absolute path of this machine).
_REPLAY_DISPLAY = "../shared/llm_cache"


def _with_release_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Pairs read from the official release may lack our extra columns; fill what can be derived."""
    frame = frame.copy()
    if "marker_has_anaphor" not in frame.columns:
        frame["marker_has_anaphor"] = frame["queryTerm"].map(has_explicit_anaphor)
    for column in PAIR_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.NA
    return frame


def _resolve(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
