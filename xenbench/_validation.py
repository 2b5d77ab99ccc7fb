"""One validation layer: small, typed parameter checks in scikit-learn's spirit.

Every check raises :class:`xenbench.errors.ParameterError` ("The 'n' parameter of Owner must be
... Got ... instead.") or, for an estimator used before ``fit``, :class:`xenbench.errors.NotFittedError`.
The *expected* text is generated from the bounds (``"an int in [1, n_items]"``, ``"a float in (0, 1)"``,
``"an int >= 1"``) unless a caller passes ``expected=`` to keep a more specific wording.

Bounds follow :class:`sklearn.utils._param_validation.Interval`: ``lo`` / ``hi`` (``None`` = unbounded)
and, for floats, ``closed`` in ``{"both", "left", "right", "neither"}``. ``bool`` is never accepted
as a number (``isinstance(True, int)`` holds in Python, but ``k=True`` is a mistake, not ``k=1``).

This module sits in the lowest layer (see ARCHITECTURE.md): it imports nothing from xenbench but
:mod:`xenbench.errors`.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

import numpy as np

from xenbench.errors import NotFittedError, ParameterError

__all__ = [
    "INT_TYPES", "PY_INT", "REAL_TYPES", "NP_REAL_TYPES",
    "check_array", "check_choice", "check_float", "check_int", "check_is_fitted", "check_seed", "is_float", "is_int",
]

INT_TYPES: tuple[type, ...] = (int, np.integer)            # ints, NumPy ints included (the usual rule)
PY_INT: tuple[type, ...] = (int,)                          # Python ints only
REAL_TYPES: tuple[type, ...] = (int, float)                # Python numbers (np.float64 is a float)
NP_REAL_TYPES: tuple[type, ...] = (int, float, np.floating)  # ... and every NumPy float

Closed = Literal["both", "left", "right", "neither"]


def _is_number(value: object, types: tuple[type, ...]) -> bool:
    return not isinstance(value, bool) and isinstance(value, types)


def is_int(value: Any, lo: int | None = None, hi: int | None = None, *, types: tuple[type, ...] = INT_TYPES) -> bool:
    """Whether ``value`` is a non-bool int of ``types`` in ``[lo, hi]``: the test of :func:`check_int`.

    For checks whose message names a whole container (``"a list of ints >= 0"``, got the list).
    """
    return _is_number(value, types) and (lo is None or value >= lo) and (hi is None or value <= hi)


def is_float(value: Any, lo: float | None = None, hi: float | None = None, *, closed: Closed = "both",
             types: tuple[type, ...] = REAL_TYPES) -> bool:
    """Whether ``value`` is a non-bool number of ``types`` in the interval: the test of :func:`check_float`."""
    left, right = closed in ("both", "left"), closed in ("both", "right")
    return _is_number(value, types) \
        and (lo is None or (value >= lo if left else value > lo)) \
        and (hi is None or (value <= hi if right else value < hi))


def check_int(value: Any, name: str, lo: int | None, hi: int | None, owner: str | None,
              hi_text: str | None = None, *, allow_none: bool = False, types: tuple[type, ...] = INT_TYPES,
              expected: str | None = None) -> int | None:
    """``int(value)`` if ``value`` is an int in ``[lo, hi]`` (a bound of ``None`` is open), else ParameterError.

    Parameters
    ----------
    value : object
        The value to check; ``bool`` is rejected.
    name, owner : str
        The parameter and the function/class it belongs to, for the message.
    lo, hi : int or None
        Inclusive bounds; ``None`` leaves that side unbounded.
    hi_text : str, optional
        How the message names ``hi`` (``"n_items"``, ``"n_items=50"``); default ``str(hi)``.
    allow_none : bool
        Accept ``None`` (returned as is); the default message then starts with "None or ".
    types : tuple of types
        Accepted int types: :data:`INT_TYPES` (default, NumPy ints too) or :data:`PY_INT`.
    expected : str, optional
        The whole expected text, replacing the generated one.

    Examples
    --------
    >>> check_int(3, "k", 1, 10, "f", "n_items")
    3
    >>> check_int(0, "k", 1, 10, "f", "n_items")
    Traceback (most recent call last):
    ...
    xenbench.errors.ParameterError: The 'k' parameter of f must be an int in [1, n_items]. Got 0 instead.
    """
    if allow_none and value is None:
        return None
    if not is_int(value, lo, hi, types=types):
        if expected is None:
            expected = _bounds_text("an int", lo, hi, hi_text, "both")
            if allow_none:
                expected = "None or " + expected
        raise ParameterError(name, expected, value, owner)
    return int(value)


def check_seed(value: Any, owner: str | None, name: str = "seed") -> int:
    """A non-negative int seed (NumPy ints accepted), else ParameterError "... must be a non-negative int"."""
    return check_int(value, name, 0, None, owner, expected="a non-negative int")


def check_float(value: Any, name: str, lo: float | None, hi: float | None, owner: str | None, *,
                closed: Closed = "both", allow_none: bool = False, types: tuple[type, ...] = REAL_TYPES,
                expected: str | None = None) -> float | None:
    """``float(value)`` if ``value`` is a number in the interval (lo, hi; ``closed``), else ParameterError.

    NaN is never in a bounded interval. ``types`` defaults to :data:`REAL_TYPES` (Python ints and floats,
    np.float64 included); :data:`NP_REAL_TYPES` accepts every NumPy float too.

    Examples
    --------
    >>> check_float(0.5, "lam", 0, 1, "f")
    0.5
    >>> check_float(0, "temperature", 0, None, "f", closed="neither")
    Traceback (most recent call last):
    ...
    xenbench.errors.ParameterError: The 'temperature' parameter of f must be a float > 0. Got 0 instead.
    """
    if closed not in ("both", "left", "right", "neither"):
        raise ParameterError("closed", "one of ('both', 'left', 'right', 'neither')", closed, "check_float")
    if allow_none and value is None:
        return None
    if not is_float(value, lo, hi, closed=closed, types=types):
        if expected is None:
            expected = _bounds_text("a float", lo, hi, None, closed)
            if allow_none:
                expected = "None or " + expected
        raise ParameterError(name, expected, value, owner)
    return float(value)


def _bounds_text(what: str, lo: Any, hi: Any, hi_text: str | None, closed: Closed) -> str:
    left, right = closed in ("both", "left"), closed in ("both", "right")
    if lo is None and hi is None:
        return what
    if hi is None:
        return f"{what} {'>=' if left else '>'} {lo}"
    hi_s = hi_text if hi_text is not None else f"{hi}"
    if lo is None:
        return f"{what} {'<=' if right else '<'} {hi_s}"
    return f"{what} in {'[' if left else '('}{lo}, {hi_s}{']' if right else ')'}"


def check_choice(value: Any, name: str, choices: Collection[Any], owner: str | None, *,
                 expected: str | None = None) -> Any:
    """``value`` if it is one of ``choices``, else ParameterError "... must be one of <choices>".

    Examples
    --------
    >>> check_choice("gram", "solver", ("gram", "pinv"), "AdaCur")
    'gram'
    """
    if value not in choices:
        raise ParameterError(name, f"one of {choices}" if expected is None else expected, value, owner)
    return value


_KINDS = {"f": (np.floating, "float"), "i": (np.integer, "int"), None: (None, "")}


def check_array(X: Any, name: str, owner: str | None, *, ndim: int | None = 2, kind: str | None = "f",
                shape: tuple[int | None, ...] | None = None, non_empty: bool = True, finite: bool = True,
                expected: str | None = None, finite_expected: str | None = None,
                finite_got: str = "an array with NaN or inf") -> np.ndarray:
    """``np.asarray(X)`` if it has ``ndim`` dimensions, a dtype of ``kind`` and the ``shape``, else ParameterError.

    Parameters
    ----------
    ndim : int or None
        Required number of dimensions (``None``: any).
    kind : {"f", "i", None}
        Required dtype kind: floating (``np.floating``), integer (``np.integer``, unsigned too), any.
    shape : tuple of int or None, optional
        Required sizes; ``None`` in an entry leaves that axis free.
    non_empty : bool
        Every axis must have size >= 1.
    finite : bool
        Reject NaN and ±inf (checked only when the dtype is right).
    expected : str, optional
        The expected text; default e.g. "a finite, non-empty float array with 2 dimensions".
    finite_expected, finite_got : str, optional
        Give a separate error for non-finite values (``expected=finite_expected``,
        ``got=finite_got``) instead of the shape/dtype one.

    The *got* text of a shape/dtype/finiteness error is ``"<dtype> array of shape <shape>"``.
    """
    arr = np.asarray(X)
    base, kind_word = _KINDS[kind]
    ok = (ndim is None or arr.ndim == ndim) \
        and (not non_empty or (arr.ndim >= 1 and min(arr.shape) >= 1)) \
        and (base is None or np.issubdtype(arr.dtype, base)) \
        and (shape is None or (len(shape) == arr.ndim
                               and all(s is None or s == a for s, a in zip(shape, arr.shape))))
    together = finite and finite_expected is None
    if ok and together:
        ok = bool(np.isfinite(arr).all())
    if not ok:
        if expected is None:
            adjectives = ", ".join(w for w, on in (("finite", finite), ("non-empty", non_empty)) if on)
            dims = f" with {ndim} dimensions" if ndim is not None else ""
            expected = " ".join(w for w in ("a", adjectives, kind_word, "array") if w) + dims
        raise ParameterError(name, expected, f"{arr.dtype} array of shape {arr.shape}", owner)
    if finite and not together and not np.isfinite(arr).all():
        raise ParameterError(name, finite_expected, finite_got, owner)
    return arr


def check_is_fitted(obj: object, attr: str | tuple[str, ...], hint: str, *, what: str | None = None) -> None:
    """Raise :class:`NotFittedError` unless ``obj`` has every attribute in ``attr`` (set by ``fit``).

    The message is "This <Class> instance is not fitted yet; call <hint> first." or, with ``what``,
    "<what>; call <hint> first." (e.g. ``what="CodeIndex.search needs an index"``).

    Examples
    --------
    >>> class Est: pass
    >>> check_is_fitted(Est(), "coef_", "fit(X)")
    Traceback (most recent call last):
    ...
    xenbench.errors.NotFittedError: This Est instance is not fitted yet; call fit(X) first.
    """
    attrs = (attr,) if isinstance(attr, str) else tuple(attr)
    if not all(hasattr(obj, a) for a in attrs):
        if what is None:
            what = f"This {type(obj).__name__} instance is not fitted yet"
        raise NotFittedError(f"{what}; call {hint} first.")
