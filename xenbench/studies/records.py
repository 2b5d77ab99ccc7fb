"""The raw records of a results file, and every summary of it re-derived from them.

A results file (``save_results``) holds summaries (means over runs, intervals, p-values, verdicts) and, where the
notebook saves them, the raw records they rest on: per grid cell (02), per run of a split × seed (03, 04, 05, 06), per
query (03, 04, 05 and 07 once re-run). ``xenbench findings --verify`` re-derives every summary from the records in the
same file with today's code (:func:`rederive`: the same functions the notebook called, so equal to rounding) and
names each summary number that disagrees (source ``"records"``). A summary whose records the file lacks (the
per-query differences behind a paired test, in files written before notebooks saved them) is checked by what its
numbers imply about each other (source ``"summary"``): a t-interval is symmetric about its mean; the paired t-test's
p-value follows from the mean, the interval and the number of queries; Holm's adjustment follows from the family's
p-values and the verdict from the rule. ``xenbench findings --write`` refuses a file with any disagreement.

Per-query records are packed for the JSON by :func:`pack_records`: each run's array as one string of the shortest decimal
that reads back as the same float64 (``repr``), so the file stays small (``json.dumps(indent=2)`` puts each list
element on its own line) and :func:`unpack_records` gives the same values bit for bit.

One record schema for notebooks 03, 04 and 07 (:class:`RunRecord`, :class:`ComparisonRecord`): a run of a method at
a budget is one row of ``runs`` (a cell ``k``: Top-k-Recall@k against the CE's exact top k) or of ``label_runs`` (a
cell ``measure``: a label measure), a paired comparison one row of ``comparisons`` or ``label_comparisons``; each
split's test rows once in ``test_rows``. :func:`migrate_results` rewrites a results file of the older schemas (03's
``test_at_dev_choice``, 04's ``split``/``seed``/``lam``, 07's ``recall``) into it without changing a number
(``xenbench findings --migrate``).

A notebook's function is registered like its witnesses::

    @register("03_adacur_rounds")
    def _adacur(results: Mapping[str, Any]) -> list[Witness]:
        ...  # one Witness per summary number, its re-derived value as "today"
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NotRequired, TypedDict

import numpy as np
import pandas as pd

from xenbench.errors import DataError, ParameterError
from xenbench.studies import notebooks
from xenbench.studies.witnesses import Witness

__all__ = ["RunRecord", "ComparisonRecord", "RUN_FIELDS", "COMPARISON_FIELDS", "as_comparison", "migrate_results",
           "migrate_file",
           "PACKED", "PEFA_ARRAYS", "label_summary_rows",
           "label_comparison_rows", "ordered_row", "pack_records", "pack_runs", "unpack_records", "unpack_array", "pack_groups", "unpack_groups", "has_per_query",
           "register", "registered", "rederive", "refuse_inconsistent", "unwitnessed", "NOT_RECOMPUTED",
           "UNWITNESSED_PROFILES"]

#: Columns of per-query arrays that :func:`pack_records` turns into strings (test query rows and their values).
PACKED = ("rows", "per_query", "de_per_query")
#: Tolerance of a re-derived number: the same arithmetic on the same float64 inputs, up to summation order.
REL, ABS = 1e-9, 1e-12

RecordsFn = Callable[[Mapping[str, Any]], list[Witness]]


# ----------------------------------------------------------------------------------------------
# the one record schema of 03, 04 and 07
# ----------------------------------------------------------------------------------------------
class RunRecord(TypedDict):
    """One run of one method at one budget, on one split's test queries: a row of ``runs`` (cell ``k``) or of
    ``label_runs`` (cell ``measure``) in the results of notebooks 03, 04 and 07.

    A run is (``split_seed``, ``anchor_seed``): a method that makes random draws runs once per anchor seed of a split, a
    method deterministic given the split once, under the first anchor seed (it counts one run per split).
    """

    split_seed: int       #: the seed that drew the split's anchor, dev and test queries (``Split.seed``)
    anchor_seed: int      #: the seed within the split: ANNCUR's anchor items, ADACUR's and AXN's first round, MF-IND's
    #:                       training (``protocol.run_seed(split_seed, anchor_seed)`` seeds every draw of the run)
    method: str           #: the method's label (``studies.methods.REGISTRY``, a first stage's re-rank, yours)
    budget: int           #: B_CE, CE calls per query
    k: NotRequired[int]   #: Top-k-Recall's k (``runs``); exactly one of ``k`` and ``measure``
    measure: NotRequired[str]  #: the ir-measures name of a label measure (``label_runs``)
    setting: float        #: the setting chosen on the split's dev queries: ANNCUR's and ADACUR's k_i, AXN's λ, PEFA's λ
    #:                       (NaN: a method with nothing to choose)
    value: float          #: the mean over the run's test queries: Top-k-Recall@k, or the label measure
    value_se: float       #: its standard error over those queries
    dev_value: NotRequired[float]  #: the same on the dev queries at the chosen setting (absent: 04's Top-k records,
    #:                                whose dev sweep is ``sweep_dev_first_run``)
    n_queries: int        #: test queries the value is the mean of (label records: those with a relevant kept item)
    per_query: NotRequired[str]  #: the per-query values, packed (:func:`pack_records`; in the order of ``test_rows``)
    n_rounds: NotRequired[float]  #: 03 only: ADACUR's rounds R (NaN for single-round methods)


class ComparisonRecord(TypedDict):
    """One pre-declared paired comparison (challenger − baseline) in a cell (``budget``, ``k`` or ``measure``): a row of
    ``comparisons`` or ``label_comparisons`` of notebooks 03, 04 and 07, under the one verdict rule
    (:func:`xenbench.studies.protocol.verdict`)."""

    challenger: str
    baseline: str
    budget: int
    k: NotRequired[int]
    measure: NotRequired[str]
    sanity_check: NotRequired[bool]  #: 04 only: a check of the protocol, not a claim (``studies.axn.SANITY_CHECKS``)
    mean: float           #: the mean per-query difference, each test query's difference pooled over the runs it is in
    se: NotRequired[float]  #: its standard error (04; 03 and 07 keep the interval alone)
    lo: float             #: the t-interval of ``mean`` (over queries)
    hi: float
    p: float              #: the paired t-test's p-value
    p_wilcoxon: float     #: the Wilcoxon signed-rank test's p-value
    n_queries: int        #: queries of the paired test
    n_better: int         #: queries where the challenger is higher
    n_worse: int          #: queries where it is lower
    run_mean: float       #: the mean difference across independent runs, and its t-interval
    run_lo: float
    run_hi: float
    n_runs: int
    p_holm: float         #: ``p`` and ``p_wilcoxon`` Holm-adjusted over the declared family
    p_wilcoxon_holm: float
    verdict: str          #: ``"beats"``, ``"level"`` or ``"loses"``


#: The fields of :class:`RunRecord` and :class:`ComparisonRecord`, in the order a record is written.
RUN_FIELDS: tuple[str, ...] = tuple(RunRecord.__annotations__)
COMPARISON_FIELDS: tuple[str, ...] = tuple(ComparisonRecord.__annotations__)


def as_comparison(test: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`xenbench.studies.protocol.compare_runs`'s numbers under :class:`ComparisonRecord`'s names (``n`` ->
    ``n_queries``, ``n_a_better`` -> ``n_better``, ``n_b_better`` -> ``n_worse``)."""
    names = {"n": "n_queries", "n_a_better": "n_better", "n_b_better": "n_worse"}
    return {names.get(key, key): value for key, value in test.items()}


#: Older names of :class:`RunRecord`'s and :class:`ComparisonRecord`'s fields, per notebook (:func:`migrate_results`).
_OLD_RUN_NAMES = {"split": "split_seed", "seed": "anchor_seed", "lam": "setting", "n_anchor_items": "setting",
                  "recall": "value", "recall_se": "value_se", "dev_recall": "dev_value",
                  "n_test_queries": "n_queries"}
_OLD_COMPARISON_NAMES = {"n": "n_queries", "n_a_better": "n_better", "n_b_better": "n_worse"}
_SCHEMA_NOTEBOOKS = ("03_adacur_rounds", "04_axn_lambda", "07_compare_methods")


def _ordered(record: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``record`` with the schema's fields first, in its order, then any other field as it was."""
    return {**{f: record[f] for f in fields if f in record}, **{k: v for k, v in record.items() if k not in fields}}


def _migrate_run(record: Mapping[str, Any], test_rows: Mapping[str, str] | None) -> dict[str, Any]:
    if record.get("part", "test") != "test":
        raise DataError("runs", f"a test record, got part {record.get('part')!r}: re-run the notebook")
    out = {_OLD_RUN_NAMES.get(k, k): v for k, v in record.items() if k != "part"}
    if "setting" in out and isinstance(out["setting"], int):
        out["setting"] = float(out["setting"])  # k_i as the float every setting is (NaN where none)
    if "n_queries" not in out and "per_query" in out:  # 07 kept the count in its rows only
        out["n_queries"] = len(str(out["per_query"]).split())
    elif "n_queries" not in out and test_rows and str(out.get("split_seed")) in test_rows:
        out["n_queries"] = len(test_rows[str(out["split_seed"])].split())
    return _ordered(out, RUN_FIELDS)


def migrate_results(doc: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """A results document of notebook 03, 04 or 07 in the one record schema, and whether anything changed.

    Renames only, no number changes: 03's ``test_at_dev_choice`` becomes ``runs`` (its ``part``, always ``"test"``,
    dropped; ``n_anchor_items`` the ``setting``), 04's ``split``/``seed``/``lam`` become ``split_seed``/``anchor_seed``/
    ``setting``, every ``recall``/``recall_se``/``dev_recall``/``n_test_queries`` of a run record ``value``/
    ``value_se``/``dev_value``/``n_queries`` (07's records gain ``n_queries``, the length of their packed
    ``per_query``; 04's dev sweep ``sweep_dev_first_run`` names its run as the records do), and 04's comparisons' ``n``/``n_a_better``/``n_b_better`` ``n_queries``/``n_better``/``n_worse``.
    The results' digest (:func:`xenbench.provenance.results_digest`) is bound again to the same commit, after
    checking that the old one held: a file edited since its run is refused, not blessed. Idempotent: a document
    already in the schema (or of another notebook) comes back unchanged, with ``False``.

    Raises
    ------
    DataError
        If the document's results digest does not hold before the migration.
    """
    import json

    from xenbench.provenance import RESULTS_DIGEST, check_results_digest, results_digest

    out = json.loads(json.dumps(doc, allow_nan=True))
    if out.get("notebook") not in _SCHEMA_NOTEBOOKS:
        return out, False
    results = out["results"]
    before = json.dumps(results, allow_nan=True)
    had_digest = RESULTS_DIGEST in (out.get("provenance") or {})
    if had_digest:
        bad = [what for what, recorded, today in check_results_digest(doc) if recorded != today]
        if bad:
            raise DataError(out["notebook"], "refused to migrate: its results digest does not hold ("
                            + "; ".join(bad[:3]) + "): the file was edited since its run")
    if "test_at_dev_choice" in results and "runs" not in results:
        results = {("runs" if k == "test_at_dev_choice" else k): v for k, v in results.items()}
    for name in ("runs", "label_runs"):
        if isinstance(results.get(name), list):
            results[name] = [_migrate_run(r, results.get("test_rows")) for r in results[name]]
    if out["notebook"] == "04_axn_lambda" and isinstance(results.get("sweep_dev_first_run"), list):
        results["sweep_dev_first_run"] = [{_OLD_RUN_NAMES.get(k, k) if k in ("split", "seed") else k: v
                                           for k, v in r.items()} for r in results["sweep_dev_first_run"]]
    for name in ("comparisons", "label_comparisons"):
        if isinstance(results.get(name), list):
            results[name] = [_ordered({_OLD_COMPARISON_NAMES.get(k, k): v for k, v in r.items()}, COMPARISON_FIELDS)
                             for r in results[name]]
    changed = json.dumps(results, allow_nan=True) != before
    out["results"] = results
    if changed and had_digest:
        out["provenance"][RESULTS_DIGEST] = results_digest(out)
    return out, changed


def migrate_file(path: Any) -> bool:
    """:func:`migrate_results` of the results file at ``path``, written back (atomically, as ``save_results`` writes
    it) when anything changed; whether it did."""
    import json
    from pathlib import Path

    from xenbench._io import read_json_bounded, write_text_atomic

    path = Path(path)
    doc = read_json_bounded(path, 256 << 20, "a results file")
    if not isinstance(doc, Mapping):
        raise DataError(path, "a results file (a JSON object)")
    try:
        out, changed = migrate_results(doc)
    except DataError as err:
        raise DataError(path, err.problem) from None
    if changed:
        write_text_atomic(path, json.dumps(out, indent=2, allow_nan=True) + "\n")
    return changed


# ----------------------------------------------------------------------------------------------
# packing
# ----------------------------------------------------------------------------------------------
def _pack_array(values: Any) -> str:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ParameterError("values", "a 1-d array per record", f"shape {arr.shape}", "records.pack")
    if np.issubdtype(arr.dtype, np.integer):
        return " ".join(str(int(v)) for v in arr)
    return " ".join(repr(float(v)) for v in arr.astype(np.float64))


def pack_records(df: pd.DataFrame, columns: Sequence[str] = PACKED) -> list[dict[str, Any]]:
    """``df.to_dict("records")`` with each array of ``columns`` (those present) as one string (module docstring).

    >>> pack_records(pd.DataFrame({"run": [0], "per_query": [np.array([0.1, 1.0])], "rows": [np.array([3, 7])]}))
    [{'run': 0, 'per_query': '0.1 1.0', 'rows': '3 7'}]
    """
    if not isinstance(df, pd.DataFrame):
        raise ParameterError("df", "a DataFrame", type(df).__name__, "records.pack")
    out = df.copy()
    for col in [c for c in columns if c in out.columns]:
        out[col] = [_pack_array(v) for v in out[col]]
    return out.to_dict(orient="records")


def pack_runs(runs: pd.DataFrame, split: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Per-run records with their per-query values packed, and each split's test rows once.

    Every run of a split is scored on the same test rows (in the same order), so the rows are saved once per split
    (``{str(split value): packed rows}``, the results' ``test_rows``) instead of once per run.

    Raises
    ------
    ParameterError
        If two runs of one split hold different rows (then pack them per run with :func:`pack_records`).
    """
    if not isinstance(runs, pd.DataFrame) or not {split, "rows", "per_query"} <= set(runs.columns):
        raise ParameterError("runs", f"a DataFrame with columns {split!r}, 'rows' and 'per_query'",
                             type(runs).__name__ if not isinstance(runs, pd.DataFrame) else sorted(runs.columns),
                             "records.pack_runs")
    rows: dict[str, str] = {}
    for value, r in zip(runs[split], runs["rows"]):
        packed = _pack_array(np.asarray(r, dtype=np.int64))
        if rows.setdefault(str(int(value)), packed) != packed:
            raise ParameterError("runs", f"the same test rows in every run of a {split}", f"{split} {value} differs",
                                 "records.pack_runs")
    return pack_records(runs.drop(columns=["rows"])), rows


def unpack_array(text: str, dtype: Any = np.float64) -> np.ndarray:
    """The array :func:`pack_records` wrote as ``text``."""
    return np.array(text.split(), dtype=dtype) if text else np.zeros(0, dtype=dtype)


def unpack_records(records: Iterable[Mapping[str, Any]], columns: Sequence[str] = PACKED) -> pd.DataFrame:
    """Records written by :func:`pack_records` as a DataFrame with arrays again (``rows`` as int64, the others float64)."""
    df = pd.DataFrame(list(records))
    for col in [c for c in columns if c in df.columns]:
        df[col] = [unpack_array(str(v), np.int64 if col == "rows" else np.float64) for v in df[col]]
    return df


def pack_groups(per_query: pd.DataFrame, by: Sequence[str], arrays: Mapping[str, str]) -> list[dict[str, Any]]:
    """A long per-query table (one row per query and setting) as one record per group ``by``, each column of
    ``arrays`` (column -> record key) packed as in :func:`pack_records` (booleans as 0/1), in the table's order.

    >>> df = pd.DataFrame({"k": [1, 1], "row": [4, 9], "recall": [0.0, 1.0]})
    >>> pack_groups(df, ["k"], {"row": "rows", "recall": "per_query"})
    [{'k': 1, 'rows': '4 9', 'per_query': '0.0 1.0'}]
    """
    out = []
    for key, g in per_query.groupby(list(by), sort=False):
        rec = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        rec = {k: v.item() if isinstance(v, np.generic) else v for k, v in rec.items()}
        for col, name in arrays.items():
            values = g[col].to_numpy()
            rec[name] = _pack_array(values.astype(np.int64) if values.dtype == bool else values)
        out.append(rec)
    return out


def unpack_groups(records: Iterable[Mapping[str, Any]], arrays: Mapping[str, str]) -> pd.DataFrame:
    """The long table :func:`pack_groups` packed (``row`` and boolean columns as written: ints; ``seen`` as bool)."""
    frames = []
    for rec in records:
        cols = {col: unpack_array(str(rec[name]), np.int64 if col in ("row", "seen") else np.float64)
                for col, name in arrays.items()}
        if "seen" in cols:
            cols["seen"] = cols["seen"].astype(bool)
        meta = {k: v for k, v in rec.items() if k not in arrays.values()}
        frames.append(pd.DataFrame(cols).assign(**meta))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


#: 05's per-query columns (:func:`xenbench.studies.pefa.evaluate_per_query`) and their keys in a packed record.
PEFA_ARRAYS = {"row": "rows", "seen": "seen", "recall": "per_query", "de_recall": "de_per_query"}


def has_per_query(records: Any) -> bool:
    """Whether saved records carry their per-query arrays (files written before notebooks saved them do not)."""
    return bool(records) and isinstance(records, list) and isinstance(records[0], Mapping) and "per_query" in records[0]


# ----------------------------------------------------------------------------------------------
# registry
# ----------------------------------------------------------------------------------------------
#: Decorator: ``@register(notebook)`` on ``fn(results) -> list[Witness]``, which re-derives the summaries of
#: ``notebook``'s results (its row's ``records`` in :data:`xenbench.studies.notebooks.NOTEBOOKS`).
register = partial(notebooks.register, "records")
#: Notebook name -> its re-derivation (:func:`xenbench.studies.notebooks.registered`).
registered = partial(notebooks.registered, "records")


def rederive(doc: Mapping[str, Any]) -> list[Witness]:
    """Every summary of one results document re-derived from its records (or, without them, from its own row)."""
    fn = registered().get(doc["notebook"])
    if fn is None:
        return []
    return [replace(w, profile=str(doc.get("profile", "full"))) for w in fn(doc["results"])]


def refuse_inconsistent(path: Any, doc: Mapping[str, Any]) -> None:
    """Raise :class:`DataError` naming ``path`` and every summary of ``doc`` that disagrees with its records."""
    try:
        bad = [w for w in rederive(doc) if not w.ok]
    except (KeyError, TypeError, IndexError, ValueError, AttributeError, ZeroDivisionError) as err:
        raise DataError(path, f"its summaries cannot be re-derived from its records ({type(err).__name__}: "
                              f"{str(err)[:200]}); re-run the notebook") from None
    if bad:
        raise DataError(path, "refused: summaries inconsistent with their own records: "
                        + "; ".join(w.line() for w in bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else ""))


# ----------------------------------------------------------------------------------------------
# shared checks
# ----------------------------------------------------------------------------------------------
def _w(nb: str, cell: str, committed: Any, today: Any, source: str = "records", rel: float = REL,
       abs_: float = ABS) -> Witness:
    if isinstance(committed, str) or isinstance(today, str):
        return Witness(nb, cell, str(committed), str(today), source=source)
    return Witness(nb, cell, float(committed), float(today), rel_tol=rel, abs_tol=abs_, source=source)


def _frame_rows(nb: str, what: str, saved: pd.DataFrame, today: pd.DataFrame, keys: Sequence[str],
                values: Sequence[str], source: str = "records") -> list[Witness]:
    """Witnesses of ``values`` of every saved row against the row of ``today`` with the same ``keys``; a saved row
    with no counterpart today (or the reverse) is a witness of its count."""
    keys = list(keys)
    s = saved.set_index(keys)
    t = today.set_index(keys)
    out = [_w(nb, f"{what}: number of rows", len(s), len(t), source)]
    for key, row in s.iterrows():
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, key if isinstance(key, tuple) else (key,)))
        if key not in t.index:
            out.append(_w(nb, f"{what} [{label}]: row", "present", "absent", source))
            continue
        other = t.loc[key]
        if isinstance(other, pd.DataFrame):  # duplicated keys: compare the first
            other = other.iloc[0]
        for v in values:
            if v in row.index and v in other.index:
                out.append(_w(nb, f"{what} [{label}] {v}", row[v], other[v], source))
    return out


def label_summary_rows(nb: str, results: Mapping[str, Any], today: Callable[[pd.DataFrame], pd.DataFrame]
                       ) -> list[Witness]:
    """``label_summary`` re-derived from the per-run label values (``label_runs``) by ``today`` (the function the
    notebook called); nothing for results saved before the notebook scored its lists against the labels."""
    saved, runs = pd.DataFrame(results.get("label_summary") or []), pd.DataFrame(results.get("label_runs") or [])
    if saved.empty or runs.empty:
        return []
    return _frame_rows(nb, "label_summary", saved, today(runs), ["method", "budget", "measure"],
                       ["mean", "lo", "hi", "n_runs", "setting", "n_queries", "n_queries_max"])


def label_comparison_rows(nb: str, results: Mapping[str, Any], *, se: str | None = None) -> list[Witness]:
    """What each saved label comparison's numbers (``label_comparisons``: mean, interval, p over queries, on a label
    measure such as Success@1) imply about each other, until the notebook keeps the per-query label values they come
    from: the mean inside its interval (:func:`ordered_row`), :func:`t_row` (the interval symmetric about the mean, the
    p-value from mean, interval and ``n``) and :func:`count_row`. The claims table's downstream row renders these
    numbers, so an edit of its mean (alone, or with lo and hi) is named. Source ``"summary"``."""
    out = []
    for _, r in pd.DataFrame(results.get("label_comparisons") or []).iterrows():
        label = f"label_comparisons [{_label(r)}, measure={r['measure']}]"
        out.append(ordered_row(nb, label, r))
        out += t_row(nb, label, r, int(r["n_queries"]), se=se if se in r.index else None)
        out.append(count_row(nb, label, [("n_better", int(r["n_better"])), ("n_worse", int(r["n_worse"]))],
                             ("n_queries", int(r["n_queries"]))))
    return out


def ordered_row(nb: str, what: str, row: Mapping[str, Any], *, mean: str = "mean", lo: str = "lo",
                hi: str = "hi") -> Witness:
    """``lo ≤ mean ≤ hi`` of one saved interval (a witness of the mean, "inside" its interval or not); NaN bounds
    (one run) pass. Source ``"summary"``."""
    m, a, b = float(row[mean]), float(row[lo]), float(row[hi])
    inside = not (math.isfinite(a) and math.isfinite(b)) or a <= m <= b
    return _w(nb, f"{what} {lo} ≤ {mean} ≤ {hi} ({a:.6g} ≤ {m:.6g} ≤ {b:.6g})",
              "inside" if inside else "outside", "inside", "summary")


def t_row(nb: str, what: str, row: Mapping[str, Any], n: int, *, mean: str = "mean", lo: str = "lo", hi: str = "hi",
          p: str | None = "p", se: str | None = None, confidence: float = 0.95) -> list[Witness]:
    """What a paired t-test's saved numbers imply about each other (:func:`xenbench.studies.protocol.paired_test`):
    the interval symmetric about the mean, the standard error it implies (``se`` if saved) and the two-sided
    p-value from ``mean / se`` with ``n − 1`` degrees of freedom. Source ``"summary"``."""
    from scipy import stats

    m, a, b = float(row[mean]), float(row[lo]), float(row[hi])
    out = [_w(nb, f"{what} {mean} (midpoint of [{lo}, {hi}])", m, (a + b) / 2, "summary", rel=1e-9, abs_=1e-12)]
    if n < 2 or not (math.isfinite(a) and math.isfinite(b)):
        return out
    if b == a:  # every difference equal: the test's p is 1 at 0, else 0
        if p is not None:
            out.append(_w(nb, f"{what} {p} (all differences equal)", float(row[p]), 1.0 if m == 0 else 0.0, "summary"))
        return out
    implied_se = (b - a) / (2 * float(stats.t.ppf(0.5 + confidence / 2, n - 1)))
    if se is not None and se in row:
        out.append(_w(nb, f"{what} {se}", row[se], implied_se, "summary", rel=1e-6, abs_=1e-12))
    if p is not None:
        t_stat = abs(m) / implied_se
        implied = 2 * float(stats.t.sf(t_stat, n - 1))
        saved = float(row[p])
        if saved == 0.0 or implied == 0.0:  # below the smallest float: both must underflow
            out.append(_w(nb, f"{what} {p}", saved, implied, "summary", rel=0.0, abs_=1e-300))
        else:  # p-values span hundreds of decades: compare their logarithms
            out.append(_w(nb, f"{what} {p} (as -log10)", -math.log10(saved), -math.log10(implied), "summary",
                          rel=1e-6, abs_=1e-6))
    return out


def count_row(nb: str, what: str, parts: Sequence[tuple[str, int]], whole: tuple[str, int]) -> Witness:
    """A count bound: the ``parts`` (queries better, queries worse) add up to at most ``whole`` (the queries)."""
    total = int(sum(v for _, v in parts))
    names = " + ".join(n for n, _ in parts)
    return _w(nb, f"{what} {names} (at most {whole[0]} = {whole[1]})", total, min(total, int(whole[1])), "summary")


def family(nb: str, what: str, saved: pd.DataFrame, today: pd.DataFrame, *, source: str,
           p_columns: Sequence[str] = ("p", "p_wilcoxon")) -> list[Witness]:
    """Holm-adjusted p-values and verdicts of a saved family against those of ``today`` (same rows, same order):
    :func:`xenbench.studies.protocol.decide` over the family's p-values and intervals across runs."""
    out = []
    for i in range(len(saved)):
        s, t = saved.iloc[i], today.iloc[i]
        label = f"{what} [{_label(s)}]"
        for c in [f"{c}_holm" for c in p_columns]:
            if c in s.index and c in t.index:
                out.append(_w(nb, f"{label} {c}", s[c], t[c], source, rel=1e-9, abs_=1e-300))
        if "verdict" in s.index:
            out.append(_w(nb, f"{label} verdict", s["verdict"], t["verdict"], source))
    return out


_LABEL_KEYS = ("challenger", "baseline", "split", "method", "budget", "k", "subset")


def _label(row: pd.Series) -> str:
    return ", ".join(f"{k}={row[k]}" for k in _LABEL_KEYS if k in row.index)


def run_intervals(nb: str, what: str, comparisons: pd.DataFrame, per_run: pd.DataFrame, *, split: str = "split_seed",
                  seed: str | None = "anchor_seed", deterministic: Iterable[str] = ()) -> list[Witness]:
    """``run_mean``, ``run_lo``, ``run_hi``, ``n_runs`` of every comparison re-derived from the per-run recalls
    (:func:`xenbench.studies.protocol.run_interval`; a deterministic method counts the first seed's run per split)."""
    from xenbench.studies.protocol import run_interval

    if seed is not None:
        first = per_run.groupby(split)[seed].transform("min")
        per_run = per_run[~per_run["method"].isin(list(deterministic)) | (per_run[seed] == first)]
    out = []
    for _, r in comparisons.iterrows():
        cell = per_run[(per_run["budget"] == r["budget"]) & (per_run["k"] == r["k"])]
        today = run_interval(cell[cell["method"] == r["challenger"]], cell[cell["method"] == r["baseline"]],
                             split=split, seed=seed, value="value")
        for key in ("run_mean", "run_lo", "run_hi", "n_runs"):
            if key in r.index:
                out.append(_w(nb, f"{what} [{_label(r)}] {key}", r[key], today[key]))
    return out


def paired_rows(nb: str, what: str, comparisons: pd.DataFrame, *, n: str = "n_queries", better: str = "n_better",
                worse: str = "n_worse", se: str | None = None) -> list[Witness]:
    """:func:`t_row` and :func:`count_row` of every saved paired comparison (a file without its per-query records)."""
    out = []
    for _, r in comparisons.iterrows():
        label = f"{what} [{_label(r)}]"
        out += t_row(nb, label, r, int(r[n]), se=se)
        out.append(count_row(nb, label, [(better, int(r[better])), (worse, int(r[worse]))], (n, int(r[n]))))
    return out


def per_run_values(nb: str, what: str, runs: pd.DataFrame, keys: Sequence[str]) -> list[Witness]:
    """Each run's ``value``, ``value_se`` and ``n_queries`` re-derived from its per-query values (mean, its standard
    error, their number)."""
    from xenbench.metrics import mean_se

    out = []
    for _, r in runs.iterrows():
        label = f"{what} [" + ", ".join(f"{k}={r[k]}" for k in keys if k in r.index) + "]"
        mean, se = mean_se(np.asarray(r["per_query"], dtype=np.float64))
        out.append(_w(nb, f"{label} value", r["value"], mean))
        if "value_se" in r.index:
            out.append(_w(nb, f"{label} value_se", r["value_se"], se))
        if "n_queries" in r.index:
            out.append(_w(nb, f"{label} n_queries", r["n_queries"], len(r["per_query"])))
    return out


def _summary_rows(nb: str, what: str, saved: pd.DataFrame, today: pd.DataFrame, keys: Sequence[str]) -> list[Witness]:
    values = [c for c in ("mean", "lo", "hi", "sd_runs", "min", "max", "se_query", "n_runs", "k_i chosen (value×runs)")
              if c in saved.columns and c in today.columns]
    return _frame_rows(nb, what, saved, today, keys, values)


# ----------------------------------------------------------------------------------------------
# what no re-derivation covers yet (written into the report by the notebook's re-run)
# ----------------------------------------------------------------------------------------------
#: What each notebook's store witnesses (xenbench.studies.witnesses) do not recompute: its raw records checked only by
#: the summaries re-derived from them. Each is a cost decision, stated where ``findings --verify`` reports it.
NOT_RECOMPUTED: dict[str, str] = {
    "01_score_matrices": "agreement's maximum over all its pairs (a few pairs are re-scored), throughput (timing)",
    "03_adacur_rounds": ("runs other than the first split and anchor seed and one run drawn at each verify "
                         "(witnesses.extra_runs), recall_vs_rounds, latency_vs_rounds (timing)"),
    "04_axn_lambda": "runs other than the first split and seed, every MF-IND run",
    "05_pefa_lambda": "split seeds after the first",
    "06_ccsa_balance": "seeds after the first, λ other than 0 and 1, by_batch, paper_objective, binary, collapse",
    "07_compare_methods": "every method but ANNCUR (at B_CE = 50) and DE re-rank",
}
#: Profiles whose raw records no store witness recomputes (06's large and regime runs: the DE embeddings of the whole
#: corpus and a model per λ on 95,840 items).
UNWITNESSED_PROFILES = ("large", "regime")


def unwitnessed(doc: Mapping[str, Any]) -> list[str]:
    """What of a results document is neither recomputed from the stores nor re-derived from records in the file:
    summaries checked only by their own arithmetic until a re-run saves their records, and raw records no witness
    recomputes (:data:`NOT_RECOMPUTED`, :data:`UNWITNESSED_PROFILES`)."""
    results, nb = doc["results"], doc["notebook"]
    out = []
    if nb == "03_adacur_rounds" and not has_per_query(results.get("runs")):
        out.append("comparisons' per-query mean, interval, t and Wilcoxon p-values, better/worse counts "
                   "(runs lack per_query: re-run 03)")
    if nb == "04_axn_lambda" and not has_per_query(results.get("runs")):
        out.append("comparisons' per-query mean, interval, t and Wilcoxon p-values, better/worse counts (runs lack "
                   "per_query: re-run 04)")
    if nb == "05_pefa_lambda" and not results.get("per_query"):
        out.append("gains' per-seed values and the comparisons' per-query statistics (no per_query records: re-run 05)")
    if nb == "07_compare_methods" and not has_per_query(results.get("runs")):
        out.append("summary, best and comparisons beyond their own arithmetic (no per-run records: re-run 07)")
    if doc.get("profile") in UNWITNESSED_PROFILES:
        out.append(f"every raw record of the {doc.get('profile')} run (no store witnesses for this profile)")
    elif nb in NOT_RECOMPUTED:
        out.append(f"not recomputed from the inputs: {NOT_RECOMPUTED[nb]}")
    return out


# ----------------------------------------------------------------------------------------------
# 00, 01: dataset statistics and score summaries (their records are the stores: see witnesses)
# ----------------------------------------------------------------------------------------------
@register("00_data")
def _data(results: Mapping[str, Any]) -> list[Witness]:
    """``baselines_mean``: the mean accuracy of each retriever over the datasets, from ``baselines``."""
    nb = "00_data"
    acc = pd.DataFrame(results["baselines"])
    means = acc.groupby(["retriever", "k"])["accuracy"].mean()
    out = []
    for retriever, row in (results.get("baselines_mean") or {}).items():
        for key, value in row.items():
            k = int(str(key).split("@")[1])
            out.append(_w(nb, f"baselines_mean {retriever} {key}", value, means.get((retriever, k), float("nan"))))
    return out


@register("01_score_matrices")
def _scores(results: Mapping[str, Any]) -> list[Witness]:
    """``agreement``: each row's pairs and maximum are non-negative and the maximum is a maximum (no pair, no
    difference)."""
    nb = "01_score_matrices"
    out = []
    for a in results.get("agreement") or []:
        out.append(_w(nb, f"agreement {a['fresh']} vs {a['store']} max_abs_diff (0 without pairs)",
                      a["max_abs_diff"], a["max_abs_diff"] if a["n_pairs"] > 0 else 0.0, "summary"))
    return out


# ----------------------------------------------------------------------------------------------
# 02: the spikes, orderings and win counts from the grid and the ranks
# ----------------------------------------------------------------------------------------------
@register("02_rank_cls_vs_emb")
def _rank(results: Mapping[str, Any]) -> list[Witness]:
    """``diagonal_spikes`` (:func:`xenbench.studies.rank.diagonal_spikes` of ``grid``), ``orderings``
    (:func:`~xenbench.studies.rank.rank_orderings` of ``ranks``) and ``emb_better_offdiagonal``
    (:func:`~xenbench.studies.rank.emb_wins` of ``grid``)."""
    from xenbench.studies.rank import ce_roles, diagonal_spikes, emb_wins, rank_orderings

    nb = "02_rank_cls_vs_emb"
    grid = pd.DataFrame(results["grid"])
    saved = pd.DataFrame(results["diagonal_spikes"])
    values = tuple(dict.fromkeys(saved["value"]))
    today = diagonal_spikes(grid, values)
    out = _frame_rows(nb, "diagonal_spikes", saved, today, ["ce", "pinv", "value", "k_q"],
                      ["diagonal", "below", "above", "ratio"])
    ranks = pd.DataFrame.from_dict(results["ranks"], orient="index")
    rules = list(results.get("orderings") or {})
    if rules:
        orderings = rank_orderings(ranks.loc[list(results.get("ces") or ranks.index)], tuple(rules))
        for rule, row in results["orderings"].items():
            for key, value in row.items():
                out.append(_w(nb, f"orderings [{rule}] {key}", value, orderings.loc[rule, key]))
    cls_ce, emb_ces = ce_roles(results["layouts"])
    for emb_ce, saved_wins in (results.get("emb_better_offdiagonal") or {}).items():
        wins = emb_wins(grid, cls_ce, emb_ce, pinv="cutoff")
        for key, value in saved_wins.items():
            out.append(_w(nb, f"emb_better_offdiagonal {emb_ce} {key}", value, wins[key]))
    shape = results.get("shape")
    if shape:
        out.append(_w(nb, "shape: rows (queries) of the grid's matrices at least n_test + largest k_q",
                      float(shape[0] >= int(results["params"]["n_test"]) + int(grid["k_q"].max())), 1.0, "summary"))
    return out


# ----------------------------------------------------------------------------------------------
# 03: ADACUR's protocol: per-run test recalls -> summary, spread, run intervals; per query -> paired tests
# ----------------------------------------------------------------------------------------------
def _per_run_03(results: Mapping[str, Any]) -> pd.DataFrame:
    per_run = results["runs"]
    return unpack_records(per_run) if has_per_query(per_run) else pd.DataFrame(per_run)


def _rows_of_splits(results: Mapping[str, Any], df: pd.DataFrame, split: str) -> pd.DataFrame:
    """Attach each run's test rows from ``test_rows`` ({split: packed rows}) when the records keep them per split."""
    rows = results.get("test_rows")
    if rows and "rows" not in df.columns:
        df = df.assign(rows=[unpack_array(rows[str(int(s))], np.int64) for s in df[split]])
    return df


@register("03_adacur_rounds")
def _adacur(results: Mapping[str, Any]) -> list[Witness]:
    """From the per-run test recalls (``runs``): ``summary``, ``seed_spread`` and each comparison's
    interval across runs; from the per-query records, when saved, each run's recall and every paired test; without
    them, each paired test's own arithmetic; the Holm adjustment and the verdicts over the family."""
    from xenbench.studies.protocol import decide
    from xenbench.studies.adacur import COMPARABLE, adacur_paired_comparisons, adacur_protocol_summary, seed_spread
    from xenbench.studies.labels import label_summary

    nb = "03_adacur_rounds"
    per_run = _per_run_03(results)
    out = _summary_rows(nb, "summary", pd.DataFrame(results["summary"]), adacur_protocol_summary(per_run),
                        ["method", "budget", "k"])
    out += label_summary_rows(nb, results, label_summary)
    out += _frame_rows(nb, "seed_spread", pd.DataFrame(results["seed_spread"]), seed_spread(per_run),
                       ["method", "budget", "k", "split_seed"], ["min", "max", "mean"])
    comp = pd.DataFrame(results["comparisons"])
    deterministic = [m.label for m in COMPARABLE.values() if m.deterministic]
    if has_per_query(results["runs"]):
        per_run = _rows_of_splits(results, per_run, "split_seed")
        out += per_run_values(nb, "runs", per_run, ["split_seed", "anchor_seed", "method", "budget", "k"])
        pairs = list(dict.fromkeys(zip(comp["challenger"], comp["baseline"])))
        today = adacur_paired_comparisons(per_run, pairs=pairs,
                                          alpha=float((results.get("protocol") or {}).get("alpha", 0.05)))
        out += _frame_rows(nb, "comparisons", comp, today, ["challenger", "baseline", "budget", "k"],
                           ["mean", "lo", "hi", "p", "p_wilcoxon", "n_queries", "n_better", "n_worse", "run_mean",
                            "run_lo", "run_hi", "n_runs", "p_holm", "p_wilcoxon_holm", "verdict"])
        return out
    out += run_intervals(nb, "comparisons", comp, per_run, deterministic=deterministic)
    out += paired_rows(nb, "comparisons", comp)
    alpha = float((results.get("protocol") or {}).get("alpha", 0.05))
    out += family(nb, "comparisons", comp, decide(comp.drop(columns=["p_holm", "p_wilcoxon_holm", "verdict"],
                                                            errors="ignore"), alpha=alpha), source="summary")
    return out


# ----------------------------------------------------------------------------------------------
# 04: AXN's protocol
# ----------------------------------------------------------------------------------------------
def _label_family_04(nb: str, results: Mapping[str, Any]) -> list[Witness]:
    """04's ``label_comparisons`` (the claims table's downstream row): each row's own arithmetic
    (:func:`label_comparison_rows`), its interval across runs re-derived from ``label_runs`` and the Holm adjustment
    and verdict over the family (as :func:`xenbench.studies.findings.axn.label_family` decides it for the findings)."""
    from xenbench.studies.protocol import run_interval

    comp = pd.DataFrame(results.get("label_comparisons") or [])
    runs = pd.DataFrame(results.get("label_runs") or [])
    if comp.empty or runs.empty:
        return []
    out = label_comparison_rows(nb, results, se="se")
    for _, r in comp.iterrows():
        cell = runs[(runs["budget"] == r["budget"]) & (runs["measure"] == r["measure"])]
        today = run_interval(cell[cell["method"] == r["challenger"]], cell[cell["method"] == r["baseline"]],
                             split="split_seed", seed="anchor_seed", value="value")
        for key in ("run_mean", "run_lo", "run_hi", "n_runs"):
            if key in r.index:
                out.append(_w(nb, f"label_comparisons [{_label(r)}, measure={r['measure']}] {key}", r[key], today[key]))
    from xenbench.studies.protocol import ALPHA, decide

    labelled = comp.assign(challenger=comp["challenger"] + " on " + comp["measure"])
    today = decide(comp.drop(columns=["p_holm", "p_wilcoxon_holm", "verdict"], errors="ignore"), alpha=ALPHA)
    out += family(nb, "label_comparisons", labelled, today.assign(challenger=labelled["challenger"].to_numpy()),
                  source="summary")
    return out


@register("04_axn_lambda")
def _axn(results: Mapping[str, Any]) -> list[Witness]:
    """From the per-run test recalls (``runs``): ``summary`` and each comparison's interval across runs; from the
    per-query records, when saved, every paired test; without them, each paired test's own arithmetic; the λ chosen
    on the first run's dev sweep; the Holm adjustment and the verdicts over the family."""
    from xenbench.studies.protocol import choose_on_dev, decide
    from xenbench.studies.axn import axn_paired_comparisons, axn_protocol_summary
    from xenbench.studies.labels import label_summary

    nb = "04_axn_lambda"
    runs = unpack_records(results["runs"]) if has_per_query(results["runs"]) else pd.DataFrame(results["runs"])
    out = _summary_rows(nb, "summary", pd.DataFrame(results["summary"]), axn_protocol_summary(runs),
                        ["method", "budget", "k"])
    out += label_summary_rows(nb, results, label_summary)
    out += _label_family_04(nb, results)
    comp = pd.DataFrame(results["comparisons"])
    if has_per_query(results["runs"]):
        runs = _rows_of_splits(results, runs, "split_seed")
        out += per_run_values(nb, "runs", runs, ["split_seed", "anchor_seed", "method", "budget", "k"])
        pairs = list(dict.fromkeys(zip(comp["challenger"], comp["baseline"])))
        today = axn_paired_comparisons(runs, pairs=pairs)
        out += _frame_rows(nb, "comparisons", comp, today, ["challenger", "baseline", "budget", "k"],
                           ["mean", "se", "lo", "hi", "p", "p_wilcoxon", "n_queries", "n_better", "n_worse",
                            "run_mean", "run_lo", "run_hi", "n_runs", "p_holm", "p_wilcoxon_holm", "verdict"])
    else:
        out += run_intervals(nb, "comparisons", comp, runs)
        out += paired_rows(nb, "comparisons", comp, se="se")
        out += family(nb, "comparisons", comp, decide(comp.drop(columns=["p_holm", "p_wilcoxon_holm", "verdict"],
                                                                errors="ignore")), source="summary")
    sweep = pd.DataFrame(results.get("sweep_dev_first_run") or [])
    chosen = pd.DataFrame(results.get("chosen_lambda_first_run") or [])
    if not sweep.empty and not chosen.empty:
        out += _frame_rows(nb, "chosen_lambda_first_run", chosen,
                           choose_on_dev(sweep, ["method", "budget", "k"], "lam"), ["method", "budget", "k"],
                           ["lam", "recall"])
    return out


# ----------------------------------------------------------------------------------------------
# 05: PEFA
# ----------------------------------------------------------------------------------------------
@register("05_pefa_lambda")
def _pefa(results: Mapping[str, Any]) -> list[Witness]:
    """``summary`` (:func:`xenbench.studies.pefa.across_seeds` of ``gains``), ``chosen`` (the dev sweep's best) and
    the settings of ``gains``; from the per-query records, when saved, ``gains`` and every paired test; without them,
    each paired test's own arithmetic and each interval across splits from ``gains``; Holm and the verdicts."""
    from xenbench.studies.protocol import decide, t_interval
    from xenbench.studies.pefa import across_seeds, pefa_choose_on_dev, pefa_paired_comparisons, subset_gains

    nb = "05_pefa_lambda"
    gains = pd.DataFrame(results["gains"])
    keys = ["split", "method", "k", "subset"]
    out = _frame_rows(nb, "summary", pd.DataFrame(results["summary"]), across_seeds(gains), keys,
                      ["n_seeds", "share", "n", "recall", "de_recall", "gain", "gain_min", "gain_max", "gain_sd",
                       "gain_se", "seeds_positive"])
    sweep = pd.DataFrame(results["sweep_dev"])
    chosen = pd.DataFrame(results["chosen"])
    today_chosen = pd.concat([pefa_choose_on_dev(g.drop(columns=["split", "seed"])).assign(split=split, seed=seed)
                              for (split, seed), g in sweep.groupby(["split", "seed"], sort=False)], ignore_index=True)
    out += _frame_rows(nb, "chosen", chosen, today_chosen, ["split", "seed", "method", "k"],
                       ["lam", "n_neighbors", "dev_recall"])
    setting = gains.drop_duplicates(["split", "seed", "method", "k"])
    out += _frame_rows(nb, "gains' setting (the chosen one)", setting, today_chosen, ["split", "seed", "method", "k"],
                       ["lam", "n_neighbors"])
    comp = pd.DataFrame(results["comparisons"])
    per_query = results.get("per_query")
    if per_query:
        pq = unpack_groups(per_query, PEFA_ARRAYS)
        today_gains = pd.concat([subset_gains(g.drop(columns=["split", "seed"])).assign(split=split, seed=seed)
                                 for (split, seed), g in pq.groupby(["split", "seed"], sort=False)], ignore_index=True)
        out += _frame_rows(nb, "gains", gains, today_gains, ["split", "seed", "method", "k", "subset"],
                           ["n", "share", "recall", "de_recall", "gain", "gain_se", "p_value"])
        today = pefa_paired_comparisons(pq)
        out += _frame_rows(nb, "comparisons", comp, today, keys,
                           ["mean", "se", "lo", "hi", "p", "p_wilcoxon", "n", "n_a_better", "n_b_better", "run_mean",
                            "run_lo", "run_hi", "n_runs", "same_as_all", "p_holm", "p_wilcoxon_holm", "verdict"])
        return out
    for _, r in comp.iterrows():  # each split seed is one run: the interval across splits of the per-seed gains
        g = gains[(gains["split"] == r["split"]) & (gains["method"] == r["method"]) & (gains["k"] == r["k"])
                  & (gains["subset"] == r["subset"])].dropna(subset=["gain"])
        mean, lo, hi = t_interval(g["gain"].to_numpy(np.float64), 0.95)
        for key, value in (("run_mean", mean), ("run_lo", lo), ("run_hi", hi), ("n_runs", len(g))):
            out.append(_w(nb, f"comparisons [{_label(r)}] {key}", r[key], value))
    out += paired_rows(nb, "comparisons", comp, n="n", better="n_a_better", worse="n_b_better", se="se")
    out += family(nb, "comparisons", comp, decide(comp.drop(columns=["p_holm", "p_wilcoxon_holm", "verdict"],
                                                            errors="ignore")), source="summary")
    return out


# ----------------------------------------------------------------------------------------------
# 06: CCSA (its claims are computed from the per-seed rows themselves; its few summaries here)
# ----------------------------------------------------------------------------------------------
@register("06_ccsa_balance")
def _ccsa(results: Mapping[str, Any]) -> list[Witness]:
    """``seeds`` against the seeds of the rows, and each collapse row's noise threshold (L − 1)/(B − 1)."""
    nb = "06_ccsa_balance"
    out = []
    rows = pd.DataFrame(results.get("by_reg") or [])
    if "seed" in rows:
        out.append(_w(nb, "seeds (those of by_reg's rows)", " ".join(str(s) for s in results["seeds"]),
                      " ".join(str(s) for s in sorted(rows["seed"].unique()))))
    for r in results.get("collapse") or []:
        out.append(_w(nb, f"collapse L={r['chunk_size']} detectable_imbalance = (L − 1)/(B − 1)",
                      r["detectable_imbalance"], (r["chunk_size"] - 1) / (r["batch_size"] - 1)))
    return out


# ----------------------------------------------------------------------------------------------
# 07: every method side by side
# ----------------------------------------------------------------------------------------------
@register("07_compare_methods")
def _compare(results: Mapping[str, Any]) -> list[Witness]:
    """From the per-run records (``runs``), when saved, ``summary``, ``best`` and every comparison; without them,
    each summary row's interval about its mean, ``best`` against ``summary`` and each paired test's own arithmetic;
    ``wall_ms`` from the search time and the CE's cost; the Holm adjustment within each (budget, k)."""
    from xenbench.studies.protocol import decide
    from xenbench.studies import compare

    nb = "07_compare_methods"
    summary = pd.DataFrame(results["summary"])
    comp = pd.DataFrame(results["comparisons"])
    ms = 1e3 * float(results["ce_cost"]["seconds_per_pair"])
    out = []
    for _, r in summary.iterrows():
        label = f"summary [method={r['method']}, budget={r['budget']}, k={r['k']}]"
        out.append(_w(nb, f"{label} wall_ms = search_ms + calls · CE ms", r["wall_ms"], r["search_ms"] + r["calls"] * ms,
                      "summary", rel=1e-9))
        out.append(_w(nb, f"{label} recall (= mean)", r["recall"], r["mean"], "summary"))
    labels = pd.DataFrame(results.get("label_summary") or [])
    if not labels.empty:  # the second currency, from its per-run values, at the saved search times
        label_seconds = labels[["method", "budget", "search_ms"]].drop_duplicates(["method", "budget"]).assign(
            search_s=lambda d: d["search_ms"] / 1e3).drop(columns="search_ms")
        out += label_summary_rows(nb, results, lambda runs: compare.compare_summary(
            runs, label_seconds, float(results["ce_cost"]["seconds_per_pair"]), cell="measure"))
    out += label_comparison_rows(nb, results)
    runs = results.get("runs")
    if has_per_query(runs):
        runs = _rows_of_splits(results, unpack_records(runs), "split_seed")
        seconds = summary[["method", "budget", "search_ms"]].drop_duplicates(["method", "budget"]).assign(
            search_s=lambda d: d["search_ms"] / 1e3).drop(columns="search_ms")
        today = compare.compare_summary(runs, seconds, float(results["ce_cost"]["seconds_per_pair"]))
        out += _frame_rows(nb, "summary", summary, today, ["method", "budget", "k"],
                           ["mean", "lo", "hi", "n_runs", "setting", "recall_se"])
        best, today_comp = compare.best_per_budget(runs)
        out += _frame_rows(nb, "best", pd.DataFrame(results["best"]).assign(
            within_noise=lambda d: d["within_noise"].map(str), below=lambda d: d["below"].map(str),
            above=lambda d: d["above"].map(str)), best.assign(
            within_noise=lambda d: d["within_noise"].map(str), below=lambda d: d["below"].map(str),
            above=lambda d: d["above"].map(str)), ["budget", "k"],
            ["best", "best_dev", "best_mean", "best_lo", "best_hi", "within_noise", "below", "above", "n_methods",
             "n_queries", "n_runs"])
        out += _frame_rows(nb, "comparisons", comp, today_comp, ["challenger", "baseline", "budget", "k"],
                           ["mean", "lo", "hi", "p", "p_wilcoxon", "n_queries", "n_better", "n_worse", "run_mean",
                            "run_lo", "run_hi", "n_runs", "p_holm", "p_wilcoxon_holm", "verdict"])
        return out
    for _, r in summary.iterrows():
        out += t_row(nb, f"summary [method={r['method']}, budget={r['budget']}, k={r['k']}]", r, int(r["n_runs"]),
                     p=None, se="recall_se")
    for _, b in pd.DataFrame(results["best"]).iterrows():
        s = summary[(summary["method"] == b["best"]) & (summary["budget"] == b["budget"]) & (summary["k"] == b["k"])]
        label = f"best [budget={b['budget']}, k={b['k']}]"
        for key in ("mean", "lo", "hi"):
            out.append(_w(nb, f"{label} best_{key} (summary's {key} of {b['best']})", b[f"best_{key}"],
                          s[key].iloc[0] if len(s) else float("nan"), "summary"))
        cells = comp[(comp["budget"] == b["budget"]) & (comp["k"] == b["k"])]
        words = {"beats": "below", "loses": "above", "trails": "above"}
        for key in ("within_noise", "below", "above"):
            today = sorted(str(r["baseline"]) for _, r in cells.iterrows()
                           if words.get(r["verdict"], "within_noise") == key)
            out.append(_w(nb, f"{label} {key} (the verdicts of its comparisons)", ", ".join(sorted(b[key])),
                          ", ".join(today), "summary"))
    out += paired_rows(nb, "comparisons", comp)
    parts = [decide(g.drop(columns=["p_holm", "p_wilcoxon_holm", "verdict"], errors="ignore"))
             for _, g in comp.groupby(["budget", "k"], sort=False)]
    out += family(nb, "comparisons", comp, pd.concat(parts).loc[comp.index], source="summary")
    return out
