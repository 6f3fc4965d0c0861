"""What every stage writes with, on the floor below the stage packages (docs/architecture.md, "Floors").

* `publish/published` — tables (CSV, Markdown, LaTeX with their notes) and figures, each with a provenance record;
* `publish/display` — the one stage shape (`Stage`) and what a stage shows in its notebook;
* `publish/run_records` — what a notebook reused and the notices shown once per run, under `runs/<run-id>/`;
* `publish/label_sources` — who answered (judge, reranker), named on every output built on their labels.
"""
