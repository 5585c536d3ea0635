"""The Dask cluster of a survey: a LocalCluster sized to the machine, or an existing scheduler.

A new survey starts its LocalCluster in a background thread while the client
plans (:func:`early_cluster`); :func:`dask_client` connects to it or to the
scheduler given.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from typing import Any

from qkenergy.base.errors import QKEnergyError


def local_cluster(workers: int | None) -> Any:
    """A LocalCluster of ``workers`` (default: one per core) single-threaded worker processes."""
    import dask
    from distributed import LocalCluster

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # No queue on the scheduler: every task goes to a worker at once, which runs its tasks in priority
    # order, so no unit (which depends on a law) overtakes the null-law blocks still queued.
    with dask.config.set({"distributed.scheduler.worker-saturation": math.inf}):
        return LocalCluster(
            n_workers=workers or cores or 1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # no dashboard, and its bare HTTP server on a free port (8787 may belong to another cluster)
            scheduler_kwargs={"dashboard_address": ":0"},
            silence_logs=logging.ERROR,
            # the workers import what the units run while they wait for their first task
            preload=["qkenergy.surveys.units", "qkenergy.analysis.analyze"],
        )


@contextlib.contextmanager
def early_cluster(scheduler: str | None, workers: int | None, new: bool) -> Iterator[Any]:
    """For a new survey on a LocalCluster: the cluster being started in a background thread (a Future).

    Starting worker processes takes seconds; a new survey has work for them,
    so they start while the client resolves the models. The cluster is
    stopped on the way out unless :func:`dask_client` took it (``None`` taken).
    """
    if scheduler is not None or not new:
        yield None
        return
    from concurrent.futures import ThreadPoolExecutor

    import distributed  # noqa: F401  (imported here, not by the thread: an import holds the GIL)

    with ThreadPoolExecutor(1, thread_name_prefix="qkenergy-cluster-start") as thread:
        starting = thread.submit(local_cluster, workers)
        holder = [starting]
        try:
            yield holder
        finally:
            if holder[0] is not None:  # not taken: nothing to do, or an error
                with contextlib.suppress(Exception):
                    holder[0].result().close()


@contextlib.contextmanager
def dask_client(
    scheduler: str | None, workers: int | None, early: list[Any] | None = None
) -> Iterator[tuple[Any, str]]:
    """A Dask client on ``scheduler``, or on a LocalCluster (``early``'s, when one is being started)."""
    from distributed import Client

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as error:
            raise QKEnergyError(
                f"scheduler {scheduler}: cannot connect ({error})", parameter="scheduler"
            ) from None
        with client:
            yield client, scheduler
        return
    if early is not None:
        starting, early[0] = early[0], None  # taken: stopped here
        cluster = starting.result()
    else:
        cluster = local_cluster(workers)
    with cluster, Client(cluster) as client:
        yield client, f"LocalCluster({len(cluster.workers)} workers x 1 thread)"
