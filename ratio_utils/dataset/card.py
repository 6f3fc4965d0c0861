"""The release directory's dataset card (`<benchmark>/README.md`), so that Hugging Face `datasets` reads it offline.

    datasets.load_dataset("<benchmark dir>", "corpus", split="test")      # the shared candidate pool of a split
    datasets.load_dataset("<benchmark dir>", "specify", split="silver")   # a move's query–gold pairs
    ratio-card DIR [--licence CORPUS=TEXT]          # a card for any release-layout directory (ratio_utils.apps.card)

The YAML header carries the Hub's metadata (licence, size category, task category and id, who created the language and
the annotations, source datasets, a pretty name) and lists one config per table: `corpus` (one split per pool: train,
validation, test; silver queries search the test pool) and one per move (its pairs: the query, its gold candidate's id,
the paper). A split without pairs is left out of the configs and named in the card. The prose is generated from the
directory and the run that wrote it: counts, the publication dates each split spans, who produced the silver labels
(`provenance/silver.json`), the corpora and their licences (`corpus.licences`, `corpora.registry.LICENCES`), and
the paper's citation. The `license` field is the one Hub licence all the corpora share; where they differ (or one
has a licence the Hub does not list) it is `other`, with each corpus's licence in `license_details` and the prose.

Written by notebooks 06 (no silver yet) and 07 (with the silver set); `Benchmark.checksum` leaves the card out,
so writing it changes no run key. Reads the benchmark directory; writes `<benchmark>/README.md`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from ..io import write_text_atomic
from ..publish.label_sources import SILVER_RECORD
from ..schema import CARD_FILE, MOVES, POOL_SPLITS, Split, move_text
from .benchmark import Benchmark, candidates_path, pairs_path

CARD_SPLITS = (Split.TRAIN, Split.VALIDATION, Split.TEST, Split.SILVER)
PAPER_TITLE = "Ratio: A Benchmark for Retrieval Across Typed Ideation Operations in Scientific Literature"
# The paper's own front matter (../shared/paper/ratio_paper.txt) gives its title only: no authors, venue, year or DOI,
# so the entry names none rather than invent them.
CITATION = "\n".join([
    "@misc{ratio_benchmark,",
    f"  title = {{{PAPER_TITLE}}},",
    "  note  = {The paper introducing the Ratio benchmark; cite its published version (authors, venue, year)}",
    "}",
])
# Hub licence ids (https://hf.co/docs/hub/repositories-licenses) of the licence texts the corpora state, by prefix.
HUB_LICENCES = (("CC BY-SA 4.0", "cc-by-sa-4.0"), ("CC BY-NC 4.0", "cc-by-nc-4.0"), ("CC BY 4.0", "cc-by-4.0"),
                ("CC0", "cc0-1.0"), ("MIT", "mit"), ("Apache-2.0", "apache-2.0"), ("Apache 2.0", "apache-2.0"),
                ("ODC-By", "odc-by"))
# The Hub's size categories, by the number of query–gold pairs (train, validation, test; silver is a subset of test).
SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"))
PAPER = ("Ratio (Retrieval Across Typed Ideation Operations), a benchmark for scientific inspiration retrieval: "
         "given a statement from a paper and a move, find a sentence that addresses the problem it states (Address), "
         "broadens it (Broaden) or specifies it (Specify)")


@dataclass(frozen=True)
class CardSources:
    """What the directory cannot say about itself: the run's name and the corpora it was built from."""

    name: str  # the params' name, e.g. "default", "ml"
    licences: dict[str, str] = field(default_factory=dict)  # corpus source -> licence
    licence_id: str | None = None  # the Hub licence id, when the caller knows it (`ratio-card --license`)


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows if path.exists() else 0


def card_configs(bench: Benchmark) -> tuple[list[dict], list[str]]:
    """(the `configs:` entries, the (move, split) files left out because they hold no pairs)."""
    root = Path(bench.root)
    corpus = [{"split": s.value, "path": candidates_path(root, s).relative_to(root).as_posix()}
              for s in POOL_SPLITS if _rows(candidates_path(root, s))]
    configs, left_out = [{"config_name": "corpus", "data_files": corpus}], []
    for move in MOVES:
        files = []
        for split in CARD_SPLITS:
            path = pairs_path(root, move, split)
            if _rows(path):
                files.append({"split": split.value, "path": path.relative_to(root).as_posix()})
            elif path.exists() or split is not Split.SILVER:
                left_out.append(f"{move.value}/{split.value}")
        if files:
            configs.append({"config_name": move.value, "data_files": files})
    return configs, left_out


def _columns(root: Path, config: dict) -> str:
    """The columns of a config's first file, as `datasets` will read them."""
    import pyarrow.parquet as pq

    if not config["data_files"]:
        return "no files"
    return ", ".join(f"`{name}`" for name in pq.read_schema(root / config["data_files"][0]["path"]).names)


def date_span(pairs: pd.DataFrame) -> tuple[str, str] | None:
    """(first, last) publication date of the pairs (YYYY-MM-DD), else their years (YYYY); None without either."""
    dates = pd.to_datetime(pairs["publicationdate"], errors="coerce").dropna() if "publicationdate" in pairs else None
    if dates is not None and not dates.empty:
        return f"{dates.min():%Y-%m-%d}", f"{dates.max():%Y-%m-%d}"
    years = pd.to_numeric(pairs["year"], errors="coerce").dropna() if "year" in pairs else None
    return (str(int(years.min())), str(int(years.max()))) if years is not None and not years.empty else None


def split_summary(bench: Benchmark) -> pd.DataFrame:
    """One row per split: the publication dates its pairs span, its pool, and pairs / distinct queries per move."""
    rows = []
    for split in CARD_SPLITS:
        present = [m for m in MOVES if bench.has(m, split)]
        if not present:
            continue
        frames = {m: bench.queries(m, split) for m in present}
        row = {"split": split.value,
               "publication dates": " to ".join(date_span(pd.concat(frames.values())) or ["no dates"]),
               "pool sentences": f"{_rows(candidates_path(bench.root, split)):,}"}
        for move in MOVES:
            frame = frames.get(move)
            row[move.value.capitalize()] = ("-" if frame is None
                                            else f"{len(frame):,} ({frame['query_id'].nunique():,})")
        rows.append(row)
    return pd.DataFrame(rows)


def _silver_text(bench: Benchmark) -> str:
    path = Path(bench.root) / SILVER_RECORD
    if not any(_rows(pairs_path(bench.root, m, Split.SILVER)) for m in MOVES):
        return "This directory has no silver set: the LLM judge (notebook 07) has not written one."
    if not path.exists():
        return "The silver set's labels carry no provenance record (`provenance/silver.json` is absent)."
    record = json.loads(path.read_text(encoding="utf-8"))
    who = ", ".join(record.get("answered_by") or []) or "unknown"
    configured = record.get("configured")
    detail = record.get("detail", {})
    text = f"Silver labels: answered by {who}" + (f", standing in for the configured judge {configured}"
                                                  if configured and configured != who else "")
    if record.get("replayed_from"):
        text += " (recorded answers, replayed)"
    text += "."
    if detail.get("rule"):
        text += f" Rule: {detail['rule']}."
    silver, sampled = detail.get("silver pairs", {}), detail.get("sampled pairs", {})
    if silver:
        text += " Kept / judged pairs: " + "; ".join(
            f"{m} {silver.get(m, 0):,} / {sampled.get(m, 0):,}" for m in (mv.value for mv in MOVES)
            if m in sampled) + "."
    return text


def _licence_text(bench: Benchmark, sources: CardSources) -> list[str]:
    counts = corpus_pair_counts(bench)
    if not counts:
        return ["The pairs do not name the corpus they were mined from; their licence is that of the release they "
                "come from."]
    return [f"- `{corpus}` ({n:,} pairs): {sources.licences.get(corpus, 'licence not stated in the run parameters')}"
            for corpus, n in sorted(counts.items())]


def corpus_pair_counts(bench: Benchmark) -> dict[str, int]:
    """Pairs per corpus the pairs name (their `corpus` column), over every split; {} when they name none."""
    counts: dict[str, int] = {}
    for move in MOVES:
        for split in CARD_SPLITS:
            if split is Split.SILVER or not bench.has(move, split):
                continue  # silver pairs are test pairs: counted once
            frame = bench.queries(move, split)
            if "corpus" in frame:
                for corpus, n in frame["corpus"].value_counts().items():
                    counts[str(corpus)] = counts.get(str(corpus), 0) + int(n)
    return counts


def hub_licence(text: str) -> str | None:
    """The Hub's id of a corpus licence text ("CC BY 4.0 (...)" -> "cc-by-4.0"), None where the Hub lists none."""
    return next((hub for prefix, hub in HUB_LICENCES if text.strip().upper().startswith(prefix.upper())), None)


def licence_metadata(corpora: list[str], sources: CardSources) -> dict:
    """The card's licence fields: the one Hub licence every corpus has; else `other` with each corpus's licence in
    `license_details` (several corpora, or one the Hub does not list); `unknown` where the pairs name no corpus."""
    if sources.licence_id:
        return {"license": sources.licence_id}
    if not corpora:
        return {"license": "unknown"}
    texts = {corpus: sources.licences.get(corpus, "licence not stated in the run parameters") for corpus in corpora}
    ids = {hub_licence(text) for text in texts.values()}
    if len(ids) == 1 and None not in ids:
        return {"license": ids.pop()}
    return {"license": "other", "license_name": "ratio-per-corpus",
            "license_details": "; ".join(f"{corpus}: {text}" for corpus, text in texts.items())}


def pair_count(bench: Benchmark) -> int:
    """The query–gold pairs of train, validation and test (silver pairs are test pairs)."""
    return sum(_rows(pairs_path(bench.root, m, s)) for m in MOVES for s in CARD_SPLITS if s is not Split.SILVER)


def size_category(pairs: int) -> str:
    """The Hub's size category of a number of examples."""
    return next((name for bound, name in SIZE_CATEGORIES if pairs < bound), "100M<n<1B")


def card_metadata(bench: Benchmark, sources: CardSources, configs: list[dict]) -> dict:
    """The YAML header: the Hub's metadata fields, then the configs `datasets` reads."""
    counts = corpus_pair_counts(bench)
    has_silver = any(_rows(pairs_path(bench.root, m, Split.SILVER)) for m in MOVES)
    return {
        "pretty_name": f"Ratio, rebuilt ({sources.name} run)",
        "language": ["en"],
        "language_creators": ["found"],  # sentences of published papers
        # the pairs are found (an author's discourse marker links them); the silver subset is kept by an LLM judge
        "annotations_creators": ["found", "machine-generated"] if has_silver else ["found"],
        "multilinguality": ["monolingual"],
        "source_datasets": [f"extended|{corpus}" for corpus in sorted(counts)] or ["extended"],
        "size_categories": [size_category(pair_count(bench))],
        "task_categories": ["text-retrieval"],
        "task_ids": ["document-retrieval"],
        **licence_metadata(sorted(counts), sources),
        "tags": ["scientific-inspiration-retrieval"],
        "configs": configs,
    }


def _markdown_table(frame: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def dataset_card(bench: Benchmark, sources: CardSources) -> str:
    """The card's text: YAML header (configs) and prose, every number read from the directory."""
    configs, left_out = card_configs(bench)
    header = card_metadata(bench, sources, configs)
    licence = ("The `license` field is `other`: the corpora's licences differ (or the Hub lists none of one), so each "
               "is given here and in `license_details`." if header["license"] == "other" else
               f"The `license` field, `{header['license']}`, is the licence of every corpus below."
               if header["license"] != "unknown" else "")
    lines = [
        "---", yaml.safe_dump(header, sort_keys=False, allow_unicode=True).rstrip(), "---", "",
        f"# Ratio, rebuilt by the ratio compendium ({sources.name} run)", "",
        f"{PAPER}. This directory is the compendium's rebuild from the corpora listed below, in the layout of the "
        "authors' release; it is **not** the authors' official release.", "",
        "## Moves", "",
        *[f"- **{move.value.capitalize()}**: {move_text(move, 'instruction')}" for move in MOVES], "",
        "## Splits", "",
        "Pairs are split by the publication date of their paper; each split has one candidate pool shared by the "
        "three moves, and silver queries (the judge-filtered subset of test) search the test pool. Cells: pairs "
        "(distinct queries).", "",
        _markdown_table(split_summary(bench)), "",
        _silver_text(bench), "",
        "## Configs", "",
        f"`corpus` has one split per pool ({_columns(bench.root, configs[0])}); each move's config has its pairs "
        f"({_columns(bench.root, configs[1]) if len(configs) > 1 else 'no pairs'}). "
        "A query sentence in two pairs of a move is one query with two relevant candidates; a query's own sentence is "
        "never a candidate for it." + (f" Left out (no pairs): {', '.join(left_out)}." if left_out else ""), "",
        "```python", "from datasets import load_dataset",
        'pool = load_dataset("<this directory>", "corpus", split="test")',
        'pairs = load_dataset("<this directory>", "specify", split="test")', "```", "",
        "## Corpora and licences", "", *_licence_text(bench, sources), "", *([licence, ""] if licence else []),
        f"`size_categories` counts the {pair_count(bench):,} query–gold pairs of train, validation and test "
        "(silver pairs are test pairs).", "",
        "## Citation", "", "```bibtex", CITATION, "```", "",
        "Generated by `ratio_utils.dataset.card` from this directory.", "",
    ]
    return "\n".join(lines)


def write_dataset_card(bench: Benchmark, sources: CardSources) -> Path:
    path = Path(bench.root) / CARD_FILE
    write_text_atomic(path, dataset_card(bench, sources))
    return path


def card_sources(cfg) -> CardSources:
    """The run's name and the licence of each corpus it reads (params `corpus.licences` over the registry's)."""
    from ..corpora.registry import LICENCES
    from ..param_sections import CorpusParams

    params = cfg.section("corpus", CorpusParams)
    return CardSources(cfg.name, {**LICENCES, **params.licences})


def write_run_card(cfg) -> str:
    """Write the card of the run's benchmark (cfg.paths.benchmark); its prose, for the notebook to show."""
    from .benchmark import load_benchmark

    path = write_dataset_card(load_benchmark(cfg.paths.benchmark), card_sources(cfg))
    return path.read_text(encoding="utf-8").split("\n---\n", 1)[1]
