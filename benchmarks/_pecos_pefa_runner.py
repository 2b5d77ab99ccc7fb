"""PEFA-XS / PEFA-XL the way the authors' recipe computes them with libpecos; run by bench_pefa_pecos.py.

This script runs inside the separate libpecos virtual environment (numpy < 2), so it imports nothing from
xenbench. It follows ``examples/pefa-wsdm24/pefa_xs.py`` and ``pefa_xl.py`` of the PECOS repository:

* PEFA-XS: ``LabelEmbeddingFactory.create(Y, Q, method="pifa", normalized_Y=False)`` (= Π(Qᵀ Y_{:,j}), rows
  L2-normalized, zero rows stay zero), item vectors ``λ·P + (1-λ)·pifa`` (``P`` alone at λ = 1), one
  ``pecos.ann.hnsw.HNSW`` index; scores ``1 - distance`` (PECOS' "ip" distance is 1 - ⟨x, y⟩).
* PEFA-XL (knn_type "v0"): ``Yp_erm`` = the HNSW top-``erm_topk`` items of P; ``qQT`` = the top-k training
  queries with weights ``⟨q̂, q_i⟩ / k``; ``Yp = λ·Yp_erm + (1-λ)·qQT·Y`` as sparse matrices (an item missing
  from one part counts 0 there; entries that sum to exactly 0 are dropped by scipy); ``smat_util.sorted_csr``
  ranks each row (descending score, ties to the lower item row: a stable sort after ``sort_indices``).
* The recipe's HNSW settings: M = 32, efC = 500, metric "ip", efS = 300.

``index = "flat"`` replaces each HNSW search by exact inner products (libpecos has no exact index; numpy
brute force, ties to the lower row) and keeps everything else, so formula differences can be told from
HNSW differences.

Inputs (``--inputs DIR``): ``embeddings.npz`` (P, Q_train, Q_test: float32), ``Y_train.npz`` (scipy sparse,
m × n) and ``jobs.json`` (a list of {"name", "method": "xs"|"xl", "lam", "n_neighbors", "erm_topk", "index",
"k", "threads", "repeat"}). Outputs (``--out DIR``): ``pred_<name>.npz`` with ``I`` (int64, rows best first, -1 pads)
and ``D`` (float32, -inf pads), width k; and ``results.json`` with each job's build / search seconds (the fastest, and
every run's) and the versions used.

Usage::

    .bench/pecos-venv/bin/python benchmarks/_pecos_pefa_runner.py --inputs DIR --out DIR
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy
import scipy.sparse as smat

M, EFC, EFS = 32, 500, 300  # the recipe's FIXED HYPER-PARAMETERS
METRIC = "ip"


def _normalize(X: np.ndarray) -> np.ndarray:
    """The recipe's ``sklearn.preprocessing.normalize(X, axis=1, norm="l2")`` (a no-op up to rounding here)."""
    from sklearn.preprocessing import normalize

    return np.ascontiguousarray(normalize(X, axis=1, norm="l2"), dtype=np.float32)


class Index:
    """One searchable matrix: a libpecos HNSW (the recipe's settings) or exact inner products."""

    def __init__(self, X: np.ndarray, kind: str, threads: int) -> None:
        self.kind, self.threads, self.n = kind, threads, X.shape[0]
        X = np.ascontiguousarray(X, dtype=np.float32)
        if kind == "hnsw":
            from pecos.ann.hnsw import HNSW

            self._HNSW = HNSW
            params = HNSW.TrainParams(M=M, efC=EFC, metric_type=METRIC, threads=threads)
            self.model = HNSW.train(X, train_params=params, pred_params=None)
            self.searchers = self.model.searchers_create(num_searcher=threads)
        elif kind == "flat":
            self.X = X
        else:
            raise ValueError(f"index must be 'hnsw' or 'flat', got {kind!r}")

    def search(self, Xq: np.ndarray, topk: int) -> smat.csr_matrix:
        """(nq × n) csr: each query's top-``topk`` items with score ⟨q̂, x⟩ (the recipe's ``1 - distance``)."""
        Xq = np.ascontiguousarray(Xq, dtype=np.float32)
        if self.kind == "hnsw":
            params = self._HNSW.PredParams(efS=EFS, topk=topk, threads=self.threads)
            Yp = self.model.predict(Xq, pred_params=params, searchers=self.searchers, ret_csr=True)
            Yp.data = 1.0 - Yp.data
            return Yp
        topk = min(topk, self.n)
        S = Xq @ self.X.T
        part = np.argpartition(-S, topk - 1, axis=1)[:, :topk]
        vals = np.take_along_axis(S, part, axis=1)
        rows = np.repeat(np.arange(S.shape[0]), topk)
        return smat.csr_matrix((vals.reshape(-1), (rows, part.reshape(-1))), shape=S.shape, dtype=np.float32)


def fit_xs(P: np.ndarray, Q: np.ndarray, Y: smat.csr_matrix, lam: float, kind: str, threads: int) -> Index:
    """pefa_xs.run_pefa_xs up to the index: item vectors λ·P + (1-λ)·pifa(Y, Q)."""
    from pecos.xmc import LabelEmbeddingFactory

    if 0.0 <= lam < 1.0:
        pifa = LabelEmbeddingFactory.create(Y, Q, method="pifa", normalized_Y=False)
        label_emb = lam * P + (1.0 - lam) * pifa
    elif lam == 1.0:
        label_emb = P
    else:
        raise ValueError(f"lam={lam} should be in [0.0, 1.0]")
    return Index(label_emb, kind, threads)


def search_xs(index: Index, Q_test: np.ndarray, k: int) -> smat.csr_matrix:
    from pecos.utils import smat_util

    return smat_util.sorted_csr(index.search(Q_test, k))  # get_eval_metric sorts before reading the ranking


def fit_xl(P: np.ndarray, Q: np.ndarray, lam: float, kind: str, threads: int) -> tuple[Index, Index | None]:
    """pefa_xl.run_pefa_xl's two indices (the training-query index only when λ < 1, as in the recipe)."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam={lam} should be in [0.0, 1.0]")
    return Index(P, kind, threads), (Index(Q, kind, threads) if lam < 1.0 else None)


def search_xl(indices: tuple[Index, Index | None], Y: smat.csr_matrix, Q_test: np.ndarray, lam: float,
              n_neighbors: int, erm_topk: int) -> smat.csr_matrix:
    """pefa_xl.run_pefa_xl's scoring (knn_type "v0"): λ·Yp_erm + (1-λ)·(qQT / k)·Y, rows sorted."""
    from pecos.utils import smat_util

    index_P, index_Q = indices
    Yp_erm = index_P.search(Q_test, erm_topk)
    if index_Q is None:  # λ = 1
        Yp = Yp_erm
    else:
        qQT = index_Q.search(Q_test, n_neighbors)
        qQT.data = qQT.data / float(n_neighbors)
        Yp_knn = qQT.dot(Y)
        Yp = lam * Yp_erm + (1.0 - lam) * Yp_knn
    return smat_util.sorted_csr(smat.csr_matrix(Yp))


def ranked(Yp: smat.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """First k entries of each row of a row-sorted csr: D (float32, -inf pads), I (int64, -1 pads)."""
    nq = Yp.shape[0]
    D = np.full((nq, k), -np.inf, np.float32)
    I = np.full((nq, k), -1, np.int64)
    for r in range(nq):
        lo, hi = Yp.indptr[r], Yp.indptr[r + 1]
        m = min(k, hi - lo)
        I[r, :m] = Yp.indices[lo:lo + m]
        D[r, :m] = Yp.data[lo:lo + m]
    return D, I


def run_job(job: dict, P: np.ndarray, Q: np.ndarray, Y: smat.csr_matrix, Q_test: np.ndarray) -> dict:
    """Build and search ``job["repeat"]`` times (default 1); the fastest build and search seconds, last ranking."""
    lam, kind, threads, k = float(job["lam"]), job["index"], int(job["threads"]), int(job["k"])
    if job["method"] not in ("xs", "xl"):
        raise ValueError(f"unknown method {job['method']!r}")
    build, search = [], []
    for _ in range(int(job.get("repeat", 1))):
        t0 = time.perf_counter()
        if job["method"] == "xs":
            model = fit_xs(P, Q, Y, lam, kind, threads)
            t1 = time.perf_counter()
            Yp = search_xs(model, Q_test, k)
        else:
            model = fit_xl(P, Q, lam, kind, threads)
            t1 = time.perf_counter()
            Yp = search_xl(model, Y, Q_test, lam, int(job["n_neighbors"]), int(job["erm_topk"]))
        t2 = time.perf_counter()
        build.append(t1 - t0)
        search.append(t2 - t1)
    D, I = ranked(Yp, k)
    return {"name": job["name"], "build_s": min(build), "search_s": min(search), "build_runs": build,
            "search_runs": search, "D": D, "I": I}


def versions() -> dict:
    import sklearn
    from importlib.metadata import version

    return {"python": platform.python_version(), "libpecos": version("libpecos"), "numpy": np.__version__,
            "scipy": scipy.__version__, "scikit-learn": sklearn.__version__}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=Path, required=True, help="folder with embeddings.npz, Y_train.npz, jobs.json")
    p.add_argument("--out", type=Path, required=True, help="folder for pred_<name>.npz and results.json")
    args = p.parse_args(argv)

    import pecos.ann.hnsw, pecos.utils.smat_util, pecos.xmc  # noqa: F401,E401  (loaded before any timing)

    emb = np.load(args.inputs / "embeddings.npz")
    # The recipe L2-normalizes every embedding matrix it loads.
    P, Q, Q_test = (_normalize(emb[name]) for name in ("P", "Q_train", "Q_test"))
    Y = smat.csr_matrix(smat.load_npz(args.inputs / "Y_train.npz"), dtype=np.float32)
    jobs = json.loads((args.inputs / "jobs.json").read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for job in jobs:
        r = run_job(job, P, Q, Y, Q_test)
        np.savez(args.out / f"pred_{job['name']}.npz", D=r.pop("D"), I=r.pop("I"))
        results.append(r)
        print(f"{job['name']}: build {r['build_s']:.3f} s, search {r['search_s']:.3f} s", file=sys.stderr)
    (args.out / "results.json").write_text(json.dumps({"versions": versions(), "jobs": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
