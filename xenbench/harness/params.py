"""A notebook's parameter values checked against its profiles file: one parameter's constraints (:class:`ParamSpec`),
a mapping of values (:func:`validate_params`) and ``-p name value`` text from the command line
(:func:`parse_cli_params`). Every refusal is one :class:`~xenbench.errors.ParameterError` line::

    The 'n_queries' parameter of notebook 00_data must be an int in [1, 100000]. Got -3 instead.
"""
from __future__ import annotations

import contextlib
import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xenbench.errors import ParameterError, YamlBoundError

if TYPE_CHECKING:
    from xenbench.harness.spec import NotebookSpec

__all__ = ["ParamSpec", "validate_params", "parse_cli_params", "load_yaml", "YamlBoundError", "PARAM_TYPES", "ITEM_TYPES",
           "SEMANTIC_TYPES", "PROFILE_NAME", "MAX_YAML_NODES"]

#: The semantic types: text that names something :func:`xenbench.harness.preflight.preflight` opens or resolves before
#: a kernel starts, each checked there by one function (``preflight.CHECKS``) -> what one value is (completing "must be
#: ...") and what a list of them holds ("a list of ...").
SEMANTIC_TYPES: dict[str, tuple[str, str]] = {
    "model": ("a cross-encoder: a folder (relative to notebooks/) or a Hugging Face hub id org/name ('' = none)",
              "cross-encoder folders or hub ids"),
    "first_stage": ("a first stage: de, tfidf, bm25 or run:<path> (a TREC run file)", "first stages"),
    "dataset": ("a dataset spec: wordnet-el:<domain>, beir:<folder> or zeshel:<root>:<world>", "dataset specs"),
    "device": ("a device: auto, cpu, cuda, cuda:N or mps", "devices"),
    "folder": ("a folder, relative to notebooks/ ('' = none)", "folders"),
    "store": ("a score store: a folder holding zarr.json in the folder parameter named by 'in'", "score stores"),
}
#: The ``type`` of a parameter -> the Python types its values may have (a semantic type's values are text).
PARAM_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (float, int), "str": (str,), "bool": (bool,),
                                            "list": (list, tuple), **{t: (str,) for t in SEMANTIC_TYPES}}
#: The element types of a ``list`` parameter (its ``items``).
ITEM_TYPES = ("int", "float", "str", "bool", *SEMANTIC_TYPES)
#: Profile names become parts of file names: keep them plain.
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
#: The most values (YAML nodes, counted after aliases are expanded) a notebook's profiles file may hold. A few hundred
#: bytes of aliases (``&a [*b, *b, ...]``, the "billion laughs") expand to billions of values, which any later
#: ``repr``, check or copy would walk; ``-p`` values and sweep grids take no aliases at all.
MAX_YAML_NODES = 100_000


def load_yaml(text: str, *, aliases: bool = True, max_nodes: int = MAX_YAML_NODES) -> Any:
    """``yaml.safe_load(text)``, bounded before anything is built.

    The text is composed into YAML nodes first (aliases share a node, so this is as small as the text); their size
    after expansion is counted without expanding them, and only a value within bounds is constructed.

    Parameters
    ----------
    text
        One YAML document.
    aliases
        Whether ``*name`` references are allowed (a profiles file: yes; a ``-p`` value: no).
    max_nodes
        The most nodes (scalars, lists, mappings) the value may hold once aliases are expanded.

    Raises
    ------
    YamlBoundError
        An alias where none is allowed, a value that contains itself, or more than ``max_nodes`` nodes (also a
        nesting too deep to parse).
    yaml.YAMLError
        Text that is not YAML.
    """
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YamlBoundError("nested too deeply to read") from None
        if node is None:
            return None
        _count_nodes(node, aliases=aliases, max_nodes=max_nodes)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _count_nodes(root: Any, *, aliases: bool, max_nodes: int) -> int:
    """The nodes under ``root`` once aliases are expanded, counted once per distinct node (iteratively: any depth)."""
    import yaml

    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > max_nodes:
                raise YamlBoundError(f"more than {max_nodes:,} values once its aliases are expanded")
            continue
        if key in sizes or key in on_path:  # a node reached twice: an alias (*name) refers to it
            if not aliases:
                raise YamlBoundError("an alias (*name), which is not allowed here")
            if key in on_path:
                raise YamlBoundError("an alias that refers to a value containing it (a recursive value)")
            continue
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children)
    return sizes[id(root)]


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
    within: str | None = None  # `in`: the folder parameter a store lives in, the dataset parameter a first stage ranks
    requires: str | None = None  # the model parameter without which this one is unused (and must be null)
    replaced_by: str | None = None  # the model parameter that, when set, replaces this one (unused, not checked)

    @property
    def kind(self) -> str:
        """The semantic type of the parameter or of its elements (``"dataset"`` for a list of datasets), or ``""``."""
        kind = self.items if self.type == "list" else self.type
        return kind if kind in SEMANTIC_TYPES else ""

    def expected(self) -> str:
        """The phrase completing "must be ...", e.g. ``"an int in [1, 100000]"``."""
        if self.type == "list":
            what = f"a list of {SEMANTIC_TYPES[self.kind][1] if self.kind else self.items or 'values'}"
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
        elif self.kind:
            what = f"text naming {SEMANTIC_TYPES[self.kind][0]}"
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
    return isinstance(value, PARAM_TYPES[type_name])


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



def validate_params(spec: NotebookSpec, values: Mapping[str, Any]) -> dict[str, Any]:
    """Check parameter names and values against a notebook's profiles file.

    Parameters
    ----------
    spec
        The notebook's :class:`~xenbench.harness.spec.NotebookSpec` (:func:`~xenbench.harness.spec.load_spec`).
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
    if not isinstance(values, Mapping):
        raise ParameterError("params", "a mapping of parameter name to value", values, spec.owner)
    cleaned: dict[str, Any] = {}
    for pname, value in values.items():
        if pname == "profile":
            if not isinstance(value, str) or not PROFILE_NAME.fullmatch(value):
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


def parse_cli_params(spec: NotebookSpec, pairs: list[tuple[str, str]] | Mapping[str, str]) -> dict[str, Any]:
    """Turn command-line ``-p name value`` strings into typed, validated values.

    ``str`` parameters take the text as is; ``int``/``float`` parse it as a number; ``bool`` takes
    true/false/yes/no/1/0; ``list`` takes YAML (``[a, b]``; no aliases, at most :data:`MAX_YAML_NODES` values) or
    comma-separated text (``a,b``); ``null``/``None`` gives ``None`` for a nullable parameter.

    Raises
    ------
    ParameterError
        Unknown name, or text that does not parse or validate (same messages as :func:`validate_params`).
    """
    import yaml

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
                loaded = load_yaml(text, aliases=False)
            except yaml.YAMLError:
                loaded = text
            except YamlBoundError as err:
                raise ParameterError(pname, f"{p.expected()} (YAML [a, b] or comma-separated a,b); this YAML holds {err}",
                                     text, spec.owner) from None
            if isinstance(loaded, list):
                value = loaded
            elif isinstance(loaded, dict):  # YAML `{a: 1}` is a mapping, never a list of its text
                raise ParameterError(pname, p.expected() + " (YAML [a, b] or comma-separated a,b), not a mapping",
                                     text, spec.owner)
            else:
                value = [_scalar(part, p, text, spec.owner) if p.items != "str" and not p.kind else part
                         for part in (s.strip() for s in text.split(",")) if part]
        parsed[pname] = value
    return validate_params(spec, parsed)


def _scalar(part: str, p: ParamSpec, text: str, owner: str) -> Any:
    """One element of a comma-separated ``-p`` list, read as YAML (``1``, ``0.5``, ``true``; no aliases)."""
    import yaml

    try:
        return load_yaml(part, aliases=False)
    except yaml.YAMLError:
        return part  # not YAML: the value check below names what was expected
    except YamlBoundError as err:
        raise ParameterError(p.name, f"{p.expected()} (YAML [a, b] or comma-separated a,b); this YAML holds {err}",
                             text, owner) from None
