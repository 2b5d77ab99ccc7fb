"""ScoreStore: round trip, resume bookkeeping, torn chunks, attributes."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from xenbench.errors import DataError, ParameterError
from xenbench.data.store import STORE_FORMAT, ScoreStore

N_Q, N_I, Q_CHUNK = 10, 7, 3  # 4 row blocks, the last one short (rows 9:10)


def matrix(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((N_Q, N_I)).astype(np.float32)


def fill(store: ScoreStore, m: np.ndarray, blocks: list[int] | None = None) -> None:
    for k in range(store.n_chunks) if blocks is None else blocks:
        a, b = store.chunk_rows(k)
        store.write_chunk(k, m[a:b], {"wall_s": 0.5})


def test_round_trip(tmp_path):
    m = matrix()
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(Q_CHUNK, None))
    assert store.n_chunks == 4 and store.chunk_rows(3) == (9, 10)
    fill(store, m)
    again = ScoreStore.open(tmp_path / "s")
    assert again.is_complete and again.shape == (N_Q, N_I) and again.chunks == (Q_CHUNK, N_I)
    np.testing.assert_array_equal(again.to_numpy(), m)  # float32 in, float32 out: exact
    np.testing.assert_array_equal(again[2:8, 1:3], m[2:8, 1:3])
    np.testing.assert_array_equal(again[-1], m[-1])
    np.testing.assert_array_equal(again[::4], m[::4])
    assert again.to_numpy().dtype == np.float32
    assert [s for s, _, _ in again.iter_chunks()] == [0, 3, 6, 9]
    assert again.wall_s == pytest.approx(2.0)


def test_several_item_chunks_per_block(tmp_path):
    m = matrix(1)
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(4, 3))  # blocks span 3 chunk files
    fill(store, m)
    np.testing.assert_array_equal(ScoreStore.open(tmp_path / "s").to_numpy(), m)


def test_resume_bookkeeping(tmp_path):
    m = matrix()
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(Q_CHUNK, None))
    fill(store, m, [0, 2])
    store = ScoreStore.open(tmp_path / "s", mode="r+")
    assert store.done_chunks() == [0, 2] and store.missing_chunks() == [1, 3] and not store.is_complete
    with pytest.raises(DataError, match=r"2 of 4 row blocks are not done \(first: \[1, 3\]\)"):
        store.to_numpy()
    with pytest.raises(DataError, match=r"block 1 \(rows 3:6\) is not done"):
        store[2:5]
    partial = store.to_numpy(allow_partial=True)
    assert np.isnan(partial[3:6]).all() and np.isnan(partial[9:]).all()
    np.testing.assert_array_equal(partial[6:9], m[6:9])
    fill(store, m, store.missing_chunks())  # what a resumed run does
    np.testing.assert_array_equal(store.to_numpy(), m)


def test_block_without_marker_is_absent_and_recomputed(tmp_path):
    # A kill between writing block 1's data and its marker, then a torn (truncated) chunk file.
    m = matrix()
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(Q_CHUNK, None))
    fill(store, m, [0])
    store._array[3:6, :] = m[3:6] + 100.0  # data written, marker never written
    chunk_file = tmp_path / "s" / "scores" / "c" / "1" / "0"
    with open(chunk_file, "r+b") as f:
        f.truncate(10)
    (chunk_file.parent / "0.deadbeef.partial").write_bytes(b"junk")  # zarr's temp file of a killed write
    (tmp_path / "s" / "zarr.cafe.partial").write_bytes(b"{")  # ... of a killed attrs update
    store = ScoreStore.open(tmp_path / "s", mode="r+")
    assert not list((tmp_path / "s").rglob("*.partial"))
    assert store.done_chunks() == [0]
    with pytest.raises(DataError, match=r"block 1 \(rows 3:6\) is not done"):
        store.read_chunk(1)
    fill(store, m, store.missing_chunks())
    np.testing.assert_array_equal(store.to_numpy(), m)


def test_block_changed_after_marker_is_never_read_as_valid(tmp_path):
    m = matrix()
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(Q_CHUNK, None))
    fill(store, m)
    chunk_file = tmp_path / "s" / "scores" / "c" / "2" / "0"
    raw = bytearray(chunk_file.read_bytes())
    raw[0] ^= 0xFF  # one flipped byte: still decodes, wrong value
    chunk_file.write_bytes(bytes(raw))
    store = ScoreStore.open(tmp_path / "s", mode="r+")
    with pytest.raises(DataError, match=r"block 2 \(rows 6:9\) does not match its completion marker"):
        store.to_numpy()
    with pytest.raises(DataError, match="does not match its completion marker"):
        store[7]
    with open(chunk_file, "r+b") as f:  # torn: too short to decode at all
        f.truncate(10)
    assert store.verify() == [2]
    store.invalidate(2)
    assert store.missing_chunks() == [2]
    fill(store, m, [2])
    np.testing.assert_array_equal(store.to_numpy(), m)


def test_attrs_round_trip(tmp_path):
    attrs = {"model": "bundled-cls", "tags": ["q1", "q2"], "nested": {"seed": 3, "domain": "noun.food"},
             "unicode": "café ✓", "wall_s": 0.0}
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(Q_CHUNK, None), attrs=attrs)
    store.update_attrs({"wall_s": 1.5})
    got = ScoreStore.open(tmp_path / "s").attrs
    assert got == {**attrs, "wall_s": 1.5, "format": STORE_FORMAT, "dtype": "float32"}
    with pytest.raises(ParameterError, match="'attrs' parameter of ScoreStore.create must be a JSON-serializable"):
        ScoreStore.create(tmp_path / "t", 2, 2, attrs={"x": object()})


def test_marker_is_written_last_and_atomically(tmp_path):
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(Q_CHUNK, None))
    fill(store, matrix(), [0])
    done = tmp_path / "s" / "scores" / "_done"
    assert sorted(os.listdir(done)) == ["0.json"]  # no temporary file left behind
    info = json.loads((done / "0.json").read_text())
    assert info["rows"] == [0, 3] and len(info["sha256"]) == 64 and info["wall_s"] == 0.5
    assert store.chunk_info(0) == info and store.chunk_info(1) is None


def test_errors(tmp_path):
    with pytest.raises(ParameterError, match="'n_queries' parameter of ScoreStore.create must be an int >= 1. Got 0"):
        ScoreStore.create(tmp_path / "a", 0, 5)
    with pytest.raises(ParameterError, match="'chunks' parameter of ScoreStore.create must be a pair whose q_chunk"):
        ScoreStore.create(tmp_path / "a", 5, 5, chunks=(0, None))
    store = ScoreStore.create(tmp_path / "s", N_Q, N_I, chunks=(Q_CHUNK, None))
    with pytest.raises(DataError, match="already exists: open it with ScoreStore.open to resume"):
        ScoreStore.create(tmp_path / "s", N_Q, N_I)
    with pytest.raises(ParameterError, match=r"'values' parameter of ScoreStore.write_chunk must be an array of "
                                             r"shape \(3, 7\). Got \(2, 7\)"):
        store.write_chunk(0, np.zeros((2, N_I)))
    with pytest.raises(ParameterError, match=r"'k' parameter of ScoreStore must be a block index in \[0, 3\]"):
        store.write_chunk(4, np.zeros((1, N_I)))
    with pytest.raises(DataError, match="store is open read-only"):
        ScoreStore.open(tmp_path / "s").write_chunk(0, np.zeros((3, N_I)))
    with pytest.raises(DataError, match="not a score store"):
        ScoreStore.open(tmp_path)
    fresh = ScoreStore.create(tmp_path / "s", 2, 2, overwrite=True)
    assert fresh.shape == (2, 2) and fresh.done_chunks() == []


# --- manifest integrity and the writer lock -----------------------------------------------------------


def _ids(n: int, prefix: str) -> list[str]:
    return [f"{prefix}{k}" for k in range(n)]


def test_ids_must_match_the_shape_at_creation(tmp_path):
    with pytest.raises(ParameterError, match=r"query_ids and item_ids of lengths \(10, 7\).*Got \(9, 7\)"):
        ScoreStore.create(tmp_path / "s", N_Q, N_I, attrs={"query_ids": _ids(9, "q"), "item_ids": _ids(N_I, "i")})
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.update(item_ids=a["item_ids"][::-1]), "do not match the ids_sha256 recorded at creation"),
    (lambda a: a.update(query_ids=a["query_ids"][:-1]), "lists 9 query ids and 7 item ids for a 10 x 7 matrix"),
    (lambda a: a.pop("ids_sha256"), "has ids but no ids_sha256"),
    (lambda a: a.update(dtype="float16"), "dtype is 'float16'"),
])
def test_an_edited_manifest_is_refused(tmp_path, edit, message):
    import json

    path = tmp_path / "s"
    store = ScoreStore.create(path, N_Q, N_I, chunks=(Q_CHUNK, None),
                              attrs={"query_ids": _ids(N_Q, "q"), "item_ids": _ids(N_I, "i")})
    store.write_chunk(0, np.zeros((Q_CHUNK, N_I)))
    assert ScoreStore.open(path).verify() == []
    meta_path = path / "zarr.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    edit(meta["attributes"])
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(DataError, match=message):
        ScoreStore.open(path)
    with pytest.raises(DataError, match=message):
        store.verify()  # an open handle re-reads the manifest


def test_writer_lock_refuses_a_second_writer_and_takes_over_a_stale_lock(tmp_path):
    import json
    import subprocess
    import sys

    from xenbench.data.store import writer_lock

    path = tmp_path / "s"
    with writer_lock(path) as lock:
        assert lock == tmp_path / ".s.lock" and json.loads(lock.read_text())["pid"] == os.getpid()
        with pytest.raises(DataError, match=r"s: is being written by process \d+ on .* \(lock .s.lock\)"):
            with writer_lock(path):
                pass
    assert not lock.exists()  # released

    # A lock left by a process that died (SIGKILL: no cleanup) is stale on this host and taken over.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(json.dumps({"pid": int(dead.stdout), "host": __import__("socket").gethostname(),
                                "started": "then"}))
    with writer_lock(path):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    lock.write_text(json.dumps({"pid": 1, "host": "another-host", "started": "then"}))
    with pytest.raises(DataError, match="by process 1 on another-host"):
        with writer_lock(path):
            pass


def test_compare_with_stores_pairs_matrices_and_stores_by_name(tmp_path):
    """A fresh matrix is compared with the store of the same name, on the (query, item) ids both hold."""
    from types import SimpleNamespace

    from xenbench.data.store import compare_with_stores

    m = matrix()
    q_ids, i_ids = [f"q{k}" for k in range(N_Q)], [f"i{k}" for k in range(N_I)]
    store = ScoreStore.create(tmp_path / "cls-ce", N_Q, N_I, chunks=(Q_CHUNK, None),
                              attrs={"query_ids": q_ids, "item_ids": i_ids})
    fill(store, m)
    stores = {"cls-ce": ScoreStore.open(tmp_path / "cls-ce")}
    queries = [SimpleNamespace(id=i) for i in ("q3", "q0", "zz")]  # "zz" is not in the store
    items = [SimpleNamespace(id=i) for i in ("i2", "i1")]
    fresh = m[np.ix_([3, 0], [2, 1])]
    fresh = np.vstack([fresh, [[9.0, 9.0]]])
    fresh[1, 0] += 0.25
    out = compare_with_stores({"cls-ce": fresh, "emb-ce": fresh}, stores, queries, items)
    assert out.to_dict(orient="records") == [{"fresh": "cls-ce", "store": "cls-ce", "n_pairs": 4,
                                              "max_abs_diff": pytest.approx(0.25)}]
