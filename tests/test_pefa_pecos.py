"""benchmarks/bench_pefa_pecos.py without libpecos: input writer, result reader, recall, fragment; and, when the
libpecos venv exists (.bench/pecos-venv), both PEFA implementations on a tiny case where they must agree."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _load("bench_pefa_pecos", ROOT / "benchmarks" / "bench_pefa_pecos.py")
runner = _load("_pecos_pefa_runner", ROOT / "benchmarks" / "_pecos_pefa_runner.py")


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _tiny(seed: int = 0, n: int = 40, m: int = 30, nq: int = 12, d: int = 8):
    rng = np.random.default_rng(seed)
    P, Q, Qt = _unit(rng, n, d), _unit(rng, m, d), _unit(rng, nq, d)
    # each training query labels one or two items; items 30.. are never labelled (Π(0) = 0 in XS)
    rows = np.r_[np.arange(m), np.arange(0, m, 3)]
    cols = np.r_[rng.integers(0, 30, m), rng.integers(0, 30, rows.size - m)]
    Y = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(m, n))
    Y.data[:] = 1.0  # duplicates summed: back to {0, 1}
    return P, Q, Qt, Y


# -- input writer / result reader ----------------------------------------------------------------------------------

def test_write_inputs_round_trip(tmp_path):
    P, Q, Qt, Y = _tiny()
    jobs = bench.make_jobs(0.3, 5, ["flat"], 10, 1, 1, 0)
    folder = bench.write_inputs(tmp_path / "in", P.astype(np.float64), Q, Qt, Y.astype(np.float64), jobs)
    emb = np.load(folder / "embeddings.npz")
    assert sorted(emb.files) == ["P", "Q_test", "Q_train"]
    assert all(emb[f].dtype == np.float32 for f in emb.files)
    np.testing.assert_array_equal(emb["P"], P)
    np.testing.assert_array_equal(emb["Q_train"], Q)
    np.testing.assert_array_equal(emb["Q_test"], Qt)
    Y_back = sp.load_npz(folder / "Y_train.npz")
    assert Y_back.dtype == np.float32 and (Y_back != Y).nnz == 0
    assert json.loads((folder / "jobs.json").read_text()) == jobs


def test_make_jobs_matches_erm_depth_and_adds_the_recipe():
    jobs = bench.make_jobs(0.5, 16, ["hnsw", "flat"], 100, 1, 2, 500)
    assert [j["name"] for j in jobs] == ["xs_hnsw", "xl_hnsw", "xl_hnsw_recipe", "xs_flat", "xl_flat",
                                        "xl_flat_recipe"]
    assert [j["erm_topk"] for j in jobs] == [100, 100, 500, 100, 100, 500]
    assert all(j["k"] == 100 and j["lam"] == 0.5 and j["n_neighbors"] == 16 and j["repeat"] == 2 for j in jobs)
    assert [j["name"] for j in bench.make_jobs(0.5, 16, ["flat"], 100, 1, 1, 0)] == ["xs_flat", "xl_flat"]


def test_read_results_reads_what_the_runner_writes(tmp_path):
    I = np.array([[2, 0, -1], [1, 2, 0]])
    D = np.array([[0.9, 0.5, -np.inf], [0.8, 0.7, 0.1]], np.float32)
    np.savez(tmp_path / "pred_xs_flat.npz", I=I, D=D)
    (tmp_path / "results.json").write_text(json.dumps(
        {"versions": {"libpecos": "1.2.8"}, "jobs": [{"name": "xs_flat", "build_s": 0.25, "search_s": 0.5}]}))
    results, versions = bench.read_results(tmp_path)
    assert versions == {"libpecos": "1.2.8"}
    assert set(results) == {"xs_flat"}
    r = results["xs_flat"]
    assert r["I"].dtype == np.int64 and r["build_s"] == 0.25 and r["search_s"] == 0.5
    assert r["build_runs"] == [0.25] and r["search_runs"] == [0.5]  # a results.json without the runs
    np.testing.assert_array_equal(r["I"], I)
    np.testing.assert_array_equal(r["D"], D)


def test_runner_ranked_pads_and_keeps_row_order():
    Yp = sp.csr_matrix((np.array([0.9, 0.4, 0.7], np.float32), np.array([3, 1, 0]), np.array([0, 2, 2, 3])),
                       shape=(3, 5))
    D, I = runner.ranked(Yp, 3)
    np.testing.assert_array_equal(I, [[3, 1, -1], [-1, -1, -1], [0, -1, -1]])
    assert D[0, 0] == np.float32(0.9) and np.isneginf(D[1]).all() and np.isneginf(D[0, 2])


def test_runner_exact_search_is_brute_force():
    P, _, Qt, _ = _tiny()
    Yp = runner.Index(P, "flat", 1).search(Qt, 4)
    S = Qt @ P.T
    for r in range(Qt.shape[0]):
        lo, hi = Yp.indptr[r], Yp.indptr[r + 1]
        assert set(Yp.indices[lo:hi]) == set(np.argsort(-S[r])[:4])
        np.testing.assert_allclose(Yp.data[lo:hi], S[r, Yp.indices[lo:hi]], rtol=1e-6)


# -- recall, overlap, ratio, fragment ------------------------------------------------------------------------------

def test_recall_from_predictions_equals_a_hand_count():
    # query 0: relevant {1, 4}; query 1: relevant {0}; query 2: no relevant item (left out)
    Y = sp.csr_matrix(np.array([[0, 1, 0, 0, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0]], np.float32))
    I = np.array([[4, 2, 1], [3, 0, -1], [0, 1, 2]])
    assert bench.recall_at(I, Y, 1) == pytest.approx((1 / 2 + 0) / 2)
    assert bench.recall_at(I, Y, 2) == pytest.approx((1 / 2 + 1) / 2)
    assert bench.recall_at(I, Y, 3) == pytest.approx((2 / 2 + 1) / 2)


def test_topk_overlap_hand_count():
    a = np.array([[1, 2, 3], [4, 5, -1]])
    b = np.array([[3, 2, 9], [5, 4, -1]])
    assert bench.topk_overlap(a, b, 1) == pytest.approx((0 + 0) / 2)
    assert bench.topk_overlap(a, b, 2) == pytest.approx((1 / 2 + 2 / 2) / 2)
    assert bench.topk_overlap(a, b, 3) == pytest.approx((2 / 3 + 2 / 3) / 2)  # -1 pads never match


def test_ratio_direction():
    assert bench.ratio(0.6, 0.5, True) == pytest.approx(1.2)  # recall: ours / baseline
    assert bench.ratio(2.0, 4.0, False) == pytest.approx(2.0)  # time: baseline / ours (ours twice as fast)
    assert bench.ratio(0.0, 0.0, True) == 1.0
    assert math.isinf(bench.ratio(0.5, 0.0, True))


def _fragment():
    Y = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 0]], np.float32))
    ours = {"I": np.array([[1, 0], [2, 0]]), "build_s": 1.0, "search_s": 0.5}
    base = {"I": np.array([[2, 0], [0, 1]]), "build_s": 3.0, "search_s": 0.25}
    rows = bench.comparison_rows("PEFA-XS ours vs libpecos (flat)", "PEFA-XS, λ=0.5, exact, 3 items", ours, base,
                                 Y, [1, 2])
    return bench.build_fragment("t", "python benchmarks/bench_pefa_pecos.py", rows, ["why"]), rows


def test_fragment_rows_and_schema():
    frag, rows = _fragment()
    assert json.loads(json.dumps(frag)) == frag
    by = {r["metric"]: r for r in rows}
    assert list(by) == ["recall@1", "recall@2", "build_s", "search_s"]
    # hand count: ours finds query 0's item at rank 1 and query 1's at rank 2; the baseline only query 1's at 1
    assert (by["recall@1"]["ours"], by["recall@1"]["baseline"]) == (0.5, 0.5)
    assert (by["recall@2"]["ours"], by["recall@2"]["baseline"]) == (1.0, 0.5)
    assert by["recall@2"]["ratio"] == 2.0 and by["recall@2"]["higher_is_better"] is True
    assert by["build_s"]["ratio"] == 3.0 and by["build_s"]["higher_is_better"] is False
    assert by["search_s"]["ratio"] == 0.5
    assert all(r["at"] == "PEFA-XS, λ=0.5, exact, 3 items" for r in rows)
    no_times = bench.comparison_rows("c", "a", {"I": np.array([[1]])}, {"I": np.array([[0]])},
                                     sp.csr_matrix(np.array([[0, 1]])), [1], times=False)
    assert [r["metric"] for r in no_times] == ["recall@1"]


def test_command_line_leaves_out_the_json_path():
    assert bench.command_line(["--lam", "0.3", "--json", "out.json", "--index", "flat"]) == \
        "python benchmarks/bench_pefa_pecos.py --lam 0.3 --index flat"
    assert bench.command_line(["--json=out.json"]) == "python benchmarks/bench_pefa_pecos.py"


@pytest.mark.parametrize("spoil", [
    lambda f: f.pop("notes"),
    lambda f: f.update(extra=1),
    lambda f: f.update(benchmark="other"),
    lambda f: f["rows"][0].update(ratio=math.inf),
    lambda f: f["rows"][0].update(ours=1),  # an int is not a float
    lambda f: f["rows"][0].update(higher_is_better=1),
    lambda f: f["rows"][0].pop("at"),
    lambda f: f.update(rows=[]),
    lambda f: f.update(notes=[1]),
])
def test_validate_fragment_refuses(spoil):
    frag, _ = _fragment()
    spoil(frag)
    with pytest.raises(ValueError):
        bench.validate_fragment(frag)


# -- both implementations (only where the libpecos venv exists) ------------------------------------------------------

def _pecos_ready() -> bool:
    py = bench.pecos_python(bench.DEFAULT_VENV)
    return py.exists() and subprocess.run([str(py), "-c", "import pecos.ann.hnsw, pecos.xmc"],
                                          capture_output=True).returncode == 0


@pytest.mark.skipif(not _pecos_ready(), reason="no libpecos venv (.bench/pecos-venv; bench_pefa_pecos.py makes it)")
@pytest.mark.parametrize("lam", [0.3, 1.0])
def test_both_implementations_agree_on_a_tiny_exhaustive_case(tmp_path, lam):
    # Exact search, and HNSW on 40 items with efS = 300 (the result set never fills, so every reachable node is
    # visited: exhaustive), with XL's ERM depth matched: the formulas are the same, so the rankings must be.
    P, Q, Qt, Y = _tiny(seed=1)
    jobs = bench.make_jobs(lam, 5, ["flat", "hnsw"], 10, 1, 1, 0)
    bench.write_inputs(tmp_path / "in", P, Q, Qt, Y, jobs)
    pecos, versions = bench.run_pecos(bench.pecos_python(bench.DEFAULT_VENV), tmp_path / "in", tmp_path / "out")
    assert versions["libpecos"] == "1.2.8"
    for job in jobs:
        ours = bench.run_ours(job, P, Q, Y, Qt)
        base = pecos[job["name"]]
        np.testing.assert_array_equal(ours["I"], base["I"], err_msg=job["name"])
        np.testing.assert_allclose(ours["D"], base["D"], atol=1e-5, err_msg=job["name"])
