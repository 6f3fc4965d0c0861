"""The command-line applications, above the library (docs/architecture.md, "Floors"); each module's `main` is one
console script of pyproject.toml:

* `apps/evaluate` — `ratio-evaluate`: score a retriever on a benchmark directory;
* `apps/mteb` — `ratio-mteb`: the same through MTEB's retrieval tasks, one per move;
* `apps/search` — `ratio-search`: inspiration search over a sentence index;
* `apps/explorer` — `ratio-explorer`: three moves side by side in the browser (its page in `apps/explorer_static/`);
* `apps/export` — `ratio-export`: the benchmark as BEIR or TREC files;
* `apps/card` — `ratio-card`: the dataset card of any release-layout directory;
* `apps/annotate` — `ratio-annotate`: the annotation app of the human study.
"""
