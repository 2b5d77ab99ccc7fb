"""The CEs' score matrices of notebook 02: read from their stores (same queries and items, in the same order),
checked, summarized, a function applied to each, and each CE's role ([CLS]-CE or [EMB]-CE) from its manifest.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from xenbench._validation import check_array, check_int, check_seed
from xenbench.errors import DataError, ParameterError
from xenbench.sampling import sample_rows

__all__ = ["available_ces", "ce_layouts", "ce_roles", "ce_stores", "data_line", "is_anncur_layout", "load_matrices",
           "matrix_summary", "per_ce", "store_attrs"]

logger = logging.getLogger("xenbench.studies.rank")


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------
def _check_matrix(M: object, owner: str, name: str = "M") -> np.ndarray:
    return check_array(M, name, owner, expected="a non-empty float array of shape (n_queries, n_items)",
                       finite_expected="finite (no NaN or inf)")


def _check_matrices(matrices: object, owner: str, min_count: int = 1) -> dict[str, np.ndarray]:
    if not isinstance(matrices, Mapping) or len(matrices) < min_count:
        raise ParameterError("matrices", f"a mapping of at least {min_count} CE names to score matrices",
                             type(matrices).__name__, owner)
    return {str(ce): _check_matrix(m, owner, f"matrices[{ce!r}]") for ce, m in matrices.items()}


def load_matrices(
    scores_dir: str | os.PathLike[str],
    ces: Sequence[str],
    *,
    max_queries: int | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Read the score matrix of every CE from ``scores_dir/<ce>`` (a :class:`~xenbench.data.store.ScoreStore`).

    All stores must score the same queries and items in the same order (their ``query_ids`` and
    ``item_ids`` attributes are compared with the first store's), so that the CEs are compared on
    the same pairs.

    Parameters
    ----------
    scores_dir : path
        Folder holding one complete score store per CE.
    ces : sequence of str
        Store names (sub-folders of ``scores_dir``), at least one; the result keeps this order.
    max_queries : int, optional
        Keep a seeded random subsample of this many queries (rows, in their original order), the same
        rows for every CE. None, or a value >= the number of queries: all rows.
    seed : int, default 0
        Seed of the subsample (:func:`xenbench.sampling.sample_rows`, kind ``"queries"``).

    Returns
    -------
    matrices : dict of str to ndarray of shape (n_queries, n_items)
        ``{ce: scores}`` in the stores' dtype (float32).

    Raises
    ------
    DataError
        A store does not score the same queries and items in the same order as the first one (or
        cannot be read, see :meth:`~xenbench.data.store.ScoreStore.open`).
    ParameterError
        Empty or repeated ``ces``, ``max_queries`` < 1, negative ``seed``.
    """
    from xenbench.data.store import ScoreStore  # lazy: xenbench.studies.rank needs no zarr until stores are read

    owner = "load_matrices"
    if isinstance(ces, (str, bytes)) or not isinstance(ces, Sequence) or not ces or len(set(ces)) != len(ces):
        raise ParameterError("ces", "a non-empty sequence of distinct store names", ces, owner)
    check_int(max_queries, "max_queries", 1, None, owner, allow_none=True)
    check_seed(seed, owner)
    stores = {ce: ScoreStore.open(Path(scores_dir) / ce) for ce in ces}
    first = ces[0]
    ids = (stores[first].attrs.get("query_ids"), stores[first].attrs.get("item_ids"))
    for ce, store in stores.items():
        if (store.attrs.get("query_ids"), store.attrs.get("item_ids")) != ids:
            raise DataError(store.path, f"{ce} and {first} do not score the same queries and items in the same order")
    matrices = {ce: store.to_numpy() for ce, store in stores.items()}
    n_all = matrices[first].shape[0]
    if max_queries is not None and max_queries < n_all:
        rows = sample_rows(n_all, max_queries, seed, kind="queries")
        matrices = {ce: m[rows] for ce, m in matrices.items()}
    from xenbench.models.ce_check import warn_if_untrained

    for ce, m in matrices.items():  # a CE whose rankings ignore the query: warned, and the findings marked
        warn_if_untrained(m, ce)
    return matrices


def store_attrs(scores_dir: str | os.PathLike[str], ces: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The manifest (attributes) of every CE's score store ``scores_dir/<ce>``, for :func:`matrix_summary`.

    Parameters
    ----------
    scores_dir : path
        Folder holding one score store per CE.
    ces : sequence of str
        Store names.

    Returns
    -------
    attrs : dict of str to dict
        ``{ce: ScoreStore.open(scores_dir / ce).attrs}``.
    """
    from xenbench.data.store import ScoreStore

    return {ce: ScoreStore.open(Path(scores_dir) / ce).attrs for ce in ces}


def matrix_summary(
    matrices: Mapping[str, np.ndarray], attrs: Mapping[str, Mapping[str, Any]] | None = None
) -> pd.DataFrame:
    """One row per CE: model kind, precision, dtype, shape and score statistics of its matrix.

    Parameters
    ----------
    matrices : mapping of str to ndarray of shape (n_queries, n_items)
        ``{ce: scores}`` (:func:`load_matrices`).
    attrs : mapping of str to mapping, optional
        ``{ce: store attributes}`` (:func:`store_attrs`); gives the "model kind"
        (``attrs["model_config"]["kind"]``) and "precision" columns, None where missing.

    Returns
    -------
    summary : DataFrame
        Index: the CEs. Columns ``model kind``, ``precision``, ``dtype``, ``queries``, ``items``,
        ``mean score``, ``std of scores`` (over all pairs), ``mean per-query std`` (mean over queries
        of the std of the query's scores).
    """
    matrices = _check_matrices(matrices, "matrix_summary")
    attrs = attrs or {}
    return pd.DataFrame({
        ce: {"model kind": attrs.get(ce, {}).get("model_config", {}).get("kind"),
             "precision": attrs.get(ce, {}).get("precision"), "dtype": str(m.dtype),
             "queries": m.shape[0], "items": m.shape[1], "mean score": float(m.mean()),
             "std of scores": float(m.std()), "mean per-query std": float(m.std(axis=1).mean())}
        for ce, m in matrices.items()
    }).T


def per_ce(func: Callable[..., Any], matrices: Mapping[str, np.ndarray], **kwargs: Any) -> dict[str, Any]:
    """Apply ``func(M, **kwargs)`` to every CE's matrix.

    Parameters
    ----------
    func : callable
        E.g. :func:`singular_values`, :func:`score_skew`, :func:`center_rows`.
    matrices : mapping of str to ndarray
        ``{ce: scores}``.
    **kwargs
        Passed to ``func``.

    Returns
    -------
    results : dict
        ``{ce: func(matrices[ce], **kwargs)}``, in the order of ``matrices``.

    Examples
    --------
    >>> from xenbench.studies.rank import singular_values
    >>> per_ce(singular_values, {"a": np.diag([2.0, 1.0])})["a"].tolist()
    [2.0, 1.0]
    """
    from tqdm.auto import tqdm

    # A bar per CE: one SVD of a 1001 x 2964 matrix takes seconds.
    return {ce: func(m, **kwargs) for ce, m in tqdm(matrices.items(), desc=getattr(func, "__name__", "per CE"),
                                                     total=len(matrices), disable=len(matrices) < 2)}


def ce_stores(scores_dir: str | os.PathLike[str]) -> list[str]:
    """Every score store in ``scores_dir`` whose manifest names a CE layout ([CLS]-CE or [EMB]-CE), whatever its folder
    is called: the [CLS]-CE(s) first, then the [EMB]-CEs, each by name. A retriever's store (``de``) is not a CE.

    Examples
    --------
    >>> from xenbench._io import REPO_ROOT
    >>> ce_stores(REPO_ROOT / "data" / "scores" / "noun.cognition")  # its fourth store, de, is the DE's
    ['cls-ce', 'emb-ce', 'emb-ce-marker']
    """
    folder = Path(scores_dir)
    names = sorted(p.name for p in folder.iterdir() if (p / "zarr.json").is_file()) if folder.is_dir() else []
    kinds = {ce: layout["kind"] for ce, layout in ce_layouts(store_attrs(scores_dir, names)).items()}
    return [ce for kind in ("cls", "emb") for ce in names if kinds[ce] == kind]


def available_ces(scores_dir: str | os.PathLike[str], ces: Sequence[str] | None,
                  optional: Sequence[str] = ()) -> list[str]:
    """The stores to compare: ``ces`` (all required), then those of ``optional`` that exist in ``scores_dir``; with
    ``ces`` None, every CE store there (:func:`ce_stores`: any folder names, roles from the manifests).

    Notebook 02 lists the paper-layout [EMB]-CE (``emb-ce-marker``) as optional: it joins the comparison once
    its score store has been computed (``xenbench score models/emb-ce-marker ...``), and is skipped, with a log
    line, before.

    Examples
    --------
    >>> available_ces("/nonexistent", ["a", "b"], ["c"])
    ['a', 'b']
    """
    out = list(ces) if ces is not None else ce_stores(scores_dir)
    for ce in optional:
        if ce in out:
            continue
        if (Path(scores_dir) / ce).is_dir():
            out.append(ce)
        else:
            logger.info("optional store %s is not in %s: compared without it", ce, scores_dir)
    return out


def data_line(scores_dir: str | os.PathLike[str], attrs: Mapping[str, Mapping[str, Any]],
              matrices: Mapping[str, np.ndarray]) -> str:
    """Which CEs and which data a run of notebook 02 compares, in one line for its report: ``"cls-ce ([CLS]-CE,
    models/cls-ce), emb-ce ([EMB]-CE, models/emb-ce) from ../data/scores/noun.cognition: 300 of the 1001 queries x 2964
    items of wordnet-el:noun.cognition"``."""
    first = next(iter(attrs.values()), {})
    n_q, n_i = next(iter(matrices.values())).shape
    total = len(first.get("query_ids") or ()) or n_q
    kinds = {"cls": "[CLS]-CE", "emb": "[EMB]-CE"}
    ces = ", ".join(f"{ce} ({kinds.get(layout['kind'], 'kind unknown')}, {attrs[ce].get('model', '?')})"
                    for ce, layout in ce_layouts(attrs).items())
    queries = f"{n_q} of the {total} queries" if total != n_q else f"{n_q} queries"
    return f"{ces} from {scores_dir}: {queries} x {n_i} items of {first.get('dataset', 'an unnamed dataset')}"


def ce_roles(layouts: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[str]]:
    """Which CE is the [CLS]-CE and which are [EMB]-CEs, read from their layouts (:func:`ce_layouts`), never from
    their order or names.

    Returns
    -------
    (cls_ce, emb_ces)
        The one CE whose model kind is ``"cls"``, and those of kind ``"emb"`` in the given order.

    Raises
    ------
    DataError
        Unless exactly one CE is a [CLS]-CE and at least one an [EMB]-CE (a manifest without the model's kind
        counts as neither).

    Examples
    --------
    >>> ce_roles({"a": {"kind": "emb"}, "b": {"kind": "cls"}, "c": {"kind": "emb"}})
    ('b', ['a', 'c'])
    """
    kinds = {str(ce): (layout or {}).get("kind") for ce, layout in layouts.items()}
    cls = [ce for ce, kind in kinds.items() if kind == "cls"]
    emb = [ce for ce, kind in kinds.items() if kind == "emb"]
    if len(cls) != 1 or not emb:
        raise DataError("ce_roles", f"the score stores' manifests must name exactly one [CLS]-CE and at least one "
                                    f"[EMB]-CE (model_config.kind); found {kinds}")
    return cls[0], emb


def is_anncur_layout(layout: Mapping[str, Any]) -> bool:
    """Whether a :func:`ce_layouts` entry is ANNCUR's own [EMB]-CE (§2.6): marker pooling, raw dot (no scale).

    >>> is_anncur_layout({"kind": "emb", "pooling": "markers", "scale": None})
    True
    """
    return layout.get("kind") == "emb" and layout.get("pooling") == "markers" and layout.get("scale") is None


def ce_layouts(attrs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The scoring layout of every CE, from its store's manifest (:func:`store_attrs`).

    Returns
    -------
    layouts : dict
        ``{ce: {"kind": "cls" | "emb" | None, "pooling": str | None, "scale": float | None}}`` from
        ``attrs[ce]["model_config"]`` (None where the manifest lacks it). An [EMB]-CE with ``pooling="mean"`` and a
        scale is xenbench's mean-pooled cosine variant; ``pooling="markers"`` with no scale is ANNCUR's layout.

    Examples
    --------
    >>> ce_layouts({"e": {"model_config": {"kind": "emb", "pooling": "markers", "scale": None}}, "x": {}})
    {'e': {'kind': 'emb', 'pooling': 'markers', 'scale': None}, 'x': {'kind': None, 'pooling': None, 'scale': None}}
    """
    return {str(ce): {key: (a.get("model_config") or {}).get(key) for key in ("kind", "pooling", "scale")}
            for ce, a in attrs.items()}
