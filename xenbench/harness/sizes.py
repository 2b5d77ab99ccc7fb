"""The sizes of a notebook's data, found without a kernel, and the size relations its parameters must keep.

Two kinds of relation, both declared in the profiles file (:mod:`xenbench.harness.spec`) and checked by
:func:`check_sizes` before any kernel starts, and again inside the kernel: an ``at_most`` parameter (each value at
most the data's items or queries), and each relation of its ``fits`` (:class:`~xenbench.harness.spec.Fit`). A k of
100 on a 40-item dataset fails at once, naming the parameter, not 10 minutes into the kernel.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from xenbench.errors import ParameterError
from xenbench.harness.spec import SIZES, TERM, Fit, NotebookSpec, as_spec, term_param

__all__ = ["data_sizes", "check_sizes", "run_sample", "sized_values", "dataset_specs", "in_folder", "load_dataset_once", "store_names"]


@contextlib.contextmanager
def in_folder(folder: Path) -> Iterator[None]:
    """Run the body with ``folder`` as the working directory: relative paths are read from the notebook's folder,
    as its kernel reads them."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def dataset_specs(spec: NotebookSpec, name: str, value: Any) -> list[str]:
    """The dataset specs a parameter holds, read as the kernel reads it: the ``data`` section's parameter is a corpus
    (:func:`xenbench.studies.corpus.corpus_specs`: a list or comma-separated specs, bare WordNet-EL domains), any other
    a spec or a list of specs."""
    if spec.data.get("dataset") == name:
        from xenbench.studies.corpus import corpus_specs

        return corpus_specs(value)
    return list(value) if isinstance(value, list) else [value]


def load_dataset_once(text: str, loaded: dict[str, Any]) -> Any:
    """The dataset of spec ``text``, opened once per check: ``loaded`` keeps what was opened (spec -> dataset)."""
    if text not in loaded:
        from xenbench.data.sources import load_dataset

        loaded[text] = load_dataset(text)
    return loaded[text]


def store_names(folder: str | os.PathLike[str], names: Any) -> list[str]:
    """The score stores a ``store`` parameter names: its name or list of names, or, when it is None, every score store
    in ``folder`` (sub-folders holding a ``zarr.json``), sorted."""
    if names is None:
        base = Path(folder)
        return sorted(p.name for p in base.iterdir() if (p / "zarr.json").is_file()) if base.is_dir() else []
    return list(names) if isinstance(names, list) else [names]


def _sizes(spec: NotebookSpec, values: Mapping[str, Any],
           loaded: dict[str, Any] | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """The data's sizes before and after the ``max_items``/``max_queries`` caps (see :func:`data_sizes`)."""
    data, loaded = spec.data, {} if loaded is None else loaded
    if not data:
        return {}, {}
    with in_folder(spec.path.parent):
        if "dataset" in data:
            specs = dataset_specs(spec, data["dataset"], values[data["dataset"]])
            datasets = [load_dataset_once(s, loaded) for s in specs]
            raw = {"queries": sum(len(d.queries) for d in datasets), "items": sum(len(d.items) for d in datasets)}
            if "max_items" in data and len(datasets) == 1:  # 03, 04, 07: the sample that keeps the labels
                sample = run_sample(spec, values, datasets[0])
                return raw, {"queries": int(sample.queries.size), "items": int(sample.items.size)}
        else:
            from xenbench.data.store import ScoreStore

            folder, names = (values[p] for p in data["store"])
            found = store_names(folder, names)
            if not found:
                raise ParameterError(data["store"][0], "a folder holding score stores (xenbench score writes them)",
                                     folder, spec.owner)
            shape = ScoreStore.open(Path(folder) / found[0]).shape
            raw = {"queries": int(shape[0]), "items": int(shape[1])}
    sizes = dict(raw)
    for size in SIZES:
        cap = values.get(data.get(f"max_{size}", ""))
        if cap is not None:
            sizes[size] = min(sizes[size], int(cap))
    return raw, sizes


def run_sample(spec: NotebookSpec, values: Mapping[str, Any], dataset: Any) -> Any:
    """The seeded sample of ``dataset`` a run of notebook 03, 04 or 07 works on
    (:func:`xenbench.data.datasets.corpus_sample` with the run's ``max_queries``, ``max_items`` and ``seed``): the
    same rows the kernel's :func:`xenbench.studies.setup.load_setup` draws. Refused, naming ``max_items``, when it
    cannot hold the sampled queries' relevant items."""
    from xenbench.data.datasets import corpus_sample

    data = spec.data
    cap = {size: values.get(data.get(f"max_{size}", "")) for size in ("queries", "items")}
    return corpus_sample(dataset, cap["queries"], cap["items"], values.get(data.get("seed", ""), 0) or 0,
                         owner=spec.owner)


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
    return _sizes(as_spec(name_or_spec), values)[1]


def _source(spec: NotebookSpec, values: Mapping[str, Any]) -> str:
    """Where the data's sizes come from, in the notebook's parameter names: ``dataset 'beir:...', max_queries 100``."""
    source = ", ".join(f"{k} {values[v]!r}" for k, v in spec.data.items()
                       if isinstance(v, str) and k in ("dataset", "max_items", "max_queries"))
    if "store" in spec.data:
        folder, names = (values[p] for p in spec.data["store"])
        store = Path(folder) / next(iter(store_names(folder, names)), "")
        source = f"store {store}" + (f", {source}" if source else "")
    return source


def sized_values(spec: NotebookSpec, values: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
    """``values`` with the parameters left None sized from the data by the profiles file's ``sized_by`` function
    (e.g. notebook 02's grids: :func:`xenbench.studies.rank.default_sizes`); ``values`` itself when it names none.

    The function takes ``(values, sizes)`` and returns a value for each parameter it sizes; only those that are None
    in ``values`` are taken (a value the user gave wins), each checked as a value of its parameter.
    """
    target = spec.data.get("sized_by")
    if not target:
        return dict(values)
    import importlib

    module, _, name = target.partition(":")
    filled = getattr(importlib.import_module(module), name)(values, sizes)
    out = dict(values)
    for key, value in filled.items():
        if key in spec.params and values.get(key) is None:
            out[key] = spec.params[key].check(value, spec.owner)
    return out


def check_sizes(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any], *,
                _loaded: dict[str, Any] | None = None, _filled: dict[str, Any] | None = None) -> dict[str, int]:
    """Check every size relation of a notebook against its data (:func:`data_sizes`), before any kernel starts.

    Two kinds: an ``at_most`` parameter (each value at most the data's items or queries), and each relation of the
    profiles file's ``fits`` (:class:`~xenbench.harness.spec.Fit`), e.g. ``n_anchor_queries + n_dev_queries + 1 <=
    queries``: anchor, dev and at least one test query within the queries the notebook samples. A broken relation
    names the parameters to lower and, when a ``max_*`` cap binds, the cap to raise, in the notebook's own parameter
    names. Parameters left None that the profiles file sizes from the data (``sized_by``) are sized first
    (:func:`sized_values`) and checked as sized; ``_filled``, when given, receives the sized values.

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
    spec = as_spec(name_or_spec)
    bounded = [p for p in spec.params.values() if p.at_most]
    needs_data = (bool(spec.data.get("sized_by")) or any(values.get(p.name) is not None for p in bounded)
                  or any(term_param(t) in SIZES for f in spec.fits for t in (*f.lhs, *f.rhs)))
    raw, sizes = _sizes(spec, values, _loaded) if needs_data else ({}, {})
    source = _source(spec, values) if needs_data else ""
    values = sized_values(spec, values, sizes) if needs_data else dict(values)
    if _filled is not None:
        _filled.update(values)
    for p in (p for p in bounded if values.get(p.name) is not None):
        value, bound = values[p.name], sizes[p.at_most]
        if any(v > bound for v in (value if isinstance(value, list) else [value])):
            what = "ints each" if isinstance(value, list) else "an int"
            raise ParameterError(p.name, f"{what} <= the {bound} {p.at_most} of its data ({source})", value,
                                 spec.owner)
    for fit in spec.fits:
        _check_fit(spec, fit, values, raw, sizes, source)
    return sizes


def _term_value(term: str, values: Mapping[str, Any], sizes: Mapping[str, int]) -> int | None:
    match = TERM.fullmatch(term)
    if match.group(4):
        return int(match.group(4))
    name = match.group(2) or match.group(3)
    if name in SIZES:
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
    lower = [term_param(t) for t in fit.lhs if term_param(t) not in (None, *SIZES)]
    raise_ = [term_param(t) for t in fit.rhs if term_param(t) not in (None, *SIZES)]
    notes = []
    for size in (t for t in fit.rhs if t in SIZES):
        cap = spec.data.get(f"max_{size}")
        if cap and values.get(cap) is not None and raw[size] > values[cap]:
            raise_.append(cap)
            notes.append(f"the data has {raw[size]} {size}")
        else:
            notes.append(f"all {raw[size]} {size} of the data are used")
    rhs = " + ".join(f"the {sizes[t]} {t} of its data ({source})" if t in SIZES else f"{t} = {v}"
                     for t, v in zip(fit.rhs, right))
    lhs = " + ".join(map(str, left))
    what = f"{fit.text}{f' ({fit.why})' if fit.why else ''}, and {lhs} = {sum(left)} > {rhs}"
    name = (lower or raise_)[0]
    first = next(k for k, t in enumerate(fit.lhs) if term_param(t) == name) if lower else None
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

