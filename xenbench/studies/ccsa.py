"""Notebook 06's driver: the balance of CCSA's inverted index against λ and the batch size, its retrieval against faiss
baselines of equal bytes, and binary codes in HNSW, repeated over seeds ([CCSA] §4.1.3 RQ3, §4.1.2 RQ2).

The estimator is :mod:`xenbench.methods.ccsa` (:class:`~xenbench.methods.ccsa.CompositeCodeAE`,
:class:`~xenbench.methods.ccsa.CodeIndex`); this module trains and searches it as the notebook does
(:func:`balance_sweep`, :func:`train_to_convergence`), runs the faiss baselines (:func:`faiss_baselines`,
:func:`binary_hnsw`) through the same exact re-ranking (:func:`exact_rerank`) and accounting
(:func:`retrieval_metrics`), and repeats everything per seed (:func:`study`, :func:`over_seeds`).

References
----------
.. [CCSA] Lassance, Formal, Clinchant. "Composite Code Sparse Autoencoders for first stage retrieval":
   §3.2 (retrieval), §4.1.2 (RQ2: binary codes in HNSW), §4.1.3 (RQ3, Fig. 2/3: balance vs λ and B).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from xenbench.errors import ParameterError
from xenbench.methods.ccsa import (
    CodeIndex,
    CompositeCodeAE,
    activation_frequency,
    code_bytes,
    code_candidates,
    code_usage,
    expected_uniformity_sq,
    imbalance_factor,
    ur_noise_floor,
)
from xenbench.studies.protocol import Split

__all__ = ["Study", "balance_sweep", "binary_hnsw", "eval_split", "evaluated_rows", "exact_ip_topk", "exact_rerank",
           "faiss_baselines", "faiss_ivf", "over_seeds", "pq_for_bytes", "retrieval_metrics", "study",
           "train_to_convergence"]


# ==============================================================================================
# retrieval with exact re-ranking, and its accounting (shared by CCSA and every baseline)
# ==============================================================================================
# Work of one query, defined once for every method:
#   postings  = posting-list entries (or compressed codes) the query touches; an item in two of its lists counts twice;
#   scored    = UNIQUE items whose float vector is scored exactly (inner product) in the re-ranking step.
# Every method ends with the same step: exact inner product over its unique candidates, best m kept.

def pq_for_bytes(n_chunks: int, chunk_size: int, d: int) -> tuple[int, int]:
    """(M, nbits) of a product quantizer whose codes take exactly as many bits as a C × L composite code.

    M · nbits = C · log2(L); prefers nbits = 8 (faiss's fast path), else M = C sub-quantizers of log2(L)
    bits, else the largest nbits <= 16 that works; M must divide d.
    """
    bits = int(round(code_bytes(n_chunks, chunk_size) * 8))
    for nbits in (8, int(np.log2(chunk_size)), *range(16, 0, -1)):
        if bits % nbits == 0 and d % (bits // nbits) == 0 and nbits <= 16:
            return bits // nbits, nbits
    raise ParameterError("n_chunks", f"C, L such that C·log2(L) = {bits} bits split into M sub-quantizers "
                         f"dividing d = {d}", (n_chunks, chunk_size), "pq_for_bytes")


def exact_ip_topk(queries: np.ndarray, items: np.ndarray, k: int) -> np.ndarray:
    """Rows of the k items with the largest inner product per query (faiss flat index), int64 (nq, k)."""
    import faiss

    index = faiss.IndexFlatIP(items.shape[1])
    index.add(np.ascontiguousarray(items, dtype=np.float32))
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)[1].astype(np.int64)


def exact_rerank(queries: np.ndarray, items: np.ndarray, candidates: Sequence[np.ndarray], m: int) -> np.ndarray:
    """Exact re-ranking: per query, the m best of its UNIQUE candidate rows by inner product (ties to the lower
    row); -1 pads when fewer than m candidates. int64 (nq, m)."""
    if len(candidates) != len(queries):
        raise ParameterError("candidates", f"one array of item rows per query ({len(queries)})", len(candidates),
                             "exact_rerank")
    out = np.full((len(queries), m), -1, np.int64)
    for r, cand in enumerate(candidates):
        cand = np.unique(np.asarray(cand, dtype=np.int64))
        cand = cand[cand >= 0]
        if cand.size == 0:
            continue
        s = items[cand] @ queries[r]  # float32, like faiss's exact scores
        top = np.lexsort((cand, -s))[:m]
        out[r, :top.size] = cand[top]
    return out


def _pad(I: np.ndarray) -> np.ndarray:
    return np.where(I < 0, -1, I).astype(np.int64)

def eval_split(n_queries: int, n_eval: int, seed: int) -> Split:
    """The evaluated query rows of one seed: ``n_eval`` rows drawn without replacement (seeded), half of them
    (``n_eval // 2``, seeded) **dev** rows (settings are chosen there) and the rest **test** rows.

    CCSA trains on every item and query (the paper's setting), so no query rows are held out for training:
    ``anchor`` is empty.
    """
    n_eval = min(int(n_eval), n_queries)
    rows = np.sort(np.random.default_rng(seed).choice(n_queries, n_eval, replace=False))
    is_dev = np.zeros(n_eval, bool)
    is_dev[np.random.default_rng(seed + 1).permutation(n_eval)[:n_eval // 2]] = True
    return Split(np.empty(0, np.int64), rows[is_dev].astype(np.int64), rows[~is_dev].astype(np.int64), int(seed))


def evaluated_rows(split: Split) -> tuple[np.ndarray, np.ndarray]:
    """(rows, part): the dev and test rows of ``split`` together, sorted, and each row's part ("dev" or "test"),
    the ``split`` labels :func:`retrieval_metrics` reads."""
    rows = np.union1d(split.dev, split.test)
    return rows, np.where(np.isin(rows, split.dev), "dev", "test").astype(object)


def retrieval_metrics(I: np.ndarray, exact: np.ndarray, relevant, split: np.ndarray, *, k: int,
                      postings: np.ndarray, scored: np.ndarray, sharing: np.ndarray | None = None) -> list[dict]:
    """One row per split: Top-k-Recall@m against the exact DE top-k (|T ∩ S| / k over the m returned S), Recall@k
    against the gold labels (of the first k returned; :func:`xenbench.metrics.label_recall`), each with its
    standard error over queries, and the mean ``postings`` and ``scored`` work (defined above) and, when given, of
    ``sharing`` (items sharing a code with the query)."""
    from xenbench.metrics import label_recall

    T = exact[:, :k]
    topk = np.array([np.isin(T[r], I[r][I[r] >= 0]).mean() for r in range(len(I))])
    has = np.asarray(relevant.sum(axis=1)).ravel() > 0
    gold = np.full(len(I), np.nan)
    gold[has] = label_recall(I[has], relevant[has], k, per_query=True)
    rows = []
    for name in ("dev", "test"):
        sel = split == name
        g = gold[sel][~np.isnan(gold[sel])]
        rows.append({"split": name, "n_queries": int(sel.sum()),
                     "recall": float(topk[sel].mean()), "recall_se": float(topk[sel].std(ddof=1) / np.sqrt(sel.sum())),
                     "gold_recall": float(g.mean()), "gold_recall_se": float(g.std(ddof=1) / np.sqrt(g.size)),
                     "postings": float(postings[sel].mean()), "scored": float(scored[sel].mean()),
                     **({} if sharing is None else {"sharing": float(sharing[sel].mean())})})
    return rows


# ==============================================================================================
# experiments ([CCSA] §4.1.3 RQ3, §4.1.2 RQ2)
# ==============================================================================================
def balance_sweep(train: np.ndarray, items: np.ndarray, queries: np.ndarray, settings: Sequence[tuple[float, int]], *,
                  exact: np.ndarray, relevant, split: np.ndarray, n_chunks: int = 16, chunk_size: int = 64,
                  k: int = 10, m: int = 100, shortlist: int | None = None, progress: bool = True,
                  **fit_params) -> tuple[pd.DataFrame, dict[tuple[float, int], np.ndarray]]:
    """Train one CCSA per (λ, B) on ``train`` (queries and items), index the items, search the queries.

    Search = the unique items of the query's C posting lists (the ``shortlist`` R with the most shared codes
    when given, as the faiss PQ methods keep their R best), re-ranked by exact inner product (:func:`exact_rerank`),
    best m returned.

    Returns
    -------
    results : DataFrame
        One row per (λ, B, split): ``objective`` (:func:`ccsa_loss`), ``reg``, ``batch_size``, ``steps``,
        ``bytes_per_item``, ``imbalance`` (:func:`imbalance_factor`), ``code_usage`` (:func:`code_usage`),
        ``recon`` / ``mse`` / ``uniformity_norm`` (last pass), ``sharing`` (mean items sharing a code with the query:
        the work an imbalanced index adds), ``shortlist`` (R or None) and the columns
        of :func:`retrieval_metrics`.
    frequencies : dict
        (λ, B) -> :func:`activation_frequency` of its index (Fig. 2/3).
    """
    rows, frequencies = [], {}
    for reg, batch in settings:
        ae = CompositeCodeAE(n_chunks, chunk_size, reg=reg, batch_size=batch, progress=progress,
                             **fit_params).fit(train)
        index = CodeIndex(n_chunks, chunk_size).add(ae.encode(items))
        cands, postings, sharing = code_candidates(index, ae.encode(queries), shortlist)
        I = exact_rerank(queries, items, cands, m)
        scored = np.array([c.size for c in cands])
        last = ae.history_[-1]
        head = {"method": "CCSA", "objective": ae.objective, "reg": float(reg), "batch_size": int(batch),
                "steps": ae.steps_, "code_usage": code_usage(index.list_sizes),
                "bytes_per_item": code_bytes(n_chunks, chunk_size), "imbalance": imbalance_factor(index.list_sizes),
                "recon": last["recon"], "mse": last["mse"], "uniformity_norm": last["uniformity_norm"],
                "shortlist": None if shortlist is None else int(shortlist)}
        for row in retrieval_metrics(I, exact, relevant, split, k=k, postings=postings, scored=scored, sharing=sharing):
            rows.append({**head, **row})
        frequencies[float(reg), int(batch)] = activation_frequency(index.list_sizes)
    return pd.DataFrame(rows), frequencies


def train_to_convergence(train: np.ndarray, items: np.ndarray, *, n_chunks: int, chunk_sizes: Sequence[int],
                         batch_size: int, max_steps: int, tol: float, window: int, reg: float = 0.0,
                         seed: int = 0, progress: bool = True, **fit_params) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]]:
    """Does the λ = ``reg`` autoencoder collapse ([CCSA] §3.1.3: "the network could ignore most of the dimensions")
    once trained to convergence? One model per L in ``chunk_sizes``, trained until the :class:`CompositeCodeAE`
    ``tol``/``window`` rule stops it or ``max_steps``, then the items indexed.

    Returns
    -------
    table : DataFrame
        One row per L: ``n_chunks``, ``chunk_size``, ``batch_size``, ``reg``, ``objective``, ``steps``,
        ``max_steps``, ``converged``, ``tol``, ``window``, ``imbalance`` and ``code_usage`` of the item index,
        ``mse`` (mean of the last window), ``uniformity_norm`` (L_UR of the training batches / noise floor, last
        window), ``expected_uniformity_norm`` (what a batch drawn from the index would give,
        sqrt(:func:`expected_uniformity_sq`)) and ``detectable_imbalance`` ((L − 1)/(B − 1): the imbalance excess
        F − 1 at which a batch's L_UR² is twice its noise floor).
    curves : dict
        L -> :attr:`CompositeCodeAE.curve_` (the loss curve).
    """
    rows, curves = [], {}
    for L in chunk_sizes:
        ae = CompositeCodeAE(n_chunks, int(L), reg=reg, batch_size=batch_size, steps=max_steps, tol=tol, window=window,
                             seed=seed, progress=progress, **fit_params).fit(train)
        sizes = CodeIndex(n_chunks, int(L)).add(ae.encode(items)).list_sizes
        tail = ae.curve_.tail(window)
        F = imbalance_factor(sizes)
        B = min(int(batch_size), len(train))
        rows.append({"n_chunks": int(n_chunks), "chunk_size": int(L), "batch_size": B, "reg": float(reg),
                     "objective": ae.objective, "steps": ae.steps_, "max_steps": int(max_steps),
                     "converged": bool(ae.converged_), "tol": float(tol), "window": int(window), "imbalance": F,
                     "code_usage": code_usage(sizes), "mse": float(tail["mse"].mean()),
                     "uniformity_norm": float(tail["uniformity"].mean()) / ur_noise_floor(n_chunks, int(L)),
                     "expected_uniformity_norm": float(np.sqrt(expected_uniformity_sq(F, n_chunks, int(L), B))),
                     "detectable_imbalance": (int(L) - 1) / (B - 1)})
        curves[int(L)] = ae.curve_
    return pd.DataFrame(rows), curves


def faiss_baselines(train: np.ndarray, items: np.ndarray, queries: np.ndarray, n_lists: int, nprobes: Sequence[int], *,
                    exact: np.ndarray, relevant, split: np.ndarray, pq: tuple[int, int], k: int = 10, m: int = 100,
                    shortlist: int = 1000, seed: int = 0) -> pd.DataFrame:
    """faiss IVF-Flat, IVF-PQ and OPQ+IVF-PQ (``n_lists`` k-means lists, inner product) trained on ``train``.

    Each probes w lists; IVF-Flat's candidates are all their items (its exact search is the re-ranking), IVF-PQ's
    the ``shortlist`` R best of them by the PQ approximation (with PQ codes of ``pq`` = (M, nbits), the bytes of a CCSA code:
    :func:`pq_for_bytes`). All are then re-ranked by exact inner product like CCSA (:func:`exact_rerank`).
    ``postings`` = items in the w lists, ``scored`` = unique candidates re-ranked.
    """
    import faiss

    X = np.ascontiguousarray(items, dtype=np.float32)
    Q = np.ascontiguousarray(queries, dtype=np.float32)
    T = np.ascontiguousarray(train, dtype=np.float32)
    d = X.shape[1]
    M, nbits = pq
    # k-means of the IVF lists and of each PQ sub-quantizer (OPQ's included, faiss_ivf); OPQ's d x d rotation: with
    # fewer than d training rows faiss's OPQ training corrupts the heap and kills the process (measured: d = 384, 383
    # rows crash, 384 train).
    need = max(int(n_lists), 2**int(nbits), d)
    if len(T) < need:
        raise ParameterError("train", f"at least {need} rows to train {n_lists} IVF lists, PQ{M}x{nbits} and OPQ",
                             f"{len(T)} rows", "faiss_baselines")
    specs = {"IVF-Flat": f"IVF{n_lists},Flat", "IVF-PQ": f"IVF{n_lists},PQ{M}x{nbits}",
             "OPQ+IVF-PQ": f"OPQ{M},IVF{n_lists},PQ{M}x{nbits}"}
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # OpenMP spin-waits on a busy 2-core machine; one thread is faster and deterministic
    try:
        return _faiss_rows(specs, T, X, Q, d, n_lists, nprobes, M, nbits, exact, relevant, split, k, m, shortlist, seed)
    finally:
        faiss.omp_set_num_threads(threads)


def faiss_ivf(spec: str, train: np.ndarray, items: np.ndarray, seed: int = 0) -> tuple:
    """A faiss IVF index of ``spec`` (``IVF{n},Flat``, ``IVF{n},PQ{M}x{b}``, ``OPQ{M},IVF{n},PQ{M}x{b}``; inner
    product) trained on ``train`` with k-means seeded by ``seed``, holding ``items``: ``(index, its IVF layer)``.

    An IVF-PQ skips faiss's polysemous training. That step only reorders each sub-quantizer's centroids, so that
    Hamming distances between codes follow the true distances, which only a search with a Hamming threshold
    (``polysemous_ht``) uses; the distances and ids of a search stay the same. Measured on notebook 06's full
    baselines (seed 0): the same rows, exactly, in 32 s instead of 68 s.

    OPQ learns its rotation R together with the sub-quantizers' codebooks, alternately minimizing one distortion
    [OPQ]; faiss's ``OPQMatrix`` does so with codebooks of 8-bit codes unless given a product quantizer, whatever the
    index's codes. Here it is given one of the index's M and nbits: R is fitted for codes of the size the index stores.
    With 8-bit codes (every committed profile of notebook 06) that is faiss's own training, bit for bit; with fewer
    bits (``quick``'s PQ4x3) it trains 2^nbits centroids per sub-quantizer instead of 256 (6.8 instead of 14.8 CPU-s
    on 12,048 x 384 rows, one thread).

    References
    ----------
    .. [OPQ] Ge, He, Ke, Sun. "Optimized Product Quantization for Approximate Nearest Neighbor Search", CVPR 2013
       (the non-parametric solution: R and the codebooks, alternately).
    """
    import faiss

    index = faiss.index_factory(train.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    ivf.cp.seed = seed
    if hasattr(ivf, "pq"):
        ivf.pq.cp.seed = seed
        ivf.do_polysemous_training = False
    opq = faiss.downcast_VectorTransform(index.chain.at(0)) if isinstance(index, faiss.IndexPreTransform) else None
    own_pq = None  # alive until training ends: faiss keeps a bare pointer to it
    if isinstance(opq, faiss.OPQMatrix) and hasattr(ivf, "pq"):
        own_pq = opq.pq = faiss.ProductQuantizer(opq.d_out, opq.M, ivf.pq.nbits)
    try:
        index.train(np.ascontiguousarray(train, dtype=np.float32))
    finally:
        if own_pq is not None:
            opq.pq = None
    index.add(np.ascontiguousarray(items, dtype=np.float32))
    return index, ivf


def _faiss_rows(specs, T, X, Q, d, n_lists, nprobes, M, nbits, exact, relevant, split, k, m, shortlist, seed):
    import faiss

    rows = []
    for method, spec in specs.items():
        index, ivf = faiss_ivf(spec, T, X, seed)
        sizes = np.array([ivf.invlists.list_size(i) for i in range(n_lists)])
        q_in = index.chain.at(0).apply(Q) if isinstance(index, faiss.IndexPreTransform) else Q
        _, nearest = ivf.quantizer.search(np.ascontiguousarray(q_in), max(nprobes))
        for w in nprobes:
            ivf.nprobe = int(w)
            postings = sizes[nearest[:, :w]].sum(axis=1)
            if method == "IVF-Flat":  # it scores every item of its w lists exactly: that IS the re-ranking
                I = _pad(index.search(Q, m)[1])
                scored = postings
            else:
                _, cand = index.search(Q, shortlist)
                I = exact_rerank(Q, X, list(cand), m)
                scored = np.array([np.unique(c[c >= 0]).size for c in cand])
            head = {"method": method, "nprobe": int(w),
                    "bytes_per_item": float(d * 4 if method == "IVF-Flat" else M * nbits / 8),
                    "imbalance": imbalance_factor(sizes)}
            for row in retrieval_metrics(I, exact, relevant, split, k=k, postings=postings, scored=scored):
                rows.append({**head, **row})
    return pd.DataFrame(rows)


def binary_hnsw(train: np.ndarray, items: np.ndarray, queries: np.ndarray, n_bits: int, *, exact: np.ndarray,
                relevant, split: np.ndarray, k: int = 10, m: int = 100, shortlist: int = 100, hnsw_m: int = 32,
                ef_search: int = 128, seed: int = 0, progress: bool = True, **fit_params) -> pd.DataFrame:
    """RQ2 ([CCSA] §4.1.2): binary CCSA codes (C = ``n_bits`` chunks of L = 2, τ = 1, λ = 0) in faiss's binary HNSW
    (Hamming) against HNSW over PQ codes of the same bytes (M = n_bits / 8 sub-quantizers of 8 bits).

    Each returns its ``shortlist`` R nearest by its codes, re-ranked by exact inner product (:func:`exact_rerank`).
    ``postings`` is NaN (graph search has no lists), ``scored`` = R.
    """
    import faiss

    if n_bits % 8:
        raise ParameterError("n_bits", "a multiple of 8 (whole bytes per item)", n_bits, "binary_hnsw")
    X = np.ascontiguousarray(items, dtype=np.float32)
    Q = np.ascontiguousarray(queries, dtype=np.float32)
    fit_params = {**fit_params, "temperature": 1.0}
    ae = CompositeCodeAE(n_bits, 2, reg=0.0, seed=seed, progress=progress, **fit_params).fit(train)
    bx, bq = np.packbits(ae.encode(X).astype(np.uint8), axis=1), np.packbits(ae.encode(Q).astype(np.uint8), axis=1)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # graph construction is deterministic single-threaded only
    try:
        cand_b, cand_p = _hnsw_candidates(bx, bq, X, Q, train, n_bits, hnsw_m, ef_search, shortlist, seed)
    finally:
        faiss.omp_set_num_threads(threads)
    rows = []
    for method, cand in (("CCSA-binary+HNSW", cand_b), ("PQ+HNSW", cand_p)):
        I = exact_rerank(Q, X, list(cand), m)
        scored = np.array([np.unique(c[c >= 0]).size for c in cand])
        head = {"method": method, "bytes_per_item": n_bits / 8, "shortlist": int(shortlist)}
        for row in retrieval_metrics(I, exact, relevant, split, k=k, postings=np.full(len(Q), np.nan), scored=scored):
            rows.append({**head, **row})
    return pd.DataFrame(rows)


def _hnsw_candidates(bx, bq, X, Q, train, n_bits, hnsw_m, ef_search, shortlist, seed):
    import faiss

    hb = faiss.IndexBinaryHNSW(n_bits, hnsw_m)
    hb.add(bx)
    hb.hnsw.efSearch = max(ef_search, shortlist)
    cand_b = hb.search(bq, shortlist)[1]
    hp = faiss.IndexHNSWPQ(X.shape[1], n_bits // 8, hnsw_m)  # L2 on unit vectors orders like inner product
    faiss.downcast_index(hp.storage).pq.cp.seed = seed
    hp.train(np.ascontiguousarray(train, dtype=np.float32))
    hp.add(X)
    hp.hnsw.efSearch = max(ef_search, shortlist)
    cand_p = hp.search(Q, shortlist)[1]
    return cand_b, cand_p


# ==============================================================================================
# the notebook-06 study over seeds (each seed: query split, CCSA initialization/batches/noise, k-means)
# ==============================================================================================
@dataclass
class Study:
    """Tables of :func:`study`, each with a ``seed`` column (one row per seed, setting and split).

    ``by_reg``: the λ sweep at batch size B; ``by_batch``: the B sweep at λ = ``reg_for_batches`` (sharing the
    models the λ sweep already trained); ``baselines``: :func:`faiss_baselines`; ``binary``: :func:`binary_hnsw`.
    ``frequencies``: (λ, B) -> :func:`activation_frequency` of the first seed's index (Fig. 2/3).
    ``paper_objective``: the λ sweep at batch size B under the paper's literal objective (``objective="paper"``,
    its own learning rate), ``paper_frequencies`` its first seed's λ -> :func:`activation_frequency` (both empty
    without ``paper_regs``).
    """

    by_reg: pd.DataFrame
    by_batch: pd.DataFrame
    baselines: pd.DataFrame
    binary: pd.DataFrame
    frequencies: dict[tuple[float, int], np.ndarray]
    paper_objective: pd.DataFrame = field(default_factory=pd.DataFrame)
    paper_frequencies: dict[float, np.ndarray] = field(default_factory=dict)


def study(train: np.ndarray, items: np.ndarray, queries: np.ndarray, relevant, *, seeds: Sequence[int],
          regs: Sequence[float], batch_size: int, batch_sizes: Sequence[int], reg_for_batches: float,
          n_chunks: int, chunk_size: int, nprobes: Sequence[int], binary_bits: int, n_eval_queries: int,
          k: int = 10, m: int = 100, shortlist: int = 1000, paper_regs: Sequence[float] = (),
          paper_lr: float = 1e-4, progress: bool = True, **fit_params) -> Study:
    """Notebook 06's experiments, repeated per seed in ``seeds``, so every number has a spread across seeds.

    Per seed s: :func:`eval_split` draws ``n_eval_queries`` rows of ``queries`` (half dev, half test) with seed s;
    every CCSA model (``fit_params``: steps, temperature, lr, device, ...) and the faiss k-means are seeded with s.
    ``regs`` and ``batch_sizes`` train on the normalized objective; ``paper_regs`` (the paper's grid
    {0, 0.1, 1, 10, 100}) adds a λ sweep at B = ``batch_size`` on the paper's literal objective with Adam's
    learning rate ``paper_lr`` (the paper's 1e-4), everything else alike.

    Parameters
    ----------
    train : ndarray (N_train, d)
        What the models are trained on (the paper: queries and documents).
    items, queries : ndarray (N, d), (nq, d)
        The indexed items and every query; ``relevant`` (nq, N) sparse gold labels.
    """
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ParameterError("seeds", "a non-empty list of distinct ints", seeds, "study")
    settings_reg = [(float(r), int(batch_size)) for r in regs]
    settings_batch = [(float(reg_for_batches), int(b)) for b in batch_sizes]
    extra = [s for s in settings_batch if s not in settings_reg]
    pq = pq_for_bytes(n_chunks, chunk_size, items.shape[1])
    tables: dict[str, list[pd.DataFrame]] = {"models": [], "baselines": [], "binary": [], "paper": []}
    frequencies: dict[tuple[float, int], np.ndarray] = {}
    paper_frequencies: dict[float, np.ndarray] = {}
    for seed in tqdm(seeds, desc="CCSA seeds", disable=not progress or len(seeds) == 1):
        rows, split = evaluated_rows(eval_split(len(queries), n_eval_queries, seed))
        Q, rel = queries[rows], relevant[rows]
        exact = exact_ip_topk(Q, items, k)
        common = dict(exact=exact, relevant=rel, split=split, k=k, m=m)
        # CCSA keeps the same R as the PQ methods, so every method re-ranks equally many items exactly.
        models, freq = balance_sweep(train, items, Q, settings_reg + extra, n_chunks=n_chunks, chunk_size=chunk_size,
                                     shortlist=shortlist, seed=seed, progress=progress, **common, **fit_params)
        tables["models"].append(models.assign(seed=seed))
        if len(paper_regs):
            paper, pfreq = balance_sweep(train, items, Q, [(float(r), int(batch_size)) for r in paper_regs],
                                         n_chunks=n_chunks, chunk_size=chunk_size, shortlist=shortlist, seed=seed,
                                         progress=progress, **common, **{**fit_params, "lr": paper_lr,
                                                                         "objective": "paper"})
            tables["paper"].append(paper.assign(seed=seed))
            paper_frequencies = paper_frequencies or {reg: f for (reg, _), f in pfreq.items()}
        tables["baselines"].append(faiss_baselines(train, items, Q, chunk_size, nprobes, pq=pq, shortlist=shortlist,
                                                   seed=seed, **common).assign(seed=seed))
        tables["binary"].append(binary_hnsw(train, items, Q, binary_bits, shortlist=min(shortlist, len(items)),
                                            batch_size=batch_size, seed=seed, progress=progress, **common, **fit_params)
                                .assign(seed=seed))
        if not frequencies:
            frequencies = freq
    models = pd.concat(tables["models"], ignore_index=True)
    in_reg = pd.Series(list(zip(models["reg"], models["batch_size"]))).isin(settings_reg).to_numpy()
    in_batch = pd.Series(list(zip(models["reg"], models["batch_size"]))).isin(settings_batch).to_numpy()
    return Study(by_reg=models[in_reg].reset_index(drop=True), by_batch=models[in_batch].reset_index(drop=True),
                 baselines=pd.concat(tables["baselines"], ignore_index=True),
                 binary=pd.concat(tables["binary"], ignore_index=True), frequencies=frequencies,
                 paper_objective=(pd.concat(tables["paper"], ignore_index=True) if tables["paper"] else pd.DataFrame()),
                 paper_frequencies=paper_frequencies)


def over_seeds(rows: pd.DataFrame, by: Sequence[str], columns: Sequence[str] = ("recall", "gold_recall", "imbalance",
               "scored", "postings", "sharing"), confidence: float = 0.95) -> pd.DataFrame:
    """Mean over seeds per group ``by`` of each of ``columns`` present, with ``<col>_lo``/``<col>_hi`` (t-interval
    across seeds; NaN with one seed) and ``n_seeds``. With one seed, ``recall_se``/``gold_recall_se`` stay the
    per-query standard errors; with several they become the standard error across seeds."""
    from xenbench.studies.protocol import t_interval

    out = []
    for key, g in rows.groupby(list(by), sort=False, dropna=False):
        rec = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        for col in (c for c in columns if c in g):
            mean, lo, hi = t_interval(g[col].to_numpy(np.float64), confidence)
            rec.update({col: mean, f"{col}_lo": lo, f"{col}_hi": hi})
            if f"{col}_se" in g:
                rec[f"{col}_se"] = (float(g[f"{col}_se"].iloc[0]) if len(g) == 1 else
                                    float(g[col].std(ddof=1) / np.sqrt(len(g))))
        for col in ("bytes_per_item", "shortlist"):
            if col in g:
                rec[col] = g[col].iloc[0]
        rec["n_seeds"] = int(g["seed"].nunique()) if "seed" in g else 1
        out.append(rec)
    return pd.DataFrame(out)
