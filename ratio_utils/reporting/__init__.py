"""What the stages publish and how a notebook shows it: tables, figures, claims, provenance.

* `reporting/display` — the one stage shape (`Stage`) and what a stage shows in its notebook;
* `reporting/published` — tables (CSV, Markdown, LaTeX) and figures, each with a provenance record;
* `reporting/paper_tables` — Tables 1, 7, 8 assembled from the run files present, with intervals;
* `reporting/claims` — the paper's testable claims, each decided by one stated rule from the tables' records;
* `reporting/label_sources` — who answered (judge, reranker), named on every output built on their labels;
* `reporting/run_records` — what a notebook reused and the notices shown once per run, under `runs/<run-id>/`.
"""
