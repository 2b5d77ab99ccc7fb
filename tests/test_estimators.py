"""One check for every estimator with ``fit``, in scikit-learn's spirit (``check_estimator``, scaled down):

* ``fit`` returns the estimator itself;
* a call that needs the fitted state, made before ``fit``, raises :class:`NotFittedError` (an
  ``AttributeError``) with the message format "This <Class> instance is not fitted yet; call ... first.";
* two estimators built with the same seed and fitted on the same data give identical results.

Inputs are tiny (a few dozen items) so the whole table runs in seconds on a CPU. Estimators without a
seed (PEFA, the retrievers) are deterministic: the same-seed check then asserts that refitting does
not change the result.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from xenbench.methods.adacur import AdaCur, SearchOptions
from xenbench.methods.axn import Axn
from xenbench.methods.ccsa import CodeIndex, CompositeCodeAE
from xenbench.methods.cur import AnnCur
from xenbench.data.datasets import Item, Query
from xenbench.errors import NotFittedError
from xenbench.methods.mf import MatrixFactorization
from xenbench.methods.pefa import PefaXL, PefaXS
from xenbench.models.retrievers import DualEncoder, TfidfRetriever

RNG = np.random.default_rng(0)
N_QUERIES, N_ITEMS, D = 12, 30, 6
M = (RNG.standard_normal((N_QUERIES, D)) @ RNG.standard_normal((D, N_ITEMS))).astype(np.float32)  # rank-D scores
R_ANC, M_TEST = M[:8], M[8:]
V = RNG.standard_normal((N_ITEMS, D))  # item embeddings (AXN)


def _unit(X: np.ndarray) -> np.ndarray:
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


P, Q, T = _unit(RNG.standard_normal((N_ITEMS, D))), _unit(RNG.standard_normal((10, D))), _unit(RNG.standard_normal((4, D)))
Y = sp.csr_matrix((np.ones(10), (np.arange(10), RNG.integers(0, N_ITEMS, 10))), shape=(10, N_ITEMS))
OBS_ROWS = np.repeat(np.arange(10), 5)
OBS_COLS = np.concatenate([RNG.choice(N_ITEMS, 5, replace=False) for _ in range(10)])
OBS_VALUES = RNG.standard_normal(OBS_ROWS.size)
ITEMS = [Item(f"i{k}", f"title {k}", f"text about thing {k} and {k % 3}") for k in range(8)]
QUERIES = [Query(f"q{k}", f"thing {k}") for k in range(3)]


@dataclass
class Case:
    id: str
    make: Callable[[int], Any]            # seed -> unfitted estimator
    fit: Callable[[Any], Any]             # estimator -> what fit returned
    result: Callable[[Any], Any]          # fitted estimator -> arrays to compare
    unfitted: Callable[[Any], Any]        # unfitted estimator -> a call that needs fit
    hint: str = ""                        # the "call ... first" of the NotFittedError message


CASES = [
    Case("AnnCur", lambda s: AnnCur(5, seed=s), lambda e: e.fit(R_ANC),
         lambda e: e.search(M_TEST[:, e.anchor_items_], 3), lambda e: e.transform(np.zeros((2, 5))), "fit(R_anc)"),
    Case("AdaCur-softmax", lambda s: AdaCur(8, n_rounds=2, sampler="softmax", seed=s, options=SearchOptions(device="cpu")),
         lambda e: e.fit(R_ANC), lambda e: e.search(M_TEST, 3), lambda e: e.search(M_TEST, 3), "fit(R_anc)"),
    Case("AdaCur-reference", lambda s: AdaCur(8, n_anchor_items=4, n_rounds=2, seed=s,
                                              options=SearchOptions(implementation="reference")),
         lambda e: e.fit(R_ANC), lambda e: e.run(M_TEST).I, lambda e: e.run(M_TEST), "fit(R_anc)"),
    Case("Axn", lambda s: Axn(8, n_rounds=2, seed=s, options=SearchOptions(device="cpu")), lambda e: e.fit(V),
         lambda e: e.search(M_TEST, 3), lambda e: e.search(M_TEST, 3), "fit(V)"),
    Case("MatrixFactorization", lambda s: MatrixFactorization("ind", epochs=2, batch_size=16, seed=s,
                                                               progress=False, device="cpu"),
         lambda e: e.fit(Q, P, OBS_ROWS, OBS_COLS, OBS_VALUES),
         lambda e: (e.item_embeddings_, e.transform_queries(T)), lambda e: e.transform_queries(T), "fit"),
    Case("CompositeCodeAE", lambda s: CompositeCodeAE(2, 4, batch_size=8, epochs=2, seed=s, progress=False,
                                                      device="cpu"),
         lambda e: e.fit(P), lambda e: (e.encode(P), e.reconstruct(T)), lambda e: e.encode(P), "fit(X)"),
    Case("PefaXS", lambda s: PefaXS(0.5), lambda e: e.fit(P, Q, Y), lambda e: e.search(T, 5),
         lambda e: e.search(T, 5), "fit(P, Q, Y)"),
    Case("PefaXL", lambda s: PefaXL(0.5, n_neighbors=3), lambda e: e.fit(P, Q, Y), lambda e: e.search(T, 5),
         lambda e: e.search(T, 5), "fit(P, Q, Y)"),
    Case("TfidfRetriever", lambda s: TfidfRetriever(), lambda e: e.fit(ITEMS), lambda e: e.search(QUERIES, 3),
         lambda e: e.search(QUERIES, 3), "fit(items)"),
    Case("DualEncoder", lambda s: DualEncoder(device="cpu", cache_dir=False), lambda e: e.fit(ITEMS),
         lambda e: e.search(QUERIES, 3), lambda e: e.search(QUERIES, 3), "fit(items)"),
]


def _flat(x: Any) -> list[np.ndarray]:
    if isinstance(x, (tuple, list)):
        return [a for part in x for a in _flat(part)]
    return [np.asarray(x)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fit_returns_self(case):
    est = case.make(0)
    assert case.fit(est) is est


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_unfitted_call_raises_not_fitted_error(case):
    est = case.make(0)
    with pytest.raises(NotFittedError, match=rf"This {type(est).__name__} instance is not fitted yet; "
                                             rf"call {case.hint.replace('(', '[(]').replace(')', '[)]')} first\."):
        case.unfitted(est)
    assert issubclass(NotFittedError, AttributeError)  # hasattr-style callers keep working


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_same_seed_same_result(case):
    first, second = (case.result(case.fit(case.make(7))) for _ in range(2))
    for a, b in zip(_flat(first), _flat(second), strict=True):
        np.testing.assert_array_equal(a, b)


def test_code_index_needs_add_first():
    index = CodeIndex(2, 4)
    with pytest.raises(NotFittedError, match=r"CodeIndex\.search needs an index; call add\(codes\) first\."):
        index.search(np.zeros((1, 2), np.int64), 1)
    assert index.add(np.zeros((3, 2), np.int64)) is index


SEARCHERS = [c for c in CASES if c.id not in ("AdaCur-reference", "MatrixFactorization", "CompositeCodeAE")]


@pytest.mark.parametrize("case", SEARCHERS, ids=lambda c: c.id)
def test_every_search_follows_the_retrieval_contract(case):
    """search(...) -> (D float32 (nq, k), I int64 (nq, k)), best first, statistics returned elsewhere."""
    out = case.result(case.fit(case.make(0)))
    assert isinstance(out, tuple) and len(out) == 2
    D, I = out
    assert D.dtype == np.float32 and I.dtype == np.int64 and D.shape == I.shape and D.ndim == 2
    valid = I >= 0
    assert (np.diff(np.where(valid, D, -np.inf), axis=1)[valid[:, 1:]] <= 0).all()  # descending where filled


def test_code_index_search_follows_the_retrieval_contract():
    codes = np.random.default_rng(0).integers(0, 4, size=(30, 3))
    D, I = CodeIndex(3, 4).add(codes).search(codes[:5], 4)
    assert D.dtype == np.float32 and I.dtype == np.int64 and D.shape == I.shape == (5, 4)
    assert (np.diff(D, axis=1) <= 0).all() and (D[:, 0] == 3).all()  # each item shares all 3 codes with itself
