"""Command line of the S2ORC download: `S2_API_KEY=... python -m ratio_utils.s2orc --params params/paper.yaml`.

The code lives in `ratio_utils.corpus.s2_api` (Datasets API client, download) and
`ratio_utils.corpus.s2orc` (shard reader); this module re-exports their names.
"""

from __future__ import annotations

import sys

from .corpus.base import S2orcParams
from .corpus.s2_api import API_KEY_ENV, S2DatasetsClient, download_release, main, shard_name
from .corpus.s2orc import PaperMeta, S2orcReader, annotation_spans, default_download_dir, parse_papers_record, s2orc_paragraphs

__all__ = [
    "API_KEY_ENV", "PaperMeta", "S2DatasetsClient", "S2orcParams", "S2orcReader", "annotation_spans",
    "default_download_dir", "download_release", "main", "parse_papers_record", "s2orc_paragraphs", "shard_name",
]  # fmt: skip

if __name__ == "__main__":
    sys.exit(main())
