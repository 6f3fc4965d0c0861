"""Which process this is under torchrun, for the training stages (notebooks 09 and 13).

One process trains on CPU or one GPU; under `torchrun --nproc_per_node N` every rank trains, rank 0
alone writes files, and the others wait for it at a barrier before reading what it wrote. Reads the
RANK / WORLD_SIZE / LOCAL_RANK variables torchrun sets; writes nothing.

The process group is started here, before the trainer would start it, because the first barrier comes
before any training: rank 0 scores the untuned baseline while the others wait. A barrier before the group
exists would return at once and let the other ranks read a file rank 0 has not written yet.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys

from .param_sections import DEFAULT_DDP_TIMEOUT_SECONDS  # the `train.ddp_timeout` default


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_process_group(timeout_seconds: float = DEFAULT_DDP_TIMEOUT_SECONDS, device: str | None = None) -> bool:
    """Start the torch process group under torchrun unless it runs already; True when one runs.

    NCCL on the rank's GPU when CUDA is there (and `device` is not "cpu"), else gloo. A group started
    here is the one the trainer uses (accelerate does not start a second one), so `timeout_seconds`
    bounds every collective of the run, barriers included. One process: nothing to start (False).
    """
    import torch
    import torch.distributed as dist

    if world_size() <= 1 or not dist.is_available():
        return False
    if dist.is_initialized():
        return True
    use_cuda = torch.cuda.is_available() and device != "cpu"
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if use_cuda else "gloo", timeout=_dt.timedelta(seconds=timeout_seconds))
    return True


def barrier() -> None:
    """Wait for every rank under torchrun (rank 0 writes, the others read what it wrote).

    Starts the process group first if nothing has (with the default timeout), so the first barrier of a
    run really waits."""
    import torch.distributed as dist

    if init_process_group():
        dist.barrier()


def torchrun_argv(nproc_per_node: int, module: str, *args: str) -> list[str]:
    """The command that runs `python -m <module> <args>` as `nproc_per_node` processes on this machine
    (torchrun with a standalone rendezvous on a free port)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc_per_node}",
            "-m", module, *args]
