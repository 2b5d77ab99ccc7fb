"""Seeded row samples: one convention for every notebook, so the same seed picks the same items everywhere.

A sample of ``size`` of ``n`` rows is ``numpy.random.default_rng([seed, stream]).choice(n, size,
replace=False)``, sorted (rows stay in dataset order), with one stream per kind of row: items and queries
are drawn independently, and notebook 01's 250-item sample under seed 0 is notebook 03's ``max_items=250``
sample under seed 0. ``size`` None or >= ``n`` keeps every row.
"""
from __future__ import annotations

import numpy as np

from xenbench._validation import check_int, check_seed
from xenbench.errors import ParameterError

__all__ = ["STREAMS", "sample_rows"]

STREAMS = {"items": 1, "queries": 2}


def sample_rows(n: int, size: int | None, seed: int = 0, *, kind: str) -> np.ndarray:
    """Sorted seeded sample of ``min(n, size)`` rows of ``range(n)``, int64 (all of them when ``size`` is None).

    Parameters
    ----------
    n : int
        Rows to draw from (>= 1).
    size : int or None
        Rows wanted (>= 1).
    seed : int
        The user's seed (>= 0).
    kind : {"items", "queries"}
        Which stream of ``seed`` draws (:data:`STREAMS`).

    Examples
    --------
    >>> sample_rows(10, 3, 0, kind="items").tolist() == sorted(
    ...     np.random.default_rng([0, 1]).choice(10, 3, replace=False).tolist())
    True
    >>> sample_rows(4, None, 7, kind="queries").tolist()
    [0, 1, 2, 3]
    """
    owner = "sample_rows"
    if kind not in STREAMS:
        raise ParameterError("kind", f"one of {list(STREAMS)}", kind, owner)
    n = check_int(n, "n", 1, None, owner)
    size = check_int(size, "size", 1, None, owner, allow_none=True)
    seed = check_seed(seed, owner)
    if size is None or size >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng([seed, STREAMS[kind]]).choice(n, size=size, replace=False)).astype(np.int64)
