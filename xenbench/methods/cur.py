"""ANNCUR: CUR decomposition of the query-item CE score matrix for k-NN search.

Offline, k_q anchor queries Q_anc are scored against every item, R_anc = f(Q_anc, I), and k_i anchor
items I_anc are drawn; U = pinv(R_anc[:, I_anc]) and the item embeddings E_I = U · R_anc. Online, a test
query is scored against the anchor items only, e_q = C_test = f(q, I_anc), and every item gets the
approximate score ŝ = e_qᵀ E_I.

References
----------
.. [ANNCUR] Yadav, Monath, Angell, Zaheer, McCallum. "Efficient Nearest Neighbor Search for
   Cross-Encoder Models using Matrix Factorization", EMNLP 2022, §2.2–2.4 (method), §B.2
   (ill-conditioning when k_q = k_i).
.. [GTZ97] Goreinov, Tyrtyshnikov, Zamarashkin. "A theory of pseudoskeleton approximations", 1997.
.. [MD09] Mahoney, Drineas. "CUR matrix decompositions for improved data analysis", PNAS 2009.
"""
from __future__ import annotations

import logging

import numpy as np

from xenbench._validation import check_array, check_int, check_is_fitted, check_seed
from xenbench.errors import NotFittedError, ParameterError
from xenbench.metrics import topk_indices

__all__ = ["AnnCur", "BUDGET_RULES", "NotFittedError", "PINV_RULES", "approximation_error", "oracle_cur",
           "pinv_cutoff", "pinv_rtol", "rerank_candidates"]

logger = logging.getLogger(__name__)


def pinv_rtol(shape: tuple[int, ...], dtype: np.dtype | type = np.float64) -> float:
    """Relative singular-value cut-off ``max(m, n) * eps(dtype)`` used for every pinv here.

    ``dtype`` is the precision the scores were *stored* in (R_anc's dtype as given to ``fit``), not
    the float64 the algebra runs in: float32 scores carry relative noise of order eps(float32) =
    1.2e-7, so singular values below ``max(m, n) * eps(float32) * σ_max`` are rounding noise of the
    stored scores, and inverting them would amplify that noise by up to 1/eps(float64) instead of
    1/eps(float32) (the usual numerical-rank rule, e.g. NumPy's ``matrix_rank`` default, applied
    to the input precision). Fixed explicitly (NumPy's and PyTorch's defaults differ) so that the
    numpy reference and the batched torch code of ADACUR drop exactly the same singular values.

    Examples
    --------
    >>> bool(pinv_rtol((3, 10), np.float32) == 10 * float(np.finfo(np.float32).eps))
    True
    """
    return float(max(shape[-2:]) * np.finfo(np.dtype(dtype)).eps)


#: The two rules for U = pinv(R_anc[:, I_anc]), by the relative cut-off below which singular values count as zero:
#:
#: ``"cutoff"`` (xenbench's default): ``max(k_q, k_i) * eps(stored dtype)`` (:func:`pinv_rtol`). Singular values below
#: it are rounding noise of the stored (float32) scores; inverting them amplifies that noise by up to 1/eps(float64).
#: It removes most of the k_q = k_i spike of [ANNCUR] §B.2 (a square random intersection has tiny singular values).
#: ``"plain"``: NumPy's default ``np.linalg.pinv`` (relative cut-off 1e-15), as the ANNCUR authors' code computes U
#: (``np.linalg.pinv(intersect_mat)`` in iesl/anncur ``eval/matrix_approx_zeshel.py``); it keeps the noise-level
#: singular values and shows the §B.2 spike as the paper does.
PINV_RULES: tuple[str, ...] = ("cutoff", "plain")
_PLAIN_RCOND = 1e-15  # numpy.linalg.pinv's default rcond

#: Which items ANNCUR re-ranks at a CE budget B_CE with k_i anchor calls (k_r = B_CE − k_i re-ranking calls):
#:
#: ``"free anchors"`` (default; [ADACUR] §2.2, footnote 1): the k_r *non-anchor* items with the highest ŝ are scored,
#: and the k_i anchors, already scored, join the final exact re-ranking for free (B_CE items ranked).
#: ``"authors' code"``: the k_r items with the highest ŝ over *all* items are re-ranked, as the ANNCUR authors' code
#: does ([ANNCUR] Fig. 6's Top-k-Recall@k_r); an anchor among them takes a slot (costing no new call), and an anchor
#: outside them is not returned. Recall under "free anchors" is never lower.
BUDGET_RULES: tuple[str, ...] = ("free anchors", "authors' code")


def pinv_cutoff(shape: tuple[int, ...], dtype: np.dtype | type, pinv: str = "cutoff") -> float:
    """Relative singular-value cut-off of the pinv rule ``pinv`` (:data:`PINV_RULES`) for a matrix of ``shape`` whose
    scores were stored as ``dtype``: singular values ``<= cutoff * σ_max`` are treated as zero.

    Examples
    --------
    >>> pinv_cutoff((3, 10), np.float32, "plain"), pinv_cutoff((3, 10), np.float32) == pinv_rtol((3, 10), np.float32)
    (1e-15, True)
    """
    if pinv == "cutoff":
        return pinv_rtol(shape, dtype)
    if pinv == "plain":
        return _PLAIN_RCOND
    raise ParameterError("pinv", f"one of {list(PINV_RULES)}", pinv, "pinv_cutoff")


def rerank_candidates(S_hat: np.ndarray, anchors: np.ndarray, budget: int,
                      budget_rule: str = "free anchors") -> np.ndarray:
    """The items whose exact scores ANNCUR ranks at a CE budget, under ``budget_rule`` (:data:`BUDGET_RULES`).

    Parameters
    ----------
    S_hat : ndarray of shape (nq, n_items)
        Approximate scores ŝ.
    anchors : int ndarray of shape (k_i,)
        I_anc (already scored: k_i calls per query).
    budget : int
        B_CE, in [k_i, n_items]; k_r = B_CE − k_i re-ranking calls.
    budget_rule : str
        ``"free anchors"``: the anchors, then the k_r non-anchor items with the highest ŝ (B_CE items);
        ``"authors' code"``: the k_r items with the highest ŝ over all items (k_r items, anchors included if they
        rank there).

    Returns
    -------
    items : int64 ndarray of shape (nq, B_CE) or (nq, k_r)
        Distinct items per row (ties in ŝ to the lower item index, :func:`xenbench.metrics.topk_indices`).

    Examples
    --------
    >>> S_hat = np.array([[5.0, 4.0, 3.0, 2.0, 1.0]])  # the anchor, item 0, has the highest ŝ
    >>> rerank_candidates(S_hat, np.array([0]), 3).tolist(), rerank_candidates(S_hat, np.array([0]), 3, "authors' code").tolist()
    ([[0, 1, 2]], [[0, 1]])
    """
    owner = "rerank_candidates"
    if budget_rule not in BUDGET_RULES:
        raise ParameterError("budget_rule", f"one of {list(BUDGET_RULES)}", budget_rule, owner)
    S_hat = np.asarray(S_hat, dtype=np.float64)
    anchors = np.asarray(anchors, dtype=np.int64)
    nq, n_items = S_hat.shape
    k_r = check_int(budget, "budget", anchors.size, n_items, owner, "n_items") - anchors.size
    if budget_rule == "authors' code":
        return topk_indices(S_hat, k_r) if k_r else np.zeros((nq, 0), np.int64)
    keys = S_hat.copy()
    keys[:, anchors] = -np.inf  # already scored: free to re-rank, never re-retrieved
    extra = topk_indices(keys, k_r) if k_r else np.zeros((nq, 0), np.int64)
    return np.concatenate([np.broadcast_to(anchors, (nq, anchors.size)), extra], axis=1)


def _check_R_anc(R_anc: object, owner: str) -> np.ndarray:
    return check_array(R_anc, "R_anc", owner, expected="a non-empty float array of shape (k_q, n_items)",
                       finite_expected="finite")


def check_item_indices(items: object, n_items: int, name: str, owner: str,
                       length: int | None = None, bound: str = "n_items") -> np.ndarray:
    """Validate a 1-d array of distinct indices in [0, n_items); returns it as int64."""
    arr = np.asarray(items)
    ok = arr.ndim == 1 and np.issubdtype(arr.dtype, np.integer) and (length is None or arr.size == length)
    if not ok:
        shape = "(n,)" if length is None else f"({length},)"
        raise ParameterError(name, f"a 1-d int array of shape {shape}", f"{arr.dtype} array of shape {arr.shape}",
                             owner)
    if arr.size and (arr.min() < 0 or arr.max() >= n_items):
        raise ParameterError(name, f"indices in [0, {bound}={n_items})",
                             f"values in [{arr.min()}, {arr.max()}]", owner)
    if np.unique(arr).size != arr.size:
        raise ParameterError(name, "distinct indices", "an array with repeated indices", owner)
    return arr.astype(np.int64)


class AnnCur:
    """ANNCUR index: approximate CE scores of all items from a query's scores on k_i anchor items.

    Parameters
    ----------
    n_anchor_items : int
        k_i, the number of anchor items I_anc (test-time CE calls per query); ``1 <= k_i <= n_items``.
        Avoid k_i = k_q: R_anc[:, I_anc] is then square and ill-conditioned ([ANNCUR] §B.2).
    anchor_items : "random" or int ndarray of shape (k_i,), default "random"
        "random": k_i distinct items uniformly at random with ``seed`` ([ANNCUR] §2.2); or explicit
        item indices (e.g. top items of a dual encoder, ANNCUR_DE in [ADACUR] §3).
    seed : int, default 0
        Seed of the random anchor draw.
    pinv : {"cutoff", "plain"}, default "cutoff"
        How U = pinv(R_anc[:, I_anc]) treats tiny singular values (:data:`PINV_RULES`): xenbench's cut-off at the
        stored scores' precision, or NumPy's plain pinv as the ANNCUR authors' code.
    budget_rule : {"free anchors", "authors' code"}, default "free anchors"
        Which items are re-ranked at a CE budget (:data:`BUDGET_RULES`, :meth:`rerank_candidates`).

    Attributes
    ----------
    anchor_items_ : ndarray of shape (k_i,), int64
        I_anc, in draw order; column j of ``C_test`` must hold the scores of ``anchor_items_[j]``.
    U_ : ndarray of shape (k_i, k_q), float64
        U = pinv(R_anc[:, I_anc]), the joining matrix.
    item_embeddings_ : ndarray of shape (k_i, n_items), float64
        E_I = U · R_anc; column i is the latent embedding of item i.
    n_items_ : int
        |I|.
    score_dtype_ : numpy dtype
        dtype of R_anc as given; its eps sets the pinv cut-off (:func:`pinv_rtol`).

    References
    ----------
    [ANNCUR] §2.3 (offline indexing: E_I = U × R_anc), §2.4 (test time: ŝ = e_qᵀ E_I).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> M = rng.standard_normal((30, 2)) @ rng.standard_normal((2, 50))  # rank 2
    >>> cur = AnnCur(5, seed=0).fit(M[:10])
    >>> S = cur.transform(M[10:, cur.anchor_items_])
    >>> bool(np.allclose(S, M[10:]))
    True
    """

    def __init__(self, n_anchor_items: int, *, anchor_items: str | np.ndarray = "random", seed: int = 0,
                 pinv: str = "cutoff", budget_rule: str = "free anchors") -> None:
        self.n_anchor_items = n_anchor_items
        self.anchor_items = anchor_items
        self.seed = seed
        self.pinv = pinv
        self.budget_rule = budget_rule

    # -- parameters --------------------------------------------------------------------------
    def _validated_anchor_items(self, n_items: int) -> np.ndarray:
        owner = type(self).__name__
        k_i = check_int(self.n_anchor_items, "n_anchor_items", 1, n_items, owner, "n_items")
        if isinstance(self.anchor_items, str):
            if self.anchor_items != "random":
                raise ParameterError("anchor_items", "'random' or an int array of item indices",
                                     self.anchor_items, owner)
            check_seed(self.seed, owner)
            # Uniform without replacement ([ANNCUR] §2.2); the draw depends only on (seed, n_items, k_i).
            return np.random.default_rng(self.seed).choice(n_items, size=k_i, replace=False).astype(np.int64)
        return check_item_indices(self.anchor_items, n_items, "anchor_items", owner, length=k_i)

    # -- estimator API -----------------------------------------------------------------------
    def fit(self, R_anc: np.ndarray) -> "AnnCur":
        """Index the items: choose I_anc, U = pinv(R_anc[:, I_anc]) and E_I = U · R_anc.

        Parameters
        ----------
        R_anc : ndarray of shape (k_q, n_items)
            Exact CE scores of the k_q anchor queries Q_anc against all items.

        Returns
        -------
        self : AnnCur
        """
        owner = type(self).__name__
        R_anc = _check_R_anc(R_anc, owner)
        if self.pinv not in PINV_RULES:
            raise ParameterError("pinv", f"one of {list(PINV_RULES)}", self.pinv, owner)
        if self.budget_rule not in BUDGET_RULES:
            raise ParameterError("budget_rule", f"one of {list(BUDGET_RULES)}", self.budget_rule, owner)
        self.score_dtype_ = R_anc.dtype  # stored precision: sets the pinv cut-off (pinv_rtol)
        R_anc = R_anc.astype(np.float64)
        anchors = self._validated_anchor_items(R_anc.shape[1])
        k_q, k_i = R_anc.shape[0], anchors.size
        if k_q == k_i:
            logger.warning("AnnCur: k_q == k_i == %d makes R_anc[:, I_anc] square and ill-conditioned "
                           "(ANNCUR §B.2); expect a large approximation error", k_q)
        intersection = R_anc[:, anchors]  # R_anc[:, I_anc], shape (k_q, k_i)
        self.anchor_items_ = anchors
        self.U_ = np.linalg.pinv(intersection, rtol=pinv_cutoff(intersection.shape, self.score_dtype_, self.pinv))
        self.item_embeddings_ = self.U_ @ R_anc  # E_I, (k_i, n_items)
        self.n_items_ = R_anc.shape[1]
        return self

    def _check_fitted(self) -> None:
        check_is_fitted(self, "item_embeddings_", "fit(R_anc)")

    def transform(self, C_test: np.ndarray) -> np.ndarray:
        """Approximate scores ŝ = C_test · E_I of the test queries on all items.

        Parameters
        ----------
        C_test : ndarray of shape (nq, k_i)
            Exact CE scores of the test queries on the anchor items, columns in the order of
            ``anchor_items_`` (the query embeddings e_q).

        Returns
        -------
        S_hat : ndarray of shape (nq, n_items), float64
        """
        self._check_fitted()
        C_test = np.asarray(C_test)
        k_i = self.anchor_items_.size
        if C_test.ndim != 2 or C_test.shape[1] != k_i or not np.issubdtype(C_test.dtype, np.floating):
            raise ParameterError("C_test", f"a float array of shape (nq, k_i={k_i})",
                                 f"{C_test.dtype} array of shape {C_test.shape}", f"{type(self).__name__}.transform")
        return C_test.astype(np.float64) @ self.item_embeddings_

    def rerank_candidates(self, S_hat: np.ndarray, budget: int) -> np.ndarray:
        """Items to rank by exact score at CE budget ``budget``, under ``budget_rule`` (:func:`rerank_candidates`).

        Parameters
        ----------
        S_hat : ndarray of shape (nq, n_items)
            :meth:`transform` of the test queries.
        budget : int
            B_CE, in [k_i, n_items].

        Returns
        -------
        items : int64 ndarray of shape (nq, B_CE) ("free anchors") or (nq, B_CE − k_i) ("authors' code")
        """
        self._check_fitted()
        return rerank_candidates(S_hat, self.anchor_items_, budget, self.budget_rule)

    def search(self, C_test: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k items by approximate score (faiss contract).

        Parameters
        ----------
        C_test : ndarray of shape (nq, k_i)
            Exact scores of the test queries on ``anchor_items_``.
        k : int
            Number of items to return, ``1 <= k <= n_items``.

        Returns
        -------
        D : ndarray of shape (nq, k), float32
            Approximate scores, descending.
        I : ndarray of shape (nq, k), int64
            Item indices; ties go to the lower index (see :mod:`xenbench.metrics`).
        """
        S_hat = self.transform(C_test)
        k = check_int(k, "k", 1, self.n_items_, f"{type(self).__name__}.search", "n_items")
        I = topk_indices(S_hat, k)
        return np.take_along_axis(S_hat, I, axis=1).astype(np.float32), I


def oracle_cur(M: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """CUR approximation with the Frobenius-optimal joining matrix U = pinv(C) · M · pinv(R).

    The "oracle" variant of [ANNCUR] §B.2 / [MD09]: it needs the whole of M, so it is an analysis
    tool (the best any U can do for these rows and columns), not a test-time method. For the same
    ``rows`` and ``cols`` its error is never above that of the skeleton U = pinv(M[rows, cols]).

    Parameters
    ----------
    M : ndarray of shape (n_queries, n_items)
        Full score matrix.
    rows : int ndarray of shape (k_q,)
        Row indices (anchor queries); R = M[rows, :].
    cols : int ndarray of shape (k_i,)
        Column indices (anchor items); C = M[:, cols].

    Returns
    -------
    M_hat : ndarray of shape (n_queries, n_items), float64
        M̃ = C · U · R.
    """
    M = np.asarray(M)
    if M.ndim != 2 or not np.issubdtype(M.dtype, np.floating):
        raise ParameterError("M", "a float array of shape (n_queries, n_items)",
                             f"{M.dtype} array of shape {M.shape}", "oracle_cur")
    dtype = M.dtype  # stored precision sets the pinv cut-off (pinv_rtol)
    M = M.astype(np.float64)
    rows = check_item_indices(rows, M.shape[0], "rows", "oracle_cur", bound="n_queries")
    cols = check_item_indices(cols, M.shape[1], "cols", "oracle_cur")
    C, R = M[:, cols], M[rows, :]
    U = np.linalg.pinv(C, rtol=pinv_rtol(C.shape, dtype)) @ M @ np.linalg.pinv(R, rtol=pinv_rtol(R.shape, dtype))
    return C @ U @ R


def approximation_error(M: np.ndarray, M_hat: np.ndarray) -> float:
    """Relative Frobenius error ‖M − M̃‖_F / ‖M‖_F ([ANNCUR] §3.3, §B.2).

    Parameters
    ----------
    M, M_hat : ndarray of shape (n_queries, n_items)
        Exact and approximate score matrices (e.g. held-out test queries only).

    Returns
    -------
    error : float
        0 for an exact reconstruction; 1 for M̃ = 0.

    Examples
    --------
    >>> approximation_error(np.array([[3.0, 4.0]]), np.array([[3.0, 0.0]]))
    0.8
    """
    M = np.asarray(M, dtype=np.float64)
    M_hat = np.asarray(M_hat, dtype=np.float64)
    if M.shape != M_hat.shape:
        raise ParameterError("M_hat", f"an array of the shape of M {M.shape}", f"shape {M_hat.shape}",
                             "approximation_error")
    norm = np.linalg.norm(M)
    if norm == 0:
        raise ParameterError("M", "a matrix with a non-zero Frobenius norm", "an all-zero matrix",
                             "approximation_error")
    return float(np.linalg.norm(M - M_hat) / norm)
