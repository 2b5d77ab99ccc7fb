"""Everything a run can check before its kernel starts, so a bad value fails in seconds, not minutes into a cell.

:func:`preflight` resolves every device, opens every folder, score store and dataset the values point at (each
parameter by the one function of its semantic type in the profiles file, :data:`CHECKS`), checks every
size relation (:mod:`xenbench.harness.sizes`) and, for a run that scores a user's CE on demand (``model``), plans that
scoring (:func:`plan_scoring`): whether the score cache holds the sample already and, if not, how long scoring takes
at the rate the CE reaches here (:func:`xenbench.models.probe.probe_rate`), refused past the cell timeout.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from xenbench.errors import DataError, ParameterError
from xenbench.harness.params import ParamSpec
from xenbench.harness.sizes import check_sizes, dataset_specs, in_folder, load_dataset_once, run_sample, store_names
from xenbench.harness.spec import NotebookSpec, as_spec
from xenbench.models.probe import duration  # numpy only: the scorer loads in probe_rate

__all__ = ["CHECKS", "ce_name", "unused_params", "refuse_checkpoint", "check_ce_path", "check_extra_methods",
           "check_typed", "check_requires", "replaced", "check_device_param", "check_folder_param",
           "check_store_param", "check_model_param", "check_dataset_param", "check_first_stage_param",
           "check_store_name", "preflight", "plan_scoring", "quiet_transformers"]

log = logging.getLogger(__name__)


_CE_EXPECTED = ("a cross-encoder folder: a xenbench folder (xenbench_ce.json) or a Hugging Face or "
                "sentence-transformers folder (config.json), or a Hugging Face hub id org/name[@revision]")
# An authors' Lightning checkpoint loads only with its base model (load_cross_encoder(path, base=...)), which no
# notebook parameter passes: refused before any work, saying what works instead.
_CKPT = ("; a Lightning .ckpt needs its base model, which no notebook parameter passes: score it with xenbench score "
         "PATH DATASET --base BASE --out STORE (or in Python: xb.jobs.score_to_store(xb.loading.load_cross_encoder("
         "path, base=...), ...)) and read that store")


def ce_name(model: str | os.PathLike[str]) -> str:
    """The name a user's CE goes by in figures, findings and set-up lines: its hub id, or its folder's name
    (``"../models/my-ce/"`` -> ``"my-ce"``; :attr:`xenbench.models.references.ModelRef.name`)."""
    from xenbench.models.references import model_name

    return model_name(model)


def replaced(p: ParamSpec, values: Mapping[str, Any]) -> bool:
    """Whether parameter ``p`` is ``replaced_by`` a model that ``values`` set (its on-demand scores stand in for the
    score store ``p`` names): such a parameter is neither checked nor used."""
    return p.replaced_by is not None and bool(values.get(p.replaced_by))


def unused_params(spec: NotebookSpec, values: Mapping[str, Any]) -> tuple[tuple[str, ...], str]:
    """The parameters a run with ``values`` does not use, and why (one phrase), for the report's injected parameters.

    With a non-empty ``model``, those it replaces (``replaced_by: model`` in the profiles file: the score store);
    without one, those only a model uses (``requires: model``) left at None (another value is refused by
    :func:`check_requires`, so it is shown). A notebook without such parameters uses every one: ``((), "")``.
    """
    linked = [p for p in spec.params.values() if p.requires or p.replaced_by]
    if not linked:
        return (), ""
    gone = tuple(p.name for p in linked if replaced(p, values))
    if gone:
        return gone, f"{spec.params[gone[0]].replaced_by} replaces the score store"
    unused = tuple(p.name for p in linked if p.requires and not values.get(p.requires) and values.get(p.name) is None)
    return unused, "only a model's sample uses them"


def check_requires(spec: NotebookSpec, values: Mapping[str, Any]) -> None:
    """Refuse a value for a parameter that ``requires: model`` when that model is empty (e.g. ``max_length``: it
    truncates the pairs a model scores on demand; a precomputed store is read as it is). Cheap: called before the
    kernel (:func:`preflight`) and in it (:func:`xenbench.harness.kernel.check_namespace`)."""
    for p in spec.params.values():
        if p.requires and not values.get(p.requires) and values.get(p.name) not in (None, "", []):
            raise ParameterError(p.name, f"null unless {p.requires} is given (only a model's on-demand scoring uses "
                                         f"it; a precomputed store is read as it is)", values[p.name], spec.owner)


def refuse_checkpoint(value: Any, name: str, owner: str) -> None:
    """Refuse a Lightning ``.ckpt`` file as the CE of parameter ``name``: it loads only with its base model
    (:func:`xenbench.models.loading.load_cross_encoder` ``base=``), which no notebook parameter passes; the
    message says what works instead."""
    if Path(str(value).rstrip("/\\")).suffix == ".ckpt":
        raise ParameterError(name, _CE_EXPECTED + _CKPT, value, owner)


def _untrained(value: Any, name: str, owner: str) -> Any:
    """The CE of an :data:`xenbench.models.loading.UNTRAINED` name (``untrained-cls``: a random head on the bundled
    backbone, seed 0), or a ParameterError naming the parameter; imports torch only for such a name."""
    from xenbench.models.loading import untrained_cross_encoder

    return untrained_cross_encoder(str(value), owner=owner, param=name)


def check_ce_path(value: Any, name: str, owner: str) -> Path:
    """``value`` as the path of a CE folder (a hub id's snapshot folder,
    :func:`xenbench.models.references.resolve_model`), without loading it; an untrained head's name
    (``untrained-cls``, ``untrained-emb``: :func:`xenbench.models.loading.untrained_cross_encoder`) as itself.

    Raises
    ------
    ParameterError
        Naming the parameter ``name`` of ``owner``: a ``.ckpt`` file (:func:`refuse_checkpoint`), no such folder, or a
        folder that holds no CE.
    DataError
        A hub id not in the local cache while ``HF_HUB_OFFLINE`` is set (naming the id, the cache and how to fetch it).
    """
    from xenbench.models.references import parse_hub_id, resolve_model

    refuse_checkpoint(value, name, owner)
    if str(value).startswith("untrained"):  # xenbench's random heads (for testing the pipeline), as xenbench score
        from xenbench.models.loading import UNTRAINED

        if value not in UNTRAINED:
            raise ParameterError(name, f"one of {sorted(UNTRAINED)} (an untrained head, for testing only), or "
                                 + _CE_EXPECTED, value, owner)
        return Path(str(value))
    path = Path(str(value)).expanduser()
    if not path.exists() and parse_hub_id(str(value)) is not None:
        # a hub id: from the local cache when HF_HUB_OFFLINE is set (an uncached one is one line naming it); a
        # relative path such as models/cls-ce spells like one: say where it was looked for as a folder too
        try:
            path = resolve_model(str(value), owner=owner, param=name).path
        except DataError as err:
            raise DataError(err.path, f"{err.problem}; nor is it a folder: relative paths are read from notebooks/ "
                                      f"(looked for {Path.cwd() / path})", err.line) from None
    if not (path.is_dir() and any((path / f).is_file() for f in ("xenbench_ce.json", "config.json"))):
        why = "" if path.exists() else (" (no such file or folder; relative paths are read from notebooks/: looked "
                                        f"for {Path.cwd() / path})")
        raise ParameterError(name, _CE_EXPECTED + why, value, owner)
    return path


def _each(value: Any) -> list[Any]:
    """The values a parameter holds: a list's elements, a single value alone, none for None."""
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


def check_device_param(spec: NotebookSpec, p: ParamSpec, values: Mapping[str, Any], loaded: dict[str, Any]) -> None:
    """A ``device`` parameter resolves on this machine (:func:`xenbench._device.resolve_device`); ``auto`` and ``cpu``
    always do, without importing torch."""
    for value in _each(values[p.name]):
        if value not in ("auto", "cpu"):
            from xenbench._device import resolve_device

            resolve_device(value, owner=spec.owner, param=p.name)


def check_folder_param(spec: NotebookSpec, p: ParamSpec, values: Mapping[str, Any], loaded: dict[str, Any]) -> None:
    """A ``folder`` parameter names an existing folder (relative to the notebook's folder); ``""`` is none."""
    for value in _each(values[p.name]):
        if value and not Path(value).is_dir():
            raise ParameterError(p.name, "an existing folder (relative paths are read from notebooks/)", value,
                                 spec.owner)


def check_store_param(spec: NotebookSpec, p: ParamSpec, values: Mapping[str, Any], loaded: dict[str, Any]) -> None:
    """A ``store`` parameter names score stores that open in the folder its ``in`` parameter holds
    (:func:`check_store_name`); a list left None names every store there, of which there must be one."""
    from xenbench.data.store import ScoreStore

    folder = values[p.within]
    listed = store_names(folder, values[p.name])  # None: every store in the folder
    if not listed and values[p.name] is None:
        raise ParameterError(p.within, "a folder holding score stores (xenbench score writes them)", folder, spec.owner)
    for store in listed:
        check_store_name(folder, store, spec.owner, param=p.name, folder_param=p.within)
        ScoreStore.open(Path(folder) / store)


def check_model_param(spec: NotebookSpec, p: ParamSpec, values: Mapping[str, Any], loaded: dict[str, Any]) -> None:
    """A ``model`` parameter names a CE folder or hub id (:func:`check_ce_path`, which does not load it); ``""`` is
    none (for ``model``: read the score store)."""
    for value in _each(values[p.name]):
        if value:
            check_ce_path(value, p.name, spec.owner)


def check_dataset_param(spec: NotebookSpec, p: ParamSpec, values: Mapping[str, Any], loaded: dict[str, Any]) -> None:
    """A ``dataset`` parameter's specs open and parse (:func:`~xenbench.harness.sizes.dataset_specs`: the ``data``
    section's parameter is a corpus); a malformed file fails naming its file and line, and the parameter."""
    name = p.name
    if not values.get(name):
        return
    text = values[name]
    try:
        for text in dataset_specs(spec, name, values[name]):
            load_dataset_once(text, loaded)
    except DataError as err:  # the file and line, and which parameter pointed there
        raise DataError(err.path, f"{err.problem} (the {name!r} parameter of {spec.owner} is {text!r})",
                        err.line) from None
    except ParameterError as err:  # a loader's own parameter (a domain, a world): say whose value it is
        raise ParameterError(name, f"dataset specs that open (wordnet-el:<domain>, beir:<folder>, "
                                   f"zeshel:<root>:<world>); {text!r} does not: {err}", values[name],
                             spec.owner) from None


def check_first_stage_param(spec: NotebookSpec, p: ParamSpec, values: Mapping[str, Any],
                            loaded: dict[str, Any]) -> None:
    """Every first stage a ``first_stage`` parameter names is one (:func:`xenbench.models.retrievers.check_first_stage`),
    and every run file among them reads and fits the dataset its ``in`` parameter names
    (:func:`xenbench.data.trec.check_run`): its query and doc ids are the dataset's, and it ranks every query the
    notebook ranks with it (00: the seeded sample of ``max_queries`` of ``eval_datasets``, which must then be one
    dataset; 03, 04, 07: every query of ``dataset``, or with ``model`` the seeded sample that is scored). Relative paths
    are read from the working directory (the notebook's folder under :func:`preflight`).

    Raises
    ------
    ParameterError
        A value that names no first stage, or a run with several datasets.
    DataError
        One line naming the run file (and line): a malformed line, an id the dataset lacks, a query it misses.
    """
    from xenbench.data.trec import check_run, read_trec_run
    from xenbench.models.first_stages import check_first_stage, run_path

    name = p.name
    runs = [run_path(check_first_stage(s, name, spec.owner)) for s in _each(values[name])]
    runs = [r for r in runs if r is not None]
    if not runs:
        return
    texts = dataset_specs(spec, p.within, values[p.within])
    if len(texts) != 1:
        raise ParameterError(p.within, f"one dataset when {name} holds a run file (a run ranks one dataset's queries)",
                             values[p.within], spec.owner)
    ds = load_dataset_once(texts[0], loaded)
    evaluated = _ranked_queries(spec, values, ds)
    for path in runs:
        if not path.exists() and not path.is_symlink():
            where = "" if path.is_absolute() else (f"; relative paths are read from notebooks/: looked for "
                                                   f"{Path.cwd() / path}")
            raise DataError(path, f"no such file (a run file, the {name!r} parameter of {spec.owner}{where})")
        check_run(read_trec_run(path), query_ids=ds.query_ids, evaluated=evaluated, item_ids=ds.item_ids,
                  dataset=ds.name, param=name)


#: The check of each semantic type (:data:`xenbench.harness.params.SEMANTIC_TYPES`) -> its one function, called on
#: every parameter of that type (or list of it) in this order, cheapest first: a run file is read against its dataset.
CHECKS: dict[str, Callable[[NotebookSpec, ParamSpec, Mapping[str, Any], dict[str, Any]], None]] = {
    "device": check_device_param, "folder": check_folder_param, "store": check_store_param,
    "model": check_model_param, "dataset": check_dataset_param, "first_stage": check_first_stage_param,
}


def check_typed(spec: NotebookSpec, values: Mapping[str, Any], loaded: dict[str, Any] | None = None,
                kinds: Sequence[str] = tuple(CHECKS)) -> None:
    """Check every parameter of a semantic type in ``kinds`` by its type's function (:data:`CHECKS`), in that order;
    a parameter a set model replaces (:func:`replaced`) is skipped. Relative paths are read from the working
    directory (the notebook's folder under :func:`preflight`); ``loaded`` keeps the datasets opened (spec -> dataset).

    Raises
    ------
    ParameterError, DataError
        One line naming the parameter (and the file and line, for a malformed dataset or run file).
    """
    loaded = {} if loaded is None else loaded
    for kind in kinds:
        for p in spec.params.values():
            if p.kind == kind and not replaced(p, values):
                CHECKS[kind](spec, p, values, loaded)


def preflight(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any], *,
              timeout: int | None = None, fit: bool = False) -> dict[str, int]:
    """Check a run against this machine and its data before a kernel starts; ``values`` are already validated.

    Cheapest first: a parameter that ``requires: model`` is null without one (:func:`check_requires`); every parameter
    of a semantic type is checked by its type's function (:func:`check_typed`, :data:`CHECKS`): every device resolves
    here; every folder (``""`` skips) and score store exists and every CE folder looks like one (a model's store is
    not checked: ``replaced_by: model``); every dataset spec opens and parses (a malformed file fails naming its file
    and line); every first stage is one, and its run file fits its dataset; every size relation holds (:func:`~xenbench.harness.sizes.check_sizes`); with a non-empty ``model``, the
    CE loads and the on-demand scoring is planned (:func:`plan_scoring`: one line with the pairs and the time they
    take, refused past ``timeout``). Relative paths are read from the notebook's folder, as the kernel does.

    With ``fit`` (``xenbench run --fit``; a run with ``model``): instead of refusing a scoring past ``timeout``,
    ``max_queries`` and ``max_items`` are chosen to fit it (:func:`fit_sizes`) and written into ``values`` (a
    mutable mapping), which the kernel then runs with.

    Returns
    -------
    dict
        The data's sizes (:func:`~xenbench.harness.sizes.data_sizes`), or an empty dict.

    Raises
    ------
    ParameterError, DataError
        One line naming the parameter (and the file and line, for a malformed dataset).
    """
    spec = as_spec(name_or_spec)
    if fit and not (values.get("model") and "max_items" in spec.data):
        raise ParameterError("fit", "a run that scores a CE on demand (notebooks 03, 04 and 07 with model): it sizes "
                                    "max_queries and max_items to the cell timeout", True, spec.owner)
    loaded: dict[str, Any] = {}
    model = values.get("model") if "model" in spec.params else None
    check_requires(spec, values)
    with in_folder(spec.path.parent):
        # fitted sizes are checked once chosen: a run file must rank the sample --fit picks
        check_typed(spec, values, loaded, kinds=[k for k in CHECKS if not (fit and k == "first_stage")])
        check_extra_methods(spec, values)
    if fit:
        plan_scoring(spec, values, timeout=timeout, _loaded=loaded, fit=True)
        with in_folder(spec.path.parent):
            check_typed(spec, values, loaded, kinds=["first_stage"])
        sizes = check_sizes(spec, values, _loaded=loaded)
        _log_scale(spec, values, sizes)
        return sizes
    sizes = check_sizes(spec, values, _loaded=loaded)
    check_label_coverage(spec, values, sizes)
    if model:
        plan_scoring(spec, values, timeout=timeout, _loaded=loaded)
    _log_scale(spec, values, sizes)
    return sizes


#: Test queries with a relevant item that each split of a labelled run keeps at least: fewer, and a label measure's
#: mean and interval rest on a handful of queries.
MIN_LABELLED_TEST = 5


def check_label_coverage(spec: NotebookSpec, values: Mapping[str, Any], sizes: Mapping[str, int]) -> None:
    """Refuse, before the kernel, a run of 03, 04 or 07 whose splits would keep fewer than :data:`MIN_LABELLED_TEST`
    test queries. Every sampled query has a relevant kept item when the data has labels
    (:func:`xenbench.data.datasets.corpus_sample`), so each split's dev and test queries all count: this bounds the
    test queries left beside the anchor and dev ones (and ``max_test_queries``), naming the knob to change."""
    needed = ("n_anchor_queries", "n_dev_queries")
    if not sizes or not all(n in spec.params for n in needed) or "max_items" not in spec.data:
        return
    left = sizes["queries"] - values["n_anchor_queries"] - values["n_dev_queries"]
    cap = values.get("max_test_queries")
    if cap is not None and cap < MIN_LABELLED_TEST and left >= MIN_LABELLED_TEST:
        raise ParameterError("max_test_queries", f"at least {MIN_LABELLED_TEST}: test queries with a relevant item "
                                                 "per split, for the label measures to rest on more than a handful",
                             cap, spec.owner)
    if left < MIN_LABELLED_TEST:
        knob = spec.data.get("max_queries", "max_queries")
        raise ParameterError(knob, f"at least n_anchor_queries + n_dev_queries + {MIN_LABELLED_TEST} = "
                                   f"{values['n_anchor_queries'] + values['n_dev_queries'] + MIN_LABELLED_TEST} "
                                   f"queries of the sample ({sizes['queries']} now): each split keeps at least "
                                   f"{MIN_LABELLED_TEST} test queries (with a relevant item, when the data has labels). "
                                   "Or lower n_anchor_queries or n_dev_queries", values.get(knob), spec.owner)


def _log_scale(spec: NotebookSpec, values: Mapping[str, Any], sizes: Mapping[str, int]) -> None:
    """One line before the kernel: the queries and items a run works on and its CE budgets as a share of the items
    (a budget of 100 is a third of a 300-item sample, 0.1% of a 10^5-item corpus: where the methods differ)."""
    budgets = values.get("budgets")
    if not sizes or not isinstance(budgets, list) or not budgets or "max_items" not in spec.data:
        return
    items = sizes["items"]
    share = ", ".join(f"{b} ({100 * b / items:.2g}%)" for b in sorted(budgets))
    log.info("%s: %s queries x %s items; CE budgets %s of the items", spec.name, f"{sizes['queries']:,}",
             f"{items:,}", share)


def check_extra_methods(spec: NotebookSpec, values: Mapping[str, Any]) -> None:
    """Every ``extra_methods`` value is a registry key (``gar``) or an import path ``module:Class`` of a method class
    that imports and has ``fit(state)`` and ``search(counter, k)`` (:func:`xenbench.studies.methods.extra_entry`;
    relative imports from the working directory, the notebook's folder under :func:`preflight`).

    Raises
    ------
    ParameterError
        One line naming the value and what is wrong with it.
    """
    if "extra_methods" not in spec.params or not values.get("extra_methods"):
        return
    import sys

    from xenbench.studies.methods import extra_entry

    here = str(Path.cwd())
    added = here not in sys.path
    if added:  # as the kernel, started in the notebook's folder, imports a module beside the notebook
        sys.path.insert(0, here)
    try:
        for value in values["extra_methods"]:
            extra_entry(value, name="extra_methods", owner=spec.owner)
    finally:
        if added:
            sys.path.remove(here)


def _ranked_queries(spec: NotebookSpec, values: Mapping[str, Any], ds: Any) -> list[str]:
    """The ids of the queries a notebook ranks with its first stage (see :func:`check_first_stage_param`)."""
    seed = values.get(spec.data.get("seed", "seed"), 0)
    if "max_items" in spec.data:  # 03, 04, 07: the sample load_setup draws
        return [ds.queries[r].id for r in run_sample(spec, values, ds).queries]
    if "max_queries" in spec.params:  # 00: a seeded sample of the queries with gold
        from xenbench.data.datasets import sample_queries

        return [q.id for q in sample_queries(ds, values.get("max_queries"), seed)]
    return ds.query_ids


def check_store_name(scores_dir: str, ce: str, owner: str, param: str = "ce", folder_param: str = "scores_dir") -> None:
    """``ce`` names a score store folder in ``scores_dir`` (the bundled cls-ce, emb-ce, emb-ce-marker or a user's own):
    refused before any work, naming the parameter ``param`` and listing the stores there (in the parameter
    ``folder_param``). Used by :func:`check_store_param` (before the kernel) and
    :func:`xenbench.harness.kernel.check_namespace` (in it)."""
    folder = Path(scores_dir)
    if (folder / ce / "zarr.json").is_file():
        return
    found = sorted(p.name for p in folder.iterdir() if (p / "zarr.json").is_file()) if folder.is_dir() else []
    where = f"one of the score stores in {folder_param} {scores_dir!r} ({', '.join(found)})" if found else (
        f"a score store folder in {folder_param} {scores_dir!r}, which holds none (score one with xenbench score, or "
        "pass model to score on demand)")
    raise ParameterError(param, where, ce, owner)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No "Loading weights" bar from transformers while the harness loads a CE (restored afterwards)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def plan_scoring(name_or_spec: str | os.PathLike[str] | NotebookSpec, values: Mapping[str, Any], *,
                 timeout: int | None = None, _loaded: dict[str, Any] | None = None, fit: bool = False
                 ) -> dict[str, Any]:
    """Plan the on-demand scoring of a notebook run with ``model`` (03, 04, 07): the seeded sample the kernel will
    score (``max_queries`` x ``max_items`` of ``dataset``, as :func:`xenbench.studies.setup.load_setup` draws
    it), whether the score cache already holds it, and, if not, how long it takes at the rate the CE reaches here on
    :data:`~xenbench.models.probe.PROBE_PAIRS` pairs of that sample (:func:`~xenbench.models.probe.probe_rate`).

    The CE's fingerprint (the key of the cache) is computed the first time the CE is used and recorded
    (:func:`xenbench.models.fingerprint.folder_fingerprint`): the kernel that
    :func:`~xenbench.harness.runner.run_notebook` starts next, and every later run, open the cache without loading the
    CE; it is loaded (once) only to fingerprint it the first time or to measure its rate when something is left to
    score. A folder that holds no trained head is refused by that load
    (:func:`~xenbench.models.loading.load_cross_encoder`), naming the folder.

    Logs one line (INFO) with the pairs and the estimated time, a range over the probe's batches; logs a warning when
    the probe's (or the cached) scores are near-constant (:func:`~xenbench.models.probe.degenerate_scores`), or when
    they show a CE that does not read the query (:func:`check_probe`; a cached sample: the caveat is recorded too, by
    :func:`~xenbench.models.ce_check.warn_if_untrained`; a fresh sample is judged again in the kernel, once scored).

    Returns
    -------
    dict
        ``pairs`` (still to score), ``seconds`` (estimated at the median batch's rate; 0 when cached),
        ``seconds_range`` (at the fastest and the slowest batch's; absent when cached), ``pairs_per_s`` (the median
        batch's), ``cache`` (the store).

    Raises
    ------
    ParameterError
        When the estimate exceeds ``timeout`` (the cell timeout, seconds): names the ``max_queries``/``max_items``
        values that fit and the timeout that would do; or when a probe score is NaN or inf
        (:func:`~xenbench.models.probe.nonfinite_scores`).
    DataError
        From loading the CE: a folder that is not a usable CE (e.g. its classifier head missing), naming it.
    """
    from xenbench.models.fingerprint import release_shared

    try:
        return _plan(as_spec(name_or_spec), values, timeout, {} if _loaded is None else _loaded, fit)
    finally:
        release_shared()  # this process needs the CE no more; the kernel finds the cache by the fingerprint


def _plan(spec: NotebookSpec, values: Mapping[str, Any], timeout: int | None, loaded: dict[str, Any],
          fit: bool = False) -> dict[str, Any]:
    from xenbench.data.store import ScoreStore
    from xenbench.models.ce_check import sample_evidence, warn_if_untrained
    from xenbench.models.fingerprint import (cache_path, folder_fingerprint, load_shared, model_fingerprint,
                                             stored_fingerprint)
    from xenbench.models.probe import (  # the scorer loads in probe_rate only
        PROBE_PAIRS, degenerate_scores, nonfinite_scores, probe_rate, scoring_line)

    data = spec.data
    model = values["model"]
    untrained = str(model).startswith("untrained")
    with in_folder(spec.path.parent):
        path = check_ce_path(model, "model", spec.owner).resolve()
        (ds,) = [load_dataset_once(s, loaded) for s in dataset_specs(spec, data["dataset"], values[data["dataset"]])]
    max_length = values.get("max_length")
    if untrained:  # built (seconds), keyed by its weights as the kernel's cached_scores keys it
        if max_length is not None:
            raise ParameterError("max_length", f"null with {model} (the bundled backbone's own length)", max_length,
                                 spec.owner)
        with quiet_transformers():
            built = _untrained(model, "model", spec.owner)
        fingerprint = model_fingerprint(built)
    else:
        fingerprint = stored_fingerprint(path, max_length)  # a CE used before: no load (transformers not imported)
    if fingerprint is None:
        with quiet_transformers():
            fingerprint = folder_fingerprint(path, max_length)
    name, seed = ce_name(model), values.get(data.get("seed", ""), 0)
    sample = run_sample(spec, values, ds)  # the sample load_setup scores in the kernel
    sub = ds.subset([ds.queries[r].id for r in sample.queries], [ds.items[i].id for i in sample.items])
    nq, ni = len(sub.queries), len(sub.items)
    out = cache_path(fingerprint, sub)
    todo = 1.0
    with contextlib.suppress(DataError, OSError, KeyError):
        store = ScoreStore.open(out)
        if store.is_complete:
            cached = store.to_numpy()
            warning = degenerate_scores(cached, name)
            if warning:
                log.warning(warning)
            warn_if_untrained(cached, name, **sample_evidence(sub.gold, sub.queries, sub.items))
            log.info("%s: the scores of %s on %d queries x %d items are cached (%s): no scoring", spec.name, name,
                     nq, ni, out)
            return {"pairs": 0, "seconds": 0.0, "pairs_per_s": None, "cache": out}
        todo = len(store.missing_chunks()) / max(store.n_chunks, 1)
    pairs = int(round(nq * ni * todo))
    if untrained:
        ce = built
    else:
        with quiet_transformers():
            ce = load_shared(path, max_length)  # the CE the fingerprint was just computed from, if it was: loaded once
    probe = probe_rate(ce, sub.queries, sub.items, n_pairs=PROBE_PAIRS, seed=seed, device=values.get("device", "auto"),
                       relevant=sub.gold)
    rate = probe.rate
    broken = nonfinite_scores(probe.scores, name)
    if broken:  # the kernel would fail on them after scoring everything: refused now, as xenbench score refuses them
        raise ParameterError("model", broken, model, spec.owner)
    warning = degenerate_scores(probe.scores, name) or check_probe(probe, sub.gold, sub.queries, sub.items,
                                                                   name)
    if warning:  # the kernel judges the whole sample again and marks the report's findings
        log.warning(warning)
    if fit:
        # sized at the probe's slowest batch: the range's pessimistic end
        caps = fit_sizes(spec, values, loaded, ds, pairs_per_s=min(probe.rate_range), timeout=timeout or 1200)
        values.update(caps)  # type: ignore[attr-defined]  (preflight's documented contract with fit)
        sample = run_sample(spec, values, ds)
        sub = ds.subset([ds.queries[r].id for r in sample.queries], [ds.items[i].id for i in sample.items])
        nq, ni = len(sub.queries), len(sub.items)
        out, pairs = cache_path(fingerprint, sub), nq * ni
        log.info("%s: --fit chose %s", spec.name, ", ".join(f"{k} {v}" for k, v in caps.items()))
    seconds = pairs / rate
    what = scoring_line(name, nq, ni, pairs, probe)
    if timeout is not None and seconds > timeout:
        _refuse_past_timeout(spec, values, loaded, timeout=timeout, rate=rate, sizes=(nq, ni), what=what,
                             seconds=seconds)
    log.info("%s: %s (once: cached in %s for later runs)", spec.name, what, out)
    return {"pairs": pairs, "seconds": seconds, "seconds_range": probe.seconds(pairs), "pairs_per_s": rate,
            "cache": out}


def check_probe(probe: Any, gold: Mapping[str, Any], queries: Sequence[Any], items: Sequence[Any],
                name: str) -> str | None:
    """The CE check (:func:`xenbench.models.ce_check.check_ce`) on the probe's pairs (``probe``:
    :func:`~xenbench.models.probe.probe_rate` of ``queries`` x ``items``), against ``gold`` (query id -> relevant item
    ids): its warning, or None. Nothing is recorded: the kernel judges the whole sample once scored."""
    from xenbench.models.ce_check import check_ce, sample_evidence

    qs, its = [queries[r] for r in probe.rows], [items[c] for c in probe.cols]
    return check_ce(probe.scores, name, **sample_evidence(gold, qs, its)).warning()


#: Test queries (with a relevant item, when the data has labels) that ``--fit`` keeps per split at least.
FIT_MIN_TEST = 10
#: The share of the cell timeout ``--fit`` sizes the scoring to (the rest: the probe's error, the methods' own time).
FIT_SHARE = 0.6


def fit_sizes(spec: NotebookSpec, values: Mapping[str, Any], loaded: dict[str, Any], dataset: Any, *,
              pairs_per_s: float, timeout: int) -> dict[str, int | None]:
    """``max_queries`` and ``max_items`` for ``xenbench run --fit``: the scoring at ``pairs_per_s`` takes at most
    :data:`FIT_SHARE` of ``timeout``, with the fewest queries that leave :data:`FIT_MIN_TEST` test queries beside the
    anchor and dev ones (every size relation of the notebook holds), as many items as then fit, and, when the whole
    corpus fits, as many more queries (of those with a relevant item) as fit.

    Raises
    ------
    ParameterError
        Naming ``timeout`` (with the time the smallest such sample takes) when even it does not fit.
    """
    cap_q, cap_i = spec.data.get("max_queries", "max_queries"), spec.data.get("max_items", "max_items")
    every = run_sample(spec, {**values, cap_q: None, cap_i: None}, dataset)
    n_q, n_i = int(every.queries.size), int(every.items.size)

    def fits(q: int, i: int | None) -> bool:
        try:
            check_sizes(spec, {**values, cap_q: q, cap_i: i}, _loaded=loaded)
        except ParameterError:
            return False
        return True

    least = _smallest(lambda q: fits(q, None), 1, n_q)  # the notebook's own floor (anchor + dev + 1 test query)
    if least is None:  # not even every query fits the other sizes: that check's own message names them
        check_sizes(spec, {**values, cap_q: None, cap_i: None}, _loaded=loaded)
    q = min(n_q, (least or n_q) - 1 + FIT_MIN_TEST)
    pairs = FIT_SHARE * timeout * pairs_per_s
    i = min(n_i, int(pairs // q))
    if i >= n_i:
        q = min(n_q, max(q, int(pairs // n_i)))
        i = n_i
    elif fits(q, i):  # down to a round size, so that the next run's probe, a little faster or slower, draws the
        # same sample and reads its scores from the cache (153 then 156 items drew two samples: 10 min of scoring each)
        i = max(_round_down(i), _smallest(lambda n: fits(q, n), 1, i) or i)
    if not fits(q, i):
        i_least = _smallest(lambda n: fits(q, n), 1, n_i) or n_i
        seconds = q * i_least / pairs_per_s
        # the timeout that fits it, with the refusals' 25% margin: the next run's probe measures the rate again
        longer = math.ceil(seconds / FIT_SHARE * 1.25)
        raise ParameterError("timeout", f"longer for --fit to find a sample: the least this notebook needs ({cap_q} {q}, "
                                        f"{cap_i} {i_least}) takes about {duration(seconds)} to "
                                        f"score at the {pairs_per_s:.0f} pairs/s measured here, more than "
                                        f"{FIT_SHARE:.0%} of the {timeout} s cell timeout. Raise it "
                                        f"(xenbench run --fit --timeout {longer})", timeout, spec.owner)
    return {cap_q: None if q >= n_q else q, cap_i: None if i >= n_i else i}


#: Round sizes ``--fit`` chooses from, per decade: steps of at most 25%.
_ROUND = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def _round_down(n: int) -> int:
    """The largest round size (:data:`_ROUND` x a power of 10) at most ``n`` (``n`` itself below 10).

    >>> [_round_down(n) for n in (7, 153, 156, 199, 200, 4321)]
    [7, 150, 150, 150, 200, 4000]
    """
    if n < 10:
        return n
    decade = 10 ** (len(str(n)) - 1)
    return int(max(r * decade for r in _ROUND if r * decade <= n))


def _smallest(fits: Any, lo: int, hi: int) -> int | None:
    """The smallest n in [lo, hi] with ``fits(n)`` (``fits`` is monotone: a larger sample fits every size relation a
    smaller one does), or None when even ``hi`` does not fit."""
    if hi < lo or not fits(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def _refuse_past_timeout(spec: NotebookSpec, values: Mapping[str, Any], loaded: dict[str, Any], *, timeout: int,
                         rate: float, sizes: tuple[int, int], what: str, seconds: float) -> None:
    """Refuse an on-demand scoring that would pass the cell timeout, suggesting only samples that pass every other check
    of the notebook (:func:`~xenbench.harness.sizes.check_sizes`): fewer queries, fewer items, both, or a longer
    timeout. A suggestion is sized to 80% of the timeout at the measured ``rate``."""
    cap_q, cap_i = spec.data.get("max_queries", "max_queries"), spec.data.get("max_items", "max_items")
    (nq, ni), budget = sizes, 0.8 * timeout * rate  # pairs that fit

    def fits(**caps: int) -> bool:
        try:
            check_sizes(spec, {**values, **caps}, _loaded=loaded)
        except ParameterError:
            return False
        return True

    q_min = _smallest(lambda q: fits(**{cap_q: q}), 1, nq) or nq
    i_min = _smallest(lambda i: fits(**{cap_i: i}), 1, ni) or ni
    fit_q, fit_i = int(budget / ni), int(budget / nq)
    longer = f"raise the timeout (xenbench run --timeout {math.ceil(seconds * 1.25)})"
    both_i = int(budget / q_min)
    if fit_q >= q_min:
        alternatives = ([f"lower {cap_i} (about {fit_i} fits)"] if fit_i >= i_min else []) + [longer]
        raise ParameterError(cap_q, f"at most about {fit_q} here for the on-demand scoring to fit in the cell timeout: "
                                    f"{what}, past the {timeout} s timeout. Or {', or '.join(alternatives)}",
                             values.get(cap_q), spec.owner)
    if fit_i >= i_min:
        raise ParameterError(cap_i, f"at most about {fit_i} here for the on-demand scoring to fit in the cell timeout "
                                    f"(fewer queries alone cannot: the other sizes need {cap_q} >= {q_min}): {what}, "
                                    f"past the {timeout} s timeout. Or {longer}",
                             values.get(cap_i), spec.owner)
    if both_i >= i_min:
        raise ParameterError(cap_q, f"{q_min} (the least the other sizes allow), with {cap_i} at most about {both_i}, "
                                    f"for the on-demand scoring to fit in the cell timeout: {what}, past the {timeout} s "
                                    f"timeout. Or {longer}", values.get(cap_q), spec.owner)
    least = q_min * i_min / rate
    raise ParameterError("timeout", f"longer for this run's on-demand scoring: {what}; even the smallest sample the "
                                    f"other sizes allow ({cap_q} {q_min}, {cap_i} {i_min}) takes about {duration(least)}. "
                                    f"So {longer}, or lower the sizes that need that many queries and items",
                         timeout, spec.owner)
