"""The dataset card's YAML header carries the Hub's metadata (licence, size, task, creators, sources, name) and the
card a citation, and a card with all of it still loads every config with Hugging Face `datasets` offline."""

from __future__ import annotations

import shutil

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from card_checks import assert_every_config_loads_offline

from ratio_utils.corpora.registry import LICENCES
from ratio_utils.dataset.benchmark import CARD_FILE, load_benchmark, pairs_path, write_pairs
from ratio_utils.dataset.card import (
    PAPER_TITLE,
    CardSources,
    card_configs,
    hub_licence,
    size_category,
    write_dataset_card,
)
from ratio_utils.schema import MOVES, Move, Split

HUB_FIELDS = ("license", "size_categories", "task_categories", "task_ids", "language", "language_creators",
              "annotations_creators", "source_datasets", "pretty_name", "configs")


def _header(path) -> dict:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def _release(tiny_benchmark, tmp_path, corpora: dict[Move, str], silver: bool = True):
    """The tiny benchmark with a corpus per move (its pairs' `corpus` column) and, optionally, silver pairs."""
    root = tmp_path / "release"
    shutil.copytree(tiny_benchmark, root)
    for move in MOVES:
        for split in (Split.TRAIN, Split.VALIDATION, Split.TEST):
            frame = pd.read_parquet(pairs_path(root, move, split))
            if move in corpora:
                frame = frame.assign(corpus=corpora[move])
            write_pairs(frame, root, move, split)
        if silver:
            write_pairs(pd.read_parquet(pairs_path(root, move, Split.TEST)).head(2), root, move, Split.SILVER)
    return load_benchmark(root)


def test_the_yaml_has_the_hub_fields_and_several_licences_say_other(tiny_benchmark, tmp_path):
    bench = _release(tiny_benchmark, tmp_path, {Move.ADDRESS: "acl_scisumm", Move.BROADEN: "aclsum",
                                                Move.SPECIFY: "acl_scisumm"})
    header = _header(write_dataset_card(bench, CardSources("fixture-run", LICENCES)))
    assert all(field in header for field in HUB_FIELDS), sorted(set(HUB_FIELDS) - set(header))
    assert header["task_categories"] == ["text-retrieval"] and header["task_ids"] == ["document-retrieval"]
    assert header["language"] == ["en"] and header["language_creators"] == ["found"]
    # marker-found pairs, an LLM-judged silver set
    assert header["annotations_creators"] == ["found", "machine-generated"]
    assert header["source_datasets"] == ["extended|acl_scisumm", "extended|aclsum"]
    pairs = sum(pq.read_metadata(pairs_path(bench.root, m, s)).num_rows
                for m in MOVES for s in (Split.TRAIN, Split.VALIDATION, Split.TEST))
    assert header["size_categories"] == [size_category(pairs)] == ["n<1K"]
    assert header["pretty_name"] == "Ratio, rebuilt (fixture-run run)"
    # CC BY 4.0 and MIT: no one Hub licence, so "other", each corpus's licence in the details and the prose
    assert header["license"] == "other" and header["license_name"] == "ratio-per-corpus"
    assert "acl_scisumm: CC BY 4.0" in header["license_details"] and "aclsum: MIT" in header["license_details"]
    text = (bench.root / CARD_FILE).read_text(encoding="utf-8")
    assert "The `license` field is `other`" in text and "- `aclsum` (" in text
    # the citation: the paper's title from its front matter, no invented DOI, year or authors
    citation = text.split("## Citation", 1)[1]
    assert "@misc{ratio_benchmark," in citation and PAPER_TITLE in citation
    assert not any(field in citation for field in ("doi =", "year =", "author =", "doi=", "year=", "author="))
    assert header["configs"] == card_configs(bench)[0]


def test_one_shared_licence_is_the_hub_licence_and_no_corpus_is_unknown(tiny_benchmark, tmp_path):
    bench = _release(tiny_benchmark, tmp_path, dict.fromkeys(MOVES, "acl_scisumm"), silver=False)
    header = _header(write_dataset_card(bench, CardSources("one", LICENCES)))
    assert header["license"] == "cc-by-4.0" and "license_details" not in header
    assert header["annotations_creators"] == ["found"]  # no silver set: no machine-made labels
    plain = load_benchmark(tiny_benchmark)  # pairs that name no corpus: nothing to derive a licence from
    assert _header(write_dataset_card(plain, CardSources("plain", LICENCES)))["license"] == "unknown"
    assert _header(write_dataset_card(plain, CardSources("plain", {}, "cc-by-4.0")))["license"] == "cc-by-4.0"
    assert _header(write_dataset_card(plain, CardSources("plain", {})))["source_datasets"] == ["extended"]


def test_a_corpus_licence_the_hub_does_not_list_says_other():
    assert hub_licence("CC BY 4.0 (the scisumm-corpus licence; ACL Anthology papers)") == "cc-by-4.0"
    assert hub_licence("ODC-By 1.0 (S2ORC)") == "odc-by" and hub_licence("MIT (the aclsum wheel)") == "mit"
    assert hub_licence("none stated: the authors' copyright (ICLR 2022, OpenReview)") is None
    assert (size_category(999) == "n<1K" and size_category(17_716) == "10K<n<100K"
            and size_category(3_017_476) == "1M<n<10M")


def test_huggingface_hub_reads_the_metadata(tiny_benchmark, tmp_path):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    bench = _release(tiny_benchmark, tmp_path, {Move.ADDRESS: "acl_scisumm"})
    card = huggingface_hub.DatasetCard(
        write_dataset_card(bench, CardSources("x", LICENCES)).read_text(encoding="utf-8"))
    assert card.data.license == "cc-by-4.0" and card.data.task_ids == ["document-retrieval"]
    assert card.data.pretty_name == "Ratio, rebuilt (x run)"


def test_the_card_with_its_metadata_still_loads_every_config_offline(tiny_benchmark, tmp_path, monkeypatch):

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bench = _release(tiny_benchmark, tmp_path, {Move.ADDRESS: "acl_scisumm", Move.SPECIFY: "aclsum"})
    write_dataset_card(bench, CardSources("fixture-run", LICENCES))
    assert_every_config_loads_offline(bench, tmp_path / "hf")


def test_the_card_command_takes_a_hub_licence(tiny_benchmark, tmp_path, capsys):
    from ratio_utils.apps.card import main

    root = tmp_path / "official"
    shutil.copytree(tiny_benchmark, root)
    assert main([str(root), "--license", "cc-by-4.0"]) == 0
    assert _header(root / CARD_FILE)["license"] == "cc-by-4.0"
