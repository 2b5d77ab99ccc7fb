"""The label currency of notebooks 03, 04, 05 and 07: each method's ranked lists scored against the dataset's graded
relevance, and those lists written out as TREC run files.

A method at a budget B_CE returns a ranked list per test query: the items it scored with the CE, ranked by exact
score (``search(counter, B_CE)``: its top-k for Top-k-Recall is that list's first k). The label measures of
:func:`xenbench.metrics.label_metrics` (nDCG@10, MRR@10, R@100, Success@k; ir-measures underneath) score those
lists against ``Dataset.qrels`` restricted to the kept items.

Protocol, as for Top-k-Recall: a method's setting (ANNCUR's k_i, AXN's λ, PEFA's λ) is chosen on the **dev**
queries, here by :data:`xenbench.studies.protocol.LABEL_CHOICE` (nDCG@10), and every label measure is read on the
**test** queries at that one setting (:func:`choose_by_labels`), so each (run, method, budget) has one list per test
query: the list :func:`export_runs` writes and ir-measures re-scores to the same numbers.

==========================  ==================================================================================
:func:`choose_by_labels`    one method's setting chosen on dev by nDCG@10; its test values of every measure
:func:`label_summary`       per (method, budget, measure): the mean over runs with its interval across runs
:func:`export_runs`         the lists as TREC run files, each with a qrels file of its queries; the table of files
==========================  ==================================================================================
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from xenbench.errors import ParameterError
from xenbench.metrics import LABEL_MEASURES, label_metrics, mean_se

log = logging.getLogger(__name__)

__all__ = ["LABEL_COLUMNS", "choose_by_labels", "export_runs", "label_summary"]

#: Columns of a label record besides the run's and method's keys: those of
#: :class:`xenbench.studies.records.RunRecord` after ``budget`` (``measure`` its cell), then the lists it was scored on.
LABEL_COLUMNS = ["measure", "setting", "value", "value_se", "dev_value", "n_queries", "per_query", "rows",
                 "list_rows", "ranked"]


def choose_by_labels(settings: Sequence[float], dev_ranked: Sequence[np.ndarray],
                     test_ranked: Sequence[np.ndarray | Callable[[], np.ndarray]], *, dev_rows: np.ndarray,
                     test_rows: np.ndarray, grades: Any, measures: Sequence[str] = LABEL_MEASURES,
                     choose_by: str | None = None) -> list[dict[str, Any]]:
    """One method's setting chosen on dev queries by a label measure, and every measure on its test queries.

    Parameters
    ----------
    settings : sequence of float
        The method's settings (NaN for a method without one), in the order ties go to (the first).
    dev_ranked, test_ranked : sequences of int ndarray of shape (n_dev, m), (n_test, m)
        Each setting's ranked lists of the dev and test rows (item columns of ``grades``, best first, ``-1`` pads);
        a test entry may be a zero-argument callable that computes them (called for the chosen setting only).
    dev_rows, test_rows : int ndarray
        Rows of ``grades`` of the dev and test queries.
    grades : sparse matrix of shape (n_queries, n_items)
        :meth:`xenbench.data.datasets.Dataset.grades` of every query row and the kept items.
    measures : sequence of str
        ir-measures names; ``choose_by`` must be among them.
    choose_by : str, optional
        The measure the setting is chosen by; default :data:`xenbench.studies.protocol.LABEL_CHOICE`.

    Returns
    -------
    list of dict
        One per measure with :data:`LABEL_COLUMNS`: ``setting`` (chosen), ``value`` and ``value_se`` (mean and
        standard error over the test queries with a relevant item), ``dev_value`` (the chosen setting's dev mean of
        that measure), ``n_queries``, ``rows`` and ``per_query`` (those queries and their values), ``list_rows`` and
        ``ranked`` (every test row and its list). Empty when no test query has a relevant item among the items.
    """
    from xenbench.studies.protocol import LABEL_CHOICE

    choose_by = LABEL_CHOICE if choose_by is None else choose_by
    measures = list(measures)
    if choose_by not in measures:
        raise ParameterError("choose_by", f"one of the measures {measures}", choose_by, "choose_by_labels")
    if not len(settings) == len(dev_ranked) == len(test_ranked) or not len(settings):
        raise ParameterError("settings", "one dev and one test list per setting, at least one", len(settings),
                             "choose_by_labels")
    dev_rows, test_rows = np.asarray(dev_rows), np.asarray(test_rows)
    dev_grades, test_grades = grades[dev_rows], grades[test_rows]
    dev = [label_metrics(r, dev_grades, measures) if dev_rows.size else dict.fromkeys(measures, np.nan)
           for r in dev_ranked]
    scores = np.array([d[choose_by] for d in dev], dtype=np.float64)
    if np.isfinite(scores).any():
        best = int(np.nanargmax(scores))  # first maximum: ties to the first setting
    else:
        best = 0
        if len(settings) > 1:  # said, not silent: the choice below is not a dev choice
            log.warning("choose_by_labels: no dev query has a relevant kept item, so no setting can be chosen on dev by "
                        "%s; the first of %s is used", choose_by, [float(v) for v in settings])
    ranked = test_ranked[best]() if callable(test_ranked[best]) else test_ranked[best]
    counted, values = label_metrics(ranked, test_grades, measures, per_query=True)
    if not counted.size:
        return []
    out = []
    for m in measures:
        mean, se = mean_se(values[m])
        out.append({"setting": float(settings[best]), "measure": m, "value": mean, "value_se": se,
                    "dev_value": float(dev[best][m]), "n_queries": int(counted.size), "rows": test_rows[counted],
                    "per_query": values[m], "list_rows": test_rows, "ranked": ranked})
    return out


def label_summary(label_runs: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """Test value per (method, budget, measure): mean over runs with its t-interval across runs
    (:func:`xenbench.studies.protocol.summarize`), how often each setting was chosen (value×runs), and the test
    queries each run's value rests on (those with a relevant kept item: ``n_queries`` the fewest of any run,
    ``n_queries_max`` the most). Empty (with those columns) when no run has a labelled test query."""
    from xenbench.studies.protocol import summarize

    by = ["method", "budget", "measure"]
    columns = [*by, "mean", "lo", "hi", "sd_runs", "min", "max", "se_query", "n_runs", "setting", "n_queries",
               "n_queries_max"]
    if not isinstance(label_runs, pd.DataFrame) or label_runs.empty:  # no test query has a relevant kept item
        return pd.DataFrame(columns=columns)
    out = summarize(label_runs, by, value="value", se="value_se", confidence=confidence)
    grouped = label_runs.groupby(by)
    chosen = grouped["setting"].agg(
        lambda s: ", ".join(f"{v:g}×{c}" for v, c in s.dropna().value_counts().sort_index().items()))
    out = out.merge(chosen.rename("setting").reset_index(), on=by, how="left")
    if "n_queries" not in label_runs:  # records of another source, without the counts
        return out
    counts = grouped["n_queries"].agg(n_queries="min", n_queries_max="max").reset_index()
    return out.merge(counts, on=by, how="left")


def _slug(value: Any) -> str:
    text = re.sub(r"[^A-Za-z0-9.+_-]+", "-", str(value)).strip("-")
    return text or "x"


#: How a key column is written in a run file's name (``ANNCUR.B50.split0.seed1.trec``).
_PREFIX = {"budget": "B", "k": "k", "split_seed": "split", "anchor_seed": "seed", "split": "split", "seed": "seed"}


def export_runs(folder: str | os.PathLike[str], lists: pd.DataFrame, dataset: Any, items: Sequence[int] | None = None,
                *, keys: Sequence[str] = ("method", "budget", "split_seed", "anchor_seed"),
                qrels_by: Sequence[str] = ("split_seed",), compress: bool = False,
                relative_to: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Write each (run, method, budget)'s test-query lists as a TREC run file, with a qrels file of the same queries.

    Each pair evaluates as written, with xenbench's numbers: ``ranx.evaluate(qrels, run, metrics)`` with its default
    arguments (it refuses a pair whose query ids differ), ``trec_eval qrels run`` and ir-measures give the label values
    of :func:`choose_by_labels` (``tests/test_exported_runs.py``).

    * **Queries.** A run file and its qrels list the same queries: the listed test queries that have a relevant item
      (grade > 0) among the kept items, exactly those xenbench's label means are over (``n_queries`` of a label
      record). A listed query without one is in neither file: xenbench counts it nowhere, while trec_eval and ranx
      would count a judged query without a relevant item as 0 and ranx refuses a run query missing from the qrels.
      How many were left out is in the returned ``qrels`` table; a list set none of whose queries has a relevant
      kept item writes no run file (and is not in ``files``).
    * **Order.** The score column is ``n − rank + 1`` (:func:`xenbench.data.trec.write_trec_run`): strictly
      decreasing, so trec_eval (score descending; equal scores by doc id, descending), ranx and ir-measures read each
      list in xenbench's order, whatever the ties among the method's own scores.
    * **Text.** Plain text by default; ``compress=True`` gzips every file (``.trec.gz``, ``qrels.<split>.txt.gz``):
      ranx and ir-measures read those, trec_eval does not.

    Parameters
    ----------
    folder : path
        Created if missing (the notebooks pass :func:`xenbench.harness.runs_dir`: ``<results stem>.runs`` beside
        the results file). Files of an earlier run there are replaced when they have the same name.
    lists : DataFrame
        One row per list set, with the columns ``keys``, ``list_rows`` (query rows of ``dataset``) and ``ranked``
        (int array (n, m): item columns, best first, ``-1`` pads); label records (:func:`choose_by_labels`) repeat a
        list once per measure, and each list set is written once.
    dataset : Dataset
        The query and item ids (rows of ``dataset.queries``; columns index ``items``), and the qrels.
    items : sequence of int, optional
        Dataset rows of the item columns (a seeded subsample of the corpus); default all items.
    keys : sequence of str
        Columns naming a list set: the file is ``<key values joined by '.'>.trec`` (``budget`` written ``B<n>``,
        seeds ``split<n>``/``seed<n>``; other values with every character but letters, digits and ``.+_-`` as
        ``-``); its tag (last column) is the same name.
    qrels_by : sequence of str
        The columns of ``keys`` that fix which queries a file lists (the split): the files of one value list the same
        test queries and share one qrels file, ``qrels.<values>.txt``.
    compress : bool, default False
        Gzip the run and qrels files (``.gz`` added to their names).
    relative_to : path, optional
        Paths in the returned table are relative to it (the results file's folder); default ``folder``'s parent.

    Returns
    -------
    dict
        ``folder`` (relative); ``files``: one record per run file with the ``keys``, ``setting`` (when ``lists``
        has it), ``file`` (relative path), ``qrels`` (its qrels file, the judgements on the kept items of exactly its
        queries), ``n_queries`` (queries in both files) and ``depth`` (the longest list); ``qrels``: one record per
        ``qrels_by`` value with ``qrels`` (None when no listed query has a relevant kept item), ``n_listed`` (test
        queries listed) and ``n_judged`` (those with a relevant kept item: the queries written).

    Raises
    ------
    ParameterError
        When ``lists`` lacks a column, two list sets of one ``qrels_by`` value list different queries, a query with a
        relevant kept item has an empty list (a run file cannot hold one: trec_eval would skip the query, ranx refuse
        the pair, xenbench counts it 0), or ``compress`` is not a bool.
    """
    from xenbench.data.trec import write_trec_qrels, write_trec_run

    owner = "export_runs"
    folder = Path(folder)
    base = Path(relative_to) if relative_to is not None else folder.parent
    keys, qrels_by = list(keys), list(qrels_by)
    needed = [*keys, "list_rows", "ranked"]
    if not isinstance(lists, pd.DataFrame) or not set(needed) <= set(lists.columns) or not set(qrels_by) <= set(keys):
        raise ParameterError("lists", f"a DataFrame with columns {needed} (qrels_by among the keys)",
                             sorted(lists.columns) if isinstance(lists, pd.DataFrame) else type(lists).__name__, owner)
    if not isinstance(compress, bool):
        raise ParameterError("compress", "True or False", compress, owner)
    gz = ".gz" if compress else ""
    cols = np.arange(len(dataset.items)) if items is None else np.asarray(items)
    item_ids = [dataset.items[int(i)].id for i in cols]
    kept = set(item_ids)
    folder.mkdir(parents=True, exist_ok=True)

    def name_of(names: Sequence[str], values: Sequence[Any]) -> str:
        return ".".join(f"{_PREFIX.get(k, '')}{_slug(v)}" for k, v in zip(names, values))

    files: list[dict[str, Any]] = []
    groups: dict[str, dict[str, Any]] = {}  # qrels_by name -> its listed queries, judgements and record
    for key, g in lists.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        record = dict(zip(keys, key))
        first = g.iloc[0]
        rows, ranked = np.asarray(first["list_rows"]), np.asarray(first["ranked"])
        listed = {dataset.queries[int(r)].id: [item_ids[j] for j in ranked[n] if j >= 0] for n, r in enumerate(rows)}
        name = name_of(qrels_by, [record[k] for k in qrels_by])
        if name not in groups:
            # the judgements on the kept items of the listed queries that have a relevant one: the queries counted
            judged = {q: {i: grade for i, grade in dataset.qrels.get(q, {}).items() if i in kept} for q in listed}
            qrels = {q: j for q, j in judged.items() if any(grade > 0 for grade in j.values())}
            path = write_trec_qrels(folder / f"qrels.{name}.txt{gz}", qrels) if qrels else None
            groups[name] = {"listed": set(listed), "qrels": qrels,
                            "record": {k: record[k] for k in qrels_by}
                            | {"qrels": path.relative_to(base).as_posix() if path else None,
                               "n_listed": len(listed), "n_judged": len(qrels)}}
        group = groups[name]
        if group["listed"] != set(listed):
            raise ParameterError("lists", f"the same queries in every list set of {dict(zip(qrels_by, key))}",
                                 f"{record} lists other queries", owner)
        run = {q: docs for q, docs in listed.items() if q in group["qrels"]}
        empty = [q for q, docs in run.items() if not docs]
        if empty:
            raise ParameterError("lists", "a non-empty list for every query with a relevant item (a TREC run file "
                                          "cannot hold an empty list)", f"{record}: query {empty[0]!r}", owner)
        if not run:
            continue
        path = write_trec_run(folder / f"{name_of(keys, key)}.trec{gz}", run, tag=name_of(keys, key))
        if "setting" in g.columns:
            record["setting"] = float(first["setting"])
        files.append(record | {"file": path.relative_to(base).as_posix(), "qrels": group["record"]["qrels"],
                               "n_queries": len(run), "depth": max(len(v) for v in run.values())})
    return {"folder": folder.relative_to(base).as_posix(), "files": files,
            "qrels": [g["record"] for g in groups.values()]}
