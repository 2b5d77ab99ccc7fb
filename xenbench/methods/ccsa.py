"""CCSA: composite-code sparse autoencoders and their inverted index ([CCSA] §3).

An autoencoder maps a dense embedding x (d) to a *composite code*: D = C·L dimensions in C chunks of L,
exactly one dimension on per chunk, then decodes it back (Eq. 1, f(x) = d(g(e(x)))):

    e(x) = W · BatchNorm(x)          (d → C·L logits)
    g(·) = per chunk, hard Gumbel-softmax with temperature τ and a straight-through gradient
    d(z) = V · z                     (C·L → d)

The uniformity regularizer (Eq. 5)

    L_UR = sqrt( Σ_j ( Σ_{i ∈ batch} g(e(x_i))_j − B / L )² / B )

pushes every dimension to be on for B / L of a batch of B items. **Its scale.** Even a batch whose codes
are drawn uniformly at random (or a batch sampled at random from a perfectly balanced index, up to the
finite-population factor (N − B) / (N − 1)) has, per dimension, a Binomial(B, 1/L) count with variance
B (1/L)(1 − 1/L); summed over the C·L dimensions and divided by B,

    E[L_UR²] = C (1 − 1/L)          (the sampling-noise floor; ≈ 3.97² for C = 16, L = 64),

while the paper's MSE averaged over the d = 384 coordinates of unit vectors is ≤ 1/d ≈ 0.0026. Taken
literally, λ · L_UR swamps the reconstruction at every λ ≥ 0.001. We therefore train on

    loss = ‖x − f(x)‖²  +  λ · L_UR / sqrt(C (1 − 1/L))

(squared error summed over the d coordinates and averaged over the batch: 1 = reconstructing a unit
vector by 0; the uniformity term is 1 for random codes and 0 for a perfectly balanced batch), so both terms
are O(1) and λ ≈ 1 is where balance and reconstruction trade off (``objective="normalized"``, the default). The
paper's literal objective (Eq. 6 with Eq. 5) is ``objective="paper"``:

    loss = mean over the batch and the d coordinates of (x − f(x))²  +  λ · L_UR

on which λ = 1 weighs the regularizer about sqrt(C (1 − 1/L)) · d times more heavily than the normalized λ = 1
(:func:`ccsa_loss` computes both). ``history_`` also logs the paper's per-coordinate ``mse`` and the raw
``uniformity`` (L_UR). Each (chunk, code) is a posting list
of an inverted index; a query scores the items that share its code in each chunk (the number of shared
codes, 0..C). The index is balanced when every list holds N / L items; :func:`imbalance_factor` is
faiss's single-number summary k · Σ n_i² / (Σ n_i)² (1 = perfect).

References
----------
.. [CCSA] Lassance, Formal, Clinchant. "Composite Code Sparse Autoencoders for first stage retrieval":
   §3.1 (architecture, Eq. 1, Eq. 5), §3.2 (retrieval), §4.1.3 (RQ3, Fig. 2/3: balance vs λ and B).
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numba
import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from xenbench._validation import check_array, check_choice, check_float, check_int, check_is_fitted
from xenbench.errors import NotFittedError, ParameterError  # noqa: F401  (NotFittedError: old import path)

__all__ = ["OBJECTIVES", "CodeIndex", "CompositeCodeAE", "activation_frequency", "ccsa_loss", "code_bytes",
           "code_candidates", "code_usage", "expected_uniformity_sq", "imbalance_factor", "normalized_uniformity_loss",
           "ur_noise_floor", "uniformity_loss"]



def uniformity_loss(codes: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """L_UR of Eq. 5 for a batch of (relaxed or hard) codes of shape (B, C·L)."""
    B = codes.shape[0]
    return torch.sqrt(((codes.sum(dim=0) - B / chunk_size) ** 2).sum() / B)


def ur_noise_floor(n_chunks: int, chunk_size: int) -> float:
    """sqrt(C (1 − 1/L)): the root of E[L_UR²] for a batch of codes drawn uniformly at random (module docstring)."""
    return float(np.sqrt(n_chunks * (1 - 1 / chunk_size)))


def expected_uniformity_sq(imbalance: float, n_chunks: int, chunk_size: int, batch_size: int) -> float:
    """E[L_UR²] / (C (1 − 1/L)) for a batch of B items drawn (with replacement) from an index whose every chunk has
    faiss imbalance factor F: ``1 + (B − 1)(F − 1) / (L − 1)``.

    Per chunk with list shares p_j, a count n_j ~ Binomial(B, p_j) has E[(n_j − B/L)²] = B p_j (1 − p_j) +
    B² (p_j − 1/L)²; summed over j with Σ p_j² = F / L this is B (1 − F/L) + B² (F − 1) / L, and over C chunks,
    divided by B: E[L_UR²] = C (1 − F/L) + B C (F − 1) / L. Eq. 5's batch estimate therefore tells an imbalanced
    index from a balanced one only when the second term rises above the sampling noise, F − 1 ≳ (L − 1) / (B − 1):
    at L = 64, B = 1,000 an index of F = 1.06 gives a batch L_UR twice (in square) that of a perfect one; at
    L = 256, B = 1,000 only F ≳ 1.26 does.
    """
    check_float(imbalance, "imbalance", 1, None, "expected_uniformity_sq")
    F, L, B = float(imbalance), int(chunk_size), int(batch_size)
    return (n_chunks * (1 - F / L) + B * n_chunks * (F - 1) / L) / (n_chunks * (1 - 1 / L))


def normalized_uniformity_loss(codes: torch.Tensor, n_chunks: int, chunk_size: int) -> torch.Tensor:
    """L_UR / sqrt(C (1 − 1/L)): 0 for a perfectly balanced batch, about 1 (E[·²] = 1) for random codes."""
    return uniformity_loss(codes, chunk_size) / ur_noise_floor(n_chunks, chunk_size)


OBJECTIVES = ("normalized", "paper")


def ccsa_loss(x: torch.Tensor, decoded: torch.Tensor, codes: torch.Tensor, *, reg: float, n_chunks: int,
              chunk_size: int, objective: str = "normalized") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The training loss of a batch, with its reconstruction and uniformity terms.

    Parameters
    ----------
    x, decoded : Tensor of shape (B, d)
        The inputs and f(x) = d(g(e(x))).
    codes : Tensor of shape (B, C·L)
        g(e(x)), one-hot per chunk (or relaxed).
    objective : {"normalized", "paper"}
        ``"paper"``: Eq. 6, MSE (mean over the B·d entries) + λ · L_UR (Eq. 5). ``"normalized"``: xenbench's
        Σ_d (x − f(x))² averaged over the batch + λ · L_UR / sqrt(C (1 − 1/L)) (module docstring).

    Returns
    -------
    loss, mse, ur : Tensor (scalars)
        The loss, the per-coordinate MSE and the raw L_UR.
    """
    err = (decoded - x) ** 2
    mse = err.mean()
    ur = uniformity_loss(codes, chunk_size)
    if objective == "paper":
        return mse + reg * ur, mse, ur
    return err.sum(dim=1).mean() + reg * ur / ur_noise_floor(n_chunks, chunk_size), mse, ur


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
        λ, weight of the uniformity term: of L_UR / sqrt(C (1 − 1/L)) against the summed squared reconstruction
        error (``objective="normalized"``), or of the raw L_UR against the mean MSE (``"paper"``).
    temperature : float, default 1.0
        τ of the Gumbel-softmax (the paper: 100 for retrieval, 1 for binary codes).
    batch_size : int, default 1000
        B; L_UR is computed per batch, so larger batches estimate the balance better (Fig. 3).
    epochs : int, default 100
        Passes over the rows of X (ignored when ``steps`` is given).
    steps : int, optional
        Train this many optimizer steps (batches), reshuffling after each pass ([CCSA] §4: ~8,800); with ``tol``,
        the most steps.
    objective : {"normalized", "paper"}, default "normalized"
        The loss (:func:`ccsa_loss`): xenbench's normalized variant, or the paper's Eq. 6 taken literally.
    tol : float, optional
        Stop early when the mean loss of the last ``window`` steps is less than ``tol`` (relative) below the mean
        of the ``window`` steps before them: ``(prev − last) / |prev| < tol``, checked after every step from step
        2 · ``window`` on. None: train all ``steps`` (or ``epochs``).
    window : int, default 200
        Steps per window of the stopping rule (the per-step loss is noisy: batch sampling and Gumbel noise).
    lr : float, default 1e-3
        Adam learning rate.
    seed : int, default 0
        Seeds the initialization, the batch order and the Gumbel noise (the same seed gives the same model on
        the same device; CPU and CUDA draw different noise).
    progress : bool, default True
        Show a progress bar over the optimizer steps.
    device : str or torch.device, default "auto"
        Where to train: CUDA when available, else CPU (:func:`xenbench._device.resolve_device`); :meth:`encode`
        always runs on the CPU (numpy).

    Attributes
    ----------
    history_ : list of dict
        Per pass over the data: mean ``loss``, ``recon`` (‖x − f(x)‖²), ``mse`` (per coordinate),
        ``uniformity`` (raw L_UR) and ``uniformity_norm`` (L_UR / floor) over its batches.
    curve_ : DataFrame
        One row per optimizer step: ``step`` (1-based), ``loss``, ``mse``, ``uniformity`` (raw L_UR).
    steps_ : int
        Optimizer steps taken.
    converged_ : bool
        Whether the ``tol`` rule stopped training (False when it ran to its step cap, or without ``tol``).
    net_ : torch.nn.Module
        The trained network (eval mode).
    encoder_ : tuple of ndarray
        (W', b'): e(x) = x · W' + b' with the BatchNorm folded in, float32 of shapes (d, C·L) and (C·L,).
    """

    def __init__(self, n_chunks: int = 16, chunk_size: int = 64, *, reg: float = 0.0, temperature: float = 1.0,
                 batch_size: int = 1000, epochs: int = 100, lr: float = 1e-3, seed: int = 0,
                 steps: int | None = None, objective: str = "normalized", tol: float | None = None,
                 window: int = 200, progress: bool = True, device: str | torch.device = "auto") -> None:
        self.n_chunks = n_chunks
        self.chunk_size = chunk_size
        self.reg = reg
        self.temperature = temperature
        self.batch_size = batch_size
        self.epochs = epochs
        self.lr = lr
        self.seed = seed
        self.steps = steps
        self.objective = objective
        self.tol = tol
        self.window = window
        self.progress = progress
        self.device = device

    def _check(self) -> None:
        owner = type(self).__name__
        check_int(self.n_chunks, "n_chunks", 1, 2**20, owner, "2**20")
        check_int(self.chunk_size, "chunk_size", 2, 2**20, owner, "2**20")
        check_int(self.batch_size, "batch_size", 2, 2**31, owner, "2**31")
        check_int(self.epochs, "epochs", 1, 2**31, owner, "2**31")
        check_int(self.seed, "seed", 0, 2**63 - 1, owner, "2**63 - 1")
        if self.steps is not None:
            check_int(self.steps, "steps", 1, 2**31, owner, "2**31")
        check_float(self.reg, "reg", 0, None, owner)
        check_float(self.temperature, "temperature", 0, None, owner, closed="neither")
        check_float(self.lr, "lr", 0, None, owner, closed="neither")
        check_choice(self.objective, "objective", OBJECTIVES, owner)
        check_float(self.tol, "tol", 0, None, owner, allow_none=True)
        check_int(self.window, "window", 1, 2**31, owner, "2**31")

    def fit(self, X: np.ndarray) -> "CompositeCodeAE":
        """Train on the rows of X (N × d) with Adam; returns self."""
        from xenbench._device import resolve_device

        self._check()
        X = _check_X(X, "X", type(self).__name__)
        device = resolve_device(self.device)
        torch.manual_seed(self.seed)  # the initialization of the linear layers
        generator = torch.Generator(device=device).manual_seed(self.seed)
        net = _Net(X.shape[1], self.n_chunks, self.chunk_size).to(device)
        optimizer = torch.optim.Adam(net.parameters(), lr=self.lr)
        data = torch.from_numpy(X).to(device)
        batch = min(self.batch_size, len(X))
        per_pass = len(X) // batch  # full batches only: L_UR's target is B / L
        total = self.steps if self.steps is not None else self.epochs * per_pass
        floor = ur_noise_floor(self.n_chunks, self.chunk_size)
        self.history_ = []
        curve: list[tuple[float, float, float]] = []
        losses: list[float] = []  # the stopping rule's input, kept apart from ``curve``: no per-step rebuild
        net.train()
        bar = tqdm(total=total, desc="CCSA steps", disable=not self.progress)
        done, converged = 0, False
        while done < total and not converged:
            order = torch.randperm(len(X), generator=generator, device=device)
            sums = np.zeros(5)
            n_batches = 0
            for start in range(0, per_pass * batch, batch):
                if done == total or converged:
                    break
                x = data[order[start:start + batch]]
                codes = _hard_gumbel_softmax(net.logits(x), self.temperature, generator).flatten(1)
                loss, mse, ur = ccsa_loss(x, net.decoder(codes), codes, reg=self.reg, n_chunks=self.n_chunks,
                                          chunk_size=self.chunk_size, objective=self.objective)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step = (loss.item(), mse.item(), ur.item())
                curve.append(step)
                losses.append(step[0])
                sums += (step[0], step[1] * x.shape[1], step[1], step[2], step[2] / floor)
                n_batches += 1
                done += 1
                bar.update(1)
                converged = self.tol is not None and _stalled(losses, self.window, self.tol)
            self.history_.append(dict(zip(("loss", "recon", "mse", "uniformity", "uniformity_norm"),
                                          sums / n_batches)))
        bar.close()
        self.curve_ = pd.DataFrame(curve, columns=["loss", "mse", "uniformity"])
        self.curve_.insert(0, "step", np.arange(1, done + 1))
        self.steps_ = done
        self.converged_ = converged
        self.device_ = device
        self.net_ = net.eval()
        self.encoder_ = _fold_batchnorm(net.norm, net.encoder)
        return self

    def encode(self, X: np.ndarray) -> np.ndarray:
        """Composite codes, int64 of shape (n, C): the arg-max code of each chunk of e(x) (no noise).

        Runs in numpy on the CPU, with the eval-mode BatchNorm folded into the encoder (e(x) = x · W' + b'), in
        blocks of rows: one query costs one (d × C·L) mat-vec, with no framework overhead."""
        check_is_fitted(self, "net_", "fit(X)")
        W, b = self.encoder_
        X = _check_X(X, "X", f"{type(self).__name__}.encode", d=W.shape[0])
        codes = np.empty((len(X), self.n_chunks), np.int64)
        step = max(1, 2**22 // W.shape[1])  # rows per block: 16 MB of float32 logits
        for lo in range(0, len(X), step):
            logits = X[lo:lo + step] @ W + b
            codes[lo:lo + step] = logits.reshape(-1, self.n_chunks, self.chunk_size).argmax(axis=-1)
        return codes

    @torch.inference_mode()
    def reconstruct(self, X: np.ndarray) -> np.ndarray:
        """f(x) = d(g(e(x))) with hard arg-max codes, float32 of shape (n, d)."""
        codes = torch.from_numpy(self.encode(X)).to(self.device_)
        one_hot = torch.nn.functional.one_hot(codes, self.chunk_size).flatten(1).float()
        return self.net_.decoder(one_hot).cpu().numpy()


def _stalled(losses: Sequence[float], window: int, tol: float) -> bool:
    """The stopping rule of :class:`CompositeCodeAE`: the last ``window`` losses' mean is less than ``tol``
    (relative) below the mean of the ``window`` before them."""
    if len(losses) < 2 * window:
        return False
    prev = float(np.mean(losses[-2 * window:-window]))
    last = float(np.mean(losses[-window:]))
    return (prev - last) < tol * abs(prev)


@torch.no_grad()
def _fold_batchnorm(norm: torch.nn.BatchNorm1d, linear: torch.nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    """(W' (d × C·L), b' (C·L,)) float32 with linear(norm(x)) = x · W' + b' for the eval-mode BatchNorm (running
    statistics); folded in float64."""
    scale = norm.weight.double() / torch.sqrt(norm.running_var.double() + norm.eps)
    shift = norm.bias.double() - norm.running_mean.double() * scale
    W = linear.weight.double()  # (C·L, d)
    return (W * scale).T.float().cpu().numpy().copy(), (linear.bias.double() + W @ shift).float().cpu().numpy()


def _check_X(X: object, name: str, owner: str, d: int | None = None) -> np.ndarray:
    want = f"(n, d={d})" if d is not None else "(n, d)"
    X = check_array(X, name, owner, shape=(None, d), expected=f"a finite, non-empty float array of shape {want}")
    return np.ascontiguousarray(X, dtype=np.float32)


class CodeIndex:
    """Inverted index over composite codes (§3.2): one posting list per (chunk, code).

    A query's score for an item is the number of chunks in which they share the code; search scores
    only the items in the query's C posting lists. The posting lists are the rows of a sparse
    (C·L) × N matrix P (scipy.sparse CSR, item rows ascending in each list).

    :meth:`search` runs the paper's retrieval phases per query in one compiled loop (numba): **score** (walk the
    query's C posting lists, counting each item's shared codes in a dense per-item counter and remembering the
    items touched), **threshold** (the histogram of the C + 1 possible scores, built from the items seen at least twice,
    gives t, the largest score that at least k items reach), **top-k** (the items above t by score, then the first items at t by
    row, read in row order from a bitmap of the candidates). The work is linear in the posting entries read (plus
    N / 64 bitmap words), with no pass over all N items; the per-item counters are allocated once per thread and
    reused. The encoding of the queries is :meth:`CompositeCodeAE.encode`. :meth:`shared_codes`
    gives the whole sparse score matrix.

    Parameters
    ----------
    n_chunks, chunk_size : int
        C and L of the codes.
    """

    def __init__(self, n_chunks: int, chunk_size: int) -> None:
        self.n_chunks = check_int(n_chunks, "n_chunks", 1, 2**20, type(self).__name__, "2**20")
        self.chunk_size = check_int(chunk_size, "chunk_size", 1, 2**20, type(self).__name__, "2**20")

    def _check_codes(self, codes: object, owner: str) -> np.ndarray:
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != self.n_chunks or not np.issubdtype(codes.dtype, np.integer) \
                or (codes.size and (codes.min() < 0 or codes.max() >= self.chunk_size)):
            raise ParameterError("codes", f"an int array of shape (n, C={self.n_chunks}) with values in [0, L={self.chunk_size})",
                                 f"{codes.dtype} array of shape {codes.shape}", owner)
        return codes.astype(np.int64)

    def _lists(self, codes: np.ndarray) -> np.ndarray:
        return codes + self.chunk_size * np.arange(self.n_chunks)  # flat list id c·L + l

    def add(self, codes: np.ndarray) -> "CodeIndex":
        """Index the items' codes (N × C); posting list (c, l) holds the items with code l in chunk c, ascending."""
        codes = self._check_codes(codes, f"{type(self).__name__}.add")
        n, n_lists = len(codes), self.n_chunks * self.chunk_size
        items = sp.csr_matrix((np.ones(codes.size, np.float32), self._lists(codes).reshape(-1),
                               np.arange(0, codes.size + 1, self.n_chunks)), shape=(n, n_lists))
        self.postings_ = items.T.tocsr()  # (C·L) × N: row j is posting list j, item rows ascending
        self.postings_.sort_indices()
        self.n_items_ = n
        self._starts = self.postings_.indptr[:-1].astype(np.int64)  # where each list begins in _entries
        self._sizes = np.diff(self.postings_.indptr).astype(np.int64)
        self._entries = self.postings_.indices.astype(np.int32 if n < 2**31 else np.int64)
        return self

    @property
    def list_sizes(self) -> np.ndarray:
        """Items per posting list, int64 of shape (C, L)."""
        check_is_fitted(self, "postings_", "add(codes)", what="CodeIndex.list_sizes needs an index")
        return self._sizes.reshape(self.n_chunks, self.chunk_size).copy()

    def shared_codes(self, query_codes: np.ndarray) -> sp.csr_matrix:
        """S = q_onehot · P: sparse (nq, N) float32 counts of shared codes, stored (columns ascending) only for the
        items that share one."""
        check_is_fitted(self, "postings_", "add(codes)", what=f"{type(self).__name__} needs an index: call add first")
        q = self._check_codes(query_codes, f"{type(self).__name__}.shared_codes")
        onehot = sp.csr_matrix((np.ones(q.size, np.float32), self._lists(q).reshape(-1),
                                np.arange(0, q.size + 1, self.n_chunks)), shape=(len(q), self.postings_.shape[0]))
        S = (onehot @ self.postings_).tocsr()
        S.sort_indices()
        return S

    def postings(self, query_codes: np.ndarray) -> np.ndarray:
        """Posting-list entries each query reads (Σ of its C list sizes), int64 (nq,): the scoring work (§3.2.2)."""
        check_is_fitted(self, "postings_", "add(codes)", what="CodeIndex.postings needs an index")
        q = self._check_codes(query_codes, f"{type(self).__name__}.postings")
        return self._sizes[self._lists(q)].sum(axis=1)

    def search(self, query_codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k items of each query by shared codes, ties to the lower item row (no re-ranking).

        Returns
        -------
        D : float32 ndarray of shape (nq, k)
            Shared codes (0 pads where fewer than k items share any code).
        I : int64 ndarray of shape (nq, k)
            Item rows; -1 pads.
        """
        D, I, _ = self._search(query_codes, k, f"{type(self).__name__}.search")
        return D, I

    def _search(self, query_codes: np.ndarray, k: int, owner: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`search`, plus the number of items sharing at least one code with each query (int64, (nq,))."""
        check_is_fitted(self, "postings_", "add(codes)", what=f"{owner} needs an index")
        k = check_int(k, "k", 1, self.n_items_, owner, "n_items")
        codes = np.asarray(query_codes)
        if codes.ndim != 2 or codes.shape[1] != self.n_chunks or codes.dtype != np.int64:
            codes = self._check_codes(codes, owner)
        # the kernel checks the code range (one query costs a few µs of numpy calls otherwise) and reports a row
        # outside [0, L) before touching anything; the shared check then raises the error
        D, I, sharing, bad = _search_lists(self._entries, self._starts, self._sizes, codes, self.chunk_size, k,
                                           *self._scratch())
        if bad >= 0:
            self._check_codes(codes, owner)
        return D, I, sharing

    def _scratch(self) -> tuple[np.ndarray, ...]:
        """The kernel's scratch arrays, allocated once per thread (the kernel leaves them as it found them)."""
        try:
            local = self._local
        except AttributeError:
            local = self._local = threading.local()
        arrays = getattr(local, "arrays", None)
        if arrays is None or len(arrays[0]) != self.n_items_:
            n = self.n_items_
            counter = np.uint8 if self.n_chunks < 2**8 else np.uint16 if self.n_chunks < 2**16 else np.int32
            arrays = local.arrays = (np.zeros(n, counter), np.zeros(n + 1, self._entries.dtype),
                                     np.zeros(n + 1, self._entries.dtype), np.zeros((n + 63) // 64, np.uint64))
        return arrays

    def __getstate__(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key != "_local"}  # scratch is not state


def _de_bruijn_table() -> np.ndarray:
    """Bit position of x = 2**i from (x · 0x07EDD5E59A4E28C2 mod 2**64) >> 58: a branch-free count of trailing zeros."""
    table = np.zeros(64, np.int64)
    for i in range(64):
        table[((1 << i) * 0x07EDD5E59A4E28C2 % 2**64) >> 58] = i
    return table


_DE_BRUIJN = _de_bruijn_table()
_DE_BRUIJN_MAGIC = np.uint64(0x07EDD5E59A4E28C2)


@numba.njit(cache=True, nogil=True)
def _search_lists(entries, starts, sizes, codes, chunk_size, k, counts, touched, promoted, bits
                  ):  # pragma: no cover (compiled)
    """CodeIndex.search's kernel: for each query (row of ``codes``, its C codes; list c·L + l) its top-k in D, I
    (nq, k) (0 and -1 pads) and its number of touched items in sharing (nq,). Returns (D, I, sharing, bad): bad is
    the first query row with a code outside [0, L) (nothing searched then), else -1.

    Scratch, left as it was found: ``counts`` (N zeros: shared codes per item), ``touched`` and ``promoted`` (N + 1
    slots: the items seen once, and twice), ``bits`` (⌈N / 64⌉ zero words: the candidates in row order). The
    appends are branch-free (a slot is always written, the length grows by 0 or 1) because whether an item was
    seen before is a coin toss the branch predictor loses."""
    nq, n_chunks = codes.shape
    D = np.zeros((nq, k), np.float32)
    I = np.full((nq, k), -1, np.int64)
    sharing = np.zeros(nq, np.int64)
    for q in range(nq):
        for j in range(n_chunks):
            if codes[q, j] < 0 or codes[q, j] >= chunk_size:
                return D, I, sharing, q
    width = n_chunks + 1
    hist = np.zeros(width, np.int64)
    pos = np.zeros(width, np.int64)
    one = np.uint64(1)
    for q in range(nq):
        # score: count every item's shared codes; remember the items seen once (touched) and twice (promoted)
        n_touched = 0
        n_promoted = 0
        for j in range(n_chunks):
            a = starts[j * chunk_size + codes[q, j]]
            for p in range(a, a + sizes[j * chunk_size + codes[q, j]]):
                item = entries[p]
                c = counts[item]
                touched[n_touched] = item
                n_touched += c == 0
                promoted[n_promoted] = item
                n_promoted += c == 1
                counts[item] = c + 1
        sharing[q] = n_touched
        # threshold: the histogram of scores (>= 2 from the promoted items, the rest score 1) gives t, the largest
        # score that at least k items reach (1 when fewer than k items share a code)
        hist[:] = 0
        for j in range(n_promoted):
            hist[counts[promoted[j]]] += 1
        hist[1] = n_touched - n_promoted
        t, at_least = 1, 0
        for s in range(width - 1, 0, -1):
            at_least += hist[s]
            if at_least >= k:
                t = s
                break
        # top-k: slots by score (counting sort); the candidates (score >= t) are read in row order from a bitmap,
        # so items are row-ascending within a score and the first items at t by row are the ones kept; the scan
        # stops once all end_t slots are filled (the words after it are cleared without reading their bits)
        filled = 0
        for s in range(width - 1, t, -1):
            pos[s] = filled
            filled += hist[s]
        pos[t] = filled
        end_t = filled + min(k - filled, hist[t])
        cand, n_cand = (promoted, n_promoted) if t >= 2 else (touched, n_touched)
        for j in range(n_cand):
            item = cand[j]
            bits[item >> 6] |= np.uint64(counts[item] >= t) << np.uint64(item & 63)
        placed = 0
        for w in range(bits.shape[0]):
            if placed == end_t:
                bits[w] = 0
                continue
            word = bits[w]
            if word == 0:
                continue
            bits[w] = 0
            while word != 0:
                low = word & (~word + one)
                word ^= low
                item = (w << 6) + _DE_BRUIJN[(low * _DE_BRUIJN_MAGIC) >> np.uint64(58)]
                s = np.int64(counts[item])
                if s > t or pos[t] < end_t:
                    D[q, pos[s]] = s
                    I[q, pos[s]] = item
                    pos[s] += 1
                    placed += 1
        for j in range(n_touched):
            counts[touched[j]] = 0
    return D, I, sharing, -1


def imbalance_factor(list_sizes: np.ndarray) -> float:
    """faiss's imbalance factor k · Σ n_i² / (Σ n_i)² over k posting lists (1 = perfectly balanced).

    For composite codes, all C·L lists at once (equal to the mean of the per-chunk factors).
    """
    n = np.asarray(list_sizes, dtype=np.float64).reshape(-1)
    if n.size == 0 or n.sum() <= 0:
        raise ParameterError("list_sizes", "a non-empty array with a positive total", n.tolist()[:5], "imbalance_factor")
    return float(n.size * (n ** 2).sum() / n.sum() ** 2)


def code_usage(list_sizes: np.ndarray) -> float:
    """Share of the C·L code dimensions (posting lists) that hold at least one item (1 = every code used; a
    collapsed autoencoder ignores most of them, [CCSA] §3.1.3)."""
    n = np.asarray(list_sizes).reshape(-1)
    if n.size == 0:
        raise ParameterError("list_sizes", "a non-empty array", n.tolist(), "code_usage")
    return float((n > 0).mean())


def activation_frequency(list_sizes: np.ndarray) -> np.ndarray:
    """Share of the items that switch on each dimension, sorted descending ([CCSA] Fig. 2/3); ideal 1 / L."""
    sizes = np.asarray(list_sizes, dtype=np.float64)
    return np.sort(sizes.reshape(-1) / sizes.sum(axis=-1).mean())[::-1]


def code_bytes(n_chunks: int, chunk_size: int) -> float:
    """Bytes per item of a composite code: C codes of log2(L) bits ([CCSA] §3.2), C · log2(L) / 8."""
    if chunk_size < 2 or chunk_size & (chunk_size - 1):
        raise ParameterError("chunk_size", "a power of two >= 2 (codes of log2(L) bits)", chunk_size, "code_bytes")
    return n_chunks * int(np.log2(chunk_size)) / 8


def code_candidates(index: CodeIndex, query_codes: np.ndarray, shortlist: int | None = None
                    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """A CCSA query's candidates: the unique items of its C posting lists (§3.2); with ``shortlist`` R, only the
    R with the most shared codes (the paper's score-threshold-top-k steps, :meth:`CodeIndex.search`; ties to the
    lower row).

    Returns (candidates, postings touched per query, items sharing at least one code per query)."""
    postings = index.postings(query_codes)
    if shortlist is not None:
        _, I, sharing = index._search(query_codes, min(shortlist, index.n_items_), "code_candidates")
        return [row[row >= 0] for row in I], postings, sharing
    S = index.shared_codes(query_codes)
    sharing = np.diff(S.indptr).astype(np.int64)
    return [S.indices[S.indptr[r]:S.indptr[r + 1]].astype(np.int64) for r in range(S.shape[0])], postings, sharing
