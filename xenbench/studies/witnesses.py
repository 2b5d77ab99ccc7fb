"""Witnesses: a few cells of each committed result, re-derived with today's code from the committed stores.

``xenbench findings --check`` compares the docs with the committed results; nothing compared the results with the
code. Each notebook's function here declares a few cheap cells of its committed ``full`` results (seconds each) and
recomputes them from the inputs the run read (the score stores and datasets in ``data/``), through the same package
functions the notebook calls. :func:`verify` runs them all; a cell whose value today differs from the committed one
by more than its stated tolerance means a change to the code has left that result behind: re-run the notebook.
``make test`` runs ``xenbench findings --verify``.

A notebook's function is registered like its findings::

    @register("02_rank_cls_vs_emb")
    def _rank(results: Mapping[str, Any]) -> list[Witness]:
        ...  # read the cells from ``results`` (the committed JSON), recompute them, one Witness per value

Tolerances. Computations that are exact in float64 on one machine (CUR errors, recalls as counts over queries) are
compared at 1e-6 relative (errors) or 1e-9 absolute (recalls): BLAS differences between machines are far below both.
A cell that inverts noise-level singular values (the plain pinv on the k_q = k_i diagonal) is ill-conditioned, so
machines differ there by more; it is compared at 5% relative, which still separates the two pinv rules (they differ
by orders of magnitude on that cell). A model trained with torch on the CPU (06's CCSA) is reproducible on one machine
but not across machines: the code of the committed 06 run (a7cb823), re-run on another machine, gave imbalance
1.111527467 against the committed 1.111519808 (6.9e-6 relative) and dev recall 0.8012 against 0.8018 (3 of 5,000
neighbours); its witnesses allow about three times that (1e-4 relative, 2e-3 absolute), and are no finer than that. torch's
thread count matters more than the machine (the same code and machine at 1 and at 2 threads: 1.111838 against
1.111528, 2.8e-4 relative), so witnesses run at the thread count the run's provenance records
(``machine.torch_threads``; files written before it was recorded: this process's count).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from xenbench._io import REPO_ROOT
from xenbench.errors import DataError, ParameterError

__all__ = ["Witness", "register", "registered", "witnesses", "verify", "describe"]

#: Relative paths in a notebook's parameters are relative to the notebook's folder (its kernel's working directory).
NOTEBOOKS = REPO_ROOT / "notebooks"
#: Profiles whose committed results are witnessed (the reference runs of docs/FINDINGS.md).
PROFILES = ("full",)


@dataclass(frozen=True)
class Witness:
    """One committed value and the same value computed today.

    Attributes
    ----------
    notebook : str
        The notebook whose results hold the cell.
    cell : str
        What the value is, e.g. ``"grid cls-ce cutoff k_q=200 k_i=200 error"``.
    committed, today : float
        The value in the committed results file and the value today's code computes (NaN = no value, e.g. no recall).
    rel_tol, abs_tol : float
        Tolerance of :func:`math.isclose`.
    """

    notebook: str
    cell: str
    committed: float
    today: float
    rel_tol: float = 0.0
    abs_tol: float = 1e-9

    @property
    def ok(self) -> bool:
        """Both NaN, or equal within the tolerance."""
        a, b = float(self.committed), float(self.today)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=self.rel_tol, abs_tol=self.abs_tol)

    def line(self) -> str:
        """``notebook: cell: committed X, today Y (tolerance ...)``."""
        tol = " and ".join(t for t in (f"{self.rel_tol:g} relative" if self.rel_tol else "",
                                        f"{self.abs_tol:g} absolute" if self.abs_tol else "") if t) or "exact"
        return (f"{self.notebook}: {self.cell}: committed {self.committed:.10g}, today {self.today:.10g} "
                f"(tolerance {tol}){'' if self.ok else ' MISMATCH'}")


WitnessFn = Callable[[Mapping[str, Any]], list[Witness]]
_REGISTRY: dict[str, WitnessFn] = {}


def register(notebook: str) -> Callable[[WitnessFn], WitnessFn]:
    """Decorator: ``fn(results) -> list[Witness]`` re-derives a few cells of ``notebook``'s committed results."""

    def wrap(fn: WitnessFn) -> WitnessFn:
        _REGISTRY[notebook] = fn
        return fn

    return wrap


def registered() -> dict[str, WitnessFn]:
    """Notebook name -> its witness function."""
    return dict(_REGISTRY)


def _path(value: str) -> Path:
    p = Path(value)
    return p if p.is_absolute() else (NOTEBOOKS / p).resolve()


def witnesses(doc: Mapping[str, Any]) -> list[Witness]:
    """The witnesses of one results document (:func:`xenbench.studies.findings.load_results`); [] if its notebook
    declares none."""
    fn = _REGISTRY.get(doc["notebook"])
    if fn is None:
        return []
    import torch

    # Re-derive at the run's torch thread count where its provenance records one (see the module docstring).
    threads = ((doc.get("provenance") or {}).get("machine") or {}).get("torch_threads")
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads) if threads else before)
    try:
        return fn(doc["results"])
    finally:
        torch.set_num_threads(before)


def verify(results_dir: str | Path | None = None, *, notebooks: list[str] | None = None,
           log: Callable[[str], None] | None = None) -> list[Witness]:
    """Recompute the witnesses of every committed ``<name>.full.results.json`` in ``results_dir``.

    Parameters
    ----------
    results_dir
        Default: the committed reference runs, ``notebooks/results``.
    notebooks
        Only these notebooks (default: all with witnesses).
    log
        Called with one line per notebook (its witness count and seconds).

    Returns
    -------
    list of Witness
        All of them; the caller fails on any ``not w.ok``.
    """
    from xenbench.studies.findings import RESULTS_DIR, load_results

    folder = Path(results_dir) if results_dir is not None else RESULTS_DIR
    if notebooks is not None:
        unknown = sorted(set(notebooks) - set(_REGISTRY))
        if unknown:
            raise ParameterError("notebooks", f"notebooks with witnesses ({sorted(_REGISTRY)})", unknown, "verify")
    out = []
    for path in sorted(folder.glob("*.results.json")):
        name, profile = path.name.split(".")[0], path.name.split(".")[-3]
        if profile not in PROFILES or name not in _REGISTRY or (notebooks is not None and name not in notebooks):
            continue
        start = time.perf_counter()
        try:
            found = witnesses(load_results(path))
        except (KeyError, TypeError, IndexError) as err:  # a results file without the cells its witnesses read
            raise DataError(path, f"lacks what its witnesses read ({type(err).__name__}: {err}); re-run the "
                                  f"notebook") from None
        out += found
        if log is not None:
            bad = sum(not w.ok for w in found)
            log(f"{path.name}: {len(found)} witnesses, {bad} mismatched, {time.perf_counter() - start:.1f} s")
    return out


def describe(found: list[Witness]) -> list[str]:
    """One line per mismatched witness."""
    return [w.line() for w in found if not w.ok]


# ------------------------------------------------------------------------------------------------
# 00: the described dataset; 01: the statistics of the bundled score stores
# ------------------------------------------------------------------------------------------------
@register("00_data")
def _data(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.data.datasets import load_dataset
    from xenbench.studies.stats import dataset_lengths, mention_ambiguity

    p, committed = results["params"], results["domain"]
    ds = load_dataset(p["dataset"])
    lengths = dataset_lengths(ds, unit=p["length_unit"])
    today = {"items": len(ds.items), "queries": len(ds.queries),
             f"median_query_{p['length_unit']}": float(np.median(lengths["queries"])),
             f"median_item_{p['length_unit']}": float(np.median(lengths["items"])),
             "unambiguous_share": float((mention_ambiguity(ds) == 1).mean())}
    return [Witness("00_data", f"domain {committed['name']} {key}", float(committed[key]), float(value), abs_tol=0.0,
                    rel_tol=1e-12) for key, value in today.items()]


@register("01_score_matrices")
def _scores(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.data.store import open_stores
    from xenbench.studies.stats import score_summary

    stores = open_stores(_path(results["params"]["bundled_scores"]))
    today = score_summary({name: s.to_numpy() for name, s in stores.items()}).set_index("matrix")
    out = []
    for row in results["score_summary"]:
        for key in ("std", "median_query_skew", "median_top1_z"):
            out.append(Witness("01_score_matrices", f"score_summary {row['matrix']} {key}", float(row[key]),
                               float(today.loc[row["matrix"], key]), rel_tol=1e-6, abs_tol=0.0))
    return out


# ------------------------------------------------------------------------------------------------
# 02: ANNCUR cells of the (k_q × k_i) grid, both pinv rules
# ------------------------------------------------------------------------------------------------
#: The cells of notebook 02 witnessed (CE, pinv rule, k_q, k_i) when the grid has them: a k_q = k_i cell (§B.2) under
#: both rules, and one off-diagonal cell per CE. Grids written before the pinv rules were named hold the cut-off rule.
RANK_CELLS = (("cls-ce", "cutoff", 200, 200), ("cls-ce", "plain", 200, 200), ("cls-ce", "cutoff", 400, 100),
              ("emb-ce", "cutoff", 400, 100), ("emb-ce-marker", "cutoff", 400, 100), ("cls-ce", "plain", 400, 100))


@register("02_rank_cls_vs_emb")
def _rank(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.studies.rank import cur_grid, load_matrices

    p = results["params"]
    grid = pd.DataFrame(results["grid"])
    if "pinv" not in grid.columns:
        grid = grid.assign(pinv="cutoff").rename(columns={"recall": "recall_at_budget"})
    cells = [c for c in RANK_CELLS if ((grid["ce"] == c[0]) & (grid["pinv"] == c[1]) & (grid["k_q"] == c[2])
                                       & (grid["k_i"] == c[3])).any()]
    ces = sorted({c[0] for c in cells})
    M = load_matrices(_path(p["scores_dir"]), ces, max_queries=p["max_queries"], seed=p["seed"])
    out = []
    for ce, rule, k_q, k_i in cells:
        row = grid[(grid["ce"] == ce) & (grid["pinv"] == rule) & (grid["k_q"] == k_q) & (grid["k_i"] == k_i)].iloc[0]
        today = cur_grid(M[ce], [k_q], [k_i], n_test=p["n_test"], seed=p["seed"], budget=p["budget"], m=p.get("m"),
                         k=p["k"], pinv_rules=[rule]).iloc[0]
        ill = rule == "plain" and k_q == k_i  # inverts noise-level singular values: machine-dependent digits
        name = f"grid {ce} {rule} pinv k_q={k_q} k_i={k_i}"
        out.append(Witness("02_rank_cls_vs_emb", f"{name} error", float(row["error"]), float(today["error"]),
                           rel_tol=5e-2 if ill else 1e-6, abs_tol=0.0))
        for value in ("recall_at_m", "recall_at_budget"):
            if value in row.index and value in today.index and not ill:
                out.append(Witness("02_rank_cls_vs_emb", f"{name} {value}", float(row[value]), float(today[value])))
    return out


# ------------------------------------------------------------------------------------------------
# 03: ANNCUR and ADACUR at one split, anchor seed and budget (the protocol's test recall at the dev choice)
# ------------------------------------------------------------------------------------------------
#: Notebook 03's witnessed methods (keys of :data:`xenbench.studies.adacur.COMPARABLE`) and budget: ANNCUR and
#: ADACUR TopK No-Split need no retriever scores, so no DE has to embed anything.
ADACUR_METHODS = ("anncur", "adacur_nosplit")
ADACUR_BUDGET = 50


def _store_setup(p: Mapping[str, Any], split_seeds: list[int]) -> tuple[Any, list[Any]]:
    """The exact matrix of a store-reading notebook (03, 07) and its query splits, as its parameters ``p`` made them."""
    from xenbench.methods.protocol import query_splits
    from xenbench.studies.setup import load_setup

    setup = load_setup(_path(p["scores_dir"]) / p["ce"], p["dataset"], seed=p["seed"], max_items=p["max_items"])
    return setup, query_splits(setup.M.shape[0], p["n_anchor_queries"], p["n_dev_queries"], split_seeds,
                               max_test=p["max_test_queries"])


@register("03_adacur_rounds")
def _adacur(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.studies.adacur import METHODS, adacur_protocol_runs, chosen_on_dev

    p = results["params"]
    setup, split = _store_setup(p, p["split_seeds"][:1])
    seed = p["anchor_seeds"][0]
    k_values = sorted({int(r["k"]) for r in results["test_at_dev_choice"]} & {1, 10})
    runs = adacur_protocol_runs(setup.M, split, [seed], [ADACUR_BUDGET], methods=ADACUR_METHODS, k_values=k_values,
                                n_rounds=p["n_rounds"], device="cpu")
    today = chosen_on_dev(runs)
    committed = pd.DataFrame(results["test_at_dev_choice"])
    out = []
    for method in (METHODS[m] for m in ADACUR_METHODS):
        for k in k_values:
            sel = lambda d: d[(d["split_seed"] == p["split_seeds"][0]) & (d["anchor_seed"] == seed)  # noqa: E731
                              & (d["method"] == method) & (d["budget"] == ADACUR_BUDGET) & (d["k"] == k)]
            c, t = sel(committed), sel(today)
            cell = f"test_at_dev_choice split {p['split_seeds'][0]} seed {seed} {method} B_CE={ADACUR_BUDGET} k={k}"
            out.append(Witness("03_adacur_rounds", f"{cell} recall", float(c["recall"].iloc[0]),
                               float(t["recall"].iloc[0])))
            out.append(Witness("03_adacur_rounds", f"{cell} k_i chosen", float(c["n_anchor_items"].iloc[0]),
                               float(t["n_anchor_items"].iloc[0]), abs_tol=0.0))
    return out


# ------------------------------------------------------------------------------------------------
# 04: AXN at one λ on the first split's dev queries (needs the DE embeddings of the items and queries)
# ------------------------------------------------------------------------------------------------
#: Notebook 04's witnessed cells: β of the first split, and the dev recall of "AXN DE" and "AXN" at this λ and budget.
AXN_LAMBDA, AXN_BUDGET = 0.8, 50


@register("04_axn_lambda")
def _axn(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.methods.axn import prior_scale
    from xenbench.methods.protocol import query_splits, run_seed
    from xenbench.studies.axn import axn_lambda_sweep
    from xenbench.studies.setup import de_embeddings, load_setup

    p = results["params"]
    setup = load_setup(_path(p["scores_dir"]) / p["ce"], p["dataset"], seed=p["seed"], max_items=p["max_items"])
    M = setup.M
    first = query_splits(M.shape[0], p["n_anchor_queries"], p["dev_queries"], p["split_seeds"][:1],
                         max_test=p["max_test_queries"])[0]
    V, U = de_embeddings(setup, device="cpu")
    de = U @ V.T
    beta = prior_scale(M[first.anchor], de[first.anchor])
    out = [Witness("04_axn_lambda", "beta_first_split", float(results["beta_first_split"]), float(beta),
                   rel_tol=1e-6, abs_tol=0.0)]
    committed = pd.DataFrame(results["sweep_dev_first_run"])
    seed = run_seed(int(first.seed), int(p["first_round_seeds"][0]))  # the run's seed, as the protocol draws it
    de_order = np.argsort(-de, axis=1, kind="stable")
    dev = first.dev
    for method, cand in (("AXN DE", de_order[dev]), ("AXN", None)):
        today = axn_lambda_sweep(M[dev], V, beta * U[dev], [AXN_LAMBDA], [AXN_BUDGET], [1, 10], n_rounds=p["n_rounds"],
                                 candidates=cand, method=method, seed=seed, query_ids=dev, device="cpu")
        for k in (1, 10):
            sel = lambda d: d[(d["method"] == method) & (d["lam"] == AXN_LAMBDA)  # noqa: E731
                              & (d["budget"] == AXN_BUDGET) & (d["k"] == k)]
            out.append(Witness("04_axn_lambda", f"sweep_dev_first_run {method} λ={AXN_LAMBDA:g} B_CE={AXN_BUDGET} "
                               f"k={k} recall", float(sel(committed)["recall"].iloc[0]),
                               float(sel(today)["recall"].iloc[0])))
    return out


# ------------------------------------------------------------------------------------------------
# 05: PEFA on the first random split (needs the DE embeddings of the pooled datasets)
# ------------------------------------------------------------------------------------------------
PEFA_SPLIT = "random"


@register("05_pefa_lambda")
def _pefa(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.studies.pefa import tune_and_test
    from xenbench.studies.splits import gold_groups, make_split, pool_datasets, pooled_embeddings

    p = results["params"]
    ds = pool_datasets(p["datasets"])
    P, U = pooled_embeddings(p["datasets"], device="cpu")
    split = make_split(PEFA_SPLIT, gold_groups(ds), p["eval_fraction"], p["dev_fraction"], seed=p["seed"])
    today = tune_and_test(ds, P, U, split, p["lambdas"], p["k_values"], p["n_neighbors"], index=p["index"])
    out = []
    of_run = lambda d: d[(d["split"] == PEFA_SPLIT) & (d["seed"] == p["seed"])]  # noqa: E731
    cov = of_run(pd.DataFrame(results["coverage"])).iloc[0]
    out.append(Witness("05_pefa_lambda", f"coverage {PEFA_SPLIT} seed {p['seed']} seen_test", float(cov["seen_test"]),
                       float(today["coverage"]["seen_test"].iloc[0])))
    sweep = of_run(pd.DataFrame(results["sweep_dev"]))
    for method, lam, k in (("PEFA-XS", 0.5, 10), (f"PEFA-XL k={p['n_neighbors'][0]}", 0.5, 10)):
        sel = lambda d: d[(d["method"] == method) & (d["lam"] == lam) & (d["k"] == k)]  # noqa: E731
        c, t = sel(sweep), sel(today["sweep_dev"])
        out.append(Witness("05_pefa_lambda", f"sweep_dev {PEFA_SPLIT} seed {p['seed']} {method} λ={lam:g} k={k} "
                           f"recall", float(c["recall"].iloc[0]), float(t["recall"].iloc[0])))
    gains = of_run(pd.DataFrame(results["gains"]))
    row = gains[(gains["method"] == "PEFA-XL") & (gains["k"] == 10) & (gains["subset"] == "all")].iloc[0]
    g = today["gains"]
    t = g[(g["method"] == "PEFA-XL") & (g["k"] == 10) & (g["subset"] == "all")].iloc[0]
    out.append(Witness("05_pefa_lambda", f"gains {PEFA_SPLIT} seed {p['seed']} PEFA-XL k=10 all gain", float(row["gain"]),
                       float(t["gain"])))
    return out


# ------------------------------------------------------------------------------------------------
# 06: one CCSA model of the λ sweep (first seed), trained as the notebook trains it
# ------------------------------------------------------------------------------------------------
#: Notebook 06's witnessed setting: λ (with the sweep's batch size) of the first seed.
CCSA_REG = 1.0
#: Tolerances of 06's witnesses: about 3x the difference between two machines running the same code (module docstring).
CCSA_IMBALANCE_REL_TOL, CCSA_RECALL_ABS_TOL = 1e-4, 2e-3


@register("06_ccsa_balance")
def _ccsa(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.studies.ccsa import balance_sweep, eval_split, evaluated_rows, exact_ip_topk
    from xenbench.studies.corpus import load_corpus

    p = results["params"]
    corpus = load_corpus(p["dataset"])
    train = np.concatenate([corpus.items, corpus.queries])
    seed = p["seeds"][0]
    rows, split = evaluated_rows(eval_split(len(corpus.queries), p["n_eval_queries"], seed))
    Q, rel = corpus.queries[rows], corpus.relevant[rows]
    today, _ = balance_sweep(train, corpus.items, Q, [(CCSA_REG, p["batch_size"])], exact=exact_ip_topk(Q, corpus.items,
                             p["k"]), relevant=rel, split=split, n_chunks=p["n_chunks"], chunk_size=p["chunk_size"],
                             k=p["k"], m=p["m"], shortlist=p["shortlist"], progress=False, seed=seed, steps=p["steps"],
                             temperature=p["temperature"], lr=p["lr"], device="cpu")
    committed = pd.DataFrame(results["by_reg"])
    out = []
    for part in ("dev",):
        sel = lambda d: d[(d["reg"] == CCSA_REG) & (d["batch_size"] == p["batch_size"]) & (d["split"] == part)]  # noqa: E731
        c = sel(committed[committed["seed"] == seed]).iloc[0]
        t = sel(today).iloc[0]
        cell = f"by_reg λ={CCSA_REG:g} B={p['batch_size']} seed {seed} {part}"
        out.append(Witness("06_ccsa_balance", f"{cell} imbalance", float(c["imbalance"]), float(t["imbalance"]),
                           rel_tol=CCSA_IMBALANCE_REL_TOL, abs_tol=0.0))
        out.append(Witness("06_ccsa_balance", f"{cell} recall", float(c["recall"]), float(t["recall"]),
                           abs_tol=CCSA_RECALL_ABS_TOL))
    return out


# ------------------------------------------------------------------------------------------------
# 07: ANNCUR's test recall at one budget, averaged over every run (07 saves per-method summaries, not runs)
# ------------------------------------------------------------------------------------------------
#: Notebook 07's witnessed budget: ANNCUR (dev-chosen k_i per run) at B_CE = 50, k = 1 and 10, over all runs.
COMPARE_BUDGET = 50


@register("07_compare_methods")
def _compare(results: Mapping[str, Any]) -> list[Witness]:
    from xenbench.studies.adacur import METHODS, adacur_protocol_runs, chosen_on_dev

    p = results["params"]
    setup, splits = _store_setup(p, p["split_seeds"])
    k_values = [k for k in (1, 10) if k in p["k_values"]]
    today = chosen_on_dev(adacur_protocol_runs(setup.M, splits, p["anchor_seeds"], [COMPARE_BUDGET], methods=["anncur"],
                                               k_values=k_values, device="cpu"))
    summary = pd.DataFrame(results["summary"])
    out = []
    for k in k_values:
        c = summary[(summary["method"] == METHODS["anncur"]) & (summary["budget"] == COMPARE_BUDGET)
                    & (summary["k"] == k)]
        t = today[(today["method"] == METHODS["anncur"]) & (today["k"] == k)]
        out.append(Witness("07_compare_methods", f"summary ANNCUR B_CE={COMPARE_BUDGET} k={k} mean test recall over "
                                                 f"{len(t)} runs", float(c["mean"].iloc[0]), float(t["recall"].mean())))
    return out
