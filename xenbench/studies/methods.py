"""The one registry of methods compared at equal CE budget (notebooks 03, 04 and 07), open to a method of yours.

Every entry (:class:`Comparable`) names a method, its family and paper, what it needs (anchor queries, a first
stage, training queries, a corpus graph, embeddings), where it sits in the pipeline, whether it makes random draws
given the split, and how to build it from one split's fitted state (:class:`SplitState`) at a budget: its variants
(:class:`Variant`, e.g. one per k_i of ANNCUR's grid), each answering one shared call ``search(counter, k)`` under a
CE-call counter (:class:`~xenbench.metrics.BudgetCounter`). :data:`REGISTRY` holds every method of the seeds' papers
and GAR; notebook 03 compares :data:`ADACUR_KEYS` (:data:`xenbench.studies.adacur.COMPARABLE`); 04 builds its
baselines (``adacur_nosplit``, ``de_rerank``) from here, while AXN's λ chosen on dev, with MF-IND trained per run, stays
04's protocol (:func:`xenbench.studies.axn.axn_protocol_runs`; the ``axn_de`` entry is one λ per variant, and 07 times
it); 07 runs 03's CE-stage entries, 04's AXN and the first stages' re-ranks, and reads its stage table, seed-free set
and labels from here; GAR and your own methods join 07 as ``extra_methods``.

Your own method (:class:`Method`): a class whose instances are made without arguments, with ``fit(state)`` on a
:class:`SplitState` (returns self) and ``search(counter, k) -> (D, I)`` that reads every CE score through
``counter`` (budget ``counter.budget``) and returns the top-k of ``state.test``'s rows by exact score, best first.
Optional class attributes: ``label`` (its name in tables; default the class name) and ``deterministic`` (True: no
random draw given the split, run once per split; False: once per anchor seed, ``state.seed`` differing). Give it to
:func:`xenbench.studies.compare.compare_protocol_runs` as ``extra_methods=[MyMethod]`` or as an import path
``"mypkg.mymod:MyMethod"`` (notebook 07's ``extra_methods``), checked by :func:`load_method` before any work; a
run that spends more than its budget or returns items it did not score (or outside the corpus) is refused by
:func:`checked_search` with one line.

References
----------
.. [ANNCUR] Yadav et al., EMNLP 2022, §3.2. .. [ADACUR] Yadav et al., Findings of EMNLP 2023, Fig. 2.
.. [AXN] Yadav et al., ICLR 2024, Eq. 4–7. .. [PEFA] Chang et al., WSDM 2024. .. [CCSA] Lassance et al.
.. [GAR] MacAvaney, Tonellotto, Macdonald, "Adaptive Re-Ranking with a Corpus Graph", CIKM 2022, Alg. 1.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from xenbench.errors import BudgetExceededError, ParameterError
from xenbench.methods.adacur import AdaCur, SearchOptions, TopK, make_sampler
from xenbench.methods.baselines import anncur_with_budget, rerank_baseline
from xenbench.methods.cur import AnnCur
from xenbench.metrics import BudgetCounter

__all__ = ["ADACUR_KEYS", "NEEDS", "REGISTRY", "SPLIT_FRACTIONS", "Comparable", "Method", "Search", "SplitState",
           "Variant", "checked_search", "extra_entry", "load_method", "split_grid"]

#: ``search(counter, k) -> (D float32 (nq, k), I int64 (nq, k))``: the top-k of every query by exact score, every CE
#: call read through ``counter`` (a fresh :class:`~xenbench.metrics.BudgetCounter` of the rows with budget B_CE).
Search = Callable[[BudgetCounter, int], tuple[np.ndarray, np.ndarray]]

#: What a method can need besides the CE: anchor queries (R_anc = M[anchor], the offline index), a first stage's
#: ranking, labelled training queries, queries to train on (MF-IND), embeddings (the DE's V and U), a corpus graph.
NEEDS: tuple[str, ...] = ("anchor queries", "first stage", "labelled queries", "training queries", "embeddings",
                          "corpus graph")

#: Grid of k_i / B_CE over which ANNCUR and ADACUR (split) take their best split per (budget, k).
SPLIT_FRACTIONS: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75)


@dataclass(frozen=True)
class SplitState:
    """What every method is built from: one split's offline index, its query rows and settings.

    Attributes
    ----------
    R_anc : ndarray of shape (k_q, n_items)
        M[split.anchor], the offline index.
    test : int ndarray of shape (nq,)
        The rows searched (a split's test or dev rows): the keys of per-query randomness; row j of the counter is
        ``test[j]``.
    orders : dict
        ``"de_scores"`` / ``"tfidf_scores"`` / a first stage's name -> its ranking of the rows, best first (the top
        max(budgets) items), for the methods that need it.
    n_rounds, split_fractions, temperature, seed
        N_r of ADACUR and AXN, ANNCUR's k_i grid, SoftMax's temperature, the run's seed.
    options : SearchOptions
        ADACUR's and AXN's engine options (the device).
    V : ndarray of shape (n_items, d), optional
        The DE's item embeddings (AXN, and yours).
    U : ndarray of shape (nq, d), optional
        The DE's embeddings of the rows.
    u_param : ndarray of shape (nq, d), optional
        AXN's u_param of the rows: β · U with β from the anchor queries (:func:`xenbench.methods.axn.prior_scale`).
    graph : pyterrier_adaptive.CorpusGraph, optional
        The corpus graph of GAR (:func:`xenbench.methods.gar.item_graph`).
    lambdas : sequence of float
        AXN's λ values, one variant each.
    """

    R_anc: np.ndarray
    test: np.ndarray
    orders: Mapping[str, np.ndarray]
    n_rounds: int
    split_fractions: Sequence[float]
    temperature: float
    seed: int
    options: SearchOptions
    V: np.ndarray | None = None
    U: np.ndarray | None = None
    u_param: np.ndarray | None = None
    graph: Any = None
    lambdas: Sequence[float] = (0.5,)


class Variant(NamedTuple):
    """One configuration of a method at a budget: its setting (k_i: 0 for re-rank, B_CE for No-Split; AXN's λ),
    N_r (None when not ADACUR) and its search."""

    n_anchor_items: float
    n_rounds: int | None
    search: Search


@dataclass(frozen=True)
class Comparable:
    """One method of the registry.

    Attributes
    ----------
    label : str
        Display name (the ``method`` column and the plots).
    variants : callable (SplitState, budget) -> list of Variant, or None
        Its configurations at a budget; with several (a k_i grid), the driver reports the best (03) or the one chosen
        on dev (07). None: its notebook driver runs it (AXN with MF-IND, trained per run by 04's protocol).
    needs : str, optional
        The ranking in ``SplitState.orders`` it reads (``"de_scores"`` or ``"tfidf_scores"``).
    deterministic : bool
        Its result depends on the split only, not on the seed (a retriever's first round or ranking and greedy
        rounds: no random draw). The protocol runs it once per split, and it counts one run per split
        (:mod:`xenbench.studies.protocol`); ``tests/test_adacur_study.py`` checks that two seeds give the same result.
    family, paper : str
        What kind of method it is and where it comes from.
    requires : tuple of str
        What it needs besides the CE (words of :data:`NEEDS`).
    stage : str
        Where it sits in the pipeline (``"CE stage"``, ``"first stage: DE"``, ...).
    uses_de : bool
        It reads the DE at query time (and pays its query embedding in 07's wall time).
    """

    label: str
    variants: Callable[[SplitState, int], list[Variant]] | None
    needs: str | None = None
    deterministic: bool = False
    family: str = ""
    paper: str = ""
    requires: tuple[str, ...] = field(default=())
    stage: str = "CE stage"
    uses_de: bool = False


def _top(result: tuple[np.ndarray, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    D, I = result
    return D[:, :k], I[:, :k]


def split_grid(budget: int, fractions: Sequence[float], lo: int, hi: int, k_q: int) -> list[int]:
    """Distinct k_i = round(f · B) in [lo, hi], without k_i = k_q (ill-conditioned, [ANNCUR] §B.2)."""
    grid = sorted({int(round(f * budget)) for f in fractions})
    grid = [k for k in grid if lo <= k <= hi and k != k_q]
    if not grid:  # every grid point fell out: take the nearest admissible k_i
        grid = [min(max(lo, int(round(fractions[0] * budget))), hi)]
    return grid


def _anncur(state: SplitState, budget: int) -> list[Variant]:
    """ANNCUR with k_i random anchors, then B_CE − k_i items by ŝ ([ANNCUR] §3.2), per k_i of the grid."""
    def variant(k_i: int) -> Variant:
        cur = AnnCur(k_i, seed=state.seed).fit(state.R_anc)
        return Variant(k_i, None, lambda counter, k: _top(anncur_with_budget(cur, counter, budget), k))

    return [variant(k_i) for k_i in split_grid(budget, state.split_fractions, 1, budget, state.R_anc.shape[0])]


def _adacur_search(ada: AdaCur, candidates: np.ndarray | None, test: np.ndarray) -> Search:
    return lambda counter, k: ada.search(counter, k, candidates=candidates, query_ids=test)


def _adacur_split(sampler: str, *, de_start: bool = False) -> Callable[[SplitState, int], list[Variant]]:
    """ADACUR (split) with ``sampler`` per k_i of the grid; ``de_start``: ANNCUR_DE, one round whose
    anchors are the DE's top k_i items ([ADACUR] Fig. 2)."""
    def variants(state: SplitState, budget: int) -> list[Variant]:
        n_rounds = 1 if de_start else state.n_rounds
        candidates = state.orders["de_scores"] if de_start else None
        out = []
        for k_i in split_grid(budget, state.split_fractions, n_rounds, budget - 1, state.R_anc.shape[0]):
            if k_i < n_rounds or k_i >= budget:
                continue
            ada = AdaCur(budget, n_anchor_items=k_i, n_rounds=n_rounds,
                         sampler=make_sampler(sampler, "recall_vs_budget", temperature=state.temperature),
                         seed=state.seed, options=state.options).fit(state.R_anc)
            out.append(Variant(k_i, None if de_start else n_rounds, _adacur_search(ada, candidates, state.test)))
        return out

    return variants


def _adacur_nosplit(*, de_start: bool = False) -> Callable[[SplitState, int], list[Variant]]:
    """ADACUR^No-Split with TopK; ``de_start``: round 1 takes the DE's top k_s items."""
    def variants(state: SplitState, budget: int) -> list[Variant]:
        if budget < state.n_rounds:
            return []
        ada = AdaCur(budget, n_rounds=state.n_rounds, sampler=TopK(), seed=state.seed,
                     options=state.options).fit(state.R_anc)
        candidates = state.orders["de_scores"] if de_start else None
        return [Variant(budget, state.n_rounds, _adacur_search(ada, candidates, state.test))]

    return variants


def _rerank(scores: str) -> Callable[[SplitState, int], list[Variant]]:
    """Retrieve-and-rerank: the retriever's top B_CE items scored with the CE."""
    def variants(state: SplitState, budget: int) -> list[Variant]:
        order = state.orders[scores]
        return [Variant(0, None, lambda counter, k: _top(rerank_baseline(counter, order, budget), k))]

    return variants


def _axn_de(state: SplitState, budget: int) -> list[Variant]:
    """AXN on the DE's embeddings, round 1 the DE's top items, one variant per λ of ``state.lambdas`` ([AXN] Eq. 7)."""
    from xenbench.methods.axn import Axn

    if state.V is None or state.u_param is None:
        raise ParameterError("state", "a SplitState with V and u_param (AXN's embeddings)", "none given", "AXN DE")
    out = []
    for lam in state.lambdas:
        axn = Axn(budget, n_rounds=min(state.n_rounds, budget), lam=float(lam), seed=state.seed,
                  options=state.options).fit(state.V)

        def search(counter: BudgetCounter, k: int, axn: Any = axn, lam: float = float(lam)) -> Any:
            res = axn.run(counter, u_param=state.u_param if lam > 0 else None, candidates=state.orders["de_scores"],
                          query_ids=state.test)
            return _top((res.D, res.I), k)

        out.append(Variant(float(lam), state.n_rounds, search))
    return out


def _gar(state: SplitState, budget: int) -> list[Variant]:
    """GAR over the corpus graph, its initial ranking the DE's ([GAR] Alg. 1, batches of 16)."""
    from xenbench.methods.gar import Gar

    if state.graph is None:
        raise ParameterError("state", "a SplitState with a corpus graph (xenbench.methods.gar.item_graph)",
                             "none given", "GAR DE")
    gar = Gar(budget).fit(state.graph)
    order = state.orders["de_scores"]
    return [Variant(0, None, lambda counter, k: gar.search(counter, k, candidates=order))]


def _gar_anncur(state: SplitState, budget: int) -> list[Variant]:
    """GAR seeded by ANNCUR: k_i random anchor items scored, ANNCUR's ŝ = e_qᵀ E_I ranks the other items ([ANNCUR] §2.4),
    and that ranking is GAR's initial ranking for the remaining B_CE − k_i calls over the corpus graph ([GAR] Alg. 1);
    the top-k by exact score among everything scored. One variant per k_i of the grid (chosen on dev in 07). No DE at
    query time: the graph is built offline from the items alone."""
    from xenbench.methods.gar import Gar
    from xenbench.metrics import topk_indices

    if state.graph is None:
        raise ParameterError("state", "a SplitState with a corpus graph (xenbench.methods.gar.item_graph)",
                             "none given", "GAR ANNCUR")

    def variant(k_i: int) -> Variant:
        cur = AnnCur(k_i, seed=state.seed).fit(state.R_anc)
        gar = Gar(budget - k_i).fit(state.graph)

        def search(counter: BudgetCounter, k: int) -> tuple[np.ndarray, np.ndarray]:
            nq, anchors = counter.n_queries, cur.anchor_items_
            anchor_items = np.broadcast_to(anchors, (nq, anchors.size))
            s_hat = cur.transform(counter.score(anchor_items).astype(np.float64))  # (nq, n_items)
            s_hat[:, anchors] = -np.inf  # scored already: GAR starts from the others
            _, I_gar = gar.search(counter, budget - k_i, candidates=topk_indices(s_hat, budget - k_i), exclude=anchors)
            items = np.concatenate([anchor_items, I_gar], axis=1)
            exact = counter.score(items).astype(np.float64)  # every pair was charged once already: free
            top = topk_indices(exact, k)
            rows = np.arange(nq)[:, None]
            return exact[rows, top].astype(np.float32), items[rows, top]

        return Variant(k_i, None, search)

    return [variant(k_i) for k_i in split_grid(budget, state.split_fractions, 1, budget - 1, state.R_anc.shape[0])]


_CUR = "CUR matrix factorization"
_PAPERS = {"anncur": "Yadav et al., EMNLP 2022", "adacur": "Yadav et al., Findings of EMNLP 2023",
           "axn": "Yadav et al., ICLR 2024", "pefa": "Chang et al., WSDM 2024", "ccsa": "Lassance et al.",
           "gar": "MacAvaney, Tonellotto, Macdonald, CIKM 2022"}

#: Every method: key -> entry, in the order they are run and drawn. 03 compares :data:`ADACUR_KEYS`; 07 the CE-stage
#: entries, the AXN entries and the first stages' re-ranks (the first stages themselves are built per split by 07).
REGISTRY: dict[str, Comparable] = {
    "anncur": Comparable("ANNCUR", _anncur, family=_CUR, paper=_PAPERS["anncur"], requires=("anchor queries",)),
    "anncur_de": Comparable("ANNCUR DE", _adacur_split("topk", de_start=True), "de_scores", deterministic=True,
                            family=_CUR, paper=_PAPERS["adacur"], requires=("anchor queries", "first stage"),
                            uses_de=True),
    "adacur_topk": Comparable("ADACUR TopK", _adacur_split("topk"), family=_CUR, paper=_PAPERS["adacur"],
                              requires=("anchor queries",)),
    "adacur_softmax": Comparable("ADACUR SoftMax", _adacur_split("softmax"), family=_CUR, paper=_PAPERS["adacur"],
                                 requires=("anchor queries",)),
    "adacur_nosplit": Comparable("ADACUR TopK No-Split", _adacur_nosplit(), family=_CUR, paper=_PAPERS["adacur"],
                                 requires=("anchor queries",)),
    "adacur_de_nosplit": Comparable("ADACUR DE+TopK No-Split", _adacur_nosplit(de_start=True), "de_scores",
                                    deterministic=True, family=_CUR, paper=_PAPERS["adacur"],
                                    requires=("anchor queries", "first stage"), uses_de=True),
    "de_rerank": Comparable("DE re-rank", _rerank("de_scores"), "de_scores", deterministic=True,
                            family="retrieve and re-rank", paper=_PAPERS["anncur"], requires=("first stage",),
                            stage="first stage: DE", uses_de=True),
    "tfidf_rerank": Comparable("TF-IDF re-rank", _rerank("tfidf_scores"), "tfidf_scores", deterministic=True,
                               family="retrieve and re-rank", paper=_PAPERS["anncur"], requires=("first stage",),
                               stage="first stage: TF-IDF"),
    "axn_de": Comparable("AXN DE", _axn_de, "de_scores", deterministic=True, family="sparse matrix factorization",
                         paper=_PAPERS["axn"], requires=("anchor queries", "first stage", "embeddings"),
                         uses_de=True),
    "axn_de_mf_ind": Comparable("AXN DE, MF-IND", None, "de_scores", deterministic=True,
                                family="sparse matrix factorization", paper=_PAPERS["axn"],
                                requires=("anchor queries", "first stage", "embeddings", "training queries"),
                                uses_de=True),
    "pefa_xs_rerank": Comparable("PEFA-XS re-rank", _rerank("PEFA-XS"), "PEFA-XS", deterministic=True,
                                 family="retrieve and re-rank", paper=_PAPERS["pefa"],
                                 requires=("first stage", "labelled queries", "embeddings"),
                                 stage="first stage: PEFA", uses_de=True),
    "pefa_xl_rerank": Comparable("PEFA-XL re-rank", _rerank("PEFA-XL"), "PEFA-XL", deterministic=True,
                                 family="retrieve and re-rank", paper=_PAPERS["pefa"],
                                 requires=("first stage", "labelled queries", "embeddings"),
                                 stage="first stage: PEFA", uses_de=True),
    "pq_rerank": Comparable("PQ codes re-rank", _rerank("PQ"), "PQ", deterministic=True,
                            family="retrieve and re-rank", paper=_PAPERS["ccsa"], requires=("first stage", "embeddings"),
                            stage="first stage: compressed", uses_de=True),
    "gar": Comparable("GAR DE", _gar, "de_scores", deterministic=True, family="graph adaptive re-ranking",
                      paper=_PAPERS["gar"], requires=("first stage", "corpus graph", "embeddings"), uses_de=True),
    "gar_anncur": Comparable("GAR ANNCUR", _gar_anncur, family="graph adaptive re-ranking seeded by CUR",
                             paper=f"{_PAPERS['gar']} + {_PAPERS['anncur']}", requires=("anchor queries", "corpus graph")),
}

#: The methods of notebook 03 (:data:`xenbench.studies.adacur.COMPARABLE`).
ADACUR_KEYS: tuple[str, ...] = ("anncur", "anncur_de", "adacur_topk", "adacur_softmax", "adacur_nosplit",
                                "adacur_de_nosplit", "de_rerank", "tfidf_rerank")


# ==============================================================================================
# your own method
# ==============================================================================================
@runtime_checkable
class Method(Protocol):
    """A method of yours: made without arguments, ``fit`` on one split's state, ``search`` under the CE-call counter.

    ``fit(state)`` receives a :class:`SplitState` (R_anc, the rows searched, the first stages' rankings, the DE's
    embeddings, the seed) and returns self; ``search(counter, k)`` returns ``(D float (nq, k), I int (nq, k))``, the
    top-k items of each row by exact score, best first, having read every score through ``counter.score(items,
    rows)`` within ``counter.budget`` calls per row.
    """

    def fit(self, state: SplitState) -> Any: ...

    def search(self, counter: BudgetCounter, k: int) -> tuple[np.ndarray, np.ndarray]: ...


_EXPECTED = "an import path 'module:Class' of a method class (made without arguments, fit(state), search(counter, k))"


def _refuse(spec: Any, why: str, name: str, owner: str) -> ParameterError:
    return ParameterError(name, f"{_EXPECTED}; {why}", spec, owner)


def _positional(fn: Any) -> int | None:
    """Required positional parameters of a bound method (None when its signature cannot be read)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def load_method(spec: Any, *, name: str = "extra_methods", owner: str = "compare_protocol_runs") -> type:
    """The method class an import path ``"pkg.mod:Class"`` names (or the class itself), checked without running it.

    Checked: the module imports, the name is a class, it is made without arguments, ``fit`` takes one argument (the
    state) and ``search`` two (counter, k); a registry key is refused here (:func:`extra_entry` takes those).

    Raises
    ------
    ParameterError
        One line naming ``spec`` and what is wrong.
    """
    if isinstance(spec, str):
        module, sep, attr = spec.partition(":")
        if not sep or not module or not attr:
            raise _refuse(spec, "no ':' between module and class", name, owner)
        try:
            obj = importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - any import failure is the user's module, said in one line
            raise _refuse(spec, f"module {module!r} does not import ({type(err).__name__}: {err})", name,
                          owner) from None
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise _refuse(spec, f"{module!r} has no {attr!r}", name, owner)
            obj = getattr(obj, part)
    else:
        obj = spec
    if not inspect.isclass(obj):
        raise _refuse(spec, f"it names a {type(obj).__name__}, not a class", name, owner)
    init = _positional(obj.__init__)
    if init is not None and init > 1:  # self
        raise _refuse(spec, f"{obj.__name__}() needs {init - 1} argument(s)", name, owner)
    for method, n in (("fit", 2), ("search", 3)):  # with self
        fn = getattr(obj, method, None)
        if not callable(fn):
            raise _refuse(spec, f"{obj.__name__} has no {method}()", name, owner)
        got = _positional(fn)
        if got is not None and got != n:
            raise _refuse(spec, f"{obj.__name__}.{method} takes {got - 1} required argument(s), not {n - 1}", name,
                          owner)
    return obj


def extra_entry(spec: Any, *, name: str = "extra_methods", owner: str = "compare_protocol_runs") -> Comparable:
    """The registry entry of an extra method: a registry key (``"gar"``), an import path or a method class.

    A class's entry builds one instance per split, rows and budget (``cls().fit(state)``); its label is the class's
    ``label`` attribute (default its name), its ``deterministic`` attribute (default True) says whether it runs once
    per split or once per anchor seed.
    """
    if isinstance(spec, str) and ":" not in spec:
        if spec not in REGISTRY or REGISTRY[spec].variants is None:
            runnable = [k for k, m in REGISTRY.items() if m.variants is not None]
            raise ParameterError(name, f"a registry key ({', '.join(runnable)}) or {_EXPECTED}", spec, owner)
        return REGISTRY[spec]
    cls = load_method(spec, name=name, owner=owner)
    label = str(getattr(cls, "label", cls.__name__))

    def variants(state: SplitState, budget: int) -> list[Variant]:
        fitted = cls().fit(state)
        return [Variant(float("nan"), None, checked_search(fitted, label, name=name))]

    return Comparable(label, variants, "de_scores", deterministic=bool(getattr(cls, "deterministic", True)),
                      family="yours", paper=f"{cls.__module__}:{cls.__qualname__}", requires=("first stage",),
                      stage="CE stage", uses_de=True)


def checked_search(method: Any, label: str, *, name: str = "extra_methods") -> Search:
    """``method.search`` refused with one line when it exceeds the budget, returns the wrong shape, or returns an item
    outside the corpus or one it did not score through the counter."""
    def search(counter: BudgetCounter, k: int) -> tuple[np.ndarray, np.ndarray]:
        try:
            D, I = method.search(counter, k)
        except BudgetExceededError as err:
            raise ParameterError(name, f"a method that stays within its budget of {counter.budget} CE calls per "
                                 f"query; {label} asked for more ({err})", label, "search") from None
        D, I = np.asarray(D), np.asarray(I)
        shape = (counter.n_queries, k)
        if I.shape != shape or D.shape != shape or not np.issubdtype(I.dtype, np.integer):
            raise ParameterError(name, f"a method whose search returns (D, I) of shape {shape}, I of ints", f"{label}: "
                                 f"D {D.shape}, I {I.dtype} {I.shape}", "search")
        if I.min() < 0 or I.max() >= counter.n_items:
            raise ParameterError(name, f"a method that returns items of the corpus, in [0, {counter.n_items})",
                                 f"{label}: item {int(I.min() if I.min() < 0 else I.max())}", "search")
        if not counter.scored[np.arange(shape[0])[:, None], I].all():
            raise ParameterError(name, "a method that returns only items it scored through the counter (ranked by "
                                 "exact score)", f"{label}: an item it did not score", "search")
        return D.astype(np.float32), I.astype(np.int64)

    return search
