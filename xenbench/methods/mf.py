"""Sparse matrix factorization of CE scores: item (and query) embeddings for AXN ([AXN] §2.1).

Offline, a sparse matrix G holds the CE scores of training queries on a few items each (Q→*: the top k_d
items of a retriever per training query, or k_d random ones). U and V are fitted to the observed entries,

    min ‖(G − U Vᵀ)_P‖²                                        (Eq. 3; P = observed pairs)

starting from the dual encoder's (DE's) embeddings:

* **MF-TRNS** (transductive): U and V are free parameters initialized with the DE's query and item
  embeddings; only items in G move.
* **MF-IND** (inductive): per side a 2-layer MLP with a gated skip connection maps the DE embedding x to
  σ(w)·x' + (1 − σ(w))·x with x' = b₂ + W₂ᵀ gelu(b₁ + W₁ᵀ x) (d → 2d → d) and w initialized to −5 (so it
  starts as the DE); it embeds unseen items and test queries too (u_param for AXN's Eq. 7).

Both are trained with AdamW on mini-batches of observed pairs, seeded, on a torch device of choice (the
initialization and the pair order are drawn on the CPU, so devices differ only by float32 round-off).

References
----------
.. [AXN] Yadav, Monath, Zaheer, Fergus, McCallum. "Adaptive Retrieval and Scalable Indexing for k-NN
   Search with Cross-Encoders", ICLR 2024: §2.1 (sparse G, MF-TRNS, MF-IND), Table 2 (learning rates).
"""
from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from xenbench._validation import check_choice, check_int, check_is_fitted
from xenbench.errors import NotFittedError, ParameterError  # noqa: F401  (NotFittedError: old import path)

__all__ = ["MatrixFactorization", "observed_pairs"]

KINDS = ("trns", "ind")


def observed_pairs(n_queries: int, n_items: int, k_d: int, *, retriever_scores: np.ndarray | None = None,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The Q→* pattern P of G: k_d items per training query, a retriever's top k_d or random ones.

    Parameters
    ----------
    n_queries, n_items : int
        Shape of G.
    k_d : int
        Items per training query (k_d · n_queries CE calls to fill G).
    retriever_scores : ndarray of shape (n_queries, n_items), optional
        E.g. DE scores; the top k_d items of each row (ties to the lower item). Default: random items.
    seed : int
        Seed of the random choice.

    Returns
    -------
    rows, cols : int64 ndarrays of shape (n_queries · k_d,)
    """
    k_d = check_int(k_d, "k_d", 1, n_items, "observed_pairs", "n_items")
    if retriever_scores is not None:
        scores = np.asarray(retriever_scores)
        if scores.shape != (n_queries, n_items):
            raise ParameterError("retriever_scores", f"an array of shape ({n_queries}, {n_items})", scores.shape,
                                 "observed_pairs")
        cols = np.argsort(-scores, axis=1, kind="stable")[:, :k_d]
    else:
        rng = np.random.default_rng(seed)
        cols = np.stack([rng.choice(n_items, k_d, replace=False) for _ in range(n_queries)])
    return np.repeat(np.arange(n_queries), k_d).astype(np.int64), cols.reshape(-1).astype(np.int64)


class _GatedMLP(torch.nn.Module):
    """x ↦ σ(w)·(b₂ + W₂ᵀ gelu(b₁ + W₁ᵀ x)) + (1 − σ(w))·x, d → 2d → d, w initialized to −5."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.hidden = torch.nn.Linear(d, 2 * d)
        self.out = torch.nn.Linear(2 * d, d)
        self.gate = torch.nn.Parameter(torch.tensor(-5.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(self.gate)
        return g * self.out(torch.nn.functional.gelu(self.hidden(x))) + (1 - g) * x


class MatrixFactorization:
    """MF-TRNS or MF-IND fitted to sparse CE scores (fit), then item and query embeddings (transform).

    Parameters
    ----------
    kind : {"trns", "ind"}, default "ind"
        Transductive free embeddings or inductive gated MLPs on the DE's embeddings.
    epochs : int, default 20
        Passes over the observed pairs (the paper trains MF-IND for 20 epochs with k_d = 100 items per training
        query, and 10 only with k_d = 1000 on 10K–50K queries: [AXN] Table 2).
    lr : float, default 0.001
        AdamW learning rate (the paper: 0.001 for ZESHEL and HotpotQA, 0.005 for SciDocs).
    weight_decay : float, default 0.0
        AdamW weight decay.
    batch_size : int, default 1024
        Observed pairs per step.
    seed : int, default 0
        Seeds the MLP initialization and the pair order: two seeds give two fits, so a protocol that fits once per
        run with the run's seed (and draws G with it, :func:`observed_pairs`) carries this randomness into its
        intervals across runs.
    progress : bool, default True
        Show a progress bar over epochs.
    device : str or torch.device, default "auto"
        Where to train and embed: ``"auto"`` (CUDA when available, else MPS, else CPU), ``"cpu"``,
        ``"cuda"``, ``"cuda:<k>"`` or ``"mps"`` (:func:`xenbench.models.crossencoder.resolve_device`, checked in
        :meth:`fit`).

    Attributes
    ----------
    item_embeddings_ : ndarray of shape (n_items, d), float64
        V after fitting (AXN's index).
    history_ : list of float
        Mean squared error on the observed pairs per epoch.
    device_ : torch.device
        The device it was trained on (its parameters live there).
    """

    def __init__(self, kind: str = "ind", *, epochs: int = 20, lr: float = 1e-3, weight_decay: float = 0.0,
                 batch_size: int = 1024, seed: int = 0, progress: bool = True,
                 device: str | torch.device = "auto") -> None:
        self.kind = kind
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.seed = seed
        self.progress = progress
        self.device = device

    def fit(self, query_embeddings: np.ndarray, item_embeddings: np.ndarray, rows: np.ndarray, cols: np.ndarray,
            values: np.ndarray) -> "MatrixFactorization":
        """Fit U Vᵀ to the observed G[rows, cols] = values, starting from the DE's embeddings.

        Parameters
        ----------
        query_embeddings : ndarray of shape (n_queries, d)
            DE embeddings of the training queries (rows of G).
        item_embeddings : ndarray of shape (n_items, d)
            DE embeddings of all items (columns of G).
        rows, cols : int ndarrays of shape (n_obs,)
            Observed pairs P (see :func:`observed_pairs`).
        values : ndarray of shape (n_obs,)
            Their CE scores.
        """
        owner = type(self).__name__
        check_choice(self.kind, "kind", KINDS, owner)
        check_int(self.epochs, "epochs", 1, 2**31, owner, "2**31")
        check_int(self.batch_size, "batch_size", 1, 2**31, owner, "2**31")
        from xenbench._device import resolve_device

        dev = resolve_device(self.device, owner=owner)
        Qe, Ie = (torch.from_numpy(np.asarray(x, dtype=np.float32)) for x in (query_embeddings, item_embeddings))
        if Qe.ndim != 2 or Ie.ndim != 2 or Qe.shape[1] != Ie.shape[1]:
            raise ParameterError("item_embeddings", f"2-d embeddings of the queries' width {tuple(Qe.shape)[1:]}",
                                 tuple(Ie.shape), owner)
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        values = np.asarray(values, dtype=np.float32)
        if not (rows.shape == cols.shape == values.shape and rows.ndim == 1) or rows.min() < 0 \
                or rows.max() >= len(Qe) or cols.min() < 0 or cols.max() >= len(Ie):
            raise ParameterError("rows, cols, values", "equal-length 1-d arrays of pairs inside G's shape",
                                 f"shapes {rows.shape}, {cols.shape}, {values.shape}", owner)
        torch.manual_seed(self.seed)
        generator = torch.Generator().manual_seed(self.seed)  # on the CPU: the same pair order on every device
        self.device_ = dev
        Qe, Ie = Qe.to(dev), Ie.to(dev)
        if self.kind == "trns":
            self.U_, self.V_ = torch.nn.Parameter(Qe.clone()), torch.nn.Parameter(Ie.clone())
            params = [self.U_, self.V_]
        else:
            # initialized on the CPU (the same weights on every device), then moved
            self.query_net_, self.item_net_ = _GatedMLP(Qe.shape[1]).to(dev), _GatedMLP(Qe.shape[1]).to(dev)
            params = [*self.query_net_.parameters(), *self.item_net_.parameters()]
        optimizer = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        r, c, g = (torch.from_numpy(x).to(dev) for x in (rows, cols, values))
        self.history_ = []
        for _ in tqdm(range(self.epochs), desc=f"MF-{self.kind.upper()} epochs", disable=not self.progress):
            order = torch.randperm(len(r), generator=generator).to(dev)
            total = 0.0
            for start in range(0, len(r), self.batch_size):
                b = order[start:start + self.batch_size]
                if self.kind == "trns":
                    u, v = self.U_[r[b]], self.V_[c[b]]
                else:
                    u, v = self.query_net_(Qe[r[b]]), self.item_net_(Ie[c[b]])
                loss = torch.nn.functional.mse_loss((u * v).sum(dim=1), g[b])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item() * len(b)
            self.history_.append(total / len(r))
        with torch.no_grad():
            V = self.V_ if self.kind == "trns" else self.item_net_(Ie)
        self.item_embeddings_ = V.detach().cpu().numpy().astype(np.float64)
        return self

    @torch.no_grad()
    def transform_queries(self, query_embeddings: np.ndarray) -> np.ndarray:
        """MF-IND query embeddings (nq, d) of DE embeddings of unseen queries: AXN's u_param."""
        check_is_fitted(self, "item_embeddings_", "fit")
        if self.kind != "ind":
            raise ParameterError("kind", "'ind' (MF-TRNS has no encoder for unseen queries)", self.kind,
                                 f"{type(self).__name__}.transform_queries")
        x = torch.from_numpy(np.asarray(query_embeddings, dtype=np.float32)).to(self.device_)
        return self.query_net_(x).cpu().numpy().astype(np.float64)
