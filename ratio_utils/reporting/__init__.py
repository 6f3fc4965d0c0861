"""The paper's tables and the summary page, assembled from what the stages wrote (the floor above training and the
analyses; what every stage writes with is `ratio_utils.publish`).

* `reporting/paper_tables` — Tables 1, 7, 8 assembled from the run files present, with intervals;
* `reporting/claims` — the paper's testable claims, each decided by one stated rule from the tables' records;
* `reporting/summary` and its parts (`summary_headline`, `summary_setting`, `summary_figure`, `summary_provenance`) —
  the summary page of notebook 14.
"""
