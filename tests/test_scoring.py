"""score_matrix / score_pairs_sparse / run_score_job against the reference path ``ce.score_pairs``.

Tolerances: fp32 paths agree with the reference to 1e-5 times the score scale (max(1, max |score|); the
same arithmetic, batched and padded differently; raw-dot [EMB] layouts give scores around 30); two runs with
the same batching agree to 1e-6.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

from xenbench.models.crossencoder import CEConfig, CrossEncoder, bundled_backbone
from xenbench.models.loading import build_cross_encoder
from xenbench.models.pairs import InputFormat, PairAssembler
from xenbench._device import resolve_device
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.errors import DataError, ParameterError
from xenbench.models.jobs import run_score_job, score_to_store
from xenbench.models.scoring import ScoreTiming, score_matrix, score_pairs_sparse

HERE = Path(__file__).resolve()

QUERIES = [
    Query("q0", "his mind wandered", (4, 8)),
    Query("q1", "I couldn't get his words out of my head", (35, 39)),
    Query("q2", "use your noddle"),  # no mention: no markers
    Query("q3", "a place in my heart", (2, 7)),
    Query("q4", "it brought the scandal to light " + "and then it went on and on " * 6, (25, 30)),  # truncated
    Query("q5", "thinking", (0, 8)),
]
ITEMS = [
    Item("i0", "mind, head, brain, psyche, nous", "that which is responsible for one's thoughts and feelings"),
    Item("i1", "noddle", "an informal British expression for head or mind"),
    Item("i2", "place", "an abstract mental location"),
    Item("i3", "public knowledge", "knowledge of something that is open and known to the general public"),
    Item("i4", "light", ""),
    Item("i5", "", "an untitled item with only a description"),
    Item("i6", "cognition, knowledge, noesis", "the psychological result of perception and learning " * 4),
    Item("i7", "tabula rasa", "a young mind not yet affected by experience"),
    Item("i8", "thinking, thought", "the process of using your mind to consider something carefully"),
    Item("i9", "x", "y"),
]


def tiny_ce(kind: str = "cls", *, pooling: str = "markers", fmt: InputFormat | None = None,
            seed: int = 0) -> CrossEncoder:
    """A 2-layer random BERT (hidden 32) on the bundled tokenizer: fast, deterministic given ``seed``."""
    tok = AutoTokenizer.from_pretrained(bundled_backbone())
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=256, num_labels=1, initializer_range=0.5)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(cfg) if kind == "cls" else BertModel(cfg, add_pooling_layer=False)
    config = CEConfig(kind=kind, pooling=pooling, scale=None, input_format=fmt or InputFormat())  # type: ignore
    return CrossEncoder(model.eval(), tok, config)


LAYOUTS = {
    "minilm-cls": lambda: build_cross_encoder(CEConfig(kind="cls")),
    "minilm-emb-mean": lambda: build_cross_encoder(CEConfig(kind="emb")),
    "tiny-cls-padded": lambda: tiny_ce("cls", fmt=InputFormat(max_query_tokens=12, max_item_tokens=20,
                                                              query_pad_to=16)),
    "tiny-emb-markers": lambda: tiny_ce("emb", pooling="markers"),
    "tiny-emb-cls-sep": lambda: tiny_ce("emb", pooling="cls-sep", fmt=InputFormat(markers=False)),
}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def ce(request) -> CrossEncoder:
    return LAYOUTS[request.param]()


@pytest.fixture(scope="module")
def small_ce() -> CrossEncoder:
    return tiny_ce("cls")


def atol(ref: np.ndarray) -> float:
    return 1e-5 * max(1.0, float(np.abs(ref).max()))


def reference(ce: CrossEncoder) -> np.ndarray:
    qs = [q for q in QUERIES for _ in ITEMS]
    its = [it for _ in QUERIES for it in ITEMS]
    return ce.score_pairs(qs, its, batch_size=7).numpy().reshape(len(QUERIES), len(ITEMS))


# -- equality with the reference path --------------------------------------------------------------


def test_assembler_equals_collate(ce):
    q_ids, i_ids = ce.pairs.encode_queries(QUERIES), ce.pairs.encode_items(ITEMS)
    asm = PairAssembler(ce.pairs, q_ids, i_ids)
    rng = np.random.default_rng(0)
    qr, ir = rng.integers(0, len(QUERIES), 25), rng.integers(0, len(ITEMS), 25)
    got = asm.batch(qr, ir)
    want = ce.pairs.collate([q_ids[r] for r in qr], [i_ids[c] for c in ir])
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), key
    lengths = (want["query_len"] + want["token_type_ids"].sum(1)).numpy()  # head (+ query padding) + tail
    np.testing.assert_array_equal(asm.lengths(qr, ir), lengths)


def test_dense_matches_reference(ce):
    ref = reference(ce)
    got = score_matrix(ce, QUERIES, ITEMS, batch_size=4, query_chunk=4, progress=False).scores
    assert got.shape == (6, 10) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=0, atol=atol(ref))
    assert np.ptp(ref) > 1e-3  # the layouts give scores that differ between pairs: the check is not vacuous


def test_sparse_matches_dense(ce):
    dense = score_matrix(ce, QUERIES, ITEMS, progress=False).scores
    rng = np.random.default_rng(1)
    pairs = np.stack([rng.integers(0, 6, 40), rng.integers(0, 10, 40)], axis=1)
    pairs[-1] = pairs[0]  # a duplicate entry is scored twice, identically
    got = score_pairs_sparse(ce, QUERIES, ITEMS, pairs, batch_size=5)
    assert got.shape == (40,) and got.dtype == np.float32
    np.testing.assert_allclose(got, dense[pairs[:, 0], pairs[:, 1]], rtol=0, atol=atol(dense))
    assert score_pairs_sparse(ce, QUERIES, ITEMS, np.zeros((0, 2), dtype=np.int64)).shape == (0,)


def test_ce_state_is_restored(small_ce):
    small_ce.train()
    small_ce.model.eval()  # the mixed state build_cross_encoder returns: top "training", model in eval
    before = [m.training for m in small_ce.modules()]
    score_matrix(small_ce, QUERIES[:2], ITEMS[:3], progress=False)
    assert [m.training for m in small_ce.modules()] == before
    assert small_ce.device.type == "cpu"


def test_bf16_is_close_but_not_exact(small_ce):
    fp32 = score_matrix(small_ce, QUERIES, ITEMS, progress=False).scores
    scored = score_matrix(small_ce, QUERIES, ITEMS, precision="bf16", progress=False)
    bf16, timing = scored.scores, scored.timing
    assert timing.precision == "bf16" and timing.n_pairs == 60
    assert np.abs(bf16 - fp32).max() < 0.05 * np.ptp(fp32)  # bf16 keeps ~3 significant digits


def test_bf16_weights_are_close_and_leave_the_model_in_fp32(small_ce):
    fp32 = score_matrix(small_ce, QUERIES, ITEMS, progress=False).scores
    scored = score_matrix(small_ce, QUERIES, ITEMS, precision="bf16-weights", progress=False)
    assert scored.timing.precision == "bf16-weights" and scored.scores.dtype == np.float32
    assert 0 < np.abs(scored.scores - fp32).max() < 0.05 * np.ptp(fp32)  # rounded, but close
    assert all(p.dtype == torch.float32 for p in small_ce.parameters())  # the caller's weights are untouched
    np.testing.assert_array_equal(score_matrix(small_ce, QUERIES, ITEMS, progress=False).scores, fp32)
    sparse = score_pairs_sparse(small_ce, QUERIES, ITEMS, np.array([[0, 1], [3, 2]]), precision="bf16-weights")
    np.testing.assert_allclose(sparse, fp32[[0, 3], [1, 2]], rtol=0, atol=0.05 * np.ptp(fp32))  # other batches


# -- the store path, resume ----------------------------------------------------------------------------


def test_store_path_and_manifest(small_ce, tmp_path):
    mem = score_matrix(small_ce, QUERIES, ITEMS, batch_size=3, query_chunk=2, progress=False).scores
    store = score_to_store(small_ce, QUERIES, ITEMS, tmp_path / "s", batch_size=3, query_chunk=2, progress=False,
                           manifest={"dataset": "handmade", "seed": 7})
    timing = ScoreTiming.last(store)
    np.testing.assert_allclose(store.to_numpy(), mem, rtol=0, atol=1e-6)
    assert store.chunks == (2, 10) and store.is_complete
    attrs = store.attrs
    assert attrs["query_ids"] == [q.id for q in QUERIES] and attrs["item_ids"] == [it.id for it in ITEMS]
    assert attrs["dataset"] == "handmade" and attrs["seed"] == 7 and attrs["precision"] == "fp32"
    assert attrs["xenbench_version"] and attrs["device"] == "cpu" and attrs["dtype"] == "float32"
    assert attrs["wall_s"] > 0 and attrs["sessions"][0]["n_pairs"] == 60 == timing.n_pairs
    assert timing.pairs_per_s > 0 and timing.device == "cpu"
    # A second call finds everything done and scores nothing.
    again = ScoreTiming.last(score_to_store(small_ce, QUERIES, ITEMS, tmp_path / "s", progress=False))
    assert again.n_pairs == 0


def test_resume_recomputes_torn_and_altered_blocks(small_ce, tmp_path):
    out = tmp_path / "s"
    full = score_to_store(small_ce, QUERIES, ITEMS, out, query_chunk=2, progress=False).to_numpy()
    # Block 1: torn file, no marker (a kill mid-write). Block 2: altered after its marker was written.
    with open(out / "scores" / "c" / "1" / "0", "r+b") as f:
        f.truncate(12)
    (out / "scores" / "_done" / "1.json").unlink()
    raw = bytearray((out / "scores" / "c" / "2" / "0").read_bytes())
    raw[5] ^= 0x55
    (out / "scores" / "c" / "2" / "0").write_bytes(bytes(raw))
    store = score_to_store(small_ce, QUERIES, ITEMS, out, query_chunk=2, progress=False)
    timing = ScoreTiming.last(store)
    assert timing.n_pairs == 2 * 2 * 10  # exactly the two bad blocks
    np.testing.assert_allclose(store.to_numpy(), full, rtol=0, atol=1e-6)


def test_resume_refuses_another_job(small_ce, tmp_path):
    score_to_store(small_ce, QUERIES, ITEMS, tmp_path / "s", progress=False)
    with pytest.raises(DataError, match=r"holds a score store of another job \(item_ids differs\)"):
        score_to_store(small_ce, QUERIES, ITEMS[:5], tmp_path / "s", progress=False)
    with pytest.raises(DataError, match=r"another job \(model_sha256 differs\)"):
        score_to_store(tiny_ce("cls", seed=1), QUERIES, ITEMS, tmp_path / "s", progress=False)
    with pytest.raises(DataError, match=r"another job \(precision differs\)"):
        score_to_store(small_ce, QUERIES, ITEMS, tmp_path / "s", precision="bf16", progress=False)


_CHILD = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("scoring_tests", sys.argv[1])
t = importlib.util.module_from_spec(spec); spec.loader.exec_module(t)
from xenbench.models.jobs import score_to_store
ce = t.tiny_ce("cls")
forward = ce.forward
def slow(batch):  # slow enough to be killed mid-run: ~0.5 s per query chunk
    time.sleep(0.1)
    return forward(batch)
ce.forward = slow
score_to_store(ce, t.QUERIES, t.ITEMS, sys.argv[2], batch_size=2, query_chunk=1, progress=False)
"""


def test_kill_and_resume(small_ce, tmp_path):
    out = tmp_path / "s"
    log = tmp_path / "child.log"
    with open(log, "wb") as err:
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(HERE), str(out)],
                                 stdout=subprocess.DEVNULL, stderr=err)
    done_dir = out / "scores" / "_done"
    deadline = time.monotonic() + 120
    try:
        while not (done_dir.is_dir() and any(done_dir.glob("*.json"))):
            if child.poll() is not None:
                pytest.fail(f"the scoring subprocess ended before it was killed:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail("no chunk was done within 120 s")
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    from xenbench.data.store import ScoreStore

    n_done = len(ScoreStore.open(out).done_chunks())
    assert 1 <= n_done < len(QUERIES)
    store = score_to_store(small_ce, QUERIES, ITEMS, out, batch_size=2, query_chunk=1, progress=False)
    timing = ScoreTiming.last(store)
    assert timing.n_pairs <= (len(QUERIES) - n_done) * len(ITEMS)  # done chunks were not recomputed
    uninterrupted = score_matrix(small_ce, QUERIES, ITEMS, batch_size=2, query_chunk=1, progress=False).scores
    np.testing.assert_allclose(store.to_numpy(), uninterrupted, rtol=0, atol=1e-6)
    assert not list(out.rglob("*.partial")) and not list(out.rglob("*.tmp"))


# -- run_score_job -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    return Dataset("wordnet-el:handmade", list(ITEMS), list(QUERIES), {"q0": ["i0"]})


def test_run_score_job(tmp_path, dataset):
    qids, iids = ["q3", "q0"], ["i2", "i0", "i9"]
    with pytest.warns(UserWarning, match="untrained-cls: the head is random"):
        store = run_score_job("untrained-cls", dataset, qids, iids, tmp_path / "s", progress=False, seed=3)
    ce = build_cross_encoder(CEConfig(kind="cls"), seed=3)
    want = score_matrix(ce, [QUERIES[3], QUERIES[0]], [ITEMS[2], ITEMS[0], ITEMS[9]], progress=False).scores
    np.testing.assert_allclose(store.to_numpy(), want, rtol=0, atol=1e-6)
    attrs = store.attrs
    assert attrs["model"] == "untrained-cls" and attrs["seed"] == 3
    assert attrs["dataset"] == "wordnet-el:handmade" and attrs["domain"] == "handmade"
    assert attrs["query_ids"] == qids and attrs["item_ids"] == iids


def test_a_ce_folder_is_recorded_relative_to_the_checkout_when_inside_it(tmp_path, monkeypatch):
    from xenbench._io import REPO_ROOT, repo_relative

    assert repo_relative(REPO_ROOT / "models" / "cls-ce") == "models/cls-ce"
    monkeypatch.chdir(REPO_ROOT / "notebooks")
    assert repo_relative("../models/cls-ce") == "models/cls-ce"  # as the notebooks name it
    assert repo_relative(tmp_path / "x" / ".." / "ce") == str((tmp_path / "ce").resolve())  # outside: absolute


def test_run_score_job_bad_input(tmp_path, dataset):
    with pytest.raises(ParameterError, match=r"'query_ids' parameter of run_score_job must be ids of dataset "
                                             r"'wordnet-el:handmade' \(2 of 3 are unknown\). Got \['nope', 'q9'\]"):
        run_score_job("untrained-cls", dataset, ["q1", "nope", "q9"], None, tmp_path / "s")
    with pytest.raises(ParameterError, match=r"'item_ids' parameter of run_score_job must be distinct ids"):
        run_score_job("untrained-cls", dataset, None, ["i1", "i2", "i1"], tmp_path / "s")
    with pytest.raises(ParameterError, match="'item_ids' parameter of run_score_job must be a sequence of ids"):
        run_score_job("untrained-cls", dataset, None, "i1", tmp_path / "s")
    with pytest.raises(ParameterError, match=r"'ce' parameter of run_score_job must be one of \['untrained-cls'"):
        run_score_job("bundled-cls", dataset, None, None, tmp_path / "s")  # the old, misleading name
    with pytest.raises(DataError, match="no such file or folder"):
        run_score_job(tmp_path / "no-model", dataset, None, None, tmp_path / "s")


# -- bad input -----------------------------------------------------------------------------------------


def test_bad_input(small_ce):
    with pytest.raises(ParameterError, match=r"'queries' parameter of score_matrix must be a non-empty sequence "
                                             r"of Query. Got \[\] instead"):
        score_matrix(small_ce, [], ITEMS)
    with pytest.raises(ParameterError, match=r"'items' parameter of score_pairs_sparse must be a non-empty"):
        score_pairs_sparse(small_ce, QUERIES, [], np.zeros((0, 2), dtype=int))
    with pytest.raises(ParameterError, match=r"'items' parameter of score_matrix must be a sequence of Item "
                                             r"\(entry 1 is not\). Got 'str'"):
        score_matrix(small_ce, QUERIES, [ITEMS[0], "i1"])
    with pytest.raises(ParameterError, match="'batch_size' parameter of score_matrix must be an int >= 1 or None. "
                                             "Got 0"):
        score_matrix(small_ce, QUERIES, ITEMS, batch_size=0)
    with pytest.raises(ParameterError, match="'query_chunk' parameter of score_matrix must be an int >= 1 or None"):
        score_matrix(small_ce, QUERIES, ITEMS, query_chunk=-1)
    with pytest.raises(ParameterError, match="'precision' parameter of score_matrix must be one of \\['fp32', 'bf16', "
                                             "'fp16', 'bf16-weights'\\]"):
        score_matrix(small_ce, QUERIES, ITEMS, precision="fp64")
    with pytest.raises(ParameterError, match="'ce' parameter of score_matrix must be a xenbench CrossEncoder"):
        score_matrix(small_ce.model, QUERIES, ITEMS)
    with pytest.raises(ParameterError, match=r"'pairs' parameter of score_pairs_sparse must be an int array of "
                                             r"shape \(nnz, 2\)"):
        score_pairs_sparse(small_ce, QUERIES, ITEMS, np.zeros((4, 3), dtype=int))
    with pytest.raises(ParameterError, match=r"must be item rows in \[0, 9\] \(entry 1 is not\). Got \[2, 10\]"):
        score_pairs_sparse(small_ce, QUERIES, ITEMS, np.array([[0, 0], [2, 10]]))
    with pytest.raises(ParameterError, match=r"must be query rows in \[0, 5\] \(entry 0 is not\). Got \[-1, 0\]"):
        score_pairs_sparse(small_ce, QUERIES, ITEMS, np.array([[-1, 0]]))


def test_devices():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cuda", "mps", "cpu")
    with pytest.raises(ParameterError, match=r"'device' parameter of resolve_device must be 'auto', 'cpu', 'cuda'"):
        resolve_device("gpu please")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu") or torch.backends.mps.is_available()
        with pytest.raises(ParameterError, match="CUDA is not available on this machine. Got 'cuda'"):
            resolve_device("cuda")


def test_import_without_zarr():
    # The GPU machines have no zarr: importing the scorer (and its jobs and cache) and scoring in memory must still
    # work.
    code = ("import sys; sys.modules['zarr'] = None\n"
            "import xenbench.models.scoring, xenbench.models.jobs, xenbench.models.cache, xenbench.data.store\n"
            "try:\n    xenbench.data.store.ScoreStore.create('never', 2, 2)\n"
            "except ImportError as e:\n    assert 'needs zarr' in str(e), e\n"
            "else:\n    raise SystemExit('no ImportError')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_resume_identity_includes_batch_size_and_chunking(small_ce, tmp_path):
    out = tmp_path / "s"
    score_to_store(small_ce, QUERIES, ITEMS, out, batch_size=3, query_chunk=2, progress=False)
    # batch composition changes the float bits: another batch size would mix bit-different blocks
    with pytest.raises(DataError, match=r"another job \(batch_size differs\): store 3, this run 4; pass the same "
                                        r"--batch-size"):
        score_to_store(small_ce, QUERIES, ITEMS, out, batch_size=4, progress=False)
    with pytest.raises(DataError, match=r"was chunked in blocks of 2 queries, not 3"):
        score_to_store(small_ce, QUERIES, ITEMS, out, batch_size=3, query_chunk=3, progress=False)
    timing = ScoreTiming.last(score_to_store(small_ce, QUERIES, ITEMS, out, progress=False))  # adopts 3
    assert timing.n_pairs == 0 and timing.batch_size == 3


def _spawn(out, tmp_path, name: str) -> subprocess.Popen:
    with open(tmp_path / f"{name}.log", "wb") as err:
        return subprocess.Popen([sys.executable, "-c", _CHILD, str(HERE), str(out)], stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)


def _holds(lock, pid: int) -> bool:
    try:
        return json.loads(lock.read_text())["pid"] == pid
    except (OSError, ValueError, KeyError):
        return False


def _wait_for(lock, child, timeout: float = 120.0) -> None:
    """Until ``child`` holds the writer lock (a stale lock of an earlier kill does not count)."""
    deadline = time.monotonic() + timeout
    while not _holds(lock, child.pid):
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"the scoring subprocess never took its lock (rc {child.poll()})")
        time.sleep(0.01)


def test_killed_five_times_at_random_points_gives_the_uninterrupted_bits(small_ce, tmp_path):
    out, lock = tmp_path / "s", tmp_path / ".s.lock"
    rng = np.random.default_rng(5)
    for attempt in range(5):
        child = _spawn(out, tmp_path, f"child{attempt}")
        _wait_for(lock, child)  # scoring has started (a stale lock of the previous kill was taken over)
        time.sleep(float(rng.uniform(0.0, 0.6)))  # somewhere inside a block: blocks take ~0.5 s
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        if child.returncode != -signal.SIGKILL:  # finished before the kill: nothing left to interrupt
            break
    assert lock.exists() or child.returncode == 0  # SIGKILL leaves the lock; the next writer takes it over
    store = score_to_store(small_ce, QUERIES, ITEMS, out, batch_size=2, query_chunk=1, progress=False)
    reference = score_to_store(small_ce, QUERIES, ITEMS, tmp_path / "ref", batch_size=2, query_chunk=1, progress=False)
    assert np.array_equal(store.to_numpy(), reference.to_numpy())  # bit-identical, not merely close
    assert store.verify() == [] and not lock.exists()
    assert not list(out.rglob("*.partial")) and not list(out.rglob("*.tmp"))


def test_a_second_writer_is_refused_up_front(small_ce, tmp_path):
    out = tmp_path / "s"
    child = _spawn(out, tmp_path, "writer")
    try:
        _wait_for(tmp_path / ".s.lock", child)
        # the same job, and another CE into the same fresh folder: both refused before touching anything
        for ce in (small_ce, tiny_ce("emb")):
            with pytest.raises(DataError, match=rf"s: is being written by process {child.pid} on .*wait for that job"):
                score_to_store(ce, QUERIES, ITEMS, out, batch_size=2, query_chunk=1, progress=False)
        assert child.poll() is None  # the first writer is undisturbed
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


# --- Ray backend: a local cluster of 2 CPUs --------------------------------------------------------------


def _ray_job():
    """The bundled-size MiniLM CE (random head, seeded) on 7 queries x 48 items: blocks of a few tenths of a s."""
    items = [Item(f"{it.id}-{r}", it.title, f"{it.text} (copy {r})") for r in range(4) for it in ITEMS][:48]
    return build_cross_encoder(CEConfig(kind="cls"), seed=0), QUERIES, items


@contextlib.contextmanager
def _actor_threads():
    """The local reference at a Ray CPU actor's thread count (Ray sets OMP_NUM_THREADS to its 1 CPU): on CPUs
    whose GEMM splits its reductions by thread, the bits of a score depend on the thread count, not only on
    the token ids, batches and precision."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_ray_backend_gives_the_single_process_matrix(ray_cluster, tmp_path):
    ce, queries, items = _ray_job()
    kw = dict(batch_size=16, query_chunk=1, progress=False)
    with _actor_threads():
        ref = score_to_store(ce, queries, items, tmp_path / "local", **kw).to_numpy()
    store = score_to_store(ce, queries, items, tmp_path / "ray", backend="ray", ray_options={"workers": 2}, **kw)
    assert np.array_equal(store.to_numpy(), ref)  # the same bits: same token ids, batches and precision
    workers = {store.chunk_info(k)["worker"] for k in range(store.n_chunks)}
    assert len(workers) == 2  # both actors scored blocks
    assert store.attrs["batch_size"] == 16 and store.verify() == []

    # A resumed job skips finished blocks: forget two, resume on Ray, only those are scored.
    from xenbench.data.store import ScoreStore

    writable = ScoreStore.open(tmp_path / "ray", mode="r+")
    writable.invalidate(2)
    writable.invalidate(5)
    timing = ScoreTiming.last(score_to_store(ce, queries, items, tmp_path / "ray", backend="ray",
                                             ray_options={"workers": 1}, **kw))  # two blocks: one fresh actor
    assert timing.n_pairs == 2 * len(items)
    assert np.array_equal(ScoreStore.open(tmp_path / "ray").to_numpy(), ref)


def test_ray_backend_recovers_a_killed_worker(ray_cluster, tmp_path):
    import threading

    ce, queries, items = _ray_job()
    kw = dict(batch_size=16, query_chunk=1, progress=False)
    with _actor_threads():
        ref = score_matrix(ce, queries, items, **kw).scores
    out, killed = tmp_path / "ray", []

    def kill_one(actors):
        def run():
            done = out / "scores" / "_done"
            while not (done.is_dir() and any(done.glob("*.json"))):
                time.sleep(0.01)
            pid = ray_cluster.get(actors[0].pid.remote())
            os.kill(pid, signal.SIGKILL)  # the worker process dies mid-job
            killed.append(pid)
        threading.Thread(target=run, daemon=True).start()

    store = score_to_store(ce, queries, items, out, backend="ray", ray_options={"workers": 2, "on_actors": kill_one}, **kw)
    assert killed, "the worker was not killed"
    assert store.is_complete and np.array_equal(store.to_numpy(), ref)


def test_a_failed_ray_job_releases_its_workers_at_once(ray_cluster, tmp_path):
    """A notebook keeps the last exception, and with its traceback the job's frames and actor handles: the actors are
    killed when the job ends, or they would hold their CPU (or GPU) slots on the cluster for as long (before: still
    held 5 s after the failure, with the exception kept)."""
    ce, queries, items = _ray_job()

    def fail(actors):
        ray_cluster.get([actor.pid.remote() for actor in actors])  # the actor is up, holding its CPU
        raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError, match="the job failed") as kept:
        score_to_store(ce, queries, items, tmp_path / "ray", backend="ray", batch_size=16, query_chunk=1,
                       progress=False, ray_options={"workers": 1, "on_actors": fail})
    deadline = time.monotonic() + 30
    while ray_cluster.available_resources().get("CPU") != 2.0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray_cluster.available_resources().get("CPU") == 2.0 and kept.value is not None


def test_a_store_needs_a_folder(small_ce):
    with pytest.raises(ParameterError, match="'out' parameter of score_to_store must be a store folder"):
        score_to_store(small_ce, QUERIES, ITEMS, None, backend="ray")


def test_cached_scores_score_once_per_model_and_sample(tmp_path, monkeypatch):
    import xenbench.models.cache as cache
    from xenbench.models.loading import load_cross_encoder

    model = Path(__file__).resolve().parent.parent / "models" / "cls-ce"
    data = Dataset("mine", ITEMS[:4], QUERIES[:3], gold={})
    store = cache.cached_scores(model, data, cache=tmp_path, device="cpu", progress=False)
    direct = score_matrix(load_cross_encoder(model), data.queries, data.items, device="cpu", progress=False,
                          batch_size=store.attrs["batch_size"]).scores
    np.testing.assert_array_equal(store.to_numpy(), direct)
    monkeypatch.setattr(cache, "score_to_store", lambda *a, **k: pytest.fail("a cached sample was scored again"))
    again = cache.cached_scores(model, data, cache=tmp_path, device="cpu")
    assert again.path == store.path
    monkeypatch.undo()
    other = cache.cached_scores(model, Dataset("mine", ITEMS[1:5], QUERIES[:3], gold={}), cache=tmp_path,
                                device="cpu", progress=False)
    assert other.path != store.path and other.shape == (3, 4)
    with pytest.raises(ParameterError, match="'model' parameter of cached_scores"):
        cache.cached_scores(tmp_path / "nope", data, cache=tmp_path)
