"""Starting Ray: one place, with retries (a loaded machine can miss Ray's fixed 30 s raylet start-up wait), and a
bounded connection to a cluster.

``ray.init(address=...)`` retries an address that does not answer for many minutes (measured with Ray 2.60: still
retrying ``127.0.0.1:1`` after 400 s, each try blocking some 40 s inside Ray's C++ client). So an address is tried
first, within :data:`CONNECT_TIMEOUT_S`: a TCP connection to it, then a Ray driver in a child process that connects
and leaves (killed at the deadline, whatever Ray does inside); only then does this process connect.
"""
from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

from xenbench.errors import ParameterError

log = logging.getLogger(__name__)

#: Seconds a Ray cluster at an address has to answer (a TCP connection, then a Ray driver's connection) before
#: xenbench gives up with one line naming the address.
CONNECT_TIMEOUT_S = 60.0

_PROBE = """
import sys
import ray
ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False, logging_level="ERROR")
ray.shutdown()
"""


# Addresses that answered in this process: a command checks its address up front, and ray_session need not again.
_ANSWERED: set[str] = set()


def _refuse(address: str, why: str) -> ParameterError:
    return ParameterError("address", f"the address of a running Ray cluster that answers within {CONNECT_TIMEOUT_S:g} s "
                                     f"({why}; start one with `ray start --head`, or leave the address out for a local "
                                     "Ray)", address, "Ray")


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; None for anything else (``auto``: Ray finds it)."""
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_address(address: str, timeout: float | None = None) -> None:
    """Raise one :class:`~xenbench.errors.ParameterError` naming ``address`` unless a Ray cluster there accepts a
    driver within ``timeout`` seconds (default :data:`CONNECT_TIMEOUT_S`).

    A ``host:port`` is first tried as a TCP connection (a refused or unroutable address fails here at once); then a
    child process connects as a Ray driver and leaves, and is killed at the deadline.
    """
    if address in _ANSWERED:
        return
    timeout = CONNECT_TIMEOUT_S if timeout is None else float(timeout)
    deadline = time.monotonic() + timeout
    target = _host_port(address)
    if target is not None:
        try:
            with socket.create_connection(target, timeout=timeout):
                pass
        except OSError as err:
            raise _refuse(address, f"a TCP connection to it failed: {err.strerror or type(err).__name__}") from None
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, address], capture_output=True, text=True,
                              timeout=max(1.0, deadline - time.monotonic()), check=False)
    except subprocess.TimeoutExpired:
        raise _refuse(address, f"no Ray driver could connect within {timeout:g} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
        raise _refuse(address, f"a Ray driver could not connect: {last[:200]}")
    _ANSWERED.add(address)


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None, attempts: int = 3) -> Iterator[Any]:
    """``ray`` connected to ``address`` (None: a local Ray with ``num_cpus``); shut down on exit if started here.

    An already initialized Ray (e.g. started by the caller) is used as is and left running. An address must answer
    within :data:`CONNECT_TIMEOUT_S` (:func:`check_address`).

    Raises
    ------
    ParameterError
        Naming ``address`` when no Ray cluster answers there in time.
    """
    import ray

    if ray.is_initialized():
        yield ray
        return
    if address is not None:
        check_address(address)
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
