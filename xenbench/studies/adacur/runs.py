"""The honest protocol of notebook 03: k_i chosen on dev rows, test results over anchor seeds × query splits, the
pre-declared paired comparisons under the one verdict rule (:func:`xenbench.studies.protocol.verdict`), and ANNCUR's
two budget rules side by side.

References
----------
.. [ADACUR] Yadav, Monath, Zaheer, McCallum. "Adaptive Selection of Anchor Items for CUR-based k-NN
   search with Cross-Encoders", Findings of EMNLP 2023: §2.2, §3, Fig. 2–4, 6, 8.
.. [ANNCUR] Yadav et al. "Efficient Nearest Neighbor Search for Cross-Encoder Models using Matrix
   Factorization", EMNLP 2022, §3.2.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from xenbench._device import search_device
from xenbench._validation import check_int
from xenbench.errors import ParameterError
from xenbench.methods.cur import AnnCur
from xenbench.studies.protocol import ALPHA, Split, compare_runs, decide, run_seed
from xenbench.metrics import LABEL_MEASURES, mean_se, topk_indices
from xenbench.studies.adacur.budget import COMPARABLE, METHODS, SPLIT_FRACTIONS, Comparable, _split_grid, recall_vs_budget
from xenbench.studies.labels import LABEL_COLUMNS, choose_by_labels
from xenbench.studies.records import RUN_FIELDS, as_comparison

__all__ = ["ADACUR_PAIRS", "PROTOCOL_METHODS", "adacur_paired_comparisons", "adacur_protocol_runs",
           "adacur_protocol_summary", "budget_rule_gap", "chosen_on_dev", "seed_spread"]

#: Pre-declared comparisons (challenger label, baseline label), fixed before any result is seen: the
#: like-for-like random-start pair and the DE-start pair of [ADACUR] Fig. 2, plus the DE-start pair
#: without adaptive rounds. Every pair is tested at every (budget, k); nothing is a "best of" several.
ADACUR_PAIRS: tuple[tuple[str, str], ...] = (
    (METHODS["adacur_nosplit"], METHODS["anncur"]),
    (METHODS["adacur_de_nosplit"], METHODS["de_rerank"]),
    (METHODS["adacur_de_nosplit"], METHODS["anncur_de"]),
)
#: Methods the protocol runs by default: those the pairs of :data:`ADACUR_PAIRS` need (method keys).
PROTOCOL_METHODS: tuple[str, ...] = ("anncur", "anncur_de", "adacur_nosplit", "adacur_de_nosplit", "de_rerank")
# ALPHA (imported above) is the family-wise level of the one verdict rule, xenbench.studies.protocol.verdict.


def adacur_protocol_runs(M: np.ndarray, splits: Sequence[Any], anchor_seeds: Sequence[int], budgets: Sequence[int], *,
                         methods: Sequence[str] = PROTOCOL_METHODS, k_values: Sequence[int] = (1, 10, 100),
                         de_scores: np.ndarray | None = None, tfidf_scores: np.ndarray | None = None, n_rounds: int = 5,
                         split_fractions: Sequence[float] = SPLIT_FRACTIONS,
                         device: str | torch.device = "auto", labels: Any = None,
                         measures: Sequence[str] = LABEL_MEASURES) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Per-query Top-k-Recall of every method and k_i grid point, on dev and test rows, per (split, anchor seed).

    One run = one query split (:func:`xenbench.studies.protocol.query_splits`: anchor rows Q_anc, dev rows,
    test rows) × one anchor seed. Its random draws (ANNCUR's anchors, ADACUR's first round and draws) take
    the run's own seed, :func:`xenbench.studies.protocol.run_seed` of (split seed, anchor seed), so the
    S × R runs make S × R independent draws. A method that is deterministic given the split
    (:attr:`Comparable.deterministic`) runs once per split, under the first anchor seed. Dev and test
    rows are run together (ADACUR's randomness is keyed by the query row and ANNCUR's anchors do not
    depend on the queries, so each row's result is the one it gets alone) and labelled by ``part``.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    splits : sequence of xenbench.studies.protocol.Split
        Query splits (>= 3 for the issue's protocol).
    anchor_seeds : sequence of int
        Anchor / first-round seeds (>= 5 for the issue's protocol).
    budgets, methods, k_values, n_rounds, split_fractions, device
        As in :func:`recall_vs_budget` (every grid point is kept: ``all_splits=True``).
    de_scores, tfidf_scores : ndarray of shape (n_queries, n_items), optional
        Retriever scores of **every** row of M (:func:`xenbench.studies.setup.retriever_scores`); ``de_scores``
        ranks the first round of the DE-start methods and DE re-rank, whatever first stage computed it
        (:func:`xenbench.studies.setup.first_stage_matrix`).
    labels : sparse matrix of shape (n_queries, n_items), optional
        Relevance grades of every row of M on its items (:meth:`xenbench.studies.setup.Setup.grades`): each run
        also scores every method's ranked lists against them (:func:`xenbench.studies.labels.choose_by_labels`: k_i
        chosen on the dev rows by nDCG@10, every measure read on the test rows at it).
    measures : sequence of str
        The label measures (ir-measures names), with ``labels``.

    Returns
    -------
    DataFrame
        Columns ``split_seed``, ``anchor_seed``, ``part`` (``"dev"``/``"test"``), the columns of
        :func:`recall_vs_budget` for that part's rows (``recall`` is their mean), ``rows`` (the part's
        query rows) and ``per_query`` (their recalls, same order). Deterministic methods have rows for the
        first anchor seed only.
    label_runs : DataFrame
        With ``labels`` only (then a tuple): one row per (split_seed, anchor_seed, method, budget, measure) with the
        columns of :data:`xenbench.studies.labels.LABEL_COLUMNS` (``setting`` = the k_i chosen by nDCG@10).
    """
    from tqdm.auto import tqdm

    owner = "adacur_protocol_runs"
    M = np.asarray(M)
    seeds = [check_int(s, "anchor_seeds", 0, None, owner) for s in anchor_seeds]
    if not seeds or not len(splits):
        raise ParameterError("anchor_seeds" if not seeds else "splits", "a non-empty list", [] if not seeds else splits,
                             owner)
    for name, sc in (("de_scores", de_scores), ("tfidf_scores", tfidf_scores)):
        if sc is not None and np.shape(sc) != M.shape:
            raise ParameterError(name, f"scores of every query row, shape {M.shape}", np.shape(sc), owner)
    if labels is not None and np.shape(labels) != M.shape:
        raise ParameterError("labels", f"grades of every query row on the items, shape {M.shape}", np.shape(labels),
                             owner)
    device = search_device(device, owner)
    methods = list(methods)
    frames, label_rows = [], []
    runs = [(sp, seed) for sp in splits for seed in seeds]
    for sp, seed in tqdm(runs, desc="runs (split x anchor seed)"):
        if not isinstance(sp, Split):
            raise ParameterError("splits", "xenbench.studies.protocol.Split objects (anchor, dev, test)",
                                 type(sp).__name__, owner)
        rows = np.concatenate([sp.dev, sp.test])
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        is_dev = np.isin(rows, sp.dev)
        run_methods = [m for m in methods if seed == seeds[0] or not COMPARABLE.get(m, _RANDOM).deterministic]
        if not run_methods:
            continue
        # dev and test rows together as the evaluated rows: each row's result is the one it gets alone
        evaluated = Split(sp.anchor, np.empty(0, np.int64), rows, sp.seed)
        res = recall_vs_budget(M, evaluated, budgets, run_methods, k_values,
                               None if de_scores is None else np.asarray(de_scores)[rows],
                               None if tfidf_scores is None else np.asarray(tfidf_scores)[rows], n_rounds=n_rounds,
                               split_fractions=split_fractions, seed=run_seed(int(sp.seed), seed), device=device,
                               all_splits=True, per_query=True, ranked=labels is not None)
        if labels is not None:
            label_rows += _label_rows(res, rows, is_dev, labels, measures, {"split_seed": int(sp.seed), "anchor_seed": seed})
            res = res.drop(columns="ranked")
        for part, mask in (("dev", is_dev), ("test", ~is_dev)):
            df = res.copy()
            df["per_query"] = [v[mask] for v in res["per_query"]]
            df["rows"] = [rows[mask]] * len(df)
            df["recall"] = [float(v.mean()) for v in df["per_query"]]
            df["recall_se"] = [mean_se(v)[1] for v in df["per_query"]]
            df["n_test_queries"] = int(mask.sum())
            df.insert(0, "part", part)
            df.insert(0, "anchor_seed", seed)
            df.insert(0, "split_seed", int(sp.seed))
            frames.append(df)
    runs_df = pd.concat(frames, ignore_index=True)
    if labels is None:
        return runs_df
    return runs_df, pd.DataFrame(label_rows, columns=[*_RUN, "method", "budget", *LABEL_COLUMNS])


def _label_rows(res: pd.DataFrame, rows: np.ndarray, is_dev: np.ndarray, labels: Any, measures: Sequence[str],
                run: dict[str, int]) -> list[dict[str, Any]]:
    """The label records of one run: per (method, budget), k_i chosen on the dev rows by nDCG@10 over the variants
    (the rows of one variant share its ranked lists; grid order, so ties go to the smaller k_i)."""
    out = []
    for (method, budget), g in res.groupby(["method", "budget"], sort=False):
        variants = g.drop_duplicates("n_anchor_items")
        lists = list(variants["ranked"])
        for rec in choose_by_labels(variants["n_anchor_items"].astype(float).tolist(), [r[is_dev] for r in lists],
                                    [r[~is_dev] for r in lists], dev_rows=rows[is_dev], test_rows=rows[~is_dev],
                                    grades=labels, measures=measures):
            out.append({**run, "method": method, "budget": int(budget), **rec})
    return out


_RUN = ["split_seed", "anchor_seed"]
_RANDOM = Comparable("", lambda state, budget: [])  # an unknown key is not deterministic: recall_vs_budget names it
_GROUP = ["method", "budget", "k"]


def chosen_on_dev(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run and (method, budget, k): the k_i with the best **dev** recall, and the **test** row at that k_i.

    Returns
    -------
    DataFrame
        The run records (:class:`xenbench.studies.records.RunRecord`: ``setting`` = the dev-chosen k_i, ``value`` /
        ``value_se`` its test recall, ``dev_value`` its dev recall, ``n_queries``, ``per_query``, 03's ``n_rounds``)
        of the ``part == "test"`` rows of ``runs``, and each run's test ``rows``.
    """
    from xenbench.studies.protocol import at_chosen, choose_on_dev

    by = _RUN + _GROUP
    chosen = choose_on_dev(runs[runs["part"] == "dev"], by=by, setting="n_anchor_items")
    test = at_chosen(runs[runs["part"] == "test"], chosen, by=by, setting="n_anchor_items")
    test = test.merge(chosen.rename(columns={"recall": "dev_recall"}), on=by + ["n_anchor_items"], how="left")
    test = test.rename(columns={"n_anchor_items": "setting", "recall": "value", "recall_se": "value_se",
                                "dev_recall": "dev_value", "n_test_queries": "n_queries"})
    test["setting"] = test["setting"].astype(float)
    return test[[c for c in RUN_FIELDS if c in test.columns] + ["rows"]]


def adacur_protocol_summary(test_at_chosen: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Test recall per (method, budget, k): mean over runs, interval across runs, per-query SE, and how
    often each k_i was chosen (:func:`xenbench.studies.protocol.summarize` of :func:`chosen_on_dev`)."""
    from xenbench.studies.protocol import summarize

    out = summarize(test_at_chosen, _GROUP, value="value", se="value_se", confidence=confidence)
    ki = (test_at_chosen.groupby(_GROUP)["setting"]
          .agg(lambda s: ", ".join(f"{int(v)}×{int(c)}" for v, c in s.value_counts().sort_index().items()))
          .rename("k_i chosen (value×runs)").reset_index())
    return out.merge(ki, on=_GROUP, how="left")


def adacur_paired_comparisons(test_at_chosen: pd.DataFrame, pairs: Sequence[tuple[str, str]] = ADACUR_PAIRS, *,
                              alpha: float = ALPHA, confidence: float = 0.95, cell: str = "k") -> pd.DataFrame:
    """Pre-declared paired comparisons on the test rows, at the dev-chosen settings, with the one verdict rule.

    For each pair (challenger, baseline) and (budget, k), :func:`xenbench.studies.protocol.compare_runs` over the
    runs (a deterministic method's one run per split pairs with every run of the other):

    * ``mean``, ``lo``, ``hi``, ``p`` (paired t), ``p_wilcoxon``, ``n_queries``: the per-query paired test, each
      test query's difference averaged over the runs in which it was a test row; its p-values cover the
      queries only;
    * ``run_mean``, ``run_lo``, ``run_hi``, ``n_runs``: the t-interval of the runs' mean differences (contains
      the anchor-seed and split variance; a pair of deterministic methods has one run per split).

    Every (pair, budget, k) cell was declared in advance, so the table is the family:
    :func:`xenbench.studies.protocol.decide` adds ``p_holm``, ``p_wilcoxon_holm`` (Holm over its rows) and
    ``verdict`` (``"beats"``, ``"level"``, ``"loses"``: :func:`xenbench.studies.protocol.verdict`).

    ``cell`` names the column that, with ``budget``, makes a cell (``"k"``; ``"measure"`` for label records).
    """
    out = []
    for challenger, baseline in pairs:
        a = test_at_chosen[test_at_chosen["method"] == challenger]
        b = test_at_chosen[test_at_chosen["method"] == baseline]
        if a.empty or b.empty:
            continue
        for (budget, key), ga in a.groupby(["budget", cell]):
            gb = b[(b["budget"] == budget) & (b[cell] == key)]
            if gb.empty:
                continue
            c = compare_runs(ga, gb, split="split_seed", seed="anchor_seed", confidence=confidence)
            out.append({"challenger": challenger, "baseline": baseline, "budget": int(budget),
                        cell: int(key) if cell == "k" else key, **as_comparison(c)})
    # 03's and 07's comparisons keep the interval without its standard error (ComparisonRecord's optional ``se``)
    df = pd.DataFrame(out, columns=["challenger", "baseline", "budget", cell, "mean", "lo", "hi", "p", "p_wilcoxon",
                                    "n_queries", "n_better", "n_worse", "run_mean", "run_lo", "run_hi", "n_runs"])
    return decide(df, alpha=alpha)


def seed_spread(test_at_chosen: pd.DataFrame) -> pd.DataFrame:
    """Per (method, budget, k, split): min and max test recall over anchor seeds (the seed variance alone)."""
    g = test_at_chosen.groupby(_GROUP + ["split_seed"])["value"]
    return g.agg(["min", "max", "mean"]).reset_index()


def budget_rule_gap(M: np.ndarray, splits: Sequence[Any], anchor_seeds: Sequence[int], budgets: Sequence[int],
                    k_values: Sequence[int] = (1, 10, 100), *,
                    split_fractions: Sequence[float] = SPLIT_FRACTIONS) -> pd.DataFrame:
    """How much ANNCUR's budget rule moves its test recall: "free anchors" minus "authors' code"
    (:data:`xenbench.methods.cur.BUDGET_RULES`), at the same split, anchor seed, B_CE, k and k_i.

    Every cell is ANNCUR as :func:`adacur_protocol_runs` runs it (R_anc = M[split.anchor], ``AnnCur(k_i, seed=run_seed(split
    seed, anchor seed))``,
    k_i over the same grid of B_CE), scored on the split's test rows; both rules re-rank from the same ŝ, so the cells
    differ only by the rule. The authors' re-ranked items are a subset of the free-anchor ones, so no cell is negative.

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Exact CE scores.
    splits : sequence of xenbench.studies.protocol.Split
        Query splits (anchor and test rows are used).
    anchor_seeds, budgets, k_values, split_fractions
        As in :func:`adacur_protocol_runs` (pairs with k > B_CE are skipped).

    Returns
    -------
    DataFrame
        Per (budget, k): ``mean``, ``min`` and ``max`` of the difference in Top-k-Recall over the (split, seed, k_i)
        cells, ``cells``, and the mean recall under each rule (``recall_free_anchors``, ``recall_authors_code``).
    """
    from xenbench.methods.cur import BUDGET_RULES, rerank_candidates

    M = np.asarray(M)
    rows = []
    for sp in splits:
        M_test = M[sp.test].astype(np.float64)
        exact = {k: topk_indices(M_test, k) for k in k_values if k <= M.shape[1]}
        for seed in anchor_seeds:
            for budget in budgets:
                for k_i in _split_grid(budget, split_fractions, 1, budget, sp.anchor.size):
                    cur = AnnCur(k_i, seed=run_seed(int(sp.seed), int(seed))).fit(M[sp.anchor])
                    S_hat = cur.transform(M_test[:, cur.anchor_items_])
                    recall = {}
                    for rule in BUDGET_RULES:
                        scored = np.zeros(M_test.shape, dtype=bool)
                        np.put_along_axis(scored, rerank_candidates(S_hat, cur.anchor_items_, budget, rule), True, 1)
                        recall[rule] = {k: float(np.take_along_axis(scored, T, 1).mean()) for k, T in exact.items()}
                    rows += [{"budget": int(budget), "k": int(k), "free": recall["free anchors"][k],
                              "authors": recall["authors' code"][k]} for k in exact if k <= budget]
    cells = pd.DataFrame(rows)
    gap = cells.assign(gap=cells["free"] - cells["authors"]).groupby(["budget", "k"])
    return gap["gap"].agg(mean="mean", min="min", max="max", cells="size").join(
        gap[["free", "authors"]].mean().rename(columns={"free": "recall_free_anchors",
                                                        "authors": "recall_authors_code"})).reset_index()
