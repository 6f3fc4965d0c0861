"""Analyses of the retrievers (paper Appendix F, the unified retriever's move sensitivity, and how scores move with
pool size): each module computes one analysis from runs and the benchmark and writes its tables and figures; the
stages that call them (11, 13) read the params and find the retrievers.

* `retrieval_analysis/analysed_runs` — the retrievers notebook 11 compares, their runs, the notes the tables share;
* `retrieval_analysis/lexical_overlap` — word-level Jaccard between a query and its top-k (F.1, Figure 4), its tables;
* `retrieval_analysis/oracle_pools` — candidate pools restricted to one move's gold sentences (F.2, Table 10);
* `retrieval_analysis/transfer` — cross-move transfer of the per-move retrievers (F.3);
* `retrieval_analysis/pool_size` — MRR@10 and R@10 as the test pool's distractors are subsampled (beyond the paper);
* `retrieval_analysis/move_sensitivity` — every query issued under every move's instruction (notebook 13).
"""
