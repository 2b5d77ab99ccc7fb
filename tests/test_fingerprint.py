"""A CE fingerprinted once and loaded once per process (xenbench.models.fingerprint), and the one rate probe
(xenbench.models.probe).

Truth: the fingerprint is :func:`model_fingerprint` of a freshly loaded CE; "not loaded again" is shown by replacing
``load_cross_encoder`` with a function that fails the test; a new process is stood in for by forgetting what this one
found; a changed file (its modification time) or another library version makes it load and hash again; the probe's
scores equal ``score_matrix`` on the seeded sample it documents.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from xenbench import provenance
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.models import cache, crossencoder, fingerprint, loading, scoring
from xenbench.models.probe import PROBE_ITEMS, probe_rate
from xenbench.sampling import sample_rows

CE = Path(__file__).resolve().parent.parent / "models" / "cls-ce"
WORDS = "apple river stone cloud music garden window pencil ladder candle".split()
QUERIES = [Query(f"q{k}", f"we talked about the {WORDS[k % 10]} and the {WORDS[(k * 3) % 10]}") for k in range(7)]
ITEMS = [Item(f"i{k}", WORDS[k % 10] + str(k), f"a {WORDS[(k * 7) % 10]} near a {WORDS[k % 10]}") for k in range(70)]


def _new_process(monkeypatch):
    """What another process (the kernel, a later run) knows: only the records in the cache folder."""
    monkeypatch.setattr(fingerprint, "_KNOWN", {})
    monkeypatch.setattr(fingerprint, "_SHARED", None)


def _no_load(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the CE was loaded again")

    monkeypatch.setattr(loading, "load_cross_encoder", fail)


@pytest.fixture
def ce_copy(tmp_path, monkeypatch) -> Path:
    """A CE folder of this test's own, and a cache folder of its own."""
    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    _new_process(monkeypatch)
    folder = tmp_path / "my-ce"
    shutil.copytree(CE, folder)
    return folder


def test_a_ce_is_fingerprinted_once_and_found_by_later_processes(monkeypatch, ce_copy):
    truth = fingerprint.model_fingerprint(loading.load_cross_encoder(ce_copy))
    assert fingerprint.stored_fingerprint(ce_copy) is None
    assert fingerprint.folder_fingerprint(ce_copy) == truth
    _no_load(monkeypatch)
    assert fingerprint.folder_fingerprint(ce_copy) == truth  # this process: remembered
    _new_process(monkeypatch)
    provenance.clear_inputs()
    assert fingerprint.stored_fingerprint(str(ce_copy) + "/") == truth  # the record, by any spelling of the path
    assert ("model", ce_copy.resolve()) in provenance.recorded_inputs()  # recorded as read, as a load would
    other = ce_copy.parent / "same-bytes-elsewhere"
    shutil.copytree(ce_copy, other)
    assert fingerprint.stored_fingerprint(other) is None  # another folder has its own record


@pytest.mark.parametrize("change", ["file", "library"])
def test_a_changed_file_or_library_is_loaded_and_hashed_again(monkeypatch, ce_copy, change):
    fingerprint.folder_fingerprint(ce_copy)
    _new_process(monkeypatch)
    weights = ce_copy / crossencoder.WEIGHTS_NAME
    if change == "file":  # rewritten (same bytes, so that the load's checksums still pass)
        st = weights.stat()
        os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    else:
        real = fingerprint._version
        monkeypatch.setattr(fingerprint, "_version", lambda name: "99.0" if name == "transformers" else real(name))
    assert fingerprint.stored_fingerprint(ce_copy) is None
    _no_load(monkeypatch)
    with pytest.raises(AssertionError, match="loaded again"):
        fingerprint.folder_fingerprint(ce_copy)


def test_load_shared_returns_one_object_per_folder(monkeypatch, ce_copy):
    first = fingerprint.load_shared(ce_copy)
    _no_load(monkeypatch)
    assert fingerprint.load_shared(ce_copy.parent / ".." / ce_copy.parent.name / ce_copy.name) is first
    fingerprint.release_shared()
    with pytest.raises(AssertionError, match="loaded again"):
        fingerprint.load_shared(ce_copy)


def test_a_cached_sample_is_found_without_loading_the_ce(monkeypatch, tmp_path, ce_copy):
    data = Dataset("mine", ITEMS[:5], QUERIES[:3], gold={})
    store = cache.cached_scores(ce_copy, data, cache=tmp_path / "scores", device="cpu", progress=False)
    assert store.path == fingerprint.cache_path(loading.load_cross_encoder(ce_copy), data, tmp_path / "scores")
    _new_process(monkeypatch)
    _no_load(monkeypatch)
    again = cache.cached_scores(ce_copy, data, cache=tmp_path / "scores", device="cpu")
    assert again.path == store.path and np.array_equal(again.to_numpy(), store.to_numpy())


def test_the_probe_scores_the_seeded_sample_it_documents():
    ce = loading.load_cross_encoder(CE)
    probe = probe_rate(ce, QUERIES, ITEMS, n_pairs=130, seed=3, device="cpu")
    n_items = min(len(ITEMS), PROBE_ITEMS)  # 32 items, ceil(130 / 32) = 5 queries: a warm-up batch of 2, then 2 + 1
    qs = [QUERIES[r] for r in sample_rows(len(QUERIES), 5, 3, kind="queries")]
    its = [ITEMS[c] for c in sample_rows(len(ITEMS), n_items, 3, kind="items")]
    assert probe.scores.shape == (5, 32) and probe.timing.n_pairs == 96 and len(probe.batch_rates) == 2
    direct = scoring.score_matrix(ce, qs, its, device="cpu", progress=False).scores
    np.testing.assert_allclose(probe.scores, direct, rtol=0, atol=1e-5)  # same pairs; batching may differ
    tiny = probe_rate(ce, QUERIES[:1], ITEMS[:4], n_pairs=1000, device="cpu")  # capped at what there is
    assert tiny.scores.shape == (1, 4)
