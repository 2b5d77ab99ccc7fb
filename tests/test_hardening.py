"""Hardening beyond one-line input errors (issue 27): nothing a file supplies is unpickled, non-finite scores and
embeddings never become finished work, the DE cache heals itself, and a failed write does not block the retry.

The one-line command-line cases (bad ``--out``/``--device``, ids files, long lines, FIFOs, lone surrogates,
``train-ce`` arguments, a planted ``train_state.pt``) are rows of the table in ``tests/test_bad_inputs.py``.
"""
from __future__ import annotations

import errno
import json
import logging
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import xenbench.data.store as store_mod
import xenbench.models.train as train
from xenbench.cli import main
from xenbench.data import beir, readers
from xenbench.data.store import ScoreStore
from xenbench.errors import DataError

MODELS = Path(__file__).resolve().parent.parent / "models"
CORPUS = [{"_id": f"d{k}", "title": f"title {k}", "text": f"text of item {k}"} for k in range(4)]
QUERIES = [{"_id": f"q{k}", "text": f"query number {k}"} for k in range(3)]
QRELS = "query-id\tcorpus-id\tscore\n" + "".join(f"q{k}\td{k}\t1\n" for k in range(3))


def _beir(root: Path, *, bom: bool = False, corpus: list[dict] | None = None) -> Path:
    folder = root / "beir"
    (folder / "qrels").mkdir(parents=True)
    mark = "\ufeff" if bom else ""
    rows = CORPUS if corpus is None else corpus
    (folder / "corpus.jsonl").write_text(mark + "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "queries.jsonl").write_text(mark + "".join(json.dumps(r) + "\n" for r in QUERIES), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(mark + QRELS, encoding="utf-8")
    return folder


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("xenbench: error: ")]
    assert len(errors) == 1 and not any("Traceback" in line for line in err), err
    return errors[0]


# -- 1. no unpickling of a file's code -----------------------------------------------------------------------


class _Planted:
    """Unpickling it would create the file ``target`` (``builtins.open(target, "w")``)."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_a_planted_resume_state_is_refused_and_never_runs(tmp_path, writer):
    marker, path = tmp_path / "PWNED", tmp_path / train.STATE_NAME
    payload = {"model": _Planted(marker), "step": 3}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    with pytest.raises(DataError, match=r"train_state\.pt: refused: the unpickler may build only tensors, numbers, "
                                        r"strings, lists and dicts"):
        train.load_state(path)
    assert not marker.exists()
    # the same payload through the unrestricted unpickler would have run: the test can fail
    torch.load(path, weights_only=False) if writer == "torch.save" else pickle.loads(path.read_bytes())
    assert marker.exists()


def test_a_truncated_resume_state_is_one_error(tmp_path):
    path = tmp_path / train.STATE_NAME
    torch.save({"step": 1}, path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(DataError, match=r"train_state\.pt: not a resume state written by xenbench train-ce "
                                        r"\(RuntimeError: the file is truncated or of another format\)"):
        train.load_state(path)


def test_the_resume_state_written_by_save_state_loads_with_weights_only(tmp_path):
    """The on-disk format is unchanged: what ``_save_state`` writes (model tensors, AdamW and LambdaLR state, the
    RNG, the config) is read back by the restricted unpickler, equal."""
    cfg = train.TrainConfig(kind="cls", domains=["tiny"], trainable_layers=1)
    ce = train.build_cross_encoder(train.CEConfig(kind="cls"), seed=0)
    names = set(train.trainable_parameter_names(ce, 1))
    for name, p in ce.model.named_parameters():
        p.requires_grad_(name in names)
    params = [p for p in ce.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    sum(p.sum() for p in params).backward()
    opt.step()
    sched.step()  # the optimizer now holds exp_avg / exp_avg_sq tensors and a step count
    path = tmp_path / train.STATE_NAME
    rng = torch.get_rng_state()
    train._save_state(path, ce, opt, sched, 7, [0.5, 0.25], 1.5, cfg)

    state = train.load_state(path)
    assert (state["step"], state["losses"], state["wall_s"]) == (7, [0.5, 0.25], 1.5)
    assert train._same_config(train._jsonable(state["train_config"]), cfg)
    for name, p in ce.model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(state["model"][name], p.detach(), atol=0, rtol=0)
    fresh = torch.optim.AdamW(params, lr=1e-3)
    fresh.load_state_dict(state["optimizer"])
    for a, b in zip(fresh.state.values(), opt.state.values()):
        torch.testing.assert_close(a["exp_avg"], b["exp_avg"], atol=0, rtol=0)
    resumed = torch.optim.lr_scheduler.LambdaLR(fresh, lambda s: 1.0 / (s + 1))
    resumed.load_state_dict(state["scheduler"])
    assert resumed.last_epoch == sched.last_epoch == 1
    assert torch.equal(state["torch_rng"], rng)


# -- 2. finiteness: scores and embeddings ------------------------------------------------------------------


def test_a_ce_with_nan_weights_exits_non_zero_and_leaves_the_store_unfinished(tmp_path, capsys):
    from xenbench.models.loading import load_cross_encoder

    ce = load_cross_encoder(MODELS / "cls-ce")
    weights = dict(ce.model.named_parameters())[ce.config.trained[-1]]
    with torch.no_grad():
        weights.fill_(float("nan"))  # what a diverged training run saves
    ce.save(tmp_path / "nan-ce")
    folder, out = _beir(tmp_path), tmp_path / "out"

    assert main(["score", str(tmp_path / "nan-ce"), f"beir:{folder}", "--out", str(out), "--device", "cpu"]) == 2
    line = _one_error(capsys)
    assert re.search(rf"{re.escape(str(out))}: block 0 \(rows 0:3\) holds 12 NaN/inf of 12 scores \(first at query "
                     rf"row 0, item column 0\) computed by {re.escape(str((tmp_path / 'nan-ce').resolve()))}: not "
                     r"written, the store stays incomplete", line), line
    store = ScoreStore.open(out)
    assert not store.is_complete and store.done_chunks() == []

    # the unfinished store does not block the fix: the same --out with a sound CE and --overwrite
    assert main(["score", str(MODELS / "cls-ce"), f"beir:{folder}", "--out", str(out), "--overwrite",
                 "--device", "cpu"]) == 0
    fixed = ScoreStore.open(out)
    assert fixed.is_complete and np.isfinite(fixed.to_numpy()).all()


def test_the_store_refuses_to_write_or_serve_non_finite_blocks(tmp_path, monkeypatch):
    store = ScoreStore.create(tmp_path / "s", 4, 3, chunks=(2, None), attrs={"model": "some/ce"})
    bad = np.ones((2, 3), np.float32)
    bad[1, 2] = np.inf
    with pytest.raises(DataError, match=r"block 1 \(rows 2:4\) holds 1 NaN/inf of 6 scores \(first at query row 3, "
                                        r"item column 2\) computed by some/ce"):
        store.write_chunk(1, bad)
    assert store.done_chunks() == []
    # A block written with NaN by an older xenbench (no check) is refused when read back.
    monkeypatch.setattr(store_mod, "_non_finite", lambda values: None)
    store.write_chunk(0, np.full((2, 3), np.nan, np.float32))
    monkeypatch.undo()
    with pytest.raises(DataError, match=r"block 0 \(rows 0:2\) holds 6 NaN/inf scores .* call invalidate\(0\)"):
        store.read_chunk(0)


@pytest.fixture(scope="module")
def dual_encoder(tmp_path_factory):
    from xenbench.models.retrievers import DualEncoder

    return DualEncoder(device="cpu", cache_dir=tmp_path_factory.mktemp("de-cache"))


TEXTS = ["a first text", "the second one", "and a third"]


def _corrupt(kind: str, path: Path, good: np.ndarray) -> None:
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "wrong-shape":
        np.save(path, good[:2])
    elif kind == "float64":
        np.save(path, good.astype(np.float64))
    elif kind == "nan":
        bad = good.copy()
        bad[1, 5] = np.nan
        np.save(path, bad)
    elif kind == "pickle":  # an object array: loading it would unpickle
        np.save(path, np.array([_Planted(path.parent / "PWNED")], dtype=object), allow_pickle=True)
    elif kind == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("kind", ["truncated", "wrong-shape", "float64", "nan", "pickle", "empty"])
def test_a_corrupt_embedding_cache_file_is_recomputed(dual_encoder, kind, caplog):
    good = dual_encoder.encode(TEXTS)
    [path] = list(dual_encoder.cache_dir.glob("*.npy"))  # the one file of TEXTS
    _corrupt(kind, path, good)
    with caplog.at_level(logging.WARNING, logger="xenbench.models.retrievers"):
        again = dual_encoder.encode(TEXTS)
    np.testing.assert_allclose(again, good, rtol=0, atol=1e-6)
    assert any(str(path) in r.getMessage() and "recomputing it" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(np.load(path), again)  # the bad file was replaced by a sound one
    assert not (path.parent / "PWNED").exists()


def test_a_dual_encoder_giving_nan_is_one_error_and_caches_nothing(tmp_path):
    from xenbench.models.retrievers import DualEncoder

    de = DualEncoder(device="cpu", cache_dir=tmp_path)
    with torch.no_grad():
        de.model.embeddings.word_embeddings.weight.fill_(float("nan"))
    with pytest.raises(DataError, match=r"the dual encoder gives NaN/inf embeddings for 3 of 3 texts"):
        de.encode(TEXTS)
    assert not list(tmp_path.rglob("*.npy"))


def test_an_unwritable_embedding_cache_is_skipped(tmp_path, monkeypatch, caplog, dual_encoder):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", full)
    with caplog.at_level(logging.WARNING, logger="xenbench.models.retrievers"):
        emb = dual_encoder.encode(["a text never cached before"])
    assert emb.shape == (1, 384) and np.isfinite(emb).all()
    assert any("not written (No space left on device)" in r.getMessage() for r in caplog.records)
    assert not list(dual_encoder.cache_dir.glob("*.tmp.npy"))


# -- 4. score: a failed write names the path and does not block the retry; --resume / --overwrite ---------


def test_a_full_disk_names_the_store_and_the_same_command_then_finishes(tmp_path, monkeypatch, capsys):
    folder, out = _beir(tmp_path), tmp_path / "out"
    args = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]

    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod, "_fsync_file", full)
    assert main(args) == 2
    assert _one_error(capsys) == f"xenbench: error: {out}: No space left on device"
    assert not ScoreStore.open(out).is_complete
    monkeypatch.undo()
    assert main(args) == 0  # the empty store left behind is finished, not in the way
    assert ScoreStore.open(out).is_complete


def test_retriever_stores_resume_and_overwrite(tmp_path, capsys):
    folder, out = _beir(tmp_path), tmp_path / "out"
    base = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]
    assert main(base) == 0
    first = ScoreStore.open(out).to_numpy()
    assert main([*base, "--resume"]) == 0  # the same job: the finished store is returned as is
    np.testing.assert_array_equal(ScoreStore.open(out).to_numpy(), first)
    capsys.readouterr()
    assert main([*base, "--n-items", "2"]) == 2
    assert "holds a score store of another job (item_ids differs): pass --overwrite" in _one_error(capsys)
    assert main([*base, "--n-items", "2", "--overwrite"]) == 0
    assert ScoreStore.open(out).shape == (3, 2)
    with pytest.raises(SystemExit) as exc:
        main([*base, "--resume", "--overwrite"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_score_de_runs_on_the_device_it_is_given(tmp_path, capsys):
    out = tmp_path / "de"
    assert main(["score", "de", f"beir:{_beir(tmp_path)}", "--out", str(out), "--device", "cpu"]) == 0
    assert ScoreStore.open(out).attrs["device"] == "cpu"


# -- 3. bounded and well-formed text inputs ------------------------------------------------------------------


def test_a_byte_order_mark_is_accepted(tmp_path):
    plain = beir.load_beir(_beir(tmp_path / "plain"), name="x")
    marked = beir.load_beir(_beir(tmp_path / "bom", bom=True), name="x")
    assert marked == plain and marked.items[0].id == "d0"


def test_an_ids_file_with_a_byte_order_mark_is_read(tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text("\ufeffq2\nq0\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["score", "tfidf", f"beir:{_beir(tmp_path)}", "--out", str(out), "--query-ids", str(ids)]) == 0
    assert ScoreStore.open(out).attrs["query_ids"] == ["q2", "q0"]


def test_long_texts_are_cut_with_one_warning_per_file(tmp_path):
    n = readers.MAX_TEXT_CHARS
    corpus = [*CORPUS, {"_id": "long1", "text": "y" * (n + 5)}, {"_id": "long2", "title": "t" * (n + 1), "text": "z"}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = beir.load_beir(_beir(tmp_path, corpus=corpus))
    cut = [w for w in caught if "were cut" in str(w.message)]
    assert len(cut) == 1
    assert re.search(r"corpus\.jsonl: 2 text\(s\) longer than 100,000 characters were cut to 100,000 \(first on "
                     r"line 5\)", str(cut[0].message))
    assert len(ds.item("long1").text) == n and len(ds.item("long2").title) == n and ds.item("long2").text == "z"
    assert ds.item("d0").text == "text of item 0"  # short texts untouched


def test_a_line_at_the_bound_is_read_and_one_byte_more_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 64)
    path = tmp_path / "f.jsonl"
    line = json.dumps({"_id": "a", "text": ""})
    line = line[:-2] + "x" * (64 - len(line)) + '"}'
    assert len(line.encode()) == 64
    path.write_text(line + "\n" + line + "\n")
    assert [obj["_id"] for _, obj in readers.iter_jsonl(path)] == ["a", "a"]
    path.write_text(line + "\n" + line[:-2] + 'x"}' + "\n")
    with pytest.raises(DataError, match=r"f\.jsonl:2: line longer than 64 bytes"):
        list(readers.iter_jsonl(path))


def test_an_empty_split_file_still_loads_but_a_dataset_without_any_positive_does_not(tmp_path):
    folder = _beir(tmp_path)
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n")
    assert beir.load_beir(folder).splits["dev"] == []  # save_beir writes empty splits this way
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n")
    with pytest.raises(DataError, match=r"qrels: no positive pair in \['dev\.tsv', 'test\.tsv'\]: no query has gold"):
        beir.load_beir(folder)


def test_eval_ce_names_the_file_a_full_disk_refused(tmp_path, monkeypatch, capsys):
    import xenbench.cli as cli
    import xenbench.models.loading as loading

    class StandIn:
        def to(self, device):
            return self

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(loading, "load_cross_encoder", lambda path: StandIn())
    monkeypatch.setattr(train, "evaluate_rerank",
                        lambda ce, domains, max_queries=None, progress=False: [{"domain": domains[0]}])
    monkeypatch.setattr(cli, "write_text_atomic", full)
    out = tmp_path / "eval.json"
    assert main(["eval-ce", "some-ce", "--domains", "noun.Tops", "--device", "cpu", "--out", str(out)]) == 2
    assert _one_error(capsys) == f"xenbench: error: {out}: No space left on device"


def test_a_resume_state_that_cannot_be_written_names_its_file_and_keeps_the_previous_one(tmp_path, monkeypatch):
    from types import SimpleNamespace

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    ce, cfg, path = SimpleNamespace(model=model), train.TrainConfig(domains=["x"]), tmp_path / train.STATE_NAME
    train._save_state(path, ce, opt, sched, 1, [1.0], 0.1, cfg)

    def full(obj, f):
        Path(f).write_bytes(b"half")
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(DataError, match=r"train_state\.pt: the resume state could not be written \(PytorchStreamWriter "
                                        r"failed writing file data/0: file write failed\); the previous one"):
        train._save_state(path, ce, opt, sched, 2, [1.0, 0.5], 0.2, cfg)
    monkeypatch.undo()
    assert train.load_state(path)["step"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == [train.STATE_NAME]
