"""The Dask client of the stages that fan out (corpus parts, mining): a running scheduler or a LocalCluster."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def dask_client(scheduler: str | None = None, n_workers: int = 2, processes: bool = True, client=None):
    """`client` if given; else a Client of the running scheduler at `scheduler` (`tcp://host:8786`), or of a
    LocalCluster of `n_workers` single-threaded workers (processes, or threads in this process), closed on exit."""
    if client is not None:
        yield client
        return
    from dask.distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler) as own:
            yield own
        return
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=processes,
                      dashboard_address=None) as cluster, \
            Client(cluster) as own:
        yield own
