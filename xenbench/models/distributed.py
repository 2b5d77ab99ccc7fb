"""The Ray backend of scoring jobs: row blocks of one store scored on actors that each hold the model.

:func:`~xenbench.models.jobs.score_to_store` with ``backend="ray"`` (``pip install xenbench[ray]``) hands the
blocks it lacks to :func:`score_blocks_ray`; each actor scores whole blocks with the engine's
:func:`~xenbench.models.scoring.row_scorer` (a xenbench CE or any :class:`~xenbench.models.scorers.Scorer`, shipped to
the actors by pickling), so a block has the bits the local path gives it, and this process stays the only writer of
the store (same verification, identity and lock).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from xenbench._device import resolve_device
from xenbench.data.datasets import Item, Query
from xenbench.data.store import ScoreStore
from xenbench.models.scorers import is_native
from xenbench.models.scoring import row_scorer

__all__ = ["score_blocks_ray"]


class _BlockScorer:
    """Scores whole row blocks of one job; a Ray actor holds one (the model stays loaded between blocks).

    Computes exactly what the local path computes for a block: the same token ids, the same length-sorted
    batches of ``batch_size`` pairs, the same precision (:class:`~xenbench.models.scoring.RowScorer`).
    """

    def __init__(self, ce: Any, queries: Sequence[Query], items: Sequence[Item], device: str,
                 batch_size: int, precision: str) -> None:
        dev = resolve_device(device)
        if is_native(ce):  # a protocol scorer runs where it was put
            ce.eval().to(dev)
        self.rows = row_scorer(ce, list(queries), list(items), dev, batch_size=batch_size, precision=precision)

    def score(self, start: int, stop: int) -> tuple[np.ndarray, float, str]:
        t0 = time.perf_counter()
        block = self.rows.score_rows(start, stop)
        return block, time.perf_counter() - t0, f"{os.uname().nodename}:{os.getpid()}"

    def pid(self) -> int:
        return os.getpid()


def score_blocks_ray(ce: Any, queries: Sequence[Query], items: Sequence[Item], store: ScoreStore,
                     todo: Sequence[int], rows_of: Callable[[int], tuple[int, int]], *, batch_size: int,
                     device: torch.device, precision: str, on_pairs: Callable[[int], None], address: str | None = None,
                     workers: int | None = None, gpus_per_worker: float | None = None,
                     on_actors: Callable[[list[Any]], None] | None = None) -> None:
    """Score the blocks ``todo`` as Ray tasks and write each into ``store`` here, as it arrives.

    One actor per worker holds the model (``gpus_per_worker`` GPUs each, default 1 on CUDA; else one CPU
    slot). Blocks are handed out one at a time to whichever actor is free. An actor that dies (a killed worker
    process, a lost node) is restarted and its block retried (``max_restarts``/``max_task_retries``); blocks
    already written stay written, so even a job that fails can be resumed. The actors are killed when the job ends,
    done or failed, so that their slots are free for the cluster's next job.
    """
    from xenbench._ray import ray_session

    with ray_session(address, workers) as ray:
        gpus = (1.0 if device.type == "cuda" else 0.0) if gpus_per_worker is None else float(gpus_per_worker)
        if workers is None:
            res = ray.available_resources()
            workers = max(1, int(res.get("GPU", 0) // gpus) if gpus else int(res.get("CPU", 1)))
        actor_cls = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=3, max_task_retries=3)(_BlockScorer)
        ce_ref = ray.put(ce)
        actors = [actor_cls.remote(ce_ref, list(queries), list(items), str(device), batch_size, precision)
                  for _ in range(workers)]
        try:
            if on_actors is not None:
                on_actors(actors)
            queue = list(todo)
            running: dict[Any, tuple[int, Any]] = {}

            def submit(actor: Any) -> None:
                if queue:
                    k = queue.pop(0)
                    running[actor.score.remote(*rows_of(k))] = (k, actor)

            for actor in actors:
                submit(actor)
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                k, actor = running.pop(ready[0])
                block, wall_s, worker = ray.get(ready[0])
                a, b = rows_of(k)
                store.write_chunk(k, block, {"wall_s": wall_s, "n_pairs": (b - a) * len(items), "device": str(device),
                                             "precision": precision, "batch_size": batch_size, "worker": worker})
                store.update_attrs({"wall_s": store.wall_s, "chunks_done": len(store.done_chunks())})
                on_pairs((b - a) * len(items))
                submit(actor)
        finally:
            # Released when the job ends, not when the last handle is collected: a failed job's traceback (kept by a
            # notebook) would otherwise keep the actors, and the CPU or GPU slots they hold on a shared cluster.
            for actor in actors:
                ray.kill(actor)
