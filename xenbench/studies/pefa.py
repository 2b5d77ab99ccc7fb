"""Notebook 05's driver: PEFA's λ (and PEFA-XL's k) chosen on dev queries, its gain over the DE on test queries.

A kNN model over training queries can only help a test query whose gold item is labelled for some training query
(its gold is *seen*, :func:`xenbench.methods.pefa.seen_golds`). Per split (:func:`xenbench.studies.splits.make_split`:
the random or the in-domain regime), :func:`tune_and_test` sweeps λ on the dev queries
(:func:`pefa_lambda_sweep`), keeps each method's best setting (:func:`pefa_choose_on_dev`), scores it per test query
against the DE (:func:`evaluate_per_query`) and reports the gains on all / seen / unseen golds
(:func:`subset_gains`); :func:`across_seeds` averages the split seeds and :func:`pefa_paired_comparisons` judges the
declared family by the one verdict rule (:func:`xenbench.studies.protocol.verdict`).

References
----------
.. [PEFA] Chang, Jiang, Wang, Jiang, Yu, Dhillon. "PEFA: Parameter-Free Adapters for Large-scale
   Embedding-based Retrieval Models", WSDM 2024: §3 (Eq. 2-8), §4 (Recall@k, Table 4).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from xenbench.errors import ParameterError
from xenbench.methods.pefa import PefaXL, PefaXS, label_coverage, relevance_matrix, seen_golds
from xenbench.metrics import label_recall, mean_se

__all__ = ["SUBSETS", "across_seeds", "evaluate_per_query", "pefa_choose_on_dev", "pefa_lambda_sweep", "pefa_lists",
           "pefa_paired_comparisons", "subset_gains", "tune_and_test"]


def pefa_lambda_sweep(P: np.ndarray, Q_train: np.ndarray, Y_train: sp.spmatrix, Q_eval: np.ndarray, Y_eval: sp.spmatrix,
                      lambdas: Sequence[float], k_values: Sequence[int] = (1, 10, 100), *,
                      n_neighbors: Sequence[int] = (32,), index: str = "flat") -> pd.DataFrame:
    """Recall@k of PEFA-XS and PEFA-XL (each n_neighbors) for every λ on labelled eval queries.

    Returns
    -------
    DataFrame
        Columns ``method`` ("PEFA-XS", "PEFA-XL k=32", ...), ``lam``, ``k``, ``recall`` (mean over eval
        queries with a relevant item), ``recall_se`` and ``n_test_queries``.
    """
    k_max = max(k_values)
    models = [("PEFA-XS", lambda lam: PefaXS(lam, index=index))]
    models += [(f"PEFA-XL k={kk}", lambda lam, kk=kk: PefaXL(lam, kk, index=index)) for kk in n_neighbors]
    rows = []
    for name, make in models:
        for lam in lambdas:
            _, I = make(lam).fit(P, Q_train, Y_train).search(Q_eval, k_max)
            for k in k_values:
                r = label_recall(I, Y_eval, k, per_query=True)
                recall, se = mean_se(r)
                rows.append({"method": name, "lam": float(lam), "k": int(k), "recall": recall, "recall_se": se,
                             "n_test_queries": int(r.size)})
    return pd.DataFrame(rows)


# -- tuned on dev, reported per test query: seen and unseen golds ----------------------------------------------------

def _model(method: str, lam: float, n_neighbors: int, index: str) -> PefaXS | PefaXL:
    return PefaXS(lam, index=index) if method == "PEFA-XS" else PefaXL(lam, n_neighbors, index=index)


def pefa_choose_on_dev(sweep_dev: pd.DataFrame) -> pd.DataFrame:
    """The setting of each method per Recall@k cut-off chosen on dev queries (a :func:`pefa_lambda_sweep`).

    PEFA-XS: the λ with the best dev recall; PEFA-XL: the (k of NN, λ) pair with the best dev recall (ties:
    smaller λ, then fewer neighbours).

    Returns
    -------
    DataFrame
        Columns ``method`` ("PEFA-XS", "PEFA-XL"), ``k``, ``lam``, ``n_neighbors`` (0 for XS) and
        ``dev_recall``.
    """
    df = sweep_dev.copy()
    df["n_neighbors"] = df["method"].str.extract(r"k=(\d+)", expand=False).fillna("0").astype(int)
    df["method"] = np.where(df["method"].str.startswith("PEFA-XL"), "PEFA-XL", df["method"])
    df = df.sort_values(["method", "k", "recall", "lam", "n_neighbors"], ascending=[True, True, False, True, True])
    best = df.groupby(["method", "k"], sort=False).head(1)
    return (best[["method", "k", "lam", "n_neighbors", "recall"]].rename(columns={"recall": "dev_recall"})
            .sort_values(["method", "k"]).reset_index(drop=True))


def evaluate_per_query(P: np.ndarray, Q_train: np.ndarray, Y_train: sp.spmatrix, Q_eval: np.ndarray,
                       Y_eval: sp.spmatrix, chosen: pd.DataFrame, *, index: str = "flat",
                       eval_rows: np.ndarray | None = None) -> pd.DataFrame:
    """Recall@k of every eval query (with a relevant item) for each ``chosen`` setting and for the DE alone.

    Parameters
    ----------
    chosen : DataFrame
        Rows of :func:`pefa_choose_on_dev`: ``method``, ``k``, ``lam``, ``n_neighbors``.
    eval_rows : int ndarray of shape (n_eval,), optional
        The dataset rows of the eval queries (the rows of ``Q_eval``), so a query is known across splits.

    Returns
    -------
    DataFrame
        One row per (setting, eval query): ``method``, ``k``, ``lam``, ``n_neighbors``, ``query`` (position among
        the eval queries with a relevant item), ``row`` (its dataset row; with ``eval_rows``), ``seen``
        (:func:`seen_golds`), ``recall`` and ``de_recall`` (the DE, λ = 1, on the same query: a paired comparison).
    """
    k_max = int(chosen["k"].max())
    seen = seen_golds(Y_train, Y_eval)
    has = np.diff(sp.csr_matrix(Y_eval).indptr) > 0  # the queries label_recall keeps, in order
    rows = None if eval_rows is None else np.asarray(eval_rows, dtype=np.int64)[has]
    _, I_de = PefaXS(1.0, index=index).fit(P, Q_train, Y_train).search(Q_eval, k_max)
    searched: dict[tuple[str, float, int], np.ndarray] = {}
    frames = []
    for row in chosen.itertuples(index=False):
        key = (row.method, float(row.lam), int(row.n_neighbors))
        if key not in searched:
            searched[key] = _model(row.method, *key[1:], index).fit(P, Q_train, Y_train).search(Q_eval, k_max)[1]
        k = int(row.k)
        r = label_recall(searched[key], Y_eval, k, per_query=True)
        frames.append(pd.DataFrame({
            "method": row.method, "k": k, "lam": float(row.lam), "n_neighbors": int(row.n_neighbors),
            "query": np.arange(r.size)} | ({} if rows is None else {"row": rows}) | {
            "seen": seen, "recall": r, "de_recall": label_recall(I_de, Y_eval, k, per_query=True)}))
    return pd.concat(frames, ignore_index=True)


def pefa_lists(P: np.ndarray, Q_train: np.ndarray, Y_train: sp.spmatrix, Q_eval: np.ndarray, chosen: pd.DataFrame,
               eval_rows: np.ndarray, *, index: str = "flat") -> pd.DataFrame:
    """The ranked lists of every ``chosen`` setting and of the DE (λ = 1) on the eval queries, for export as TREC run
    files (:func:`xenbench.studies.labels.export_runs`).

    Returns
    -------
    DataFrame
        One row per (method, k) of ``chosen`` and one for ``"DE"`` (at the largest k): ``method``, ``k``, ``lam``,
        ``n_neighbors``, ``list_rows`` (``eval_rows``) and ``ranked`` (int array (n_eval, max k): item rows, best
        first), the lists :func:`evaluate_per_query` reads.
    """
    k_max = int(chosen["k"].max())
    searched: dict[tuple[str, float, int], np.ndarray] = {}
    rows = []
    de = [{"method": "DE", "k": k_max, "lam": 1.0, "n_neighbors": 0}]  # one list: the DE has no setting to choose
    for row in [*chosen[["method", "k", "lam", "n_neighbors"]].to_dict("records"), *de]:
        key = ("PEFA-XS" if row["method"] == "DE" else row["method"], float(row["lam"]), int(row["n_neighbors"]))
        if key not in searched:  # the DE is PEFA-XS at λ = 1 (Eq. 2)
            searched[key] = _model(*key, index).fit(P, Q_train, Y_train).search(Q_eval, k_max)[1]
        rows.append({"method": row["method"], "k": int(row["k"]), "lam": key[1], "n_neighbors": key[2],
                     "list_rows": np.asarray(eval_rows, dtype=np.int64), "ranked": searched[key]})
    return pd.DataFrame(rows)


def subset_gains(per_query: pd.DataFrame) -> pd.DataFrame:
    """Recall and gain over the DE on all eval queries and on those whose gold is seen / unseen in training.

    The gain is the mean of the per-query differences recall − de_recall (paired); ``gain_se`` is its
    standard error and ``p_value`` the two-sided paired t-test (NaN below 2 queries or when every
    difference is 0). ``share`` is the subset's share of the eval queries, so the overall recall is the
    share-weighted mean of the seen and unseen recalls.

    Returns
    -------
    DataFrame
        Columns ``method``, ``k``, ``lam``, ``n_neighbors``, ``subset`` ("all", "seen", "unseen"), ``n``,
        ``share``, ``recall``, ``de_recall``, ``gain``, ``gain_se``, ``p_value``.
    """
    from scipy import stats

    rows = []
    for (method, k, lam, nn), g in per_query.groupby(["method", "k", "lam", "n_neighbors"], sort=False):
        for subset, mask in (("all", np.ones(len(g), bool)), ("seen", g["seen"].to_numpy(bool)),
                             ("unseen", ~g["seen"].to_numpy(bool))):
            sub = g[mask]
            d = (sub["recall"] - sub["de_recall"]).to_numpy(np.float64)
            row = {"method": method, "k": int(k), "lam": float(lam), "n_neighbors": int(nn), "subset": subset,
                   "n": int(d.size), "share": float(d.size / len(g))}
            if d.size:
                gain, se = mean_se(d)
                p = float(stats.ttest_1samp(d, 0.0).pvalue) if d.size > 1 and np.any(d != d[0]) else float("nan")
                row.update(recall=float(sub["recall"].mean()), de_recall=float(sub["de_recall"].mean()), gain=gain,
                           gain_se=se, p_value=p)
            else:
                row.update(recall=np.nan, de_recall=np.nan, gain=np.nan, gain_se=np.nan, p_value=np.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def across_seeds(gains: pd.DataFrame, by: Sequence[str] = ("split", "method", "k", "subset")) -> pd.DataFrame:
    """Mean over split seeds of :func:`subset_gains` rows (with a ``seed`` column), and their spread.

    Returns
    -------
    DataFrame
        Columns ``by``, ``n_seeds``, ``share``, ``n`` (means), ``recall``, ``de_recall``, ``gain`` (means over
        seeds), ``gain_sd`` (standard deviation over seeds, 0 for one seed), ``gain_min``, ``gain_max``,
        ``gain_se`` (root mean square of the per-seed paired standard errors: the noise of one split) and
        ``seeds_positive`` (seeds with gain > 0).
    """
    by = list(by)
    g = gains.dropna(subset=["gain"]).groupby(by, sort=False)
    out = g.agg(n_seeds=("seed", "nunique"), share=("share", "mean"), n=("n", "mean"), recall=("recall", "mean"),
                de_recall=("de_recall", "mean"), gain=("gain", "mean"), gain_min=("gain", "min"),
                gain_max=("gain", "max"))
    out["gain_sd"] = g["gain"].std(ddof=1).fillna(0.0)
    out["gain_se"] = g["gain_se"].apply(lambda s: float(np.sqrt(np.mean(np.square(s)))))
    out["seeds_positive"] = g["gain"].apply(lambda s: int((s > 0).sum()))
    return out.reset_index()


#: Subsets of the test queries a gain is reported on (:func:`subset_gains`).
SUBSETS = ("all", "seen", "unseen")


def pefa_paired_comparisons(per_query: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """Notebook 05's declared family under the one verdict rule: PEFA against the DE per (split regime, method, k,
    subset of test queries).

    Each split seed is one run (PEFA and the DE are deterministic given the split). Per cell,
    :func:`xenbench.studies.protocol.compare_runs` of the method's and the DE's per-query recalls: the per-query paired
    test on each query's difference averaged over the seeds in which it was a test query (``mean``, ``lo``, ``hi``,
    ``p``, ``p_wilcoxon``, ``n`` distinct queries; the p-values cover the queries only) and the 95% t-interval of the
    per-seed mean gains across the independent splits (``run_mean``, ``run_lo``, ``run_hi``, ``n_runs``). A subset
    that holds every test query in every seed (``seen`` when every gold is seen) is the ``all`` test again: it is
    left out (``same_as_all`` lists it) so that a test counts once in the family. Cells with fewer than 2 queries
    are left out. :func:`xenbench.studies.protocol.decide` adds ``p_holm``, ``p_wilcoxon_holm`` and ``verdict``
    (Holm over every row: the family).

    Parameters
    ----------
    per_query : DataFrame
        :func:`evaluate_per_query` rows (with ``row``) of every run, with columns ``split`` (the regime) and
        ``seed``.

    Returns
    -------
    DataFrame
        Columns ``split``, ``method``, ``k``, ``subset``, the :func:`~xenbench.studies.protocol.compare_runs` fields,
        ``same_as_all`` (subsets of this cell's (split, method, k) equal to all), ``p_holm``, ``p_wilcoxon_holm``,
        ``verdict``.
    """
    from xenbench.studies.protocol import compare_runs, decide

    owner = "pefa_paired_comparisons"
    need = {"split", "seed", "method", "k", "row", "seen", "recall", "de_recall"}
    if not isinstance(per_query, pd.DataFrame) or not need <= set(per_query.columns):
        got = sorted(per_query.columns) if isinstance(per_query, pd.DataFrame) else type(per_query).__name__
        raise ParameterError("per_query", f"evaluate_per_query rows with columns {sorted(need)}", got, owner)
    out = []
    for (regime, method, k), cell in per_query.groupby(["split", "method", "k"], sort=False):
        seeds = list(cell.groupby("seed", sort=True))
        masks = {"all": [np.ones(len(g), bool) for _, g in seeds], "seen": [g["seen"].to_numpy(bool) for _, g in seeds]}
        masks["unseen"] = [~m for m in masks["seen"]]
        same = [s for s in SUBSETS[1:] if all(m.all() for m in masks[s])]  # the all test again: counted once
        rows = []
        for subset in [s for s in SUBSETS if s not in same]:
            runs = [{"seed": seed, "rows": g["row"].to_numpy()[m], "per_query": g["recall"].to_numpy(np.float64)[m],
                     "de": g["de_recall"].to_numpy(np.float64)[m]} for (seed, g), m in zip(seeds, masks[subset]) if m.any()]
            if sum(r["rows"].size for r in runs) < 2:
                continue
            a = pd.DataFrame(runs).drop(columns="de")
            b = a.assign(per_query=[r["de"] for r in runs])
            rows.append({"split": regime, "method": method, "k": int(k), "subset": subset,
                         **compare_runs(a, b, split="seed", seed=None, confidence=confidence),
                         "same_as_all": ", ".join(same)})
        out += rows
    columns = ["split", "method", "k", "subset", "mean", "se", "lo", "hi", "p", "p_wilcoxon", "n", "n_a_better",
               "n_b_better", "run_mean", "run_lo", "run_hi", "n_runs", "same_as_all"]
    return decide(pd.DataFrame(out, columns=columns if not out else None))


def tune_and_test(dataset, P: np.ndarray, U: np.ndarray, split, lambdas: Sequence[float], k_values: Sequence[int],
                  n_neighbors: Sequence[int], *, index: str = "flat") -> dict[str, pd.DataFrame]:
    """One split, end to end: Y from the training queries, the λ (and XL's k) sweep on dev, the chosen settings
    (:func:`pefa_choose_on_dev`) scored per test query against the DE, and the gains on all / seen / unseen golds.

    Parameters
    ----------
    dataset : Dataset
        Items and gold labels; P (n_items × d) and U (n_queries × d) are its L2-normalized DE embeddings.
    split : :class:`xenbench.studies.protocol.Split`
        Query rows ``anchor`` (the labelled training queries, PEFA's kNN memory), ``dev`` and ``test``.

    Returns
    -------
    dict
        ``sweep_dev`` (:func:`pefa_lambda_sweep` on dev), ``chosen``, ``per_query`` (:func:`evaluate_per_query` on
        test, with each query's dataset ``row``), ``gains`` (:func:`subset_gains`) and ``coverage`` (one row: seen
        shares of dev and test), ``lists`` (:func:`pefa_lists` of the test queries, to export).
    """
    Y_train, Y_dev, Y_test = (relevance_matrix(dataset, rows) for rows in (split.anchor, split.dev, split.test))
    Q_train = U[split.anchor]
    sweep_dev = pefa_lambda_sweep(P, Q_train, Y_train, U[split.dev], Y_dev, lambdas, k_values, n_neighbors=n_neighbors,
                                  index=index)
    chosen = pefa_choose_on_dev(sweep_dev)
    per_query = evaluate_per_query(P, Q_train, Y_train, U[split.test], Y_test, chosen, index=index,
                                   eval_rows=split.test)
    coverage = pd.DataFrame([{"train": int(split.anchor.size), "dev": int(split.dev.size), "test": int(split.test.size),
                              "seen_dev": label_coverage(Y_train, Y_dev), "seen_test": label_coverage(Y_train, Y_test)}])
    return {"sweep_dev": sweep_dev, "chosen": chosen, "per_query": per_query, "gains": subset_gains(per_query),
            "coverage": coverage, "lists": pefa_lists(P, Q_train, Y_train, U[split.test], chosen, split.test,
                                                      index=index)}
