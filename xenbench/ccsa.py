"""CCSA: composite-code sparse autoencoders and their inverted index ([CCSA] §3).

An autoencoder maps a dense embedding x (d) to a *composite code*: D = C·L dimensions in C chunks of L,
exactly one dimension on per chunk, then decodes it back (Eq. 1, f(x) = d(g(e(x)))):

    e(x) = W · BatchNorm(x)          (d → C·L logits)
    g(·) = per chunk, hard Gumbel-softmax with temperature τ and a straight-through gradient
    d(z) = V · z                     (C·L → d)

It is trained with MSE(x, f(x)) + λ · L_UR, where the uniformity regularizer (Eq. 5)

    L_UR = sqrt( Σ_j ( Σ_{i ∈ batch} g(e(x_i))_j − B / L )² / B )

pushes every dimension to be on for B / L of a batch of B items. Each (chunk, code) is a posting list
of an inverted index; a query scores the items that share its code in each chunk (the number of shared
codes, 0..C). The index is balanced when every list holds N / L items; :func:`imbalance_factor` is
faiss's single-number summary k · Σ n_i² / (Σ n_i)² (1 = perfect).

References
----------
.. [CCSA] Lassance, Formal, Clinchant. "Composite Code Sparse Autoencoders for first stage retrieval":
   §3.1 (architecture, Eq. 1, Eq. 5), §3.2 (retrieval), §4.1.3 (RQ3, Fig. 2/3: balance vs λ and B).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from xenbench.cur import NotFittedError, _check_int
from xenbench.errors import ParameterError
from xenbench.metrics import topk_recall

__all__ = ["CodeIndex", "CompositeCodeAE", "activation_frequency", "balance_sweep", "imbalance_factor",
           "ivf_baseline", "uniformity_loss"]


def uniformity_loss(codes: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """L_UR of Eq. 5 for a batch of (relaxed or hard) codes of shape (B, C·L)."""
    B = codes.shape[0]
    return torch.sqrt(((codes.sum(dim=0) - B / chunk_size) ** 2).sum() / B)


def _hard_gumbel_softmax(logits: torch.Tensor, tau: float, generator: torch.Generator) -> torch.Tensor:
    """One-hot forward, softmax((logits + Gumbel) / τ) gradient (straight-through), over the last axis.

    Written out (not ``F.gumbel_softmax``) so that the noise comes from a seeded generator.
    """
    u = torch.rand(logits.shape, generator=generator, device=logits.device).clamp_(1e-12, 1 - 1e-7)
    soft = torch.softmax((logits - torch.log(-torch.log(u))) / tau, dim=-1)
    hard = torch.nn.functional.one_hot(soft.argmax(dim=-1), logits.shape[-1]).to(soft.dtype)
    return hard - soft.detach() + soft


class _Net(torch.nn.Module):
    def __init__(self, d: int, n_chunks: int, chunk_size: int) -> None:
        super().__init__()
        self.n_chunks, self.chunk_size = n_chunks, chunk_size
        self.norm = torch.nn.BatchNorm1d(d)
        self.encoder = torch.nn.Linear(d, n_chunks * chunk_size)
        self.decoder = torch.nn.Linear(n_chunks * chunk_size, d)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.norm(x)).view(-1, self.n_chunks, self.chunk_size)


class CompositeCodeAE:
    """The CCSA autoencoder (§3.1): fit on item embeddings, then encode items and queries to codes.

    Parameters
    ----------
    n_chunks : int, default 16
        C.
    chunk_size : int, default 64
        L, codes per chunk (posting lists per chunk).
    reg : float, default 0.0
        λ, weight of the uniformity regularizer L_UR (the paper tries 0, 0.1, 1, 10, 100).
    temperature : float, default 1.0
        τ of the Gumbel-softmax (the paper: 100 for retrieval, 1 for binary codes).
    batch_size : int, default 1000
        B; L_UR is computed per batch, so larger batches estimate the balance better (Fig. 3).
    epochs : int, default 100
        Passes over the items.
    lr : float, default 1e-3
        Adam learning rate.
    seed : int, default 0
        Seeds the initialization, the batch order and the Gumbel noise.
    progress : bool, default True
        Show a progress bar over epochs.

    Attributes
    ----------
    history_ : list of dict
        Per epoch: mean ``loss``, ``mse`` and ``uniformity`` (L_UR) over its batches.
    """

    def __init__(self, n_chunks: int = 16, chunk_size: int = 64, *, reg: float = 0.0, temperature: float = 1.0,
                 batch_size: int = 1000, epochs: int = 100, lr: float = 1e-3, seed: int = 0,
                 progress: bool = True) -> None:
        self.n_chunks = n_chunks
        self.chunk_size = chunk_size
        self.reg = reg
        self.temperature = temperature
        self.batch_size = batch_size
        self.epochs = epochs
        self.lr = lr
        self.seed = seed
        self.progress = progress

    def _check(self) -> None:
        owner = type(self).__name__
        _check_int(self.n_chunks, "n_chunks", 1, 2**20, owner, "2**20")
        _check_int(self.chunk_size, "chunk_size", 2, 2**20, owner, "2**20")
        _check_int(self.batch_size, "batch_size", 2, 2**31, owner, "2**31")
        _check_int(self.epochs, "epochs", 1, 2**31, owner, "2**31")
        _check_int(self.seed, "seed", 0, 2**63 - 1, owner, "2**63 - 1")
        for name in ("reg", "temperature", "lr"):
            value = getattr(self, name)
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) and (value >= 0 if name == "reg" else value > 0)
            if not ok:
                raise ParameterError(name, "a float >= 0" if name == "reg" else "a float > 0", value, owner)

    def fit(self, X: np.ndarray) -> "CompositeCodeAE":
        """Train on the rows of X (N × d) with Adam; returns self."""
        self._check()
        X = _check_X(X, "X", type(self).__name__)
        torch.manual_seed(self.seed)  # the initialization of the linear layers
        generator = torch.Generator().manual_seed(self.seed)
        net = _Net(X.shape[1], self.n_chunks, self.chunk_size)
        optimizer = torch.optim.Adam(net.parameters(), lr=self.lr)
        data = torch.from_numpy(X)
        batch = min(self.batch_size, len(X))
        self.history_ = []
        net.train()
        for _ in tqdm(range(self.epochs), desc="CCSA epochs", disable=not self.progress):
            order = torch.randperm(len(X), generator=generator)
            sums = np.zeros(3)
            n_batches = 0
            for start in range(0, len(X) - batch + 1, batch):  # full batches only: L_UR's target is B / L
                x = data[order[start:start + batch]]
                codes = _hard_gumbel_softmax(net.logits(x), self.temperature, generator).flatten(1)
                mse = torch.nn.functional.mse_loss(net.decoder(codes), x)
                ur = uniformity_loss(codes, self.chunk_size)
                loss = mse + self.reg * ur
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                sums += (loss.item(), mse.item(), ur.item())
                n_batches += 1
            self.history_.append(dict(zip(("loss", "mse", "uniformity"), sums / n_batches)))
        self.net_ = net.eval()
        return self

    @torch.inference_mode()
    def encode(self, X: np.ndarray) -> np.ndarray:
        """Composite codes, int64 of shape (n, C): the arg-max code of each chunk (no noise)."""
        if not hasattr(self, "net_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet; call fit(X) first.")
        X = _check_X(X, "X", f"{type(self).__name__}.encode", d=self.net_.norm.num_features)
        return self.net_.logits(torch.from_numpy(X)).argmax(dim=-1).numpy().astype(np.int64)

    @torch.inference_mode()
    def reconstruct(self, X: np.ndarray) -> np.ndarray:
        """f(x) = d(g(e(x))) with hard arg-max codes, float32 of shape (n, d)."""
        codes = torch.from_numpy(self.encode(X))
        one_hot = torch.nn.functional.one_hot(codes, self.chunk_size).flatten(1).float()
        return self.net_.decoder(one_hot).numpy()


def _check_X(X: object, name: str, owner: str, d: int | None = None) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 2 or min(X.shape) < 1 or not np.issubdtype(X.dtype, np.floating) or not np.isfinite(X).all() \
            or (d is not None and X.shape[1] != d):
        want = f"(n, d={d})" if d is not None else "(n, d)"
        raise ParameterError(name, f"a finite, non-empty float array of shape {want}",
                             f"{X.dtype} array of shape {X.shape}", owner)
    return np.ascontiguousarray(X, dtype=np.float32)


class CodeIndex:
    """Inverted index over composite codes (§3.2): one posting list per (chunk, code).

    A query's score for an item is the number of chunks in which they share the code; search scores
    only the items in the query's C posting lists.

    Parameters
    ----------
    n_chunks, chunk_size : int
        C and L of the codes.
    """

    def __init__(self, n_chunks: int, chunk_size: int) -> None:
        self.n_chunks = _check_int(n_chunks, "n_chunks", 1, 2**20, type(self).__name__, "2**20")
        self.chunk_size = _check_int(chunk_size, "chunk_size", 1, 2**20, type(self).__name__, "2**20")

    def _check_codes(self, codes: object, owner: str) -> np.ndarray:
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.n_chunks or not np.issubdtype(codes.dtype, np.integer) \
                or (codes.size and (codes.min() < 0 or codes.max() >= self.chunk_size)):
            raise ParameterError("codes", f"an int array of shape (n, C={self.n_chunks}) with values in [0, L={self.chunk_size})",
                                 f"{codes.dtype} array of shape {codes.shape}", owner)
        return codes.astype(np.int64)

    def add(self, codes: np.ndarray) -> "CodeIndex":
        """Index the items' codes (N × C); posting list (c, l) holds the items with code l in chunk c."""
        codes = self._check_codes(codes, f"{type(self).__name__}.add")
        keys = codes + self.chunk_size * np.arange(self.n_chunks)  # flat list id c·L + l
        flat = keys.T.reshape(-1)  # chunk-major, items ascending inside each chunk
        order = np.argsort(flat, kind="stable")
        self.items_ = np.tile(np.arange(len(codes)), self.n_chunks)[order]  # posting lists, concatenated
        self.offsets_ = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=self.n_chunks * self.chunk_size))])
        self.n_items_ = len(codes)
        return self

    @property
    def list_sizes(self) -> np.ndarray:
        """Items per posting list, int64 of shape (C, L)."""
        if not hasattr(self, "offsets_"):
            raise NotFittedError("CodeIndex.list_sizes needs an index; call add(codes) first.")
        return np.diff(self.offsets_).reshape(self.n_chunks, self.chunk_size)

    def search(self, query_codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Top-k items of each query by shared codes, ties to the lower item row.

        Returns
        -------
        D : int64 ndarray of shape (nq, k)
            Shared codes (0 pads where fewer than k items share any code).
        I : int64 ndarray of shape (nq, k)
            Item rows; -1 pads.
        scored : int64 ndarray of shape (nq,)
            Postings read per query (Σ of its C list sizes): the scoring work (§3.2.2).
        """
        if not hasattr(self, "offsets_"):
            raise NotFittedError("CodeIndex.search needs an index; call add(codes) first.")
        owner = f"{type(self).__name__}.search"
        query_codes = self._check_codes(query_codes, owner)
        k = _check_int(k, "k", 1, self.n_items_, owner, "n_items")
        lists = query_codes + self.chunk_size * np.arange(self.n_chunks)
        D = np.zeros((len(query_codes), k), np.int64)
        I = np.full((len(query_codes), k), -1, np.int64)
        scored = np.zeros(len(query_codes), np.int64)
        for r, row in enumerate(lists):
            hits = np.concatenate([self.items_[self.offsets_[j]:self.offsets_[j + 1]] for j in row])
            scored[r] = hits.size
            items, counts = np.unique(hits, return_counts=True)
            top = np.lexsort((items, -counts))[:k]
            D[r, :top.size], I[r, :top.size] = counts[top], items[top]
        return D, I, scored


def imbalance_factor(list_sizes: np.ndarray) -> float:
    """faiss's imbalance factor k · Σ n_i² / (Σ n_i)² over k posting lists (1 = perfectly balanced).

    For composite codes, all C·L lists at once (equal to the mean of the per-chunk factors).
    """
    n = np.asarray(list_sizes, dtype=np.float64).reshape(-1)
    if n.size == 0 or n.sum() <= 0:
        raise ParameterError("list_sizes", "a non-empty array with a positive total", n.tolist()[:5], "imbalance_factor")
    return float(n.size * (n ** 2).sum() / n.sum() ** 2)


def activation_frequency(list_sizes: np.ndarray) -> np.ndarray:
    """Share of the items that switch on each dimension, sorted descending ([CCSA] Fig. 2/3); ideal 1 / L."""
    sizes = np.asarray(list_sizes, dtype=np.float64)
    return np.sort(sizes.reshape(-1) / sizes.sum(axis=-1).mean())[::-1]


# ==============================================================================================
# experiments ([CCSA] §4.1.3, RQ3)
# ==============================================================================================
def balance_sweep(items: np.ndarray, queries: np.ndarray, regs: Sequence[float], batch_sizes: Sequence[int], *,
                  n_chunks: int = 16, chunk_size: int = 64, k: int = 10, m: int = 100, progress: bool = True,
                  **fit_params) -> tuple[pd.DataFrame, dict[tuple[float, int], np.ndarray]]:
    """Train one CCSA per (λ, B), index the items, search the queries: balance, work and recall.

    Recall is Top-k-Recall@m against the exact inner-product neighbours of the dense embeddings: the
    share of each query's exact top-k items among the m items with the most shared codes.

    Returns
    -------
    results : DataFrame
        One row per (λ, B): ``reg``, ``batch_size``, ``steps`` (optimizer steps), ``imbalance``
        (:func:`imbalance_factor`),
        ``scored`` (mean postings read per query; ideal C · N / L), ``recall``, ``mse`` (last epoch).
    frequencies : dict
        (λ, B) -> :func:`activation_frequency` of its index (Fig. 2/3).
    """
    exact = queries.astype(np.float64) @ items.astype(np.float64).T
    rows, frequencies = [], {}
    for reg in regs:
        for batch in batch_sizes:
            ae = CompositeCodeAE(n_chunks, chunk_size, reg=reg, batch_size=batch, progress=progress,
                                 **fit_params).fit(items)
            index = CodeIndex(n_chunks, chunk_size).add(ae.encode(items))
            _, I, scored = index.search(ae.encode(queries), m)
            rows.append({"reg": float(reg), "batch_size": int(batch),
                         "steps": ae.epochs * (len(items) // min(batch, len(items))),
                         "imbalance": imbalance_factor(index.list_sizes),
                         "scored": float(scored.mean()), "recall": topk_recall(exact, I, k),
                         "mse": ae.history_[-1]["mse"]})
            frequencies[float(reg), int(batch)] = activation_frequency(index.list_sizes)
    return pd.DataFrame(rows), frequencies


def ivf_baseline(items: np.ndarray, queries: np.ndarray, n_lists: int, nprobes: Sequence[int], *, k: int = 10,
                 m: int = 100, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """faiss IVF (k-means into ``n_lists`` lists, inner product) on the same items and queries.

    Returns
    -------
    results : DataFrame
        One row per nprobe w: ``nprobe``, ``imbalance`` of the k-means lists, ``scored`` (mean items in
        the w probed lists), ``recall`` (Top-k-Recall@m of the exact inner-product neighbours).
    list_sizes : ndarray of shape (n_lists,)
    """
    import faiss

    X = np.ascontiguousarray(items, dtype=np.float32)
    Q = np.ascontiguousarray(queries, dtype=np.float32)
    quantizer = faiss.IndexFlatIP(X.shape[1])
    index = faiss.IndexIVFFlat(quantizer, X.shape[1], n_lists, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    index.train(X)
    index.add(X)
    sizes = np.array([index.invlists.list_size(i) for i in range(n_lists)])
    _, nearest_lists = quantizer.search(Q, max(nprobes))
    exact = Q.astype(np.float64) @ X.astype(np.float64).T
    rows = []
    for w in nprobes:
        index.nprobe = w
        _, I = index.search(Q, m)
        rows.append({"nprobe": int(w), "imbalance": imbalance_factor(sizes),
                     "scored": float(sizes[nearest_lists[:, :w]].sum(axis=1).mean()), "recall": topk_recall(exact, I, k)})
    return pd.DataFrame(rows), sizes
