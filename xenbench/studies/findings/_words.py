"""Shared wording: how a difference with a standard error is put into words."""
from __future__ import annotations

import math


def versus(diff: float, se: float, *, higher: str = "higher", lower: str = "lower", z: float = 2.0) -> str:
    """``"higher"``/``"lower"`` when |diff| > z·se, else ``"level (within noise)"``; NaN se counts as no evidence."""
    if not math.isfinite(diff) or not math.isfinite(se) or abs(diff) <= z * se:
        return "level (within noise)"
    return higher if diff > 0 else lower


def points(x: float) -> str:
    """A difference of two rates in percentage points, signed: ``+3.1``."""
    return f"{100 * x:+.1f}"
