"""One rank of tests/test_train.py::test_torchrun_two_processes_gather_negatives_and_agree (run by torchrun).

Fine-tunes one move with `ratio_utils.train.finetune` under the params given as JSON overrides, while
recording, for every loss evaluation, how many queries of this rank and how many candidates the
in-batch loss scored them against. Writes <out>/rank<RANK>.json with those counts, the steps taken,
the per-epoch weight checksums, the baseline scores and the run key this rank saw.

    torchrun --standalone --nproc_per_node 2 tests/ddp_train_worker.py OUT_DIR OVERRIDES_JSON MOVE
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from sentence_transformers.losses import MultipleNegativesRankingLoss

from ratio_utils import train
from ratio_utils.config import load_config

loss_calls: list[dict[str, int]] = []
_compute_loss = MultipleNegativesRankingLoss.compute_loss_from_embeddings


def _recording_compute_loss(self, embeddings, labels):
    """The loss as it is, noting the shape of its first similarity matrix (this rank's queries x candidates)."""
    similarity = self.similarity_fct
    shapes = []

    def noting(a, b):
        shapes.append((int(a.shape[0]), int(b.shape[0])))
        return similarity(a, b)

    self.similarity_fct = noting
    try:
        return _compute_loss(self, embeddings, labels)
    finally:
        self.similarity_fct = similarity
        loss_calls.append({"queries": shapes[0][0], "candidates": shapes[0][1]})


def main(out_dir: str, overrides: str, move: str) -> int:
    MultipleNegativesRankingLoss.compute_loss_from_embeddings = _recording_compute_loss
    cfg = load_config(overrides=json.loads(overrides))
    (result,) = train.finetune(cfg, move)
    import torch.distributed as dist

    record = {
        "rank": int(os.environ["RANK"]),
        "world_size": dist.get_world_size() if dist.is_initialized() else 1,
        "loss_calls": loss_calls,
        "optimizer_steps": result.selected.optimizer_steps,
        "weights_per_epoch": [h["weights"] for h in result.selected.history],
        "baseline": result.baseline,
        "run_key": result.selected.run_key,
        "model_dir": result.model_dir,
    }
    Path(out_dir, f"rank{record['rank']}.json").write_text(json.dumps(record), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
