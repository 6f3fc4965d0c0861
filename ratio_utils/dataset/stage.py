"""Stage 06 end to end (notebook 06): read stage 05's pairs and distractors, build and check the benchmark,
write the release layout and the report.

Reads `cfg.paths.pairs` and `cfg.paths.distractors` (a file or a folder of parts); writes the benchmark
under `cfg.paths.benchmark` and `cfg.paths.split_report`. Past `dataset.max_in_memory_bytes` of mined rows
the build goes bucket by bucket (`dataset/bounded`, the same benchmark); below it, in one process.
"""

from __future__ import annotations

from pathlib import Path

from ..io import write_json_atomic
from ..mining import read_mined
from ..param_sections import DatasetParams
from ..parts import table_bytes
from .bounded import build_bounded
from .in_memory import BuiltBenchmark, build_benchmark
from .release import write_release


def build(cfg) -> BuiltBenchmark:
    """Stage 06 end to end: read stage 05's outputs, build, check, write the release layout and report."""
    params: DatasetParams = cfg.section("dataset", DatasetParams)
    for path in (cfg.paths.pairs, cfg.paths.distractors):
        if not Path(path).exists():
            raise FileNotFoundError(f"{path} not found: run notebook 05 (pair mining) first")
    if table_bytes(cfg.paths.pairs) + table_bytes(cfg.paths.distractors) > params.max_in_memory_bytes:
        built = build_bounded(cfg.paths.pairs, cfg.paths.distractors, params, cfg.paths.benchmark)
    else:
        pairs = read_mined(cfg.paths.pairs)  # a single file, or the parts of a partitioned run (polars scan)
        distractors = read_mined(cfg.paths.distractors)
        built = build_benchmark(pairs, distractors, params)
        write_release(built, cfg.paths.benchmark)
    report = built.report()
    report["params"] = {"split_by": params.split_by, "splits": params.splits, "year_only": params.year_only}
    if any(w.fraction is not None for w in params.windows()):
        report["params"]["hash_seed"] = params.hash_seed
    write_json_atomic(cfg.paths.split_report, report)
    return built
