"""Tables stored as one parquet file or as a folder of parts (`<name>.parquet/part-00000.parquet`, ...).

A partitioned build (corpus stage with `corpus.papers_per_part`, mining over sentence parts) writes
each part on its own, so no process ever holds the whole table; the same `cfg.paths.*` path names the
file or the folder, and `pd.read_parquet` reads either. Consumers that can stream use `scan_table`
(a polars lazy scan over every part) or `part_files` (one part at a time).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd


def part_path(table: "str | Path", index: int) -> Path:
    return Path(table) / f"part-{index:05d}.parquet"


def part_files(table: "str | Path") -> list[Path]:
    """The parts of a partitioned table in order; a single-file table is its own one part."""
    table = Path(table)
    if table.is_dir():
        return sorted(table.glob("part-*.parquet"))
    return [table] if table.exists() else []


def reset_table(table: "str | Path", partitioned: bool) -> None:
    """Remove what is at `table` if it has the other layout (a file where parts go, or a folder of parts)."""
    table = Path(table)
    if partitioned and table.is_file():
        table.unlink()
    elif not partitioned and table.is_dir():
        shutil.rmtree(table)


def remove_parts_from(table: "str | Path", first_stale: int) -> None:
    """Delete parts numbered `first_stale` and up (left over from a run with more parts)."""
    for path in part_files(table):
        if Path(table).is_dir() and int(path.stem.split("-")[1]) >= first_stale:
            path.unlink()


def scan_table(table: "str | Path"):
    """A polars LazyFrame over the file or every part (nothing is read until it is collected)."""
    import polars as pl

    files = part_files(table)
    if not files:
        raise FileNotFoundError(f"{table}: no parquet file or parts")
    return pl.scan_parquet([str(f) for f in files])


def read_table(table: "str | Path", columns: list[str] | None = None,
               parts_order: list[str] | None = None) -> pd.DataFrame:
    """The whole table as pandas: a single file exactly as pd.read_parquet reads it; parts through a polars
    scan, sorted by `parts_order` (stable) when given, text columns as Python strings (object)."""
    table = Path(table)
    if not table.is_dir():
        return pd.read_parquet(table, columns=columns)
    frame = scan_table(table)
    if columns is not None:
        frame = frame.select(columns)
    if parts_order:
        frame = frame.sort(parts_order, maintain_order=True)
    return object_text(frame.collect().to_pandas())


def object_text(frame: pd.DataFrame) -> pd.DataFrame:
    """Text columns as Python strings (object), as the single-file tables hold them, not pandas' string dtype."""
    return frame.astype({c: object for c in frame.columns if isinstance(frame[c].dtype, pd.StringDtype)})


def table_bytes(table: "str | Path") -> int:
    """The uncompressed size of the file or of every part, from the parquet footers (nothing else is read)."""
    import pyarrow.parquet as pq

    total = 0
    for path in part_files(table):
        metadata = pq.ParquetFile(path).metadata
        total += sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
    return total
