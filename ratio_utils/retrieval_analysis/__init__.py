"""Analyses of the retrievers (paper Appendix F, and the unified retriever's move sensitivity), as functions
over runs and the benchmark; the stages that call them (11, 13) run the retrievers and write the tables.

* `analysis/lexical_overlap` — word-level Jaccard between a query and its top-k (F.1, Figure 4), the overlap tables;
* `analysis/oracle_pools` — candidate pools restricted to one move's gold sentences (F.2, Table 10);
* `analysis/transfer` — cross-move transfer of the per-move retrievers (F.3);
* `analysis/move_sensitivity` — every query issued under every move's instruction (notebook 13).
"""
