"""Which process this is under torchrun, for the training stages (notebooks 09 and 13).

One process trains on CPU or one GPU; under `torchrun --nproc_per_node N` every rank trains, rank 0
alone writes files, and the others wait for it at a barrier before reading what it wrote. Reads the
RANK / WORLD_SIZE variables torchrun sets; writes nothing.
"""

from __future__ import annotations

import os


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def barrier() -> None:
    """Wait for every rank under torchrun (rank 0 writes, the others read what it wrote)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
