"""Stages 01–04: the marker lexicon, from the authors' released file to the lexicon that stage 05 mines with.

* `lexicon/markers` — the one definition of a marker: the released CSV read and checked row by row, the lexicon
  artefact (`cfg.paths.curated_lexicon`, `cfg.paths.final_lexicon`), the reviewers' decision rule, Table 4;
* `lexicon/curation` — span-before-first-comma counts, review sheets and decisions, connective extensions (01, 02);
* `lexicon/marker_llm` — LLM generation and labelling of markers; offline replay of the released labels (03, 04);
* `lexicon/patterns` — Hearst-style templates with typed slots, inflection, the grammaticality filter (04).

Import from the module that defines a name: `patterns` loads spaCy, which nothing else here needs.
"""
