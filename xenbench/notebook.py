"""Run the workbench's notebooks headless, with validated parameters, into reports.

Every notebook ``notebooks/<name>.ipynb`` has a profiles file beside it, ``notebooks/<name>.yaml``::

    params:                       # every knob of the notebook's `parameters` cell
      n_candidates:
        type: int                 # int | float | str | bool | list
        min: 1                    # optional bounds (int, float; list: bounds of its length)
        max: 4096
        help: candidates per query
      max_queries: {type: int, min: 1, nullable: true}     # None allowed
      eval_domains: {type: list, items: str, choices: [noun.cognition, noun.food]}  # choices per element
      lambdas: {type: list, items: float, min: 1, item_min: 0, item_max: 1}    # bounds per element
      dataset: {type: str, help: "wordnet-el:<domain>, beir:<folder> or zeshel:<root>:<world>"}
      k_values: {type: list, items: int, item_min: 1, at_most: items}   # each <= the data's items
    data:                         # the data that `at_most: items | queries` refers to (see data_sizes)
      dataset: dataset            # a parameter holding a dataset spec (or `store: [folder_param, name_param]`)
      max_queries: max_queries    # optional parameters capping the sizes (a seeded sample)
    fits:                         # size relations, checked before the kernel (see check_sizes)
      - {rule: "max(k_values) + n_candidates <= items", why: "an example relation"}
    profiles:
      quick: {n_candidates: 64, max_queries: 100, eval_domains: [noun.cognition], lambdas: [0.0, 0.5],
              dataset: "wordnet-el:noun.cognition", k_values: [1, 10]}
      full: {max_queries: null}   # other profiles override `quick`
      paper: {extends: full, lambdas: [0.0, 0.1, 0.5]}   # ... or the profile they extend

``quick`` (:data:`BASE_PROFILE`) lists every parameter with the value of the notebook's ``parameters`` cell
(a test checks this): a notebook opened in JupyterLab runs it, in about a minute on 2 cores. ``full``
(:data:`FULL_PROFILE`) is the complete study whose saved results the README's findings are generated from.
That cell also declares ``profile = "quick"``. Setting ``profile = "full"`` there (or ``-p profile full``
to raw ``papermill``) switches every parameter the cell leaves at its quick value; a value edited in the
cell stays (:func:`check`). :func:`run_notebook` always injects the profile and every resolved value.

Validation happens twice with the same rules and messages: :func:`run_notebook` checks names and
values, then everything else it can without a kernel (:func:`preflight`: devices, folders, every dataset opened
and parsed, every ``at_most`` bound and ``fits`` relation against the size of the data the values point at -- a k
of 100 on a 40-item dataset fails at once, not 10 minutes into the kernel -- and, with a ``model``, the time its
on-demand scoring takes), and the notebook's first cell after the parameters calls :func:`check` on its globals,
so values edited in JupyterLab or passed to raw ``papermill`` get the same clear error.

Outputs of ``run_notebook("00_data", profile="quick")`` in ``out_dir``: ``00_data.quick.ipynb`` (executed),
``00_data.quick.html`` (a self-contained offline report: it draws its figures wherever it is copied) and, written by the notebook's last cell,
``00_data.quick.results.json`` (see :func:`save_results`). A run writes into a hidden staging folder and
replaces the previous report only when it has succeeded: a failed or killed run leaves the previous good
report in place (a failed one adds ``00_data.quick.failed.ipynb``). A second run of the same notebook, profile
and data while one is running is refused (the lock ``.00_data.quick.ipynb.lock``). A notebook run by hand in JupyterLab
writes ``<name>.<profile>.lab.results.json``, never the file of a ``xenbench run``.
"""
from __future__ import annotations

import contextlib
import difflib
import json
import logging
import math
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xenbench import provenance
from xenbench._io import REPO_ROOT, pid_alive, write_text_atomic
from xenbench._validation import PY_INT, check_int
from xenbench.errors import DataError, ParameterError

__all__ = [
    "REPO_ROOT",
    "NOTEBOOKS_DIR",
    "REPORTS_ENV",
    "ParamSpec",
    "NotebookSpec",
    "Fit",
    "list_notebooks",
    "notebook_path",
    "load_spec",
    "light_html",
    "SUMMARY_TAG",
    "summary_first",
    "profile_values",
    "validate_params",
    "parse_cli_params",
    "check",
    "check_sizes",
    "data_sizes",
    "preflight",
    "plan_scoring",
    "degenerate_scores",
    "ce_name",
    "summarize_warnings",
    "final_progress",
    "setup_plotly",
    "reports_dir",
    "save_results",
    "run_notebook",
    "run_stem",
    "IDENTITY_PARAMS",
    "BASE_PROFILE",
    "FULL_PROFILE",
]

log = logging.getLogger(__name__)

#: Repository root (holds ``notebooks/``, ``data/`` and, by default, ``reports/``).
#: The profile that lists every parameter, equal to each notebook's parameters cell (fast: JupyterLab, CI, demo).
BASE_PROFILE = "quick"
#: The complete study; its committed results (``notebooks/results/<name>.full.results.json``) feed the README.
FULL_PROFILE = "full"
#: Where notebooks and their profile files live.
NOTEBOOKS_DIR: Path = REPO_ROOT / "notebooks"
#: Environment variable naming the folder :func:`save_results` writes to. :func:`run_notebook` sets
#: it for the kernel it starts (a kernel inherits its parent's environment).
REPORTS_ENV = "XENBENCH_REPORTS"

_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (float, int), "str": (str,), "bool": (bool,),
                                       "list": (list, tuple)}
_ITEM_TYPES = ("int", "float", "str", "bool")
_SPEC_KEYS = {"type", "min", "max", "choices", "items", "item_min", "item_max", "nullable", "at_most", "help"}
# What an ``at_most`` bound may name: the sizes of the notebook's data (see :func:`data_sizes`).
_SIZES = ("items", "queries")
_DATA_KEYS = {"dataset", "store", "max_items", "max_queries", "model", "seed"}
# A term of a ``fits`` relation: an int, a parameter, max(list parameter) / min(list parameter), or a size.
_TERM = re.compile(r"(?:(max|min)\((\w+)\)|([A-Za-z_]\w*)|(\d+))")
# Profile names become parts of file names: keep them plain.
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_IMPORTED = time.monotonic()  # a notebook imports xenbench in its first cell: the kernel's work starts here


# ------------------------------------------------------------------------------------------------
# Specs
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParamSpec:
    """Constraints of one notebook parameter (one entry of the profiles file's ``params``)."""

    name: str
    type: str
    min: float | None = None
    max: float | None = None
    choices: tuple[Any, ...] | None = None
    items: str | None = None  # element type of a list
    item_min: float | None = None  # bounds of each element of a numeric list
    item_max: float | None = None
    nullable: bool = False
    at_most: str | None = None  # "items" or "queries": bounded by the data's size (see check_sizes)
    help: str = ""

    def expected(self) -> str:
        """The phrase completing "must be ...", e.g. ``"an int in [1, 100000]"``."""
        if self.type == "list":
            what = f"a list of {self.items or 'values'}"
            size = _bounds_phrase(self.min, self.max, "length")
            if size:
                what += f" with {size}"
            if self.choices is not None:
                what += f", each one of {list(self.choices)}"
            each = _bounds_phrase(self.item_min, self.item_max)
            if each:
                what += f", each {each}"
        elif self.choices is not None:
            what = f"one of {list(self.choices)}"
        elif self.type == "bool":
            what = "a bool (True or False)"
        else:
            article = "an" if self.type == "int" else "a"
            what = f"{article} {self.type}"
            bounds = _bounds_phrase(self.min, self.max)
            if bounds:
                what += f" {bounds}"
        return f"None or {what}" if self.nullable else what

    def check(self, value: Any, owner: str) -> Any:
        """``value`` validated (ints become floats for a float parameter, tuples become lists).

        Raises
        ------
        ParameterError
            "The '<name>' parameter of <owner> must be <expected>. Got <value> instead."
        """
        if value is None and self.nullable:
            return None
        ok, cleaned = _check_value(value, self.type, self.min, self.max, self.choices, self.items)
        if ok and self.type == "list" and (self.item_min is not None or self.item_max is not None):
            ok = all((self.item_min is None or v >= self.item_min) and (self.item_max is None or v <= self.item_max)
                     for v in cleaned)
        if not ok:
            raise ParameterError(self.name, self.expected() + self._hint(value), value, owner)
        return cleaned

    def _hint(self, value: Any) -> str:
        # Point at the offending choices: lists of 40 domain names are hard to scan.
        if self.choices is None:
            return ""
        names = [str(c) for c in self.choices]
        if self.type != "list":
            close = difflib.get_close_matches(str(value), names, n=1)
            return f" (did you mean {close[0]!r}?)" if close else ""
        if not isinstance(value, (list, tuple)):
            return ""
        bad = [v for v in value if v not in self.choices]
        close = [m for b in bad for m in difflib.get_close_matches(str(b), names, n=1)]
        return (f" ({bad} not allowed" + (f"; did you mean {close}?)" if close else ")")) if bad else ""


def _bounds_phrase(lo: float | None, hi: float | None, what: str = "") -> str:
    prefix = f"{what} " if what else ""
    if lo is not None and hi is not None:
        return f"{prefix}in [{lo}, {hi}]"
    if lo is not None:
        return f"{prefix}>= {lo}"
    if hi is not None:
        return f"{prefix}<= {hi}"
    return ""


def _is_type(value: Any, type_name: str) -> bool:
    if isinstance(value, bool) and type_name != "bool":
        return False  # bool is an int subclass, never a number here
    return isinstance(value, _TYPES[type_name])


def _check_value(value: Any, type_name: str, lo: Any, hi: Any, choices: Any, items: str | None) -> tuple[bool, Any]:
    if not _is_type(value, type_name):
        return False, None
    if type_name == "list":
        if items is not None and not all(_is_type(v, items) for v in value):
            return False, None
        if choices is not None and not all(v in choices for v in value):
            return False, None
        size = len(value)
        if (lo is not None and size < lo) or (hi is not None and size > hi):
            return False, None
        return True, [float(v) if items == "float" else v for v in value]
    if type_name == "float":
        value = float(value)
        if math.isnan(value):
            return False, None
    if choices is not None and value not in choices:
        return False, None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        return False, None
    return True, value


@dataclass(frozen=True)
class Fit:
    """One size relation a notebook needs, ``lhs <= rhs`` (an entry of the profiles file's ``fits``).

    Each side is a sum of terms: an int, a parameter, ``max(p)``/``min(p)`` of an int-list parameter, or a size
    of the data (``items``, ``queries``: see :func:`data_sizes`). A relation naming a parameter that is ``None``
    does not apply.
    """

    text: str
    lhs: tuple[str, ...]
    rhs: tuple[str, ...]
    why: str = ""


def _term_param(term: str) -> str | None:
    match = _TERM.fullmatch(term)
    return None if match is None or match.group(4) else (match.group(2) or match.group(3))


@dataclass(frozen=True)
class NotebookSpec:
    """A notebook's parameters and profiles, as read from ``<name>.yaml`` by :func:`load_spec`."""

    name: str
    path: Path  # the profiles file
    params: dict[str, ParamSpec]
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # where the sizes named by ``at_most`` come from
    fits: tuple[Fit, ...] = ()  # size relations between parameters and the data (see check_sizes)

    @property
    def owner(self) -> str:
        return f"notebook {self.name}"


def list_notebooks(folder: Path | None = None) -> list[str]:
    """Names of the notebooks in ``folder`` (default :data:`NOTEBOOKS_DIR`), sorted: ``["00_data", ...]``."""
    base = Path(folder) if folder is not None else NOTEBOOKS_DIR
    return sorted(p.stem for p in base.glob("*.ipynb") if not p.name.startswith("."))


def notebook_path(notebook: str | os.PathLike[str]) -> Path:
    """Resolve ``"00_data"`` to ``notebooks/00_data.ipynb``; a path (``x/y.ipynb``) is taken as is.

    Raises
    ------
    ParameterError
        If no such notebook exists (the available names are listed).
    """
    text = os.fspath(notebook)
    is_path = isinstance(notebook, os.PathLike) or text.endswith(".ipynb") or os.sep in text or "/" in text
    path = Path(text) if is_path else NOTEBOOKS_DIR / f"{text}.ipynb"
    if path.suffix != ".ipynb":
        path = path.with_name(path.name + ".ipynb")
    if not path.is_file():
        expected = f"one of {list_notebooks()} or the path of an existing .ipynb file"
        raise ParameterError("notebook", expected, text, "run_notebook")
    return path.resolve()


def _spec_path(notebook: str | os.PathLike[str]) -> Path:
    text = os.fspath(notebook)
    if isinstance(notebook, os.PathLike) or text.endswith((".ipynb", ".yaml")) or "/" in text or os.sep in text:
        return Path(text).with_suffix(".yaml")
    # A bare name: the kernel's working directory first (the notebook's own folder under JupyterLab
    # and run_notebook), then the repository's notebooks/.
    for folder in (Path.cwd(), NOTEBOOKS_DIR):
        candidate = folder / f"{text}.yaml"
        if candidate.is_file():
            return candidate
    return NOTEBOOKS_DIR / f"{text}.yaml"


def load_spec(notebook: str | os.PathLike[str]) -> NotebookSpec:
    """Read and check the profiles file of a notebook (a name like ``"00_data"`` or a path).

    Returns
    -------
    NotebookSpec
        ``profiles["quick"]`` lists every parameter; every other profile is stored resolved (its own
        values over those of the profile it ``extends``, default ``quick``; see :func:`profile_values`).

    Raises
    ------
    DataError
        If the file is missing or malformed: unknown type or key, a ``quick`` profile that misses
        a parameter, a profile naming an unknown parameter or profile, or holding an invalid value.
    """
    import yaml  # installed with papermill

    path = _spec_path(notebook)
    name = path.stem
    if not path.is_file():
        raise DataError(path, f"no such file: every notebook needs a profiles file beside it (see {__name__})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(path, f"not valid YAML ({getattr(exc, 'problem', exc)})",
                        mark.line + 1 if mark is not None else None) from None
    if (not isinstance(raw, dict) or set(raw) - {"params", "profiles", "data", "fits"}
            or not isinstance(raw.get("params"), dict)):
        raise DataError(path, "expected a mapping with keys 'params' (name -> spec), 'profiles' (name -> values) "
                              "and optionally 'data' and 'fits'")

    params: dict[str, ParamSpec] = {}
    for pname, spec in raw["params"].items():
        params[pname] = _parse_param(path, pname, spec)
    data = _parse_data(path, raw.get("data"), params)
    fits = _parse_fits(path, raw.get("fits"), params, data)

    profiles = raw.get("profiles")
    if not isinstance(profiles, dict) or not isinstance(profiles.get(BASE_PROFILE), dict):
        raise DataError(path, f"expected 'profiles' with at least a {BASE_PROFILE!r} mapping of parameter values")
    nb_spec = NotebookSpec(name, path, params, {}, data, fits)
    own: dict[str, dict[str, Any]] = {}
    parents: dict[str, str | None] = {}
    for pname, values in profiles.items():
        if not isinstance(pname, str) or not _PROFILE_NAME.fullmatch(pname):
            raise DataError(path, f"profile name {pname!r} must be letters, digits, '_' or '-'")
        if not isinstance(values, dict):
            raise DataError(path, f"profile {pname!r} must map parameter names to values")
        if "profile" in values:
            raise DataError(path, f"profile {pname!r} must not set 'profile' (run_notebook injects it)")
        values = dict(values)
        parent = values.pop("extends", None if pname == BASE_PROFILE else BASE_PROFILE)
        if parent is not None and (parent not in profiles or parent == pname):
            raise DataError(path, f"profile {pname!r} extends {parent!r}, which is not another profile of this file")
        try:
            own[pname] = validate_params(nb_spec, values)
        except ParameterError as exc:
            raise DataError(path, f"profile {pname!r}: {exc}") from None
        parents[pname] = parent
    for pname in own:
        chain, at = [], pname
        while at is not None:
            if at in chain:
                raise DataError(path, f"profiles extend each other in a cycle: {' -> '.join(chain + [at])}")
            chain.append(at)
            at = parents[at]
        nb_spec.profiles[pname] = {k: v for p in reversed(chain) for k, v in own[p].items()}
    missing = sorted(set(params) - set(nb_spec.profiles[BASE_PROFILE]))
    if missing:
        raise DataError(path, f"profile {BASE_PROFILE!r} must give every parameter a value; missing {missing}")
    return nb_spec


def _parse_param(path: Path, name: Any, spec: Any) -> ParamSpec:
    where = f"parameter {name!r}"
    if not isinstance(name, str) or not name.isidentifier() or name == "profile":
        raise DataError(path, f"{where}: names must be Python identifiers other than 'profile'")
    if not isinstance(spec, dict) or spec.get("type") not in _TYPES:
        raise DataError(path, f"{where}: expected a mapping with 'type' one of {list(_TYPES)}")
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise DataError(path, f"{where}: unknown keys {unknown}; allowed {sorted(_SPEC_KEYS)}")
    kind = spec["type"]
    items = spec.get("items")
    if items is not None and (kind != "list" or items not in _ITEM_TYPES):
        raise DataError(path, f"{where}: 'items' is only for lists and must be one of {list(_ITEM_TYPES)}")
    for key in ("item_min", "item_max"):
        if spec.get(key) is not None and (kind != "list" or items not in ("int", "float")):
            raise DataError(path, f"{where}: {key!r} bounds the elements of an int or float list only")
    for key in ("min", "max", "item_min", "item_max"):
        bound = spec.get(key)
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))):
            raise DataError(path, f"{where}: {key!r} must be a number")
        if bound is not None and kind in ("str", "bool"):
            raise DataError(path, f"{where}: {key!r} applies to int, float and list (length) parameters only")
    choices = spec.get("choices")
    if choices is not None and (not isinstance(choices, list) or not choices):
        raise DataError(path, f"{where}: 'choices' must be a non-empty list")
    if not isinstance(spec.get("nullable", False), bool) or not isinstance(spec.get("help", ""), str):
        raise DataError(path, f"{where}: 'nullable' must be true/false and 'help' a string")
    at_most = spec.get("at_most")
    if at_most is not None and (at_most not in _SIZES or not (kind == "int" or items == "int")):
        raise DataError(path, f"{where}: 'at_most' must be one of {list(_SIZES)}, on an int or int-list parameter")
    return ParamSpec(
        name=name, type=kind, min=spec.get("min"), max=spec.get("max"),
        choices=tuple(choices) if choices is not None else None, items=items,
        item_min=spec.get("item_min"), item_max=spec.get("item_max"),
        nullable=spec.get("nullable", False), at_most=at_most, help=spec.get("help", ""),
    )


def _parse_data(path: Path, data: Any, params: dict[str, ParamSpec]) -> dict[str, Any]:
    bounded = [p.name for p in params.values() if p.at_most]
    if data is None:
        if bounded:
            raise DataError(path, f"{bounded} are bounded by 'at_most' but the file has no 'data' section")
        return {}
    where = "the 'data' section"
    if not isinstance(data, dict) or set(data) - _DATA_KEYS or ("dataset" in data) == ("store" in data):
        raise DataError(path, f"{where} must map 'dataset' (a parameter) or 'store' (two parameters: folder, "
                              f"store name or list of names), and optionally 'max_items'/'max_queries', to "
                              f"parameter names")
    names = [data["store"]] if "dataset" not in data else [data["dataset"]]
    names = [n for group in names for n in (group if isinstance(group, list) else [group])]
    names += [data[k] for k in ("max_items", "max_queries", "model", "seed") if k in data]
    if "store" in data and not (isinstance(data["store"], list) and len(data["store"]) == 2):
        raise DataError(path, f"{where}: 'store' must list two parameters, the folder and the store name(s)")
    unknown = [n for n in names if n not in params]
    if unknown:
        raise DataError(path, f"{where} names {unknown}, which are not parameters")
    return dict(data)


def _parse_fits(path: Path, fits: Any, params: dict[str, ParamSpec], data: dict[str, Any]) -> tuple[Fit, ...]:
    if fits is None:
        return ()
    if not isinstance(fits, list):
        raise DataError(path, "'fits' must be a list of relations such as 'n_anchor_queries + n_dev_queries + 1 <= "
                              "queries' (or mappings {rule: ..., why: ...})")
    out = []
    for entry in fits:
        rule, why = (entry, "") if isinstance(entry, str) else (
            (entry.get("rule"), entry.get("why", "")) if isinstance(entry, dict) and set(entry) <= {"rule", "why"}
            else (None, None))
        sides = rule.split("<=") if isinstance(rule, str) else []
        if len(sides) != 2 or not isinstance(why, str):
            raise DataError(path, f"fits: {entry!r} must be one relation 'a + b <= c' (or {{rule: ..., why: ...}})")
        lhs, rhs = (tuple(t.strip() for t in side.split("+")) for side in sides)
        if "" in (*lhs, *rhs):
            raise DataError(path, f"fits: {entry!r} must be one relation 'a + b <= c' (or {{rule: ..., why: ...}})")
        for term in (*lhs, *rhs):
            match = _TERM.fullmatch(term)
            name = _term_param(term)
            if match is None:
                raise DataError(path, f"fits: {term!r} in {rule!r} is not an int, a parameter, max(p)/min(p) or a size")
            if name in _SIZES:
                if not data:
                    raise DataError(path, f"fits: {rule!r} names the data's {name} but the file has no 'data' section")
                continue
            if name is None:
                continue
            p = params.get(name)
            is_list = p is not None and p.type == "list" and p.items == "int"
            if p is None or not (p.type == "int" or is_list) or is_list != bool(match.group(1)):
                raise DataError(path, f"fits: {term!r} in {rule!r} must name an int parameter, or an int-list "
                                      f"parameter inside max()/min()")
        out.append(Fit(" ".join(rule.split()), lhs, rhs, why))
    return tuple(out)


def _as_spec(name_or_spec: str | os.PathLike[str] | NotebookSpec) -> NotebookSpec:
    return name_or_spec if isinstance(name_or_spec, NotebookSpec) else load_spec(name_or_spec)


def validate_params(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any]) -> dict[str, Any]:
    """Check parameter names and values against a notebook's profiles file.

    Parameters
    ----------
    name_or_spec
        A notebook name (``"00_data"``), a path, or a :class:`NotebookSpec`.
    values
        Parameter name -> value; any subset of the declared names, plus ``profile``.

    Returns
    -------
    dict
        The values, cleaned (an int given for a float parameter becomes a float).

    Raises
    ------
    ParameterError
        For an unknown name (the message lists the declared ones) or a value of the wrong type,
        out of range or not among the choices::

            The 'n_queries' parameter of notebook 00_data must be an int in [1, 100000]. Got -3 instead.
    """
    spec = _as_spec(name_or_spec)
    if not isinstance(values, Mapping):
        raise ParameterError("params", "a mapping of parameter name to value", values, spec.owner)
    cleaned: dict[str, Any] = {}
    for pname, value in values.items():
        if pname == "profile":
            if not isinstance(value, str) or not _PROFILE_NAME.fullmatch(value):
                raise ParameterError("profile", "a profile name of letters, digits, '_' or '-'", value, spec.owner)
            cleaned[pname] = value
            continue
        if pname not in spec.params:
            allowed = sorted(spec.params) + ["profile"]
            close = difflib.get_close_matches(str(pname), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ParameterError(pname, f"one of the declared parameters {allowed}{hint}", pname, spec.owner)
        cleaned[pname] = spec.params[pname].check(value, spec.owner)
    return cleaned


@contextlib.contextmanager
def _cwd(folder: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _dataset_specs(spec: NotebookSpec, name: str, value: Any) -> list[str]:
    """The dataset specs a parameter holds, read as the kernel reads it: the ``data`` section's parameter is a corpus
    (:func:`xenbench.studies.corpus.corpus_specs`: a list or comma-separated specs, bare WordNet-EL domains), any other
    a spec or a list of specs."""
    if spec.data.get("dataset") == name:
        from xenbench.studies.corpus import corpus_specs

        return corpus_specs(value)
    return list(value) if isinstance(value, list) else [value]


def _load_dataset(text: str, loaded: dict[str, Any]) -> Any:
    if text not in loaded:
        from xenbench.data.datasets import load_dataset

        loaded[text] = load_dataset(text)
    return loaded[text]


def _sizes(spec: NotebookSpec, values: Mapping[str, Any],
           loaded: dict[str, Any] | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """The data's sizes before and after the ``max_items``/``max_queries`` caps (see :func:`data_sizes`)."""
    data, loaded = spec.data, {} if loaded is None else loaded
    if not data:
        return {}, {}
    with _cwd(spec.path.parent):
        if "dataset" in data:
            datasets = [_load_dataset(s, loaded) for s in _dataset_specs(spec, data["dataset"], values[data["dataset"]])]
            raw = {"queries": sum(len(d.queries) for d in datasets), "items": sum(len(d.items) for d in datasets)}
        else:
            from xenbench.data.store import ScoreStore

            folder, names = (values[p] for p in data["store"])
            name = names[0] if isinstance(names, list) else names
            shape = ScoreStore.open(Path(folder) / name).shape
            raw = {"queries": int(shape[0]), "items": int(shape[1])}
    sizes = dict(raw)
    for size in _SIZES:
        cap = values.get(data.get(f"max_{size}", ""))
        if cap is not None:
            sizes[size] = min(sizes[size], int(cap))
    return raw, sizes


def data_sizes(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any]) -> dict[str, int]:
    """The numbers of queries and items a notebook will work on, found without starting its kernel.

    The profiles file's ``data`` section says where they come from: ``dataset`` names the parameter holding a
    dataset spec, a corpus spec or a list of specs (:func:`xenbench.studies.corpus.corpus_specs`; a list is pooled, so
    the sizes add up), or ``store`` names the parameters of a score-store folder and store name (the first of
    a list), whose shape gives the sizes. ``max_items``/``max_queries`` name the parameters that cap them (a
    seeded sample; ``None`` = all). Relative paths are read from the notebook's folder, as the kernel does.

    Returns
    -------
    dict
        ``{"queries": ..., "items": ...}``; empty when the file has no ``data`` section.

    Raises
    ------
    DataError, ParameterError
        From the loaders: a missing or malformed dataset or store.
    """
    return _sizes(_as_spec(name_or_spec), values)[1]


def _source(spec: NotebookSpec, values: Mapping[str, Any]) -> str:
    """Where the data's sizes come from, in the notebook's parameter names: ``dataset 'beir:...', max_queries 100``."""
    source = ", ".join(f"{k} {values[v]!r}" for k, v in spec.data.items()
                       if isinstance(v, str) and k in ("dataset", "max_items", "max_queries"))
    if "store" in spec.data:
        folder, names = (values[p] for p in spec.data["store"])
        store = Path(folder) / (names[0] if isinstance(names, list) else names)
        source = f"store {store}" + (f", {source}" if source else "")
    return source


def check_sizes(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any], *,
                _loaded: dict[str, Any] | None = None) -> dict[str, int]:
    """Check every size relation of a notebook against its data (:func:`data_sizes`), before any kernel starts.

    Two kinds: an ``at_most`` parameter (each value at most the data's items or queries), and each relation of the
    profiles file's ``fits`` (:class:`Fit`), e.g. ``n_anchor_queries + n_dev_queries + 1 <= queries``: anchor,
    dev and at least one test query within the queries the notebook samples. A broken relation names the
    parameters to lower and, when a ``max_*`` cap binds, the cap to raise, in the notebook's own parameter names.

    Returns
    -------
    dict
        The sizes (empty when no relation needs them).

    Raises
    ------
    ParameterError
        "The 'k_values' parameter of notebook 03_adacur_rounds must be ints each <= the 40 items of its data
        (dataset 'beir:...', max_items None). Got [1, 10, 100] instead."
    """
    spec = _as_spec(name_or_spec)
    bounded = [p for p in spec.params.values() if p.at_most and values.get(p.name) is not None]
    needs_data = bounded or any(_term_param(t) in _SIZES for f in spec.fits for t in (*f.lhs, *f.rhs))
    raw, sizes = _sizes(spec, values, _loaded) if needs_data else ({}, {})
    source = _source(spec, values) if needs_data else ""
    for p in bounded:
        value, bound = values[p.name], sizes[p.at_most]
        if any(v > bound for v in (value if isinstance(value, list) else [value])):
            what = "ints each" if isinstance(value, list) else "an int"
            raise ParameterError(p.name, f"{what} <= the {bound} {p.at_most} of its data ({source})", value,
                                 spec.owner)
    for fit in spec.fits:
        _check_fit(spec, fit, values, raw, sizes, source)
    return sizes


def _term_value(term: str, values: Mapping[str, Any], sizes: Mapping[str, int]) -> int | None:
    match = _TERM.fullmatch(term)
    if match.group(4):
        return int(match.group(4))
    name = match.group(2) or match.group(3)
    if name in _SIZES:
        return sizes[name]
    value = values.get(name)
    if match.group(1) and value is not None:
        return (max if match.group(1) == "max" else min)(value) if value else None
    return value


def _check_fit(spec: NotebookSpec, fit: Fit, values: Mapping[str, Any], raw: Mapping[str, int],
               sizes: Mapping[str, int], source: str) -> None:
    left = [_term_value(t, values, sizes) for t in fit.lhs]
    right = [_term_value(t, values, sizes) for t in fit.rhs]
    if None in left or None in right or sum(left) <= sum(right):
        return
    lower = [_term_param(t) for t in fit.lhs if _term_param(t) not in (None, *_SIZES)]
    raise_ = [_term_param(t) for t in fit.rhs if _term_param(t) not in (None, *_SIZES)]
    notes = []
    for size in (t for t in fit.rhs if t in _SIZES):
        cap = spec.data.get(f"max_{size}")
        if cap and values.get(cap) is not None and raw[size] > values[cap]:
            raise_.append(cap)
            notes.append(f"the data has {raw[size]} {size}")
        else:
            notes.append(f"all {raw[size]} {size} of the data are used")
    rhs = " + ".join(f"the {sizes[t]} {t} of its data ({source})" if t in _SIZES else f"{t} = {v}"
                     for t, v in zip(fit.rhs, right))
    lhs = " + ".join(map(str, left))
    what = f"{fit.text}{f' ({fit.why})' if fit.why else ''}, and {lhs} = {sum(left)} > {rhs}"
    name = (lower or raise_)[0]
    first = next(k for k, t in enumerate(fit.lhs) if _term_param(t) == name) if lower else None
    if first is not None:
        room = sum(right) - (sum(left) - left[first])
        each = "ints each " if isinstance(values[name], list) else ""
        expected = f"{each}<= {room} here: {what}" if room >= 1 else f"smaller, with the others too: {what}"
    else:
        expected = f"larger: {what}"
    knobs = [f"lower {' or '.join(lower[1:])}" if len(lower) > 1 else "",
             f"raise {' or '.join(raise_)}" if raise_ else ""]
    fix = "; or ".join(k for k in knobs if k)
    tail = f" ({'; '.join(notes)})" if notes else ""
    raise ParameterError(name, f"{expected}. Or {fix}{tail}" if fix else f"{expected}{tail}", values[name], spec.owner)


# ------------------------------------------------------------------------------------------------
# Before the kernel: everything that can be checked without it
# ------------------------------------------------------------------------------------------------

#: Parameters holding dataset specs, devices, folders and CE folders, by name (the same names in every notebook):
#: :func:`preflight` opens or resolves each before a kernel starts.
DATASET_PARAMS = ("dataset", "datasets", "eval_datasets")
DEVICE_PARAMS = ("device",)
FOLDER_PARAMS = ("scores_dir", "bundled_scores")
CE_PARAMS = ("ces",)
#: Parameters that a non-empty ``model`` replaces: its on-demand scores stand in for the store ``scores_dir``/``ce``.
MODEL_OVERRIDES = ("scores_dir", "ce")
_CE_EXPECTED = "a cross-encoder: a xenbench folder (xenbench_ce.json), a Hugging Face folder (config.json) or a .ckpt file"


def ce_name(model: str | os.PathLike[str]) -> str:
    """The name a user's CE goes by in figures, findings and set-up lines: its folder's (or ``.ckpt`` file's) name,
    ``"../models/my-ce/"`` -> ``"my-ce"``."""
    path = Path(os.fspath(model).rstrip("/\\"))
    return path.stem if path.suffix == ".ckpt" else path.name


def _check_ce_path(value: Any, name: str, owner: str) -> Path:
    path = Path(str(value)).expanduser()
    ok = (path.is_dir() and any((path / f).is_file() for f in ("xenbench_ce.json", "config.json"))) or (
        path.is_file() and path.suffix == ".ckpt")
    if not ok:
        why = "" if path.exists() else " (no such file or folder; relative paths are read from notebooks/)"
        raise ParameterError(name, _CE_EXPECTED + why, value, owner)
    return path


def preflight(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any], *,
              timeout: int | None = None) -> dict[str, int]:
    """Check a run against this machine and its data before a kernel starts; ``values`` are already validated.

    Cheapest first: every device parameter (:data:`DEVICE_PARAMS`) resolves here; every folder
    (:data:`FOLDER_PARAMS`; ``""`` skips) and score store exists and every CE folder (:data:`CE_PARAMS`) looks like
    one; every dataset spec (:data:`DATASET_PARAMS`) opens and parses (a malformed file fails naming its file and
    line); every size relation holds (:func:`check_sizes`); with a non-empty ``model``, the CE loads and the
    on-demand scoring is planned (:func:`plan_scoring`: one line with the pairs and the time they take, refused past
    ``timeout``). Relative paths are read from the notebook's folder, as the kernel does.

    Returns
    -------
    dict
        The data's sizes (:func:`data_sizes`), or an empty dict.

    Raises
    ------
    ParameterError, DataError
        One line naming the parameter (and the file and line, for a malformed dataset).
    """
    from xenbench._device import resolve_device

    spec = _as_spec(name_or_spec)
    loaded: dict[str, Any] = {}
    model = values.get("model") if "model" in spec.params else None
    with _cwd(spec.path.parent):
        for name in DEVICE_PARAMS:
            if name in spec.params:
                resolve_device(values[name], owner=spec.owner)
        for name in FOLDER_PARAMS:
            if values.get(name) and name in spec.params and not (model and name in MODEL_OVERRIDES):
                if not Path(values[name]).is_dir():
                    raise ParameterError(name, "an existing folder (relative paths are read from notebooks/)",
                                         values[name], spec.owner)
        stores = spec.data.get("store", [])
        if not model and {"scores_dir", "ce"} <= set(spec.params) and not stores:  # 03/04 reading a store
            stores = ["scores_dir", "ce"]
        if stores:
            from xenbench.data.store import ScoreStore

            folder, names = (values[p] for p in stores)
            for store in names if isinstance(names, list) else [names]:
                _check_store_name(folder, store, spec.owner, param=stores[1])
                ScoreStore.open(Path(folder) / store)
        for name in CE_PARAMS:
            if name in spec.params and name not in stores:
                for value in values[name]:
                    _check_ce_path(value, name, spec.owner)
        if model:
            _check_ce_path(model, "model", spec.owner)
        for name in DATASET_PARAMS:
            if name in spec.params and values.get(name):
                text = values[name]
                try:
                    for text in _dataset_specs(spec, name, values[name]):
                        _load_dataset(text, loaded)
                except DataError as err:  # the file and line, and which parameter pointed there
                    raise DataError(err.path, f"{err.problem} (the {name!r} parameter of {spec.owner} is "
                                              f"{text!r})", err.line) from None
                except ParameterError as err:  # a loader's own parameter (a domain, a world): say whose value it is
                    raise ParameterError(name, f"dataset specs that open (wordnet-el:<domain>, beir:<folder>, "
                                               f"zeshel:<root>:<world>); {text!r} does not: {err}", values[name],
                                         spec.owner) from None
    sizes = check_sizes(spec, values, _loaded=loaded)
    if model:
        plan_scoring(spec, values, timeout=timeout, _loaded=loaded)
    return sizes


#: Pairs scored before a run to measure the CE's rate on this machine (after a warm-up batch of 8).
PROBE_PAIRS = 64
# Scores spread less than this (std over the probe's pairs; for large scores, 1e-4 of |mean|) are "near-constant".
_FLAT = 1e-3


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else (f"{seconds / 60:.1f} min" if seconds < 5400 else
                                                   f"{seconds / 3600:.1f} h")


def _fresh_head(path: Path) -> list[str]:
    """Head weights that a Hugging Face ``*ForSequenceClassification`` folder lacks (initialized at random on
    loading): a checkpoint saved without its trained head scores noise."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not path.is_dir() or not any(a.endswith("ForSequenceClassification") for a in config.get("architectures") or []):
        return []
    from transformers import AutoModelForSequenceClassification

    from xenbench.models.crossencoder import quiet_loading

    with quiet_loading():
        _, info = AutoModelForSequenceClassification.from_pretrained(path, output_loading_info=True)
    return [k for k in info.get("missing_keys", []) if "position_ids" not in k]


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No "Loading weights" bar from transformers while the harness loads a CE (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def degenerate_scores(scores: Any, model: str) -> str | None:
    """A warning when a CE's scores are near-constant (std over every pair at most 1e-3, or 1e-4 of |mean| when that
    is larger), as a tiny or freshly initialized head gives; None when they spread."""
    import numpy as np

    s = np.asarray(scores, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if s.size < 2:
        return None
    spread, mean = float(s.std()), float(np.abs(s.mean()))
    if spread > _FLAT * max(1.0, 0.1 * mean):
        return None
    return (f"the CE {model} gives near-constant scores on this data (std {spread:.2g} around {s.mean():.4g} over "
            f"{s.size} pairs): an untrained or freshly initialized head? Every method will rank at random")


def plan_scoring(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any], *,
                 timeout: int | None = None, _loaded: dict[str, Any] | None = None) -> dict[str, Any]:
    """Plan the on-demand scoring of a notebook run with ``model`` (03, 04): the seeded sample the kernel will score
    (``max_queries`` x ``max_items`` of ``dataset``, as :func:`xenbench.studies.experiments.load_setup` draws it),
    whether the score cache already holds it, and, if not, how long it takes at the rate the CE reaches here on
    :data:`PROBE_PAIRS` pairs of that sample.

    Logs one line (INFO) with the pairs and the estimated time; logs a warning when the probe's (or the cached)
    scores are near-constant (:func:`degenerate_scores`) or a Hugging Face head is missing from the folder.

    Returns
    -------
    dict
        ``pairs`` (still to score), ``seconds`` (estimated; 0 when cached), ``pairs_per_s``, ``cache`` (the store).

    Raises
    ------
    ParameterError
        When the estimate exceeds ``timeout`` (the cell timeout, seconds): names the ``max_queries``/``max_items``
        values that fit and the timeout that would do.
    """
    from xenbench.data.store import ScoreStore
    from xenbench.models.crossencoder import load_cross_encoder
    from xenbench.models.scoring import cache_path, score_matrix
    from xenbench.sampling import sample_rows

    spec = _as_spec(name_or_spec)
    data, loaded = spec.data, {} if _loaded is None else _loaded
    model = values["model"]
    with _cwd(spec.path.parent), _quiet_transformers():
        path = _check_ce_path(model, "model", spec.owner)
        ce = load_cross_encoder(path)
        (ds,) = [_load_dataset(s, loaded) for s in _dataset_specs(spec, data["dataset"], values[data["dataset"]])]
        missing_head = _fresh_head(path)
    name, seed = ce_name(model), values.get(data.get("seed", ""), 0)
    caps = {size: values.get(data.get(f"max_{size}", "")) for size in _SIZES}
    rows = sample_rows(len(ds.queries), caps["queries"], seed, kind="queries")
    cols = sample_rows(len(ds.items), caps["items"], seed, kind="items")
    sub = ds.subset([ds.queries[r].id for r in rows], [ds.items[i].id for i in cols])
    nq, ni = len(sub.queries), len(sub.items)
    if missing_head:
        log.warning("the CE %s has no trained classification head (%s missing from its folder: initialized at random "
                    "when loaded); its scores are noise", name, ", ".join(missing_head[:3]))
    out = cache_path(ce, sub)
    todo = 1.0
    with contextlib.suppress(DataError, OSError, KeyError):
        store = ScoreStore.open(out)
        if store.is_complete:
            warning = degenerate_scores(store.to_numpy(), name)
            if warning:
                log.warning(warning)
            log.info("%s: the scores of %s on %d queries x %d items are cached (%s): no scoring", spec.name, name,
                     nq, ni, out)
            return {"pairs": 0, "seconds": 0.0, "pairs_per_s": None, "cache": out}
        todo = len(store.missing_chunks()) / max(store.n_chunks, 1)
    pairs = int(round(nq * ni * todo))
    device = values.get("device", "auto")
    probe_q = max(1, min(nq, PROBE_PAIRS // min(ni, PROBE_PAIRS)))
    probe_i = min(ni, PROBE_PAIRS)
    score_matrix(ce, sub.queries[:1], sub.items[:8], device=device, progress=False)  # warm-up: first-call costs
    probe = score_matrix(ce, sub.queries[:probe_q], sub.items[:probe_i], device=device, progress=False)
    rate = probe.timing.n_pairs / max(probe.timing.wall_s, 1e-9)
    warning = degenerate_scores(probe.scores, name)
    if warning:
        log.warning(warning)
    seconds = pairs / rate
    what = (f"scoring {nq} queries x {ni} items = {pairs:,} pairs with {name} takes about {_duration(seconds)} at the "
            f"{rate:.0f} pairs/s measured here on {probe.timing.device}")
    if timeout is not None and seconds > timeout:
        fit_q = int(0.8 * timeout * rate / ni)
        fit_i = int(0.8 * timeout * rate / nq)
        cap = data.get("max_queries", "max_queries")
        raise ParameterError(
            cap, f"at most about {fit_q} here for the on-demand scoring to fit in the cell timeout: {what}, past the "
                 f"{timeout} s timeout. Or lower {data.get('max_items', 'max_items')} (about {fit_i} fits), or raise "
                 f"the timeout (xenbench run --timeout {math.ceil(seconds * 1.25)})", caps["queries"], spec.owner)
    log.info("%s: %s (once: cached in %s for later runs)", spec.name, what, out)
    return {"pairs": pairs, "seconds": seconds, "pairs_per_s": rate, "cache": out}


def profile_values(name_or_spec: str | os.PathLike[str] | NotebookSpec, profile: str = BASE_PROFILE) -> dict[str, Any]:
    """Every parameter's value under ``profile``: the ``quick`` values updated by that profile's (and
    those of the profiles it extends).

    Raises
    ------
    ParameterError
        If the profiles file has no such profile (the available ones are listed).
    """
    spec = _as_spec(name_or_spec)
    if profile not in spec.profiles:
        raise ParameterError("profile", f"one of {sorted(spec.profiles)}", profile, spec.owner)
    return {**spec.profiles[BASE_PROFILE], **spec.profiles[profile]}


def parse_cli_params(name_or_spec: str | os.PathLike[str] | NotebookSpec,
                     pairs: list[tuple[str, str]] | Mapping[str, str]) -> dict[str, Any]:
    """Turn command-line ``-p name value`` strings into typed, validated values.

    ``str`` parameters take the text as is; ``int``/``float`` parse it as a number; ``bool`` takes
    true/false/yes/no/1/0; ``list`` takes YAML (``[a, b]``) or comma-separated text (``a,b``);
    ``null``/``None`` gives ``None`` for a nullable parameter.

    Raises
    ------
    ParameterError
        Unknown name, or text that does not parse or validate (same messages as :func:`validate_params`).
    """
    import yaml

    spec = _as_spec(name_or_spec)
    items = list(pairs.items()) if isinstance(pairs, Mapping) else list(pairs)
    parsed: dict[str, Any] = {}
    for pname, text in items:
        if pname == "profile" or pname not in spec.params:
            parsed[pname] = text  # validate_params below names the problem
            continue
        p = spec.params[pname]
        value: Any = text
        if p.nullable and text.strip().lower() in ("none", "null", "~"):
            value = None
        elif p.type in ("int", "float"):
            with contextlib.suppress(ValueError):
                value = int(text) if p.type == "int" else float(text)
        elif p.type == "bool":
            value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(
                text.strip().lower(), text)
        elif p.type == "list":
            try:
                loaded = yaml.safe_load(text)
            except yaml.YAMLError:
                loaded = text
            if isinstance(loaded, list):
                value = loaded
            elif isinstance(loaded, dict):  # YAML `{a: 1}` is a mapping, never a list of its text
                raise ParameterError(pname, p.expected() + " (YAML [a, b] or comma-separated a,b), not a mapping",
                                     text, spec.owner)
            else:
                value = [yaml.safe_load(part) if p.items != "str" else part
                         for part in (s.strip() for s in text.split(",")) if part]
        parsed[pname] = value
    return validate_params(spec, parsed)


def check(namespace: dict[str, Any], notebook: str | os.PathLike[str]) -> dict[str, Any]:
    """Apply the chosen profile and validate a notebook's parameters where they live: its globals.

    ``params = xb.notebook.check(globals(), "00_data")`` in the first cell after the parameters cell
    gives whoever edits a value in JupyterLab, or runs raw papermill, the same error as
    :func:`run_notebook`.

    In JupyterLab (or raw papermill), when ``profile`` is not ``quick``, every parameter still at the
    parameters cell's (quick) value takes the profile's value, in ``namespace`` too; a parameter set
    to anything else is the user's override and stays. (So under another profile a value can be pinned
    to its quick value only with ``xenbench run -p``.) Under :func:`run_notebook` the values are
    already resolved and injected, and are only validated.

    With a non-empty ``model``, the parameters it replaces (:data:`MODEL_OVERRIDES`: the store ``scores_dir``/``ce``)
    are not checked and not returned as if used; ``ce`` becomes the model's name (:func:`ce_name`), in ``namespace``
    too, so figures and findings name the user's CE by its folder.

    Parameters
    ----------
    namespace
        The notebook's ``globals()`` (updated with the resolved values).
    notebook
        The notebook's name; its profiles file is looked up in the working directory, then in
        :data:`NOTEBOOKS_DIR`.

    Returns
    -------
    dict
        ``profile`` and every declared parameter that is used -> its (validated) value.

    Raises
    ------
    ParameterError
        On a bad value or an unknown profile.
    DataError
        If a declared parameter is not defined at all (the parameters cell and the profiles file
        disagree).
    """
    spec = load_spec(notebook)
    missing = sorted(name for name in spec.params if name not in namespace)
    if missing:
        raise DataError(spec.path, f"declares {missing} but the notebook's parameters cell does not define them")
    values = {name: namespace[name] for name in spec.params}
    values["profile"] = namespace.get("profile", BASE_PROFILE)
    # With a model, its on-demand scores replace the store scores_dir/ce: those are neither checked nor shown.
    overridden = [n for n in MODEL_OVERRIDES if n in spec.params] if "model" in spec.params and values["model"] else []
    values = {**values, **validate_params(spec, {k: v for k, v in values.items() if k not in overridden})}
    profile = values["profile"]
    chosen = profile_values(spec, profile)
    if os.environ.get(REPORTS_ENV) is None and profile != BASE_PROFILE:
        cell = spec.profiles[BASE_PROFILE]
        values = {**values, **{name: chosen[name] for name in spec.params
                               if name not in overridden and values[name] == cell[name]}}
        namespace.update(values)
    check_sizes(spec, values)
    if "ce" not in overridden and {"ce", "scores_dir"} <= spec.params.keys():
        _check_store_name(values["scores_dir"], values["ce"], spec.owner)
    if overridden:
        values = {k: v for k, v in values.items() if k not in overridden or k == "ce"}
        if "ce" in values:  # figures, set-up lines and findings name the user's CE by its folder
            namespace["ce"] = values["ce"] = ce_name(values["model"])
    _show_header(values)
    return values


def _check_store_name(scores_dir: str, ce: str, owner: str, param: str = "ce") -> None:
    """``ce`` names a score store folder in ``scores_dir`` (the bundled cls-ce, emb-ce, emb-ce-marker or a user's own):
    refused before any work, naming the parameter ``param`` and listing the stores there. Used by :func:`check` (in
    the kernel) and :func:`preflight` (before it)."""
    folder = Path(scores_dir)
    if (folder / ce / "zarr.json").is_file():
        return
    found = sorted(p.name for p in folder.iterdir() if (p / "zarr.json").is_file()) if folder.is_dir() else []
    where = f"one of the score stores in scores_dir {scores_dir!r} ({', '.join(found)})" if found else (
        f"a score store folder in scores_dir {scores_dir!r}, which holds none (score one with xenbench score, or pass "
        "model to score on demand)")
    raise ParameterError(param, where, ce, owner)


# ------------------------------------------------------------------------------------------------
# Inside notebooks
# ------------------------------------------------------------------------------------------------


def setup_plotly() -> None:
    """Make plotly figures survive headless execution and HTML export.

    The ``plotly_mimetype+notebook`` renderer emits both the JupyterLab mimetype and an HTML
    rendering; activating it also embeds plotly.js once in the cell's output, so the nbconvert
    HTML report shows every figure offline. Call it once, in the imports cell.

    Under :func:`run_notebook` (``$XENBENCH_REPORTS`` set) it also makes ``tqdm.auto`` progress bars text bars: they
    reach the terminal of ``xenbench run`` as they move (a widget bar sends no text) and the saved report keeps their
    finished state.
    """
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+notebook"
    if os.environ.get(REPORTS_ENV):
        import tqdm.auto
        import tqdm.std

        tqdm.auto.tqdm, tqdm.auto.trange = tqdm.std.tqdm, tqdm.std.trange


def reports_dir() -> Path:
    """Where :func:`save_results` writes: ``$XENBENCH_REPORTS`` (set by :func:`run_notebook`), else ``<repo>/reports``."""
    env = os.environ.get(REPORTS_ENV)
    return Path(env) if env else REPO_ROOT / "reports"


def _results_name(name: str, profile: str) -> str:
    # Outside run_notebook (a kernel in JupyterLab) the file gets its own name, so an interactive session never
    # overwrites the results of a `xenbench run`.
    lab = "" if os.environ.get(REPORTS_ENV) else ".lab"
    return f"{name}.{profile}{lab}.results.json"


def _jsonable(obj: Any) -> Any:
    # numpy and pandas scalars/arrays without importing them here
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "to_dict"):
        return obj.to_dict(orient="records") if hasattr(obj, "columns") else obj.to_dict()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"cannot store a {type(obj).__name__} in results JSON: {obj!r}")


def _resources() -> dict[str, float]:
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    peak_mb = peak / 2**20 if sys.platform == "darwin" else peak / 2**10
    return {"seconds": round(time.monotonic() - _IMPORTED, 1), "peak_rss_mb": round(peak_mb, 1)}


# The parameters :func:`check` resolved in this kernel: the ``params`` of the provenance :func:`save_results` records.
_RUN_PARAMS: dict[str, Any] | None = None


def _show_header(values: Mapping[str, Any]) -> None:
    """Remember the resolved parameters for :func:`save_results` and, in a kernel, show where the run comes from
    (commit, versions, machine; :func:`xenbench.provenance.summary`) as the report's first output."""
    global _RUN_PARAMS
    _RUN_PARAMS = dict(values)
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is None:
        return
    from IPython.display import Markdown, display

    prov = {"git": provenance.run_git_state(), **provenance.environment()}  # inputs come later: the results file
    display(Markdown("**Provenance.** " + provenance.summary(prov).replace("\n", "  \n")))


def save_results(name: str, profile: str, results: Mapping[str, Any], *, out_dir: Path | None = None,
                 params: Mapping[str, Any] | None = None) -> Path:
    """Write a notebook's key numbers to ``<out_dir>/<name>.<profile>.results.json`` (atomically).

    Parameters
    ----------
    name
        The notebook's name, e.g. ``"00_data"``.
    profile
        The profile it ran under (its ``profile`` parameter).
    results
        JSON-able mapping; numpy scalars/arrays and pandas objects are converted.
    out_dir
        Default :func:`reports_dir`.
    params
        The run's resolved parameters for its provenance; default: those :func:`check` resolved in this process.

    Returns
    -------
    Path
        The file written, ``<name>.<profile>.results.json`` (``<name>.<profile>.lab.results.json`` outside
        :func:`run_notebook`), holding ``{"notebook", "profile", "written_at", "resources", "provenance",
        "results"}``; ``resources`` is this process's (the kernel's) ``seconds`` since ``import xenbench`` and
        ``peak_rss_mb``, its peak resident memory: what a run on a larger corpus cost. ``provenance``
        (:func:`xenbench.provenance.collect`) says what produced the numbers: commit and dirty flag, parameters,
        package versions, machine, and the SHA-256 of every store, dataset and model the process read.
    """
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ParameterError("name", "a notebook name such as '00_data'", name, "save_results")
    if not isinstance(profile, str) or not _PROFILE_NAME.fullmatch(profile):
        raise ParameterError("profile", "a profile name of letters, digits, '_' or '-'", profile, "save_results")
    if not isinstance(results, Mapping):
        raise ParameterError("results", "a mapping of names to JSON-able values", results, "save_results")
    folder = Path(out_dir) if out_dir is not None else reports_dir()
    folder.mkdir(parents=True, exist_ok=True)
    prov = provenance.collect(params if params is not None else _RUN_PARAMS)  # first: hashing is part of the cost
    doc = {
        "notebook": name,
        "profile": profile,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "resources": _resources(),
        "provenance": prov,
        "results": dict(results),
    }
    text = json.dumps(doc, indent=2, default=_jsonable, allow_nan=True) + "\n"
    path = folder / _results_name(name, profile)
    write_text_atomic(path, text)
    return path


# ------------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration (a kernel started meanwhile inherits them)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


_CDN_SCRIPT = re.compile(r'<script[^>]*\bsrc="https?://[^"]*(?:mathjax|require\.js|requirejs)[^"]*"[^>]*>\s*</script>',
                         re.IGNORECASE)
_PLOTLY_INLINE = re.compile(r'<script[^>]*>\s*/\*\*\s*\* plotly\.js v([0-9][\w.-]*)\b.*?</script>',
                            re.DOTALL)


#: Parameters that say *what* a notebook ran on; a run that changes one gets its own report names.
IDENTITY_PARAMS = ("dataset", "datasets", "ce", "ces", "model", "scores_dir", "eval_datasets")


def _slug(value: Any) -> str:
    parts = value if isinstance(value, (list, tuple)) else [value]
    # "beir:/data/scifact" -> "beir-scifact"; "../models/cls-ce" -> "cls-ce"
    words = []
    for v in parts:
        kind, _, rest = str(v).partition(":") if ":" in str(v) else ("", "", str(v))
        base = Path(rest.rstrip("/")).name or rest
        words.append("-".join(w for w in (kind, base) if w))
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "+".join(words)).strip("-.")[:80] or "x"


def run_stem(spec: NotebookSpec | str, profile: str, values: Mapping[str, Any]) -> str:
    """File stem of a run's outputs: ``<name>.<profile>``, plus the dataset/model when they differ from the
    profile's (e.g. ``00_data.ci.beir-scifact``), so a run on other data never overwrites the bundled run's."""
    spec = _as_spec(spec)
    base = profile_values(spec, profile)
    tags = [_slug(values[k]) for k in IDENTITY_PARAMS if k in spec.params and k in values and values[k] != base[k]]
    return ".".join([spec.name, profile, *tags])


_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _without_widget_state(nb: Any) -> Any:
    """Drop saved widget state; an output that also has a static ``text/html`` form keeps only that form.

    A live widget's saved state (for the explorers: the whole plotly bundle, ~5 MB) renders nothing offline;
    :class:`xenbench.viz.widgets.Explorer` outputs carry a static snapshot of their figure instead. A progress bar
    (a tqdm widget) becomes the text of its finished state, read from the saved state; any other widget output
    without a static form is left out (its plain text shows the widget as it was created, e.g. a bar at 0 %).
    """
    state = nb.get("metadata", {}).pop("widgets", None) or {}
    models = state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    for cell in nb.get("cells", []):
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if _WIDGET_VIEW in data:
                if "text/html" not in data:
                    text = _progress_text(models, data[_WIDGET_VIEW].get("model_id", ""))
                    if text is None:
                        continue
                    data["text/plain"] = text
                del data[_WIDGET_VIEW]
            kept.append(output)
        if "outputs" in cell:
            cell["outputs"] = kept
    return nb


def _progress_text(models: Mapping[str, Any], model_id: str) -> str | None:
    """``"CCSA steps: 100%|██████████| 30/30 [00:01<00:00, 25.3it/s]"`` from a tqdm widget's saved state (an HBox of
    an HTML description, a progress bar and an HTML counter), or None for another widget."""
    import html as _html

    def state(ref: Any) -> dict[str, Any]:
        key = ref[len("IPY_MODEL_"):] if isinstance(ref, str) and ref.startswith("IPY_MODEL_") else ref
        return models.get(key, {}).get("state", {}) if isinstance(key, str) else {}

    children = [state(c) for c in state(model_id).get("children", [])]
    bars = [c for c in children if c.get("_model_name") in ("FloatProgressModel", "IntProgressModel")]
    if len(children) != 3 or len(bars) != 1:
        return None
    left, bar, right = children
    plain = [_html.unescape(re.sub(r"<[^>]*>", "", str(c.get("value", "")))).strip() for c in (left, right)]
    done = min(1.0, float(bar.get("value") or 0) / float(bar.get("max") or 1))
    return f"{plain[0]} {done:4.0%}|{'█' * round(10 * done):<10}| {plain[1]}".strip()


# A warning line of a library (faiss's "WARNING clustering 639 points to 256 centroids: ...", Python's
# "UserWarning: ...") in a cell's stderr; numbers are masked to find the repeats of one message.
_WARNING_LINE = re.compile(r"\bwarn(ing)?\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _warning_key(line: str) -> str | None:
    return _NUMBER.sub("#", line.strip()) if _WARNING_LINE.search(line) else None


def summarize_warnings(nb: Any) -> int:
    """Keep one line per library warning in a notebook's stderr outputs: the first of each message (numbers
    aside), followed by how many more there were; the repeats are removed, and a stream left empty with them.

    Returns
    -------
    int
        The number of lines removed.
    """
    counts: dict[str, int] = {}
    streams = [o for c in nb.get("cells", []) for o in c.get("outputs", [])
               if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    for output in streams:
        for line in str(output.get("text", "")).splitlines():
            key = _warning_key(line)
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
    first: set[str] = set()
    for output in streams:
        lines = []
        for line in str(output.get("text", "")).splitlines(keepends=True):
            key = _warning_key(line)
            if key is None:
                lines.append(line)
            elif key not in first:
                first.add(key)
                more = counts[key] - 1
                lines.append(line.rstrip("\n") + (f" [and {more} more like it in this run]" if more else "")
                             + ("\n" if line.endswith("\n") else ""))
        output["text"] = "".join(lines)
    for cell in nb.get("cells", []):
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"] if not (o.get("output_type") == "stream" and not o["text"])]
    return sum(n - 1 for n in counts.values())


# A text progress bar's line: "CCSA seeds:  50%|█████     | 1/2 [...]" (its description is the group).
_BAR_LINE = re.compile(r"^(.*?)\s*\d+%\|")


def final_progress(nb: Any) -> int:
    """Keep only the last line of each text progress bar in a notebook's stream outputs.

    A bar redrawn with ``\\r`` keeps its last state once streams are coalesced, but an outer bar of nested loops
    leaves its first state (``CCSA seeds:   0%``) on a line of its own when an inner bar starts below it. Per
    stream output, every line of a bar but the last one with the same description is removed.

    Returns
    -------
    int
        The number of lines removed.
    """
    removed = 0
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            if output.get("output_type") != "stream":
                continue
            lines = str(output.get("text", "")).splitlines(keepends=True)
            last = {}
            for k, line in enumerate(lines):
                match = _BAR_LINE.match(line)
                if match:
                    last[match.group(1).strip()] = k
            keep = [line for k, line in enumerate(lines)
                    if not (m := _BAR_LINE.match(line)) or last[m.group(1).strip()] == k]
            removed += len(lines) - len(keep)
            output["text"] = "".join(keep)
    return removed


class _Echo:
    """The kernel's stdout or stderr, passed to this process's as the cells write it (papermill's ``stdout_file``/
    ``stderr_file``): progress bars and log lines as they come, each library warning once (then counted, and the
    count written at the end)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.counts: dict[str, int] = {}

    def write(self, text: str) -> None:
        kept = []
        for line in text.splitlines(keepends=True):
            key = _warning_key(line)
            if key is not None:
                self.counts[key] = self.counts.get(key, 0) + 1
                if self.counts[key] > 1:
                    continue
            kept.append(line)
        self.stream.write("".join(kept))

    def flush(self) -> None:
        self.stream.flush()

    def summary(self) -> None:
        for key, n in self.counts.items():
            if n > 1:
                self.stream.write(f"({n - 1} more warnings like: {key})\n")
        self.stream.flush()


#: Tag of the cell whose outputs answer a notebook's question; the HTML report shows a copy of them at the top.
SUMMARY_TAG = "summary"
_PLOTLY_DIV_ID = re.compile(r'<div id="([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"')


def summary_first(nb: Any) -> Any:
    """A copy of an executed notebook for its HTML report, with the outputs of every cell tagged :data:`SUMMARY_TAG`
    repeated right after the first cell (the title and question), so a reader sees the answer before the details.

    The copy's source is a comment naming where the figure is made; a plotly figure's element id is renamed so both
    copies draw, and an inline plotly.js bundle (the first figure of a notebook carries it) stays with the copy, which
    now comes first, and leaves the original. The notebook itself is not changed (the executed ``.ipynb`` keeps its
    order).
    """
    import copy

    cells = nb.get("cells", [])
    tagged = [c for c in cells if SUMMARY_TAG in c.get("metadata", {}).get("tags", [])]
    if not tagged:
        return nb
    out = copy.deepcopy(nb)
    copies = []
    for cell in (c for c in out["cells"] if SUMMARY_TAG in c.get("metadata", {}).get("tags", [])):
        dup = copy.deepcopy(cell)
        for output in cell.get("outputs", []):  # one plotly.js bundle per page, before the first figure
            html = output.get("data", {}).get("text/html")
            if isinstance(html, str):
                output["data"]["text/html"] = _PLOTLY_INLINE.sub("", html)
        dup["metadata"] = {"tags": [f"{SUMMARY_TAG}-copy"]}
        if "id" in dup:
            dup["id"] = uuid.uuid4().hex[:8]
        dup["source"] = f"# The summary: a copy of the outputs of the cell tagged '{SUMMARY_TAG}' further down."
        for output in dup.get("outputs", []):
            html = output.get("data", {}).get("text/html")
            if isinstance(html, str):
                for old in set(_PLOTLY_DIV_ID.findall(html)):
                    html = html.replace(old, str(uuid.uuid4()))
                output["data"]["text/html"] = html
        copies.append(dup)
    # The page's one plotly.js bundle may sit in an earlier figure's output, below where the copies go: move it to
    # the first copy, so that no figure is drawn before Plotly is defined.
    bundle = None
    for output in (o for c in out["cells"] for o in c.get("outputs", [])):
        html = output.get("data", {}).get("text/html")
        if isinstance(html, str) and (m := _PLOTLY_INLINE.search(html)):
            bundle = m.group(0)
            output["data"]["text/html"] = html.replace(bundle, "", 1)
            break
    if bundle is not None and copies:
        first = next((o for o in copies[0].get("outputs", []) if isinstance(o.get("data", {}).get("text/html"), str)),
                     None)
        if first is None:
            copies[0].setdefault("outputs", []).insert(0, {"output_type": "display_data", "metadata": {},
                                                             "data": {"text/html": bundle}})
        else:
            first["data"]["text/html"] = bundle + first["data"]["text/html"]
    out["cells"] = [out["cells"][0], *copies, *out["cells"][1:]]
    return out


def light_html(body: str, out_dir: Path, *, self_contained: bool = True) -> str:
    """Make an nbconvert HTML report offline, and light on request.

    Drops ``<script src>`` tags that fetch MathJax or require.js from a CDN (no report typesets LaTeX, and
    plotly's inline bundle does not need require.js). ``self_contained`` (default) keeps plotly.js inline: the file
    draws its figures wherever it is copied. Otherwise the inline bundle becomes
    ``<script src="plotly-<version>.min.js">``, written once into ``out_dir`` (4.6 MB less per report, but a report
    copied without that file draws nothing).
    """
    body = _CDN_SCRIPT.sub("", body)
    if self_contained:
        return body
    match = _PLOTLY_INLINE.search(body)
    if match is None:
        return body
    name = f"plotly-{match.group(1)}.min.js"
    shared = out_dir / name
    if not shared.is_file():
        import plotly

        bundle = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
        write_text_atomic(shared, bundle.read_text(encoding="utf-8"))
    return body[: match.start()] + f'<script type="text/javascript" src="{name}"></script>' + body[match.end() :]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def run_notebook(
    notebook: str | os.PathLike[str],
    *,
    profile: str = BASE_PROFILE,
    params: Mapping[str, Any] | None = None,
    out_dir: str | os.PathLike[str] = Path("reports"),
    timeout: int = 1200,
    kernel: str = "python3",
    html: bool = True,
    self_contained: bool = True,
    progress_bar: bool | None = None,
    log_output: bool = False,
) -> Path:
    """Execute a notebook under a profile with papermill and export its HTML report.

    Parameters
    ----------
    notebook
        A name in ``notebooks/`` (``"00_data"``) or the path of an ``.ipynb`` file; its profiles file
        is the ``.yaml`` beside it.
    profile
        A profile of the profiles file (``quick``, ``full``, ...); its values update ``quick``'s.
    params
        Values overriding the profile's, e.g. ``{"max_queries": 50}``.
    out_dir
        Folder of the outputs (created).
    timeout
        Seconds each cell may run.
    kernel
        Jupyter kernel name.
    html
        Also export ``<name>.<profile>.html``: offline, no CDN (MathJax and require.js are dropped: no report
        uses them), no saved widget state, progress bars in their finished state, each library warning once
        (:func:`summarize_warnings`).
    self_contained
        plotly.js inside each HTML report (default: a report copied alone still draws its figures); False shares one
        ``plotly-<version>.min.js`` beside the reports (about 4.6 MB less each; see :func:`light_html`).
    progress_bar
        Show the run's progress in this terminal: papermill's bar over the cells and the kernel's stderr as it
        comes (its progress bars, e.g. the pairs, rate and time left of on-demand scoring, its log lines, each
        library warning once). Default on, except under CI (``$CI`` set).
    log_output
        Also echo the kernel's stdout (what the cells print) to this process's stdout.

    Returns
    -------
    Path
        ``out_dir/<stem>.ipynb``, the executed notebook; ``<stem>`` is ``<name>.<profile>``, plus the
        dataset/model when they differ from the profile's (:func:`run_stem`).

    Raises
    ------
    ParameterError
        Unknown notebook, profile or parameter, a bad value, or anything :func:`preflight` finds (a device this
        machine lacks, a missing folder, a size relation the data breaks, on-demand scoring past ``timeout``) --
        before any kernel starts, and nothing is written.
    DataError
        Missing or malformed profiles file or dataset; or another run of the same notebook, profile and data is
        writing into ``out_dir`` (its lock ``.<stem>.ipynb.lock``).
    papermill.PapermillExecutionError
        A cell failed; the partly executed notebook is kept as ``<name>.<profile>.failed.ipynb``.

    Notes
    -----
    The kernel runs in the notebook's folder (relative paths behave as in JupyterLab) with
    ``$XENBENCH_REPORTS`` set to ``out_dir``, where the notebook's :func:`save_results` writes, and
    Hugging Face progress bars off unless ``$HF_HUB_DISABLE_PROGRESS_BARS`` says otherwise. (The
    kernel inherits this process's environment, which is set for the duration of the run: do not
    call ``run_notebook`` from several threads at once.)
    The notebook runs in a hidden staging folder inside ``out_dir`` (its results JSON and HTML too); only
    when everything has succeeded are the executed notebook, the HTML and the results JSON renamed over the
    previous run's, so a failed or killed run never destroys a good report and the folder never mixes two
    runs. A failure adds ``<name>.<profile>.failed.ipynb`` beside the previous report; a later success
    removes it.
    """
    path = notebook_path(notebook)
    spec = load_spec(path)
    if not isinstance(kernel, str) or not kernel:
        raise ParameterError("kernel", "a Jupyter kernel name such as 'python3'", kernel, "run_notebook")
    check_int(timeout, "timeout", 1, None, "run_notebook", types=PY_INT, expected="an int >= 1 (seconds per cell)")
    if params is not None and "profile" in params:
        raise ParameterError("params", "values of the notebook's parameters; choose the profile with profile=",
                             dict(params), "run_notebook")
    values = {**profile_values(spec, profile), **validate_params(spec, dict(params or {}))}
    values["profile"] = profile
    preflight(spec, values, timeout=timeout)

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stem = run_stem(spec, profile, values)
    from xenbench.data.store import writer_lock

    # One run per report at a time: a second `xenbench run` of the same notebook, profile and data is refused.
    with writer_lock(out / f"{stem}.ipynb"):
        return _run_locked(path, spec, profile, values, out, stem, timeout=timeout, kernel=kernel, html=html,
                           self_contained=self_contained, progress_bar=progress_bar, log_output=log_output)


def _run_locked(path: Path, spec: NotebookSpec, profile: str, values: dict[str, Any], out: Path, stem: str, *,
                timeout: int, kernel: str, html: bool, self_contained: bool, progress_bar: bool | None,
                log_output: bool) -> Path:
    import sys

    import nbformat
    import papermill as pm

    final, failed = out / f"{stem}.ipynb", out / f"{stem}.failed.ipynb"
    report, results = out / f"{stem}.html", out / f"{stem}.results.json"
    for old in out.glob(f".{stem}.*.staging"):  # left by a killed run (its pid is gone)
        pid = old.name[len(stem) + 2 :].split(".", 1)[0]
        if not (pid.isdigit() and pid_alive(int(pid))):
            shutil.rmtree(old, ignore_errors=True)
    stage = out / f".{stem}.{os.getpid()}.{uuid.uuid4().hex[:12]}.staging"
    stage.mkdir()
    # The kernel's save_results names its file <name>.<profile>.results.json; it is renamed to the stem below.
    staged = {final: stage / final.name, report: stage / report.name,
              results: stage / f"{spec.name}.{profile}.results.json"}
    if progress_bar is None:
        progress_bar = not _in_ci()

    log.info("running %s (profile %s)", path.name, profile)
    log.debug("parameters of %s: %s", path.name, values)
    echo_err = _Echo(sys.stderr) if progress_bar else None
    echo_out = _Echo(sys.stdout) if log_output else None
    start = time.perf_counter()
    try:
        # Progress bars of Hugging Face loaders only clutter a report (they are frozen widgets in HTML). The kernel's
        # own bars are text (setup_plotly), redrawn at most every 2 s: its stderr is echoed here and saved.
        quiet = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        with _environ(**{REPORTS_ENV: str(stage), "HF_HUB_DISABLE_PROGRESS_BARS": quiet,
                         "TQDM_MININTERVAL": os.environ.get("TQDM_MININTERVAL", "2")}):
            nb = pm.execute_notebook(
                path, staged[final], parameters=values, kernel_name=kernel, cwd=path.parent,
                execution_timeout=timeout, progress_bar=progress_bar, log_output=False,
                stdout_file=echo_out, stderr_file=echo_err, coalesce_streams=True,
                # The kernel process's own start-up notices (e.g. "running over TCP without encryption" on
                # 127.0.0.1) are not the notebook's: only its errors reach the terminal.
                extra_arguments=["--IPKernelApp.log_level=ERROR"],
            )
        log.info("executed %s in %.1f s", path.name, time.perf_counter() - start)
        nb = _without_widget_state(nb)
        final_progress(nb)
        summarize_warnings(nb)
        nbformat.write(nbformat.from_dict(nb), staged[final])
        if html:
            from nbconvert import HTMLExporter

            body, _ = HTMLExporter().from_notebook_node(nbformat.from_dict(summary_first(nb)))
            write_text_atomic(staged[report], light_html(body, out, self_contained=self_contained))
    except BaseException as exc:
        if echo_err is not None:
            echo_err.summary()
        if staged[final].exists():
            os.replace(staged[final], failed)
            if hasattr(exc, "add_note"):
                exc.add_note(f"The partly executed notebook is kept in {failed}; the previous report is untouched")
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if echo_err is not None:
        echo_err.summary()
    # Success: every output is complete; replace the previous run's set (a name this run lacks is removed).
    for dest, src in staged.items():
        if src.exists():
            os.replace(src, dest)
        else:
            dest.unlink(missing_ok=True)
    failed.unlink(missing_ok=True)
    shutil.rmtree(stage, ignore_errors=True)
    return final
