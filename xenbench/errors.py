"""Domain exceptions, all of them. Every message says what was wrong, where, and what was expected.

Every error xenbench raises on purpose derives from :class:`XenbenchError` and from the builtin it
refines (``ValueError``, ``AttributeError``, ``RuntimeError``), so ``except ValueError`` keeps working.
Older import paths stay valid: ``xenbench.methods.cur.NotFittedError`` and ``xenbench.metrics.BudgetExceededError``
are these classes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

#: At most this many characters of a value are quoted in an error message (``Got ... instead.``): a value built by
#: YAML aliases can hold billions of elements, and its full ``repr`` would exhaust memory before the message prints.
MAX_QUOTED_CHARS = 300


class _Full(Exception):
    pass


def bounded_repr(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` cut after ``limit`` characters (then ``...``), built without ever formatting more.

    Lists, tuples, dicts and sets (the built-in types exactly) are walked element by element, so a nested value of
    any expanded size costs about ``limit`` characters of work; anything else is its own ``repr``, cut. A value that
    contains itself is shown as builtin ``repr`` shows it (``[...]``). Equal to ``repr(value)`` when that is short.

    >>> bounded_repr([1, "a", (2,), {3: None}])
    "[1, 'a', (2,), {3: None}]"
    >>> bounded_repr([[0] * 10] * 10, limit=20)
    '[[0, 0, 0, 0, 0, 0, ...'
    """
    parts: list[str] = []
    size = 0
    brackets = {list: "[]", tuple: "()", set: "{}", frozenset: "{}", dict: "{}"}

    def emit(text: str) -> None:
        nonlocal size
        parts.append(text)
        size += len(text)
        if size > limit:
            raise _Full

    def walk(v: Any, path: set[int]) -> None:
        kind = type(v)
        if kind not in brackets:
            emit(repr(v[: limit + 2]) if kind is str else repr(v))
            return
        if id(v) in path:
            emit("[...]" if kind is list else "{...}" if kind in (dict, set) else "(...)")
            return
        if not v:
            emit({set: "set()", frozenset: "frozenset()"}.get(kind, brackets[kind]))
            return
        path.add(id(v))
        emit(("frozenset(" if kind is frozenset else "") + brackets[kind][0])
        for k, item in enumerate(v.items() if kind is dict else v):
            if k:
                emit(", ")
            if kind is dict:
                walk(item[0], path)
                emit(": ")
                walk(item[1], path)
            else:
                walk(item, path)
        emit(("," if kind is tuple and len(v) == 1 else "") + brackets[kind][1] + (")" if kind is frozenset else ""))
        path.discard(id(v))

    try:
        walk(value, set())
    except _Full:
        return "".join(parts)[:limit] + "..."
    return "".join(parts)


def _rebuilt(cls: type, message: str, state: dict) -> Exception:
    """An error of ``cls`` with ``message`` and attributes ``state``, its ``__init__`` not called (unpickling)."""
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class XenbenchError(Exception):
    """Base class of every error xenbench raises on purpose."""

    def __reduce__(self) -> tuple:
        # Its subclasses' __init__ takes other arguments than the message they pass on, so the default pickling
        # (cls(*args)) fails: an error raised in a worker process (witnesses.verify's, a sweep's) would not reach the
        # parent. Rebuilt from the message and the attributes instead.
        return _rebuilt, (type(self), str(self), dict(self.__dict__))


class DataError(XenbenchError, ValueError):
    """A data file is malformed. The message names the file, the line (1-based) and the problem."""

    def __init__(self, path: str | Path, problem: str, line: int | None = None) -> None:
        self.path = Path(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else f"{self.path}"
        super().__init__(f"{where}: {problem}")


class ParameterError(XenbenchError, ValueError):
    """A parameter has a wrong value: "The 'name' parameter of Owner must be ... Got ... instead."."""

    def __init__(self, name: str, expected: str, got: object, owner: str | None = None) -> None:
        of = f" of {owner}" if owner else ""
        super().__init__(f"The {name!r} parameter{of} must be {expected}. Got {bounded_repr(got)} instead.")


class NotFittedError(XenbenchError, AttributeError):
    """An estimator was used before ``fit``."""


class BudgetExceededError(XenbenchError, RuntimeError):
    """A method asked for more CE calls than its budget B_CE allows."""


class YamlBoundError(ValueError):
    """A YAML text over :func:`xenbench.harness.params.load_yaml`'s bounds: an alias where none is allowed, a recursive
    value, or more values than allowed once aliases are expanded (turned into a :class:`ParameterError` or
    :class:`DataError` naming the parameter or file by the caller)."""
