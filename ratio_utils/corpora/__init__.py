"""Stage 00, corpus ingestion: corpora -> papers table + sentence table + corpus report.

Reads one or more corpora into one representation, `Paper` (id, title, year, publication date,
venue, source, corpus) with paragraphs of sentences in reading order, and writes

- `cfg.paths.papers` (schema.PAPER_COLUMNS), one row per paper;
- `cfg.paths.sentences` (schema.SENTENCE_COLUMNS), one row per sentence: `para` is the paragraph
  index in the paper, `sent` the sentence index in the paragraph, so consecutive sentences of a
  paragraph have the same (paper_id, para) and sent, sent + 1: pairs never cross a paragraph.
  Sentences removed by a cleaning rule stay with the rule's name in `drop_reason`;
- `cfg.paths.corpus_report` (JSON): per-corpus reader counts, every cleaning-rule count,
  quarantine counts, deduplication, sampling, statistics;
- `data/interim/quarantine/<corpus>.jsonl`: every record set aside, with file, line and reason.

Modules (imports go one way: base <- readers <- registry <- steps <- partitioned <- build; nothing imports build):

- `base`: parameters, `Paper`, `IngestLog`, the `CorpusReader` protocol, shared helpers;
- one reader per source: `acl_scisumm` (CL-SciSumm/ScisummNet XML), `aclsum` (doc2json JSON in the
  `aclsum` wheel), `jsonl` (the generic format of docs/corpus_formats.md), `s2orc` (S2ORC shards);
  the two ACL modules also download the default corpus, verified, when ../shared is absent;
- `s2_api`: the Semantic Scholar Datasets API client and shard download;
- `registry`: source name -> reader factory;
- `steps`: what every build does to its papers: admission (valid, not a duplicate), sentence splitting,
  cleaning into the sentence table, statistics;
- `build`: reading, dedupe, sampling, the steps, the tables and the report; `partitioned`: the same per input
  part, resumable, local or on Dask (`corpus.papers_per_part`).

The names below are this package's public interface (`from ratio_utils.corpora import ...`).
"""

from .acl_scisumm import (
    C1_AS_CP1252,
    PINNED_MANIFEST,
    SCISUMM_COMMIT,
    AclScisummReader,
    fetch_acl_scisumm,
    read_manifest,
)
from .aclsum import ACLSUM_WHEEL, ACLSUM_WHEEL_SHA256, AclsumReader, extract_aclsum_wheel, fetch_aclsum
from .base import CorpusReader, IngestLog, Paper, acl_year_venue, back_matter_kind, decode_bytes
from .build import build_corpus, cleaning_table, read_papers, sample_papers, write_corpus_outputs, year_histogram
from .jsonl import JsonlReader
from .registry import READERS, make_readers
from .steps import CorpusBuild, corpus_statistics, papers_frame, sentences_frame, split_unsplit

__all__ = [
    "ACLSUM_WHEEL", "ACLSUM_WHEEL_SHA256", "C1_AS_CP1252", "PINNED_MANIFEST", "READERS", "SCISUMM_COMMIT",
    "AclScisummReader", "AclsumReader", "CorpusBuild", "CorpusReader", "IngestLog", "JsonlReader",
    "Paper", "acl_year_venue", "back_matter_kind", "build_corpus", "cleaning_table",
    "corpus_statistics", "decode_bytes", "extract_aclsum_wheel", "fetch_acl_scisumm", "fetch_aclsum",
    "make_readers", "papers_frame", "read_manifest", "read_papers", "sample_papers",
    "sentences_frame", "split_unsplit", "write_corpus_outputs", "year_histogram",
]  # fmt: skip
