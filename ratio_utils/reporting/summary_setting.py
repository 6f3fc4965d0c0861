"""What this run is, beside the paper's setting (notebook 14, `ratio_utils.stages.summary`): queries and pairs per
move and split, who produced the labels, the contamination caveat, papers per year with the split windows, what
differs from the paper at a glance, and the judge waves a silver set pools (acceptance and scores per wave).

Reads:  the benchmark (cfg.paths.benchmark), cfg.paths.papers, cfg.paths.mining_report (stage 05), the run files of
        the silver set and their sidecars (cfg.paths.retrieval_runs), the retrieval, train and judge params.
Writes: nothing (the stage saves the papers-per-year figure).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset import papers_per_year_figure
from ..dataset.benchmark import Benchmark, load_benchmark
from ..evaluation import stats
from ..evaluation.intervals import IntervalCache, cell
from ..evaluation.run_scoring import score_run
from ..judge.sampling import pair_ids, sample_for_judging
from ..models import contamination_note, encoders_used
from ..param_sections import DatasetParams, JudgeParams
from ..publish.label_sources import rerank_source, silver_sources
from ..retrieval.runs import info_path, read_run_info, run_files
from ..schema import MOVES, Move, Split

# The paper's setting, as its text states it (§4, §5.1, Appendix C).
PAPER_SETTING = {
    "corpus": "S2ORC computer science papers published since 2015",
    "test pool": "404,371 sentences",
    "pairs judged": "10,000 Specify (sampled by marker), all 14,020 Address and 1,410 Broaden test pairs",
    "models": "BM25 ×3, all-mpnet-base-v2, ModernBERT-embed-large, Stella-en-1.5B-v5, EmbeddingGemma, "
              "Qwen3-Embedding, ReasonIR, three ColBERTs",
    "training": "all training pairs, 3-5 configurations per model and move, four GPUs for Address and Specify",
    "judge": "GPT-5.4",
    "reranker": "GPT-5-mini",
}
SPLITS_OF_TABLE5 = (Split.TRAIN.value, Split.VALIDATION.value, Split.TEST.value)  # the silver set is drawn from test


def benchmark_of(cfg: Config) -> Benchmark | None:
    """The benchmark on disk (None before notebook 06 has run)."""
    return load_benchmark(cfg.paths.benchmark) if Path(cfg.paths.benchmark).exists() else None


def queries_per_split(bench: Benchmark | None) -> pd.DataFrame:
    """Pairs and distinct queries of every move and split on disk (a query with two golds is one query, two pairs)."""
    rows = []
    for move in MOVES if bench is not None else ():
        for split in Split:
            if bench.has(move, split):
                frame = bench.queries(move, split)
                rows.append({"move": move.value, "split": split.value, "pairs": len(frame),
                             "queries": int(frame["query_id"].nunique())})
    return pd.DataFrame(rows, columns=["move", "split", "pairs", "queries"])


def years_of_test_pairs(bench: Benchmark | None) -> tuple[int, int] | None:
    """First and last publication year of the test pairs (None without a benchmark or a test split)."""
    years = [bench.queries(m, Split.TEST)["year"] for m in MOVES if bench is not None and bench.has(m, Split.TEST)]
    years = pd.concat(years).dropna() if years else pd.Series(dtype=float)
    return None if years.empty else (int(years.min()), int(years.max()))


def contamination_caveat(cfg: Config, bench: Benchmark | None) -> str | None:
    """A caveat when the test papers are not newer than the pretrained encoders the run uses (None otherwise)."""
    years = years_of_test_pairs(bench)
    return None if years is None else contamination_note(years, encoders_used(cfg))


def run_label_sources(cfg: Config, bench: Benchmark | None) -> list:
    """The silver set's judge and every reranker whose runs this run's tables use."""
    if bench is None:
        return []
    runs = Path(cfg.paths.retrieval_runs)
    rerankers = {}
    for path in run_files(runs) if runs.exists() else []:
        source = rerank_source(read_run_info(path).retriever)
        if source is not None:
            rerankers[json.dumps(source.to_json(), sort_keys=True)] = source
    return silver_sources(bench) + list(rerankers.values())


def papers_per_year(cfg: Config):
    """Papers per year and corpus with the split windows drawn (None before notebook 00 has run)."""
    if not Path(cfg.paths.papers).exists():
        return None
    papers = pd.read_parquet(cfg.paths.papers, columns=["corpus", "year"])
    return papers_per_year_figure(papers, cfg.section("dataset", DatasetParams))


def pairs_kept(report: dict, queries: pd.DataFrame) -> str:
    """The pairs stage 05 kept per move, said to be counted before de-duplication, beside the de-duplicated pairs of
    the benchmark (Table 5's totals: train + validation + test) where the two differ."""
    kept = report.get("pairs", {}).get("kept", {})
    text = (f"lexicon of {report.get('lexicon', {}).get('entries', 0):,} entries; pairs kept by mining (before "
            "de-duplication): " + ", ".join(f"{m} {n:,}" for m, n in kept.items()))
    split = queries[queries["split"].isin(SPLITS_OF_TABLE5)].groupby("move")["pairs"].sum()
    deduplicated = {m: int(split[m]) for m in kept if m in split.index}
    if deduplicated and any(deduplicated[m] != kept[m] for m in deduplicated):
        text += ("; after de-duplication (Table 5, train + validation + test): "
                 + ", ".join(f"{m} {n:,}" for m, n in deduplicated.items()))
    return text


def year_range(first: int, last: int) -> str:
    """'2015–2025', or one year when both are the same ('2025', not '2025–2025')."""
    return str(first) if first == last else f"{first}–{last}"


def model_list(entries: list) -> str:
    """params retrieval.dense_models as a reader reads it: 'all-mpnet-base-v2, EmbeddingGemma-300m (generic prefix)'
    (an entry is a model name, or a mapping with `model` and its `prefixes`/`prefix`), never a raw mapping."""
    shown = []
    for entry in entries:
        if not isinstance(entry, dict):
            shown.append(str(entry))
            continue
        prefixes = entry.get("prefixes", entry.get("prefix"))
        prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes or [])
        name = str(entry.get("model", "?"))
        shown.append(f"{name} ({' and '.join(prefixes)} prefix{'es' if len(prefixes) > 1 else ''})" if prefixes
                     else name)
    return ", ".join(shown) or "none"


def differences(cfg: Config, bench: Benchmark | None, label_sources: list, queries: pd.DataFrame) -> pd.DataFrame:
    """What differs from the paper at a glance, from the run's own records (papers, benchmark, params, label sources);
    `queries`: `queries_per_split`, for the test pairs behind the judged sample and the de-duplicated pairs."""
    ours: dict[str, str] = {}
    if Path(cfg.paths.papers).exists():
        papers = pd.read_parquet(cfg.paths.papers, columns=["corpus", "year"])
        ours["corpus"] = (f"{len(papers):,} papers of {', '.join(sorted(papers['corpus'].unique()))}, "
                          f"{year_range(int(papers['year'].min()), int(papers['year'].max()))} "
                          "(params corpus.sources)")
    if bench is not None:
        ours["test pool"] = f"{len(bench.pool(Split.TEST)):,} sentences"
    judge = next((source for source in label_sources if source.role == "judge"), None)
    if judge is not None and judge.detail:
        sampled, without = judge.detail.get("sampled pairs", {}), judge.detail.get("pairs without a verdict", {})
        test = queries[queries["split"] == Split.TEST.value]
        test_pairs = dict(zip(test["move"], test["pairs"]))
        ours["pairs judged"] = "; ".join(f"{m}: {sampled.get(m, 0):,} of {test_pairs.get(m, 0):,} test pairs"
                                         f"{f' ({without[m]} without a verdict)' if without.get(m) else ''}"
                                         for m in sampled)
    mining = Path(cfg.paths.mining_report)
    if mining.exists():
        ours["markers and pairs"] = pairs_kept(json.loads(mining.read_text(encoding="utf-8")), queries)
    retrieval, train = cfg.sections.get("retrieval", {}), cfg.sections.get("train", {})
    ours["models"] = (f"BM25 n-grams {', '.join(map(str, retrieval.get('bm25_ngrams') or [])) or 'none'}; dense: "
                      f"{model_list(retrieval.get('dense_models') or [])}")
    ours["training"] = (f"{train.get('base_model')}, at most {train.get('max_train_pairs')} pairs per move, "
                        f"configurations {train.get('configs')}, one device")
    for source in label_sources:
        key = "judge" if source.role == "judge" else "reranker"
        ours[key] = (f"{source.configured} configured; answers by {source.answered}"
                     + (" (stand-in)" if source.stand_in else ""))
    ours.setdefault("judge", "none here (unfiltered test set only)")
    ours.setdefault("reranker", "none here (no reranked run)")
    keys = list(dict.fromkeys([*PAPER_SETTING, *ours]))
    return pd.DataFrame([{"what": key, "paper": PAPER_SETTING.get(key, ""), "this run": ours.get(key, "not recorded")}
                         for key in keys])


WAVE_COLUMNS = ["move", "wave", "sampled", "silver", "accepted % [95% CI]"]


def _wave_of_queries(cfg: Config, bench: Benchmark, move: str, sizes: dict) -> tuple[pd.DataFrame, pd.Series, int]:
    """(the judge's sample of `move` with its waves, drawn again by the stage's own rule from the same test pairs,
    params and seed; wave per silver query id; silver pairs the redrawn sample does not hold, counted)."""
    sample = sample_for_judging({Move(move): bench.queries(move, Split.TEST)}, sizes, cfg.seed)[Move(move)]
    wave_of_pair = dict(zip(sample["pair_id"], sample["wave"]))
    silver = bench.queries(move, Split.SILVER)
    waves = pd.Series([wave_of_pair.get(pid) for pid in pair_ids(silver)], index=silver["query_id"].astype(str))
    unknown = int(waves.isna().sum())
    return sample, waves.dropna().astype(int).groupby(level=0).first(), unknown


def silver_waves(cfg: Config, bench: Benchmark | None,
                 n_resamples: int = 2_000) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """For each move whose silver set pools several judge waves (judge.sample_sizes a list: a nested sample), the
    judge's acceptance per wave (silver pairs of the wave's sampled pairs, exact 95% interval) and each silver run's
    MRR@10 per wave beside its pooled score (reranked runs left out: they cover a sample); with one sentence on how to
    read them, or '' where no silver set pools waves. A silver pair the redrawn sample does not hold is counted in the
    sentence, never dropped silently."""
    empty = pd.DataFrame(columns=WAVE_COLUMNS), pd.DataFrame(), ""
    if bench is None:
        return empty
    judge = cfg.section("judge", JudgeParams)
    moves = [m.value for m in MOVES if len(judge.waves(m.value) or []) > 1 and bench.has(m.value, Split.SILVER)]
    if not moves:
        return empty
    acceptance, scores, unknown_total = [], [], 0
    cache = IntervalCache(None, cfg.seed, n_resamples)
    for move in moves:
        sample, waves, unknown = _wave_of_queries(cfg, bench, move, judge.sample_sizes)
        unknown_total += unknown
        silver_pairs = set(pair_ids(bench.queries(move, Split.SILVER)))
        for wave, part in sample.groupby("wave"):
            accepted = int(part["pair_id"].isin(silver_pairs).sum())
            low, high = stats.proportion_ci(accepted, len(part))
            acceptance.append({"move": move, "wave": int(wave), "sampled": len(part), "silver": accepted,
                               "accepted % [95% CI]": stats.format_ci(accepted / len(part), low, high)})
        for path in run_files(cfg.paths.retrieval_runs):
            if path.parent.name != move or path.stem != Split.SILVER.value or not info_path(path).exists():
                continue
            info = read_run_info(path)
            if info.setup.endswith("rerank"):
                continue
            evalset = bench.eval_set(move, Split.SILVER, max_queries=info.max_queries, qids=info.qids)
            per_query = score_run(path, evalset.qrels, metrics=["MRR@10"], per_query=True)["MRR@10"]
            row = {"system": info.system, "move": move}
            for wave in sorted(set(waves)):
                values = per_query[per_query.index.isin(waves.index[waves == wave])]
                row[f"wave {wave}"] = _score_text(values, cache)
            row["pooled"] = _score_text(per_query, cache)
            scores.append(row)
    sizes = "; ".join(f"{move.capitalize()} {judge.waves(move)}" for move in moves)
    reading = (f"The silver set pools judge waves of a nested sample (judge.sample_sizes: {sizes}; each wave a "
               "marker-stratified equal-allocation sample of the test pairs no earlier wave drew, so the waves differ "
               "in their marker mix as well as in who answered them). A conclusion read from the pooled silver scores "
               "holds for both waves only where the per-wave scores agree; acceptance differs between waves, so the "
               "pooled set over-represents the wave the judge accepted more of. MRR@10 (%) [95% bootstrap interval "
               f"over queries], n the queries; † fewer than {stats.INDICATIVE_BELOW}.")
    if unknown_total:
        reading += (f" {unknown_total} silver pair(s) are not in the sample redrawn from the params: their wave is "
                    "unknown and they count in the pooled scores only.")
    return pd.DataFrame(acceptance, columns=WAVE_COLUMNS), pd.DataFrame(scores), reading


def _score_text(values: pd.Series, cache: IntervalCache) -> str:
    if values.empty:
        return ""
    c = cell(values.to_numpy(float), cache)
    return f"{c.text()} (n {c.n})"
