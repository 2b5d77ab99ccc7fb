"""Domain exceptions, all of them. Every message says what was wrong, where, and what was expected.

Every error xenbench raises on purpose derives from :class:`XenbenchError` and from the builtin it
refines (``ValueError``, ``AttributeError``, ``RuntimeError``), so ``except ValueError`` keeps working.
Older import paths stay valid: ``xenbench.methods.cur.NotFittedError`` and ``xenbench.metrics.BudgetExceededError``
are these classes.
"""
from __future__ import annotations

from pathlib import Path


class XenbenchError(Exception):
    """Base class of every error xenbench raises on purpose."""


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
        super().__init__(f"The {name!r} parameter{of} must be {expected}. Got {got!r} instead.")


class NotFittedError(XenbenchError, AttributeError):
    """An estimator was used before ``fit``."""


class BudgetExceededError(XenbenchError, RuntimeError):
    """A method asked for more CE calls than its budget B_CE allows."""
