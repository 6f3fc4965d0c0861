"""The blinded inspiration study (paper §5.3, Appendix G), served by notebook 12 and the annotation app.

* `human_eval/packets` — packets (what annotators see, no system names) and the unblinding key, their reading;
* `human_eval/labels` — the label files the app writes: checked row by row, read into `StudyLabels`;
* `human_eval/statistics` — Tables 2, 11, 12 and agreement, from the labels and the key;
* `human_eval/annotation_app` — the annotation app (its command is `ratio-annotate`, `apps/annotate`), with its page
  in `app_static/`.

The file formats are in docs/human_eval.md.
"""
