"""What this run is, beside the paper's setting (notebook 14, `ratio_utils.stages.summary`): queries and pairs per
move and split, who produced the labels, the contamination caveat, papers per year with the split windows, and what
differs from the paper at a glance.

Reads:  the benchmark (cfg.paths.benchmark), cfg.paths.papers, cfg.paths.mining_report (stage 05), the reranked
        run files' sidecars (cfg.paths.retrieval_runs), the retrieval and train params.
Writes: nothing (the stage saves the papers-per-year figure).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..config import Config
from ..dataset import papers_per_year_figure
from ..dataset.benchmark import Benchmark, load_benchmark
from ..models import contamination_note, encoders_used
from ..param_sections import DatasetParams
from ..publish.label_sources import rerank_source, silver_sources
from ..retrieval.runs import read_run_info, run_files
from ..schema import MOVES, Split

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
        shown.append(f"{name} ({' and '.join(prefixes)} prefix{'es' if len(prefixes) > 1 else ''})" if prefixes else name)
    return ", ".join(shown) or "none"


def differences(cfg: Config, bench: Benchmark | None, label_sources: list, queries: pd.DataFrame) -> pd.DataFrame:
    """What differs from the paper at a glance, from the run's own records (papers, benchmark, params, label sources);
    `queries`: `queries_per_split`, for the test pairs behind the judged sample and the de-duplicated pairs."""
    ours: dict[str, str] = {}
    if Path(cfg.paths.papers).exists():
        papers = pd.read_parquet(cfg.paths.papers, columns=["corpus", "year"])
        ours["corpus"] = (f"{len(papers):,} papers of {', '.join(sorted(papers['corpus'].unique()))}, "
                          f"{year_range(int(papers['year'].min()), int(papers['year'].max()))} (params corpus.sources)")
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
