"""A notebook's profiles file: its parameters, profiles, data and size relations, read and checked.

Every notebook ``notebooks/<name>.ipynb`` has a profiles file beside it, ``notebooks/<name>.yaml``::

    params:                       # every knob of the notebook's `parameters` cell
      n_candidates:
        type: int                 # int | float | str | bool | list, or a semantic type (below)
        min: 1                    # optional bounds (int, float; list: bounds of its length)
        max: 4096
        help: candidates per query
      max_queries: {type: int, min: 1, nullable: true}     # None allowed
      eval_domains: {type: list, items: str, choices: [noun.cognition, noun.food]}  # choices per element
      lambdas: {type: list, items: float, min: 1, item_min: 0, item_max: 1}    # bounds per element
      dataset: {type: dataset, help: "wordnet-el:<domain>, beir:<folder> or zeshel:<root>:<world>"}
      k_values: {type: list, items: int, item_min: 1, at_most: items}   # each <= the data's items
      first_stages: {type: list, items: first_stage, in: dataset}       # run:<path> files rank dataset's queries
      scores_dir: {type: folder, replaced_by: model}      # unused (and not checked) when model is set
      ce: {type: store, in: scores_dir, replaced_by: model}              # a score store in scores_dir
      model: {type: model, help: "a CE folder or hub id scored on demand ('' = read scores_dir/ce)"}
      max_length: {type: int, min: 1, nullable: true, requires: model}  # null unless model is set
      device: {type: device}
    data:                         # the data that `at_most: items | queries` refers to (see harness.sizes)
      dataset: dataset            # a parameter holding a dataset spec (or `store: [folder_param, name_param]`)
      max_queries: max_queries    # optional parameters capping the sizes (a seeded sample)
      # sized_by: xenbench.studies.rank:default_sizes   # optional: sizes the parameters left null from the data
    fits:                         # size relations, checked before the kernel (see harness.sizes.check_sizes)
      - {rule: "max(k_values) + n_candidates <= items", why: "an example relation"}
    profiles:
      quick: {n_candidates: 64, max_queries: 100, eval_domains: [noun.cognition], lambdas: [0.0, 0.5],
              dataset: "wordnet-el:noun.cognition", k_values: [1, 10], first_stages: [de, bm25],
              scores_dir: ../data/scores/noun.cognition, ce: cls-ce, model: "", max_length: null, device: auto}
      full: {max_queries: null}   # other profiles override `quick`
      paper: {extends: full, lambdas: [0.0, 0.1, 0.5]}   # ... or the profile they extend

**Semantic types** name what :func:`xenbench.harness.preflight.preflight` opens or resolves before the kernel, each
checked by one function (``preflight.CHECKS``); their values are text, and ``items: <type>`` makes a list of them:
``model`` (a CE folder, relative to notebooks/, or a hub id; ``""`` = none, read the store), ``first_stage`` (``de``,
``tfidf``, ``bm25`` or ``run:<path>``, a run file checked against the queries of the dataset parameter named by
``in``), ``dataset`` (a spec that must open), ``device`` (must exist here), ``folder`` (must exist; ``""`` = none) and
``store`` (a score store in the folder parameter named by ``in``). ``requires: model`` marks a parameter only a set
``model`` uses: without one it must be null and is listed as unused; ``replaced_by: model`` one that a set ``model``
replaces (neither checked nor used then). Both name a ``model`` parameter of the file.

``quick`` (:data:`BASE_PROFILE`) lists every parameter with the value of the notebook's ``parameters`` cell
(a test checks this): a notebook opened in JupyterLab runs it, in about a minute on 2 cores. ``full``
(:data:`FULL_PROFILE`) is the complete study whose saved results the README's findings are generated from.
That cell also declares ``profile = "quick"``. Setting ``profile = "full"`` there (or ``-p profile full``
to raw ``papermill``) switches every parameter the cell leaves at its quick value; a value edited in the
cell stays (:func:`xenbench.harness.kernel.check_namespace`). :func:`xenbench.harness.runner.run_notebook` always
injects the profile and every resolved value.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xenbench._io import REPO_ROOT
from xenbench.errors import DataError, ParameterError
from xenbench.harness.params import (ITEM_TYPES, MAX_YAML_NODES, PARAM_TYPES, PROFILE_NAME, SEMANTIC_TYPES, ParamSpec,
                                     YamlBoundError, load_yaml, validate_params)

__all__ = ["BASE_PROFILE", "FULL_PROFILE", "NOTEBOOKS_DIR", "SIZES", "Fit", "NotebookSpec", "list_notebooks",
           "notebook_path", "load_spec", "as_spec", "profile_values", "term_param"]

#: The profile that lists every parameter, equal to each notebook's parameters cell (fast: JupyterLab, CI, demo).
BASE_PROFILE = "quick"
#: The complete study; its committed results (``notebooks/results/<name>.full.results.json``) feed the README.
FULL_PROFILE = "full"
#: Where notebooks and their profile files live.
NOTEBOOKS_DIR: Path = REPO_ROOT / "notebooks"
#: What an ``at_most`` bound or a ``fits`` relation may name: the sizes of the notebook's data
#: (:func:`xenbench.harness.sizes.data_sizes`).
SIZES = ("items", "queries")
#: The largest profiles file read (the repository's are a few KB); its values are bounded too (``MAX_YAML_NODES``).
MAX_SPEC_BYTES = 1 << 20

_SPEC_KEYS = {"type", "min", "max", "choices", "items", "item_min", "item_max", "nullable", "at_most", "help", "in",
              "requires", "replaced_by"}
#: What the ``in`` key of a semantic type names: the type of that other parameter (its elements', for a list).
_IN = {"store": "folder", "first_stage": "dataset"}
_DATA_KEYS = {"dataset", "store", "max_items", "max_queries", "model", "seed", "sized_by"}
# ``sized_by``: a function of the studies layer that sizes a notebook's null parameters from its data.
SIZED_BY = re.compile(r"xenbench\.studies(?:\.\w+)+:\w+")
# A term of a ``fits`` relation: an int, a parameter, max(list parameter) / min(list parameter), or a size.
TERM = re.compile(r"(?:(max|min)\((\w+)\)|([A-Za-z_]\w*)|(\d+))")


@dataclass(frozen=True)
class Fit:
    """One size relation a notebook needs, ``lhs <= rhs`` (an entry of the profiles file's ``fits``).

    Each side is a sum of terms: an int, a parameter, ``max(p)``/``min(p)`` of an int-list parameter, or a size
    of the data (``items``, ``queries``: see :func:`xenbench.harness.sizes.data_sizes`). A relation naming a
    parameter that is ``None`` does not apply.
    """

    text: str
    lhs: tuple[str, ...]
    rhs: tuple[str, ...]
    why: str = ""


def term_param(term: str) -> str | None:
    """The parameter a term of a :class:`Fit` names (``"max(k_values)"`` -> ``"k_values"``; a size such as
    ``"items"`` is returned too), or None for an int."""
    match = TERM.fullmatch(term)
    return None if match is None or match.group(4) else (match.group(2) or match.group(3))


@dataclass(frozen=True)
class NotebookSpec:
    """A notebook's parameters and profiles, as read from ``<name>.yaml`` by :func:`load_spec`."""

    name: str
    path: Path  # the profiles file
    params: dict[str, ParamSpec]
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # where the sizes named by ``at_most`` come from
    fits: tuple[Fit, ...] = ()  # size relations between parameters and the data (see harness.sizes.check_sizes)

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
        raise DataError(path, "no such file: every notebook needs a profiles file beside it (see "
                              "xenbench/harness/spec.py)")
    if path.stat().st_size > MAX_SPEC_BYTES:
        raise DataError(path, f"larger than {MAX_SPEC_BYTES >> 20} MiB: a profiles file holds parameters and profiles")
    try:
        text = path.read_text(encoding="utf-8")
        raw = load_yaml(text, max_nodes=MAX_YAML_NODES)
    except YamlBoundError as exc:
        raise DataError(path, f"refused: it holds {exc} (a profiles file holds parameters and profiles)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(path, f"not valid YAML ({getattr(exc, 'problem', exc)})",
                        mark.line + 1 if mark is not None else None) from None
    if (not isinstance(raw, dict) or set(raw) - {"params", "profiles", "data", "fits"}
            or not isinstance(raw.get("params"), dict)):
        raise DataError(path, "expected a mapping with keys 'params' (name -> spec), 'profiles' (name -> values) "
                              "and optionally 'data' and 'fits'")

    params: dict[str, ParamSpec] = {}
    lines = _param_lines(text)
    for pname, spec in raw["params"].items():
        params[pname] = _parse_param(path, pname, spec, lines.get(pname))
    _check_links(path, params, lines)
    data = _parse_data(path, raw.get("data"), params)
    fits = _parse_fits(path, raw.get("fits"), params, data)

    profiles = raw.get("profiles")
    if not isinstance(profiles, dict) or not isinstance(profiles.get(BASE_PROFILE), dict):
        raise DataError(path, f"expected 'profiles' with at least a {BASE_PROFILE!r} mapping of parameter values")
    nb_spec = NotebookSpec(name, path, params, {}, data, fits)
    own: dict[str, dict[str, Any]] = {}
    parents: dict[str, str | None] = {}
    for pname, values in profiles.items():
        if not isinstance(pname, str) or not PROFILE_NAME.fullmatch(pname):
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


def _param_lines(text: str) -> dict[str, int]:
    """The line (1-based) of each parameter's name under ``params:`` in a profiles file's ``text`` (already read, so
    valid and bounded YAML): where a refusal of that parameter's spec points."""
    import yaml

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    params = next((v for k, v in getattr(root, "value", []) if getattr(k, "value", None) == "params"), None)
    if not isinstance(params, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in params.value if isinstance(k, yaml.ScalarNode)}


def _parse_param(path: Path, name: Any, spec: Any, line: int | None = None) -> ParamSpec:
    where = f"parameter {name!r}"
    if not isinstance(name, str) or not name.isidentifier() or name == "profile":
        raise DataError(path, f"{where}: names must be Python identifiers other than 'profile'", line)
    if not isinstance(spec, dict) or spec.get("type") not in PARAM_TYPES:
        raise DataError(path, f"{where}: expected a mapping with 'type' one of {list(PARAM_TYPES)} (semantic types: "
                              "xenbench/harness/spec.py)", line)
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise DataError(path, f"{where}: unknown keys {unknown}; allowed {sorted(_SPEC_KEYS)}", line)
    kind = spec["type"]
    items = spec.get("items")
    if items is not None and (kind != "list" or items not in ITEM_TYPES):
        raise DataError(path, f"{where}: 'items' is only for lists and must be one of {list(ITEM_TYPES)}", line)
    for key in ("item_min", "item_max"):
        if spec.get(key) is not None and (kind != "list" or items not in ("int", "float")):
            raise DataError(path, f"{where}: {key!r} bounds the elements of an int or float list only", line)
    for key in ("min", "max", "item_min", "item_max"):
        bound = spec.get(key)
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))):
            raise DataError(path, f"{where}: {key!r} must be a number", line)
        if bound is not None and (kind in ("str", "bool") or kind in SEMANTIC_TYPES):
            raise DataError(path, f"{where}: {key!r} applies to int, float and list (length) parameters only", line)
    choices = spec.get("choices")
    if choices is not None and (not isinstance(choices, list) or not choices):
        raise DataError(path, f"{where}: 'choices' must be a non-empty list", line)
    if not isinstance(spec.get("nullable", False), bool) or not isinstance(spec.get("help", ""), str):
        raise DataError(path, f"{where}: 'nullable' must be true/false and 'help' a string", line)
    at_most = spec.get("at_most")
    if at_most is not None and (at_most not in SIZES or not (kind == "int" or items == "int")):
        raise DataError(path, f"{where}: 'at_most' must be one of {list(SIZES)}, on an int or int-list parameter",
                        line)
    for key in ("in", "requires", "replaced_by"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise DataError(path, f"{where}: {key!r} must name another parameter", line)
    return ParamSpec(
        name=name, type=kind, min=spec.get("min"), max=spec.get("max"),
        choices=tuple(choices) if choices is not None else None, items=items,
        item_min=spec.get("item_min"), item_max=spec.get("item_max"),
        nullable=spec.get("nullable", False), at_most=at_most, help=spec.get("help", ""),
        within=spec.get("in"), requires=spec.get("requires"), replaced_by=spec.get("replaced_by"),
    )


def _check_links(path: Path, params: dict[str, ParamSpec], lines: dict[str, int]) -> None:
    """The keys that name another parameter: ``in`` (a store's folder parameter, a first stage's dataset parameter;
    required for those two types, refused on others), ``requires`` and ``replaced_by`` (a ``model`` parameter;
    ``replaced_by`` on a folder or store only: what a model's on-demand scores stand in for)."""
    for p in params.values():
        where, line = f"parameter {p.name!r}", lines.get(p.name)
        want = _IN.get(p.kind)
        target = params.get(p.within) if p.within is not None else None
        if want is None and p.within is not None:
            raise DataError(path, f"{where}: 'in' is only for {sorted(_IN)} parameters (or lists of them)", line)
        if want is not None and (target is None or target.kind != want or target.type == "list" and want == "folder"):
            raise DataError(path, f"{where}: a {p.kind} parameter needs 'in: <a {want} parameter of this file>' (the "
                                  f"{'folder it lives in' if want == 'folder' else 'dataset whose queries it ranks'}); "
                                  f"got {p.within!r}", line)
        for key in ("requires", "replaced_by"):
            name = getattr(p, key)
            if name is None:
                continue
            if name not in params or params[name].type != "model":
                raise DataError(path, f"{where}: {key!r} must name a parameter of type model; got {name!r}", line)
            if key == "replaced_by" and p.kind not in ("folder", "store"):
                raise DataError(path, f"{where}: 'replaced_by' is for folder and store parameters (a model's "
                                      f"on-demand scores replace a score store)", line)
        if p.requires is not None and p.replaced_by is not None:
            raise DataError(path, f"{where}: 'requires' and 'replaced_by' exclude each other", line)


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
    if "sized_by" in data and not (isinstance(data["sized_by"], str) and SIZED_BY.fullmatch(data["sized_by"])):
        raise DataError(path, f"{where}: 'sized_by' must name a function of xenbench.studies as 'module:function' "
                              f"(e.g. xenbench.studies.rank:default_sizes); got {data['sized_by']!r}")
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
            match = TERM.fullmatch(term)
            name = term_param(term)
            if match is None:
                raise DataError(path, f"fits: {term!r} in {rule!r} is not an int, a parameter, max(p)/min(p) or a size")
            if name in SIZES:
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



def as_spec(name_or_spec: str | os.PathLike[str] | NotebookSpec) -> NotebookSpec:
    """``name_or_spec`` itself if it is a :class:`NotebookSpec`, else :func:`load_spec` of it."""
    return name_or_spec if isinstance(name_or_spec, NotebookSpec) else load_spec(name_or_spec)


def profile_values(name_or_spec: str | os.PathLike[str] | NotebookSpec, profile: str = BASE_PROFILE) -> dict[str, Any]:
    """Every parameter's value under ``profile``: the ``quick`` values updated by that profile's (and
    those of the profiles it extends).

    Raises
    ------
    ParameterError
        If the profiles file has no such profile (the available ones are listed).
    """
    spec = as_spec(name_or_spec)
    if profile not in spec.profiles:
        raise ParameterError("profile", f"one of {sorted(spec.profiles)}", profile, spec.owner)
    return {**spec.profiles[BASE_PROFILE], **spec.profiles[profile]}
