"""Which reader serves which corpus source: a registry of factories, one per source name.

A factory takes (cfg, params) and returns a reader; `make_readers` looks each name of
`corpus.sources` up here, else under `corpus.jsonl` (generic JSONL files). Readers are imported
inside their factory, so importing the registry loads no reader and no reader imports the registry.
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import Config
from ..param_sections import CorpusParams
from .base import CorpusReader

ReaderFactory = Callable[[Config, CorpusParams], CorpusReader]


def _acl_scisumm(cfg: Config, params: CorpusParams) -> CorpusReader:
    from .acl_scisumm import PINNED_MANIFEST, AclScisummReader, fetch_acl_scisumm

    root = (cfg.paths.from_params(params.acl_scisumm_dir) if params.acl_scisumm_dir
            else cfg.paths.shared / "corpora" / "acl_scisumm" / "raw")
    if not (root / "xml").is_dir():
        root = fetch_acl_scisumm(cfg.paths.downloads / "acl_scisumm", base_url=params.download_base_url)
    return AclScisummReader(root, manifest=root / "MANIFEST.tsv" if (root / "MANIFEST.tsv").exists()
                            else PINNED_MANIFEST)


def _aclsum(cfg: Config, params: CorpusParams) -> CorpusReader:
    from .aclsum import AclsumReader, fetch_aclsum

    root = (cfg.paths.from_params(params.aclsum_dir) if params.aclsum_dir
            else cfg.paths.shared / "corpora" / "aclsum" / "raw")
    if not (root / "paper_jsons").is_dir():
        root = fetch_aclsum(cfg.paths.downloads / "aclsum")
    return AclsumReader(root)


def _s2orc(cfg: Config, params: CorpusParams) -> CorpusReader:
    from .s2orc import S2orcReader

    return S2orcReader.from_params(params.s2orc_params(), cfg)


READERS: dict[str, ReaderFactory] = {"acl_scisumm": _acl_scisumm, "aclsum": _aclsum, "s2orc": _s2orc}
# The licence of each built-in source, as its PROVENANCE.md records it (the dataset card quotes it);
# a JSONL source names its own under `corpus.licences`.
LICENCES: dict[str, str] = {
    "acl_scisumm": "CC BY 4.0 (the scisumm-corpus licence; ACL Anthology papers)",
    "aclsum": "MIT (the aclsum wheel's metadata; ACL Anthology papers)",
    "s2orc": "ODC-By 1.0 (S2ORC)",
}


def make_readers(cfg: Config, params: CorpusParams) -> list[CorpusReader]:
    from .jsonl import JsonlReader

    readers: list[CorpusReader] = []
    for source in params.sources:
        if source in READERS:
            readers.append(READERS[source](cfg, params))
        elif source in params.jsonl:
            readers.append(JsonlReader(cfg.paths.from_params(params.jsonl[source]), source))
        else:
            raise ValueError(f"unknown corpus source {source!r}: use {', '.join(READERS)} or a name listed under "
                             "corpus.jsonl")
    return readers
