"""Which torch device a computation runs on: one rule for every layer (scorer, DE, ADACUR, AXN, MF, CCSA).

:func:`resolve_device` is the rule; :func:`search_device` is it for the float64 searches of ADACUR and AXN.
"""
from __future__ import annotations

import torch

from xenbench.errors import ParameterError


def resolve_device(device: str | torch.device = "auto", *, owner: str = "resolve_device",
                   float64: bool = False, param: str = "device") -> torch.device:
    """The torch device to score (or compute) on.

    Parameters
    ----------
    device
        ``"auto"`` (CUDA if available, else MPS, else CPU), or an explicit ``"cpu"``, ``"cuda"``,
        ``"cuda:<k>"``, ``"mps"`` or :class:`torch.device`.
    owner
        The function or class named in the error message (the one whose ``device`` parameter it is).
    float64
        The computation needs float64 (ADACUR, AXN), which MPS lacks: ``"auto"`` is then CUDA if
        available, else CPU, and ``"mps"`` is refused.
    param
        The parameter named in the error message (a notebook's device parameter).

    Raises
    ------
    ParameterError
        If the string is not a device, or names one this machine does not have (or MPS with ``float64``).
    """
    expected = "'auto', 'cpu', 'cuda' or 'cuda:<k>'" if float64 else "'auto', 'cpu', 'cuda', 'cuda:<k>' or 'mps'"
    if isinstance(device, str) and device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if not float64 and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ParameterError(param, expected, device, owner) from None
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ParameterError(param, "'auto' or 'cpu': CUDA is not available on this machine", device, owner)
        if dev.index is not None and dev.index >= n:
            raise ParameterError(param, f"a CUDA device index in [0, {n - 1}]", device, owner)
        return dev
    if dev.type == "mps":
        if float64:
            raise ParameterError(param, f"{expected} (this computation is in float64, which MPS lacks)", device,
                                 owner)
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise ParameterError(param, "'auto' or 'cpu': MPS is not available on this machine", device, owner)
        return dev
    raise ParameterError(param, expected, device, owner)


def search_device(device: str | torch.device, owner: str) -> torch.device:
    """The torch device of an ADACUR / AXN search: :func:`resolve_device` for a float64 computation.

    ``"auto"`` is CUDA when available, else CPU (not MPS: the searches compute in float64). Raises one
    :class:`ParameterError` naming ``device`` and ``owner`` for a string that is not a device, ``"cuda"``
    on a machine without CUDA, or ``"mps"``.
    """
    return resolve_device(device, owner=owner, float64=True)
