"""The scorer protocol: a sentence-transformers ``CrossEncoder`` object and a plain callable go wherever xenbench's own
CEs go — ``score_matrix``, ``score_to_store`` (killed and resumed: bit-identical), the Ray backend, the on-demand
cache and notebooks 03 and 07 through the Python API. Offline: a tiny BERT cross-encoder (tests/_tiny_models.py) and
a lexical scorer written here."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
import _tiny_models as tiny  # noqa: E402

from xenbench.data.sources import load_dataset  # noqa: E402
from xenbench.data.store import ScoreStore  # noqa: E402
from xenbench.errors import DataError, ParameterError  # noqa: E402
from xenbench.models import cache  # noqa: E402
from xenbench.models.jobs import score_to_store  # noqa: E402
from xenbench.models.loading import load_cross_encoder  # noqa: E402
from xenbench.models.pairs import document_text  # noqa: E402
from xenbench.models.scorers import CallableScorer, Scorer, SentenceTransformersScorer  # noqa: E402
from xenbench.models.scoring import score_matrix, score_pairs_sparse  # noqa: E402


def overlap(query_texts: list[str], item_texts: list[str]) -> np.ndarray:
    """A deterministic lexical scorer: the Jaccard similarity of the pairs' lower-cased word sets."""
    out = []
    for q, i in zip(query_texts, item_texts):
        a, b = set(q.lower().split()), set(i.lower().split())
        out.append(len(a & b) / max(len(a | b), 1))
    return np.asarray(out, dtype=np.float32)


def picklable_overlap():
    """``overlap`` as a closure that names no global of this module: cloudpickle ships it to Ray workers by value (this
    module is not importable there)."""
    def score(query_texts, item_texts):
        import numpy

        sets = [(set(q.lower().split()), set(i.lower().split())) for q, i in zip(query_texts, item_texts)]
        return numpy.asarray([len(a & b) / max(len(a | b), 1) for a, b in sets], dtype=numpy.float32)

    return score


def st_model(folder: Path):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(folder), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu")


def data() -> tuple[list, list]:
    ds = load_dataset("wordnet-el:noun.cognition")
    return list(ds.queries[:6]), list(ds.items[:9])


@pytest.fixture(scope="module", autouse=True)
def _threads(one_thread):
    yield


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny.bert(tmp_path_factory.mktemp("tiny") / "bert")


@pytest.fixture(scope="module")
def scorers(folder) -> dict:
    return {"st": st_model(folder), "callable": CallableScorer(picklable_overlap(), name="overlap",
                                                                 fingerprint="overlap-v1")}


def test_the_adapters_and_xenbench_ces_implement_the_protocol(folder, scorers):
    ce = load_cross_encoder(folder)
    for s in (ce, SentenceTransformersScorer(scorers["st"]), scorers["callable"]):
        assert isinstance(s, Scorer) and isinstance(s.name, str) and isinstance(s.fingerprint, str)
    assert ce.name == "bert" and len(ce.fingerprint) == 64
    queries, items = data()
    pairs = [(q.text, document_text(it)) for q in queries for it in items]
    got = ce.score([p[0] for p in pairs], [p[1] for p in pairs])
    want = score_matrix(ce, queries, items, device="cpu", progress=False).scores.ravel()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(want.std()))
    # the fingerprint follows the weights, the tokenizer and the activation, not the object
    again = SentenceTransformersScorer(st_model(folder)).fingerprint
    assert again == SentenceTransformersScorer(scorers["st"]).fingerprint
    other = st_model(folder)
    with torch.no_grad():
        next(other.parameters()).add_(1e-3)
    assert SentenceTransformersScorer(other).fingerprint != again


def test_a_sentence_transformers_object_scores_as_its_predict_and_as_the_native_engine(folder, scorers):
    queries, items = data()
    pairs = [(q.text, document_text(it)) for q in queries for it in items]
    ref = np.asarray(scorers["st"].predict(pairs, show_progress_bar=False)).reshape(len(queries), len(items))
    got = score_matrix(scorers["st"], queries, items, device="cpu", progress=False).scores
    native = score_matrix(load_cross_encoder(folder), queries, items, device="cpu", progress=False).scores
    tol = 1e-4 * float(ref.std())
    assert float(ref.std()) > 1e-2 and np.abs(got - ref).max() <= tol and np.abs(native - ref).max() <= tol
    rows = np.array([[0, 0], [5, 8], [2, 3], [5, 8]])
    sparse = score_pairs_sparse(scorers["st"], queries, items, rows, device="cpu")
    assert np.abs(sparse - ref[rows[:, 0], rows[:, 1]]).max() <= tol


def test_a_callable_scores_exactly_what_it_returns(scorers):
    queries, items = data()
    got = score_matrix(scorers["callable"], queries, items, batch_size=4, device="cpu", progress=False).scores
    want = overlap([q.text for q in queries for _ in items], [document_text(it) for _ in queries for it in items])
    assert np.array_equal(got, want.reshape(got.shape)) and got.max() > 0


_CHILD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("scorer_tests", sys.argv[1])
t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
from xenbench.models.jobs import score_to_store
from xenbench.models.scorers import CallableScorer
queries, items = t.data()
if sys.argv[3] == "st":
    scorer = t.st_model(sys.argv[4])
    predict = scorer.predict
    def slow(*args, **kwargs):  # slow enough to be killed mid-run
        time.sleep(0.15)
        return predict(*args, **kwargs)
    scorer.predict = slow
else:
    def slow(q, i):
        time.sleep(0.15)
        return t.overlap(q, i)
    scorer = CallableScorer(slow, name="overlap", fingerprint="overlap-v1")
score_to_store(scorer, queries, items, sys.argv[2], batch_size=3, query_chunk=1, device="cpu", progress=False)
"""


@pytest.mark.parametrize("kind", ["st", "callable"])
def test_killed_and_resumed_it_gives_the_uninterrupted_bits(kind, folder, scorers, tmp_path):
    queries, items = data()
    out, log = tmp_path / "s", tmp_path / "child.log"
    with open(log, "wb") as err:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(HERE), str(out), kind, str(folder)],
                                 stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    done, deadline = out / "scores" / "_done", time.monotonic() + 180
    try:
        while not (done.is_dir() and any(done.glob("*.json"))):
            if child.poll() is not None:
                pytest.fail(f"the scoring subprocess ended before it was killed:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail("no block was done within 180 s")
            time.sleep(0.01)
        os.killpg(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    n_done = len(ScoreStore.open(out).done_chunks())
    assert 1 <= n_done < len(queries)
    kw = dict(batch_size=3, query_chunk=1, device="cpu", progress=False)
    store = score_to_store(scorers[kind], queries, items, out, **kw)
    reference = score_to_store(scorers[kind], queries, items, tmp_path / "ref", **kw)
    assert np.array_equal(store.to_numpy(), reference.to_numpy())  # bit-identical, not merely close
    assert store.attrs["model"] == reference.attrs["model"] and store.verify() == []
    assert store.attrs["model_sha256"] == (SentenceTransformersScorer(scorers["st"]).fingerprint if kind == "st"
                                           else "overlap-v1")
    if kind == "st":
        assert store.attrs["max_length"] == tiny.MAX_LEN
        assert store.attrs["model_config"]["scorer"].endswith("SentenceTransformersScorer")


def test_a_resume_checks_the_scorers_fingerprint(scorers, tmp_path):
    queries, items = data()
    score_to_store(scorers["callable"], queries, items, tmp_path / "s", query_chunk=2, progress=False)
    other = CallableScorer(picklable_overlap(), name="overlap", fingerprint="overlap-v2")
    with pytest.raises(DataError, match=r"another job \(model_sha256 differs\)"):
        score_to_store(other, queries, items, tmp_path / "s", query_chunk=2, progress=False)
    anonymous = CallableScorer(picklable_overlap(), name="overlap")
    store = score_to_store(anonymous, queries, items, tmp_path / "a", query_chunk=2, progress=False)
    assert store.is_complete and store.attrs["model_sha256"] is None
    store.invalidate(1)
    for scorer, why in ((anonymous, "a scorer without a fingerprint wrote it"),
                        (scorers["callable"], "a scorer without a fingerprint wrote it")):
        with pytest.raises(DataError, match=rf"holds a score store to resume, but {why}, so nothing says"):
            score_to_store(scorer, queries, items, tmp_path / "a", query_chunk=2, progress=False)
    with pytest.raises(DataError, match=r"but this run's scorer has no fingerprint"):
        score_to_store(anonymous, queries, items, tmp_path / "s", query_chunk=2, progress=False)


@pytest.mark.parametrize("kind", ["st", "callable"])
def test_the_ray_backend_gives_the_local_scores(kind, ray_cluster, scorers, tmp_path):
    """The callable's bits exactly; the sentence-transformers model's within 1e-6 of the score spread: it runs
    transformers' own padded forward, whose CPU kernels gave a few scores one float32 ulp apart in a Ray worker
    (xenbench's own CEs give the local bits there: tests/test_scoring.py)."""
    queries, items = data()
    kw = dict(batch_size=4, query_chunk=2, device="cpu", progress=False)
    local = score_to_store(scorers[kind], queries, items, tmp_path / "local", **kw).to_numpy()
    # one actor (a fresh Ray worker process each): blocks spread over two are tests/test_scoring.py's
    ray = score_to_store(scorers[kind], queries, items, tmp_path / "ray", backend="ray", ray_options={"workers": 1},
                         **kw)
    assert ray.is_complete and len({ray.chunk_info(k)["worker"] for k in range(ray.n_chunks)}) >= 1
    if kind == "callable":
        assert np.array_equal(ray.to_numpy(), local)
    else:
        assert float(np.abs(ray.to_numpy() - local).max()) <= 1e-6 * float(local.std())


@pytest.mark.parametrize("kind", ["st", "callable"])
def test_the_cache_and_notebooks_03_and_07_take_a_scorer_through_the_python_api(kind, scorers, tmp_path,
                                                                                monkeypatch):
    """``load_setup(model=scorer)`` scores the seeded sample into the cache once; 03's protocol runs, 07's
    comparison and its CE timing run on it."""
    from xenbench.studies.protocol import query_splits
    from xenbench.studies import compare
    from xenbench.studies.adacur import adacur_protocol_runs
    from xenbench.studies.setup import de_embeddings, load_setup

    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    scorer = scorers[kind]
    setup = load_setup(None, "wordnet-el:noun.cognition", model=scorer, max_queries=30, max_items=40, seed=0,
                       device="cpu")
    assert setup.M.shape == (30, 40) and np.ptp(setup.M) > 0
    assert setup.attrs["model"] == ("overlap" if kind == "callable" else SentenceTransformersScorer(scorer).name)
    assert setup.describe().startswith(setup.attrs["model"])
    direct = score_matrix(scorer, setup.dataset.queries, [setup.dataset.items[i] for i in setup.items], device="cpu",
                          progress=False, batch_size=setup.attrs["batch_size"]).scores
    assert np.array_equal(setup.M, direct)
    monkeypatch.setattr(cache, "score_to_store", lambda *a, **k: pytest.fail("a cached sample was scored again"))
    again = load_setup(None, "wordnet-el:noun.cognition", model=scorer, max_queries=30, max_items=40, seed=0)
    assert np.array_equal(again.M, setup.M)
    splits = query_splits(30, 10, 6, [0])
    runs = adacur_protocol_runs(setup.M, splits, [0], [10], methods=("anncur", "adacur_nosplit"), k_values=(1, 5),
                                n_rounds=2, device="cpu")
    assert set(runs["method"]) >= {"ANNCUR", "ADACUR TopK No-Split"} and runs["recall"].between(0, 1).all()
    V, U = de_embeddings(setup, device="cpu")
    table, info = compare.compare_protocol_runs(setup, splits, [0], [10], V=V, U=U, k_values=(1, 5), n_rounds=2,
                                                axn_lambdas=(0.0, 1.0), mf_epochs=0, pefa_lambdas=(0.5,),
                                                pefa_neighbors=4, pq_bytes=None, device="cpu", progress=False)
    assert len(table) and table["value"].between(0, 1).all()
    cost = compare.ce_seconds_per_pair(scorer, setup, n_pairs=16, device="cpu")
    assert cost["seconds_per_pair"] > 0 and cost["source"] == f"measured: {setup.attrs['model']}"


def test_the_cache_refuses_a_scorer_without_a_fingerprint_saying_how_to_name_it(tmp_path):
    full = load_dataset("wordnet-el:noun.cognition")
    ds = full.subset([q.id for q in full.queries[:3]], [it.id for it in full.items[:4]])
    anonymous = CallableScorer(overlap, name="overlap")
    with pytest.raises(ParameterError) as err:
        cache.cached_scores(anonymous, ds, cache=tmp_path)
    line = str(err.value)
    assert "\n" not in line and "'model' parameter of cached_scores must be a scorer with a fingerprint" in line
    assert "CallableScorer(fn, name=..., fingerprint=" in line and "Got 'overlap without a fingerprint'" in line
    assert not (tmp_path / "scores").exists()


def test_what_is_not_a_scorer_is_refused_in_one_line(scorers):
    queries, items = data()
    with pytest.raises(ParameterError, match=r"'ce' parameter of score_matrix must be a xenbench CrossEncoder .*wrap a "
                                             r"function with xb\.scorers\.CallableScorer\(fn, name=\.\.\., "
                                             r"fingerprint=\.\.\.\)\)\. Got 'function' instead\."):
        score_matrix(overlap, queries, items, progress=False)
    wrong = CallableScorer(lambda q, i: np.zeros((len(q), 2)), name="two-columns")
    with pytest.raises(ParameterError, match=r"'scorer' parameter of two-columns must be a scorer whose score\(\) "
                                             r"returns one real number per pair \(shape \(\d+,\)\)\. Got 'ndarray of "
                                             r"dtype float64 and shape \(\d+, 2\)'"):
        score_matrix(wrong, queries, items, progress=False)
    with pytest.raises(ParameterError, match=r"'precision' parameter of score_to_store must be 'fp32' for overlap"):
        score_to_store(scorers["callable"], queries, items, "/nonexistent/x", precision="bf16", progress=False)


def test_bring_your_own_matrix_as_the_docs_show(tmp_path, monkeypatch):
    """docs/MODELS.md's "Bring your own matrix" snippet, run as written (on a tiny BEIR folder): the store it writes is
    what notebooks 03/04/07 read (``load_setup``), value for value."""
    import re

    from test_reranker_inputs import beir

    from xenbench.studies.setup import load_setup

    doc = (HERE.parents[1] / "docs" / "MODELS.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", doc.split("### Bring your own matrix", 1)[1], re.S).group(1)
    data = beir(tmp_path)
    M = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.save(tmp_path / "my_scores.npy", M)
    monkeypatch.chdir(tmp_path)
    exec(code.replace("beir:/data/mine", f"beir:{data}"), {})
    setup = load_setup(tmp_path / "scores" / "mine" / "my-ce", f"beir:{data}")
    assert np.array_equal(setup.M, M) and setup.describe().startswith("my-ce on ")
    assert ScoreStore.open(tmp_path / "scores" / "mine" / "my-ce").verify() == []
