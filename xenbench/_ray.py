"""Starting Ray: one place, with retries (a loaded machine can miss Ray's fixed 30 s raylet start-up wait)."""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None, attempts: int = 3) -> Iterator[Any]:
    """``ray`` connected to ``address`` (None: a local Ray with ``num_cpus``); shut down on exit if started here.

    An already initialized Ray (e.g. started by the caller) is used as is and left running.
    """
    import ray

    if ray.is_initialized():
        yield ray
        return
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
                     log_to_driver=False)
            break
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception when its raylet starts late
            with contextlib.suppress(Exception):
                ray.shutdown()
            if attempt == attempts or "timed out during startup" not in str(err):
                raise
            log.warning("Ray did not start in time (attempt %d of %d): retrying", attempt, attempts)
    try:
        yield ray
    finally:
        ray.shutdown()
