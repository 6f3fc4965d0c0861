"""A system run: a system x move x split -> a run file -> scores (what notebooks 08-13 and `ratio-evaluate` produce
and consume), between the retrievers (`retrieval/`) and scoring (`evaluation/`).

* `systems/spec` — `SystemSpec` (one row of the result tables: model, prefix style, family, source, setup) and the
  one parser of a system as a user spells it ("bm25-unigram", "colbert:PATH", a model id);
* `systems/families` — the registry: family name -> how its rows are planned and how its retriever is built
  (BM25, dense, ColBERT, LLM rerank); the one place a retriever of a system is constructed;
* `systems/runs` — the queries a run covers, the one search, the reuse rule (`get_or_compute`) and recording.
"""
