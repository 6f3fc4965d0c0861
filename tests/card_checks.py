"""What every dataset card must allow: each config loads offline with Hugging Face `datasets`, with the parquet files'
row counts (tests/test_card.py, tests/test_mteb.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from ratio_utils.dataset.card import card_configs


def assert_every_config_loads_offline(bench, cache_dir: Path) -> None:
    import datasets

    configs, _ = card_configs(bench)
    assert set(datasets.get_dataset_config_names(str(bench.root))) == {c["config_name"] for c in configs}
    for config in configs:
        loaded = datasets.load_dataset(str(bench.root), config["config_name"], cache_dir=str(cache_dir))
        for entry in config["data_files"]:
            assert loaded[entry["split"]].num_rows == pq.read_metadata(bench.root / entry["path"]).num_rows, entry
