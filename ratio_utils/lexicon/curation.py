"""Manual curation and marker extensions over the sentence table (notebooks 01 and 02).

Reads `cfg.paths.sentences` (SENTENCE_COLUMNS; one file or a folder of parts) through a polars lazy
scan, so no step holds the sentence table: counting the spans before the first comma (paper §4.1: at
most seven words) is a streaming group-by; the reviewers' sheets sample the consecutive pairs whose
second sentence opens with a top span, restricting the sentences to those spans before joining them to
their predecessors; the extensions of each extendable connective (at most five words ending at a comma)
come from the same streaming span count. The review pairs are drawn part by part (a part never cuts a
paper), so that step holds one part's pairs, not all the corpus's. Writes the review sheet (HTML + CSV
with one decision column per reviewer) under `cfg.paths.lexicon_review`.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

import pandas as pd
import polars as pl

from ..io import atomic_path, require_columns, write_text_atomic
from ..parts import part_files, scan_table
from ..schema import SENTENCE_COLUMNS, normalize_text_key

SPAN = "span"


def scan_sentences(path: "str | Path") -> pl.LazyFrame:
    """The kept sentences (drop_reason null), with the text the later stages use (text_clean), as a lazy
    scan of the file or of every part (nothing is read until a step collects it)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: sentence table not found; run notebook 00 first")
    return _kept_sentences(scan_table(path), path)


def scan_sentence_parts(path: "str | Path") -> list[pl.LazyFrame]:
    """scan_sentences of each part on its own (a single-file table is its one part), in part order.

    A part never cuts a paper (corpora/partitioned), so steps that pair a sentence with the one before
    it can run part by part."""
    path = Path(path)
    files = part_files(path)
    if not files:
        raise FileNotFoundError(f"{path}: sentence table not found; run notebook 00 first")
    return [_kept_sentences(pl.scan_parquet([str(f)]), f) for f in files]


def _kept_sentences(frame: pl.LazyFrame, source: Path) -> pl.LazyFrame:
    require_columns(pl.DataFrame(schema=frame.collect_schema()), SENTENCE_COLUMNS, source)
    return (
        frame.filter(pl.col("drop_reason").is_null())
        .with_columns(pl.coalesce("text_clean", "text").alias("text_clean"))
        .select("paper_id", "para", "sent", "text_clean")
    )


def read_sentences(path: "str | Path") -> pl.DataFrame:
    """scan_sentences, read into memory (small tables: tests, benchmarks)."""
    return scan_sentences(path).collect()


def count_kept(sentences: "pl.DataFrame | pl.LazyFrame") -> int:
    """How many sentences a (lazy) table holds, counted in a streaming pass."""
    return int(sentences.lazy().select(pl.len()).collect(engine="streaming").item())


def span_expr(column: str = "text_clean", max_words: int = 7) -> pl.Expr:
    """The normalised span before the first comma, or null (no comma, or more than `max_words` words).

    Normalised as markers are (schema.normalize_text_key): lower case, single spaces.
    """
    text = pl.col(column)
    head = text.str.split_exact(",", 1).struct.field("field_0")
    normal = head.str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()
    words = normal.str.count_matches(r"\S+")
    return (
        pl.when(text.str.contains(",", literal=True) & (words >= 1) & (words <= max_words))
        .then(normal)
        .otherwise(None)
        .alias(SPAN)
    )


def count_spans(sentences: "pl.DataFrame | pl.LazyFrame", max_words: int = 7) -> pl.DataFrame:
    """Every span and its frequency, most frequent first (ties by span), in one streaming pass.

    The raw text before the first comma is counted first and only its distinct values are
    normalised, so the costly string work runs once per distinct opener, not once per sentence.
    Openers of more than `max_words` words are dropped before that count (normalising changes no
    word count): most of them are distinct clauses, so counting them would hold about one entry
    per sentence; memory is the distinct short openers instead.
    """
    text = pl.col("text_clean")
    head = pl.col("head")
    raw = (
        sentences.lazy()
        .filter(text.str.contains(",", literal=True))
        .select(text.str.split_exact(",", 1).struct.field("field_0").alias("head"))
        .filter(head.str.count_matches(r"\S+").is_between(1, max_words))
        .group_by("head")
        .len(name="count")
    )
    normal = head.str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()
    return (
        raw.with_columns(normal.alias(SPAN))
        .group_by(SPAN)
        .agg(pl.col("count").sum())
        .sort(["count", SPAN], descending=[True, False])
        .collect(engine="streaming")
    )


def span_of(text: str, max_words: int = 7) -> str | None:
    """The same span as span_expr, for one string (the reference the tests compare against)."""
    if "," not in text:
        return None
    span = normalize_text_key(text.split(",", 1)[0])
    n = len(span.split())
    return span if 1 <= n <= max_words else None


REVIEW_PAIR_KEYS = ["paper_id", "para", "sent"]  # a pair's position: its first sentence


def sample_review_pairs(sentences: "pl.DataFrame | pl.LazyFrame | list[pl.LazyFrame]", spans: list[str], k: int,
                        seed: int, max_words: int = 7) -> pl.DataFrame:
    """Up to k pairs per span whose second sentence opens with the span, drawn with a seeded hash.

    Sampling by a seeded hash of the pair's position (not by row order) makes the draw independent
    of how the sentence table happens to be sorted, and of how it is cut into parts: the draw keeps, per
    span, the k pairs lowest in (hash, position), and the k lowest of all parts are among the k lowest of
    each part. So `sentences` may be one table or its parts (scan_sentence_parts); parts are drawn from
    one at a time, each carrying on the pairs kept so far, and only the sentences that open with one of
    `spans` are joined to the sentence before them: memory is one part's such pairs plus k per span,
    not all of the corpus's.
    """
    parts = sentences if isinstance(sentences, list) else [sentences]
    kept: pl.DataFrame | None = None
    for part in parts:
        pairs = _opening_pairs(part.lazy(), spans, max_words)
        kept = owned_copy(_lowest_draws(pairs if kept is None else pl.concat([kept, pairs.select(kept.columns)]),
                                        k, seed))
    if kept is None:
        raise ValueError("sample_review_pairs: no sentence table or part given")
    return kept.with_columns(_draw(seed).rank("ordinal").over(SPAN).alias("pair_no"))


def owned_copy(frame: pl.DataFrame) -> pl.DataFrame:
    """A copy of `frame` holding only its own rows' bytes.

    Polars' string columns are views into the buffers they were taken from, so the few pairs kept from a part
    would keep that part's whole text alive: over a partitioned corpus, memory grew with the number of parts
    (docs/scale.md, the rehearsal). An IPC round trip writes only the bytes the rows use; polars has no call
    that compacts a view column in place.
    """
    buffer = io.BytesIO()
    frame.write_ipc(buffer)
    buffer.seek(0)
    return pl.read_ipc(buffer)


def _opening_pairs(sentences: pl.LazyFrame, spans: list[str], max_words: int) -> pl.DataFrame:
    """The consecutive pairs (first, second) of one table whose second sentence opens with one of `spans`."""
    keys = REVIEW_PAIR_KEYS
    seconds = (
        sentences.with_columns(span_expr("text_clean", max_words))
        .filter(pl.col(SPAN).is_in(spans))
        .select(*keys[:2], (pl.col("sent") - 1).alias("sent"), pl.col("text_clean").alias("second"), SPAN)
    )
    firsts = sentences.select(*keys, pl.col("text_clean").alias("first"))
    return (firsts.join(seconds, on=keys, how="inner").select(*keys, "first", "second", SPAN)
            .collect(engine="streaming"))


def _draw(seed: int) -> pl.Expr:
    key = pl.concat_str([pl.col("paper_id"), pl.col("para").cast(pl.Utf8), pl.col("sent").cast(pl.Utf8)],
                        separator="|")
    return key.hash(seed=seed)


def _lowest_draws(pairs: pl.DataFrame, k: int, seed: int) -> pl.DataFrame:
    """Per span the k pairs lowest in (seeded hash, position), spans in the order of their lowest pair."""
    return (
        pairs.with_columns(_draw(seed).alias("_draw"))
        .sort(["_draw", *REVIEW_PAIR_KEYS])
        .group_by(SPAN, maintain_order=True)
        .head(k)
        .drop("_draw")
    )


def review_sheet(top: pl.DataFrame, sampled: pl.DataFrame, reviewers: tuple[str, ...]) -> pd.DataFrame:
    """One row per (span, pair) with an empty decision column per reviewer, in span rank order."""
    ranked = top.with_row_index("rank", offset=1).rename({"count": "span_count"})
    sheet = ranked.join(sampled, on=SPAN, how="inner").sort(["rank", "pair_no"]).to_pandas()
    sheet = sheet[["rank", SPAN, "span_count", "pair_no", "paper_id", "para", "sent", "first", "second"]]
    for reviewer in reviewers:
        sheet[f"decision_{reviewer}"] = ""
    return sheet


def write_review_sheet(sheet: pd.DataFrame, directory: "str | Path", reviewers: tuple[str, ...]) -> dict[str, Path]:
    """review_sheet.csv (decisions filled in by each reviewer) and review_sheet.html (for reading)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    csv_path = directory / "review_sheet.csv"
    with atomic_path(csv_path) as tmp:
        sheet.to_csv(tmp, index=False)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Marker review sheet</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto}td{vertical-align:top;padding:4px}"
        "tr:nth-child(even){background:#f4f4f4}mark{background:#ffe08a}</style></head><body>",
        "<h1>Marker review sheet</h1>",
        "<p>For each span: does it, in <em>every</em> pair below, clearly signal Address, Broaden or Specify "
        "<em>and</em> refer to the preceding sentence? Write the move (address/broaden/specify) or 'reject' "
        f"in your column of review_sheet.csv ({', '.join('decision_' + r for r in reviewers)}). "
        "A span becomes a marker only if both reviewers give the same move for all its pairs.</p>",
    ]
    for (rank, span, count), rows in sheet.groupby(["rank", SPAN, "span_count"], sort=True):
        parts.append(f"<h2 id='span-{rank}'>{rank}. “{html.escape(span)}” ({count:,} sentences)</h2><table>")
        for row in rows.itertuples(index=False):
            second = html.escape(row.second)
            cut = second.find(",")
            if cut >= 0:
                second = f"<mark>{second[:cut]}</mark>{second[cut:]}"
            parts.append(
                f"<tr><td>{row.pair_no}</td><td>{html.escape(row.first)}</td><td>{second}</td>"
                f"<td><small>{html.escape(str(row.paper_id))} ¶{row.para}</small></td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    html_path = write_text_atomic(directory / "review_sheet.html", "\n".join(parts))
    return {"csv": csv_path, "html": html_path}


STATUS_ORDER = ("address", "broaden", "specify", "distractor", "rejected", "not reviewed")


def span_status(top: pl.DataFrame, lexicon: pd.DataFrame) -> pd.DataFrame:
    """The recorded decision for each top span: the released lexicon's hand-made rows decide.

    Hand-made rows are source manual and extendable (extendable connectives were chosen by hand; a
    span that extends one is a marker of its move). A span with no such row was never reviewed by
    the authors (`also_in_lexicon` says whether an LLM or pattern row has it).
    """
    manual = lexicon[lexicon["source"].isin(["manual", "extendable"])]
    by_marker = manual.set_index("marker")
    connectives = manual[manual["extendable"]][["marker", "kind", "move"]].itertuples(index=False)
    connectives = sorted(connectives, key=lambda c: -len(c.marker))
    all_markers = set(lexicon["marker"])
    rows = []
    for rank, (span, count) in enumerate(top.iter_rows(), start=1):
        status, via = "not reviewed", None
        if span in by_marker.index:
            row = by_marker.loc[span]
            status, via = (row["move"] if row["kind"] == "move" else row["kind"]), "manual row"
        else:
            for c in connectives:
                if extension_of(span, c.marker, max_words=99) is not None:
                    status, via = (c.move if c.kind == "move" else c.kind), f"extends '{c.marker}'"
                    break
        rows.append({"rank": rank, SPAN: span, "count": count, "status": status, "via": via,
                     "also_in_lexicon": span in all_markers})
    return pd.DataFrame(rows)


def status_summary(status: pd.DataFrame) -> pd.DataFrame:
    counts = status["status"].value_counts()
    return pd.DataFrame(
        {
            "status": list(STATUS_ORDER),
            "spans": [int(counts.get(s, 0)) for s in STATUS_ORDER],
            "sentences": [int(status.loc[status["status"] == s, "count"].sum()) for s in STATUS_ORDER],
        }
    )


# --- marker extensions (notebook 02) ------------------------------------------------------------


def extension_of(span: str, connective: str, max_words: int = 5) -> str | None:
    """The words a span adds to an extendable connective ('' for the connective alone), or None.

    Both are normalised (lower case, single spaces); the span is the text before a comma, so an
    extension always ends at that comma. `to address this potential bias` extends `to address`
    by 'this potential bias'; `to addressing` does not extend it (word boundary).
    """
    if span == connective:
        return ""
    if not span.startswith(connective + " "):
        return None
    extra = span[len(connective) + 1 :]
    return extra if len(extra.split()) <= max_words else None


def connective_extensions(span_counts: pl.DataFrame, connectives: pd.DataFrame, max_words: int = 5) -> pd.DataFrame:
    """For each extendable connective, every extension found in the corpus with its count.

    `span_counts` must count spans of up to len(connective) + max_words words (see count_spans).
    """
    rows = []
    spans = span_counts.to_pandas()
    for c in connectives.itertuples(index=False):
        candidates = spans[spans[SPAN].str.startswith(c.marker)]
        for span, count in zip(candidates[SPAN], candidates["count"]):
            extra = extension_of(span, c.marker, max_words)
            if extra is not None:
                rows.append({"connective": c.marker, "kind": c.kind, "move": c.move, "extension": extra, SPAN: span,
                             "count": int(count)})
    frame = pd.DataFrame(rows, columns=["connective", "kind", "move", "extension", SPAN, "count"])
    return frame.sort_values(["connective", "count", SPAN], ascending=[True, False, True]).reset_index(drop=True)


def extension_summary(extensions: pd.DataFrame, connectives: pd.DataFrame, examples: int = 3) -> pd.DataFrame:
    """One row per connective: distinct extensions, sentences, and the most frequent extensions."""
    rows = []
    for c in connectives.itertuples(index=False):
        part = extensions[extensions["connective"] == c.marker]
        top = part[part["extension"] != ""].head(examples)
        rows.append(
            {
                "connective": c.marker,
                "kind": c.kind,
                "move": c.move if isinstance(c.move, str) else "",
                "extensions": int((part["extension"] != "").sum()),
                "sentences": int(part["count"].sum()),
                "bare_connective": int(part.loc[part["extension"] == "", "count"].sum()),
                "top_extensions": "; ".join(f"{e} ({n})" for e, n in zip(top["extension"], top["count"])),
            }
        )
    return pd.DataFrame(rows)


def plot_status(summary: pd.DataFrame, top_n: int):
    """The top spans by recorded decision (notebook 01's figure): how many spans, and how many sentences they open.

    Two panels because the counts disagree: a handful of frequent spans can cover most sentences, so the
    number of spans alone says little about how much of the corpus each decision governs."""
    import matplotlib.pyplot as plt

    colors = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#937860", "#bbbbbb"][: len(summary)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    total_sentences = max(int(summary["sentences"].sum()), 1)
    for ax, column, label in ((axes[0], "spans", "spans"), (axes[1], "sentences", "sentences opened by these spans")):
        ax.bar(summary["status"], summary[column], color=colors)
        for x, n in enumerate(summary[column]):
            text = str(n) if column == "spans" else f"{n:,} ({100 * n / total_sentences:.0f}%)"
            ax.text(x, n, text, ha="center", va="bottom", fontsize=7)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", labelrotation=20)
    axes[0].set_title(f"Top {top_n} spans before the first comma, by recorded decision", fontsize=9)
    axes[1].set_title("Sentences each decision covers", fontsize=9)
    fig.tight_layout()
    return fig
