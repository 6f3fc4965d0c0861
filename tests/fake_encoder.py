"""A deterministic stand-in for a sentence-transformers model in tests: hashed bag of words.

Used where a test checks the plumbing around embeddings (search index, exports), not a model.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from ratio_utils.retrieval import DenseRetriever

DIM = 64


def bag_of_words(text: str) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    for word in re.findall(r"[a-z]+", text.lower()):
        digest = hashlib.sha1(word.encode()).digest()
        vector[digest[0] % DIM] += 1.0 + digest[1] / 255.0  # unequal weights: scores rarely tie
    norm = np.linalg.norm(vector)
    return vector / norm if norm else vector


class FakeEncoder(DenseRetriever):
    """DenseRetriever whose 'model' is bag_of_words; the fingerprint is a constant the test chooses."""

    def __init__(self, fingerprint: str = "fake-model-1", **kwargs):
        super().__init__(object(), **kwargs)
        self._fake_fingerprint = fingerprint

    def fingerprint(self) -> str:
        return self._fake_fingerprint

    def embedding_dimension(self) -> int:
        return DIM

    def encode(self, texts, prefix, desc="encoding"):
        self.encoded_texts += len(texts)
        return np.stack([bag_of_words(prefix + t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)
