"""Hardening beyond one-line input errors (issue 27): nothing a file supplies is unpickled, non-finite scores and
embeddings never become finished work, the DE cache heals itself, and a failed write does not block the retry.

The one-line command-line cases (bad ``--out``/``--device``, ids files, long lines, FIFOs, lone surrogates,
``train-ce`` arguments) are rows of the table in ``tests/test_bad_inputs.py``; the train-state cases of issue 39 are in
``tests/test_faults.py``.
"""
from __future__ import annotations

import errno
import json
import logging
import pickle
import re
import sys
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import CORPUS, one_error, smallest_beir  # noqa: E402

MODELS = Path(__file__).resolve().parent.parent / "models"


# -- 1. no unpickling of a file's code -----------------------------------------------------------------------


class _Planted:
    """Unpickling it would create the file ``target`` (``builtins.open(target, "w")``)."""

    def __init__(self, target: Path) -> None:
        self.target = str(target)

    def __reduce__(self):
        return (open, (self.target, "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_a_planted_pickle_resume_state_is_refused_and_never_runs(tmp_path, writer, capsys):
    """A ``train_state.pt`` (an older xenbench's torch pickle, or one planted) is never unpickled: ``train-ce`` refuses
    it with one line; the same payload through the unrestricted unpickler would have run."""
    run = tmp_path / "run"
    run.mkdir()
    marker, path = tmp_path / "PWNED", run / train.LEGACY_STATE_NAME
    payload = {"model": _Planted(marker), "step": 3}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    assert main(["train-ce", "--kind", "emb", "--out", str(run), "--domains", "noun.Tops", "--device", "cpu"]) == 2
    assert re.search(r"run/train_state\.pt: a resume state in the torch pickle format of an older xenbench, which is "
                     r"not read \(a pickle can run code", one_error(capsys))
    assert not marker.exists()
    torch.load(path, weights_only=False) if writer == "torch.save" else pickle.loads(path.read_bytes())
    assert marker.exists()


def test_a_truncated_resume_state_is_one_error(tmp_path):
    path = tmp_path / train.STATE_NAME
    from safetensors.torch import save_file

    save_file({"torch_rng": torch.get_rng_state()}, path)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(DataError, match=r"train_state\.safetensors: not a resume state written by xenbench train-ce: "
                                        r"not a safetensors file \(SafetensorError"):
        train.load_state(path)


def test_the_resume_state_written_by_save_state_reads_back_equal(tmp_path):
    """What ``_save_state`` writes (model tensors, AdamW's moments and step counts, the group learning rates and the
    scheduler's counters, the RNG, the config) reads back equal, and restores an optimizer and scheduler to the same
    state."""
    cfg = train.TrainConfig(kind="cls", domains=["tiny"], trainable_layers=1)
    ce = train.build_cross_encoder(train.CEConfig(kind="cls"), seed=0)
    names = set(train.trainable_parameter_names(ce, 1))
    for name, p in ce.model.named_parameters():
        p.requires_grad_(name in names)
    params = [p for p in ce.model.parameters() if p.requires_grad]

    def adamw():  # two groups, as train_cross_encoder makes them: the body and the head
        return torch.optim.AdamW([{"params": params[:-2], "lr": 1e-3}, {"params": params[-2:], "lr": 1e-2}])

    opt = adamw()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    sum(p.sum() for p in params).backward()
    opt.step()
    sched.step()  # the optimizer now holds exp_avg / exp_avg_sq tensors and a step count
    path = tmp_path / train.STATE_NAME
    rng = torch.get_rng_state()
    train._save_state(path, ce, opt, sched, 1, [0.5], 1.5, cfg)

    state = train.load_state(path)
    assert (state["step"], state["losses"], state["wall_s"]) == (1, [0.5], 1.5)
    assert train._same_config(train._jsonable(state["train_config"]), cfg)
    for name, p in ce.model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(state["model"][name], p.detach(), atol=0, rtol=0)
    fresh = adamw()
    resumed = torch.optim.lr_scheduler.LambdaLR(fresh, lambda s: 1.0 / (s + 1))
    train.check_state(path, state, dict(zip(train._optimizer_names(ce, fresh), params)), n_groups=2)
    train._restore_state(state, ce, fresh, resumed)
    for p in params:
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(fresh.state[p][key], opt.state[p][key], atol=0, rtol=0)
    assert [g["lr"] for g in fresh.param_groups] == [g["lr"] for g in opt.param_groups]
    assert resumed.last_epoch == sched.last_epoch == 1 and resumed.get_last_lr() == sched.get_last_lr()
    assert torch.equal(state["torch_rng"], rng)


# -- 2. finiteness: scores and embeddings ------------------------------------------------------------------


def test_a_ce_with_nan_weights_is_refused_before_scoring_and_never_finishes_a_store(tmp_path, capsys):
    from xenbench.models.jobs import run_score_job
    from xenbench.models.loading import load_cross_encoder

    ce = load_cross_encoder(MODELS / "cls-ce")
    weights = dict(ce.model.named_parameters())[ce.config.trained[-1]]
    with torch.no_grad():
        weights.fill_(float("nan"))  # what a diverged training run saves
    ce.save(tmp_path / "nan-ce")
    folder, out = smallest_beir(tmp_path), tmp_path / "out"

    # xenbench score probes the CE before it starts (as xenbench run does): refused in one line, nothing written
    assert main(["score", str(tmp_path / "nan-ce"), f"beir:{folder}", "--out", str(out), "--device", "cpu"]) == 2
    line = one_error(capsys)
    assert re.search(r"The 'MODEL' parameter of xenbench score must be a CE whose scores are finite: nan-ce scored 12 "
                     r"of 12 probe pairs NaN or inf \(NaN weights in the folder, or an overflow\?\)\. Got '.*nan-ce' "
                     r"instead\.", line), line
    assert not out.exists()

    # past the probe, the scorer itself never writes a block holding NaN: the store stays unfinished
    with pytest.raises(DataError, match=rf"{re.escape(str(out))}: block 0 \(rows 0:3\) holds 12 NaN/inf of 12 scores "
                                        r"\(first at query row 0, item column 0\) computed by .*nan-ce: not written, the "
                                        r"store stays incomplete"):
        run_score_job(tmp_path / "nan-ce", f"beir:{folder}", None, None, out, device="cpu", progress=False)
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
    folder, out = smallest_beir(tmp_path), tmp_path / "out"
    args = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]

    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod, "_fsync_file", full)
    assert main(args) == 2
    assert one_error(capsys) == f"xenbench: error: {out}: No space left on device"
    assert not ScoreStore.open(out).is_complete
    monkeypatch.undo()
    assert main(args) == 0  # the empty store left behind is finished, not in the way
    assert ScoreStore.open(out).is_complete


def test_retriever_stores_resume_and_overwrite(tmp_path, capsys):
    folder, out = smallest_beir(tmp_path), tmp_path / "out"
    base = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]
    assert main(base) == 0
    first = ScoreStore.open(out).to_numpy()
    assert main([*base, "--resume"]) == 0  # the same job: the finished store is returned as is
    np.testing.assert_array_equal(ScoreStore.open(out).to_numpy(), first)
    capsys.readouterr()
    assert main([*base, "--n-items", "2"]) == 2
    assert "holds a score store of another job (item_ids differs): pass --overwrite" in one_error(capsys)
    assert main([*base, "--n-items", "2", "--overwrite"]) == 0
    assert ScoreStore.open(out).shape == (3, 2)
    with pytest.raises(SystemExit) as exc:
        main([*base, "--resume", "--overwrite"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_score_de_runs_on_the_device_it_is_given(tmp_path, capsys):
    out = tmp_path / "de"
    assert main(["score", "de", f"beir:{smallest_beir(tmp_path)}", "--out", str(out), "--device", "cpu"]) == 0
    assert ScoreStore.open(out).attrs["device"] == "cpu"


# -- 3. bounded and well-formed text inputs ------------------------------------------------------------------


def test_a_byte_order_mark_is_accepted(tmp_path):
    plain = beir.load_beir(smallest_beir(tmp_path / "plain"), name="x")
    marked = beir.load_beir(smallest_beir(tmp_path / "bom", bom=True), name="x")
    assert marked == plain and marked.items[0].id == "d0"


def test_an_ids_file_with_a_byte_order_mark_is_read(tmp_path, capsys):
    ids = tmp_path / "ids.txt"
    ids.write_text("\ufeffq2\nq0\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["score", "tfidf", f"beir:{smallest_beir(tmp_path)}", "--out", str(out), "--query-ids", str(ids)]) == 0
    assert ScoreStore.open(out).attrs["query_ids"] == ["q2", "q0"]


def test_long_texts_are_cut_with_one_warning_per_file(tmp_path):
    n = readers.MAX_TEXT_CHARS
    corpus = [*CORPUS, {"_id": "long1", "text": "y" * (n + 5)}, {"_id": "long2", "title": "t" * (n + 1), "text": "z"}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = beir.load_beir(smallest_beir(tmp_path, corpus=corpus))
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
    folder = smallest_beir(tmp_path)
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
    assert one_error(capsys) == f"xenbench: error: {out}: No space left on device"


def test_a_resume_state_that_cannot_be_written_names_its_file_and_keeps_the_previous_one(tmp_path, monkeypatch):
    from types import SimpleNamespace

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched.step()  # one step: the state's counters say 1
    ce, cfg, path = SimpleNamespace(model=model), train.TrainConfig(domains=["x"]), tmp_path / train.STATE_NAME
    train._save_state(path, ce, opt, sched, 1, [1.0], 0.1, cfg)

    import safetensors.torch

    def full(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(DataError, match=r"train_state\.safetensors: the resume state could not be written \(No space "
                                        r"left on device\); the previous one"):
        train._save_state(path, ce, opt, sched, 2, [1.0, 0.5], 0.2, cfg)
    monkeypatch.undo()
    assert train.load_state(path)["step"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == [train.STATE_NAME]


# -- 7. every structured value bounded before it is expanded or printed (issue 39) ---------------------------------


def _laughs(levels: int = 9) -> str:
    """A YAML "billion laughs": ``levels`` lists of 9 aliases each, 9**levels strings once expanded, in ~400 bytes."""
    text = '&a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'
    names = "abcdefghijklmnop"
    for prev, name in zip(names, names[1:levels]):
        text += f", &{name} [" + ",".join([f"*{prev}"] * 9) + "]"
    return f"[{text}]"


def _xenbench(*args: str, cwd: Path | None = None):
    import subprocess
    import sys

    cli = Path(sys.executable).with_name("xenbench")
    return subprocess.run([str(cli), *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _refused(proc, pattern: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("xenbench: error: "), proc.stderr[-2000:]  # one line
    assert len(lines[0]) < 1000  # the value is quoted by a bounded prefix
    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


def test_yaml_aliases_in_a_run_parameter_are_refused_unexpanded(tmp_path):
    """Before: the refusal formatted the 9**9-string list with repr, ~3.1 GB and a MemoryError after a minute."""
    proc = _xenbench("run", "00_data", "-p", "eval_datasets", _laughs(), "--out", str(tmp_path / "r"))
    _refused(proc, r"The 'eval_datasets' parameter of notebook 00_data must be a list of dataset specs .*; this YAML holds an "
                   r"alias \(\*name\), which is not allowed here\. Got '\[&a \[\"lol\".*\.\.\. instead\.")
    assert not (tmp_path / "r").exists()


def test_yaml_aliases_in_a_sweep_grid_are_refused_unexpanded(tmp_path):
    proc = _xenbench("sweep", "00_data", "-p", "eval_datasets", _laughs(), "wordnet-el:noun.food",
                     "--out", str(tmp_path / "s"))
    _refused(proc, r"'eval_datasets' parameter of notebook 00_data .*this YAML holds an alias")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(("profile", "message"), [
    (_laughs(), r"refused: it holds more than 100,000 values once its aliases are expanded"),
    ("&r [*r]", r"refused: it holds an alias that refers to a value containing it \(a recursive value\)"),
])
def test_a_notebook_profiles_file_is_bounded_after_alias_expansion(tmp_path, profile, message):
    """A notebook's own .yaml may use aliases (a profile repeating a list), but not to build billions of values."""
    from xenbench.harness import NOTEBOOKS_DIR

    (tmp_path / "x.ipynb").write_bytes((NOTEBOOKS_DIR / "00_data.ipynb").read_bytes())
    spec = (NOTEBOOKS_DIR / "00_data.yaml").read_text(encoding="utf-8")
    (tmp_path / "x.yaml").write_text(spec.replace("profiles:\n", f"profiles:\n  bomb: {{eval_datasets: {profile}}}\n"),
                                     encoding="utf-8")
    proc = _xenbench("run", str(tmp_path / "x.ipynb"), "--out", str(tmp_path / "r"))
    _refused(proc, re.escape(str(tmp_path / "x.yaml")) + ": " + message)
    assert not (tmp_path / "r").exists()


def test_aliases_that_stay_small_are_read_as_yaml_reads_them():
    from xenbench.harness.params import YamlBoundError, load_yaml

    assert load_yaml("a: &x [1, 2]\nb: *x") == {"a": [1, 2], "b": [1, 2]}
    with pytest.raises(YamlBoundError, match=r"an alias \(\*name\), which is not allowed here"):
        load_yaml("a: &x [1, 2]\nb: *x", aliases=False)
    with pytest.raises(YamlBoundError, match="more than 10 values"):
        load_yaml("[" + ", ".join(["x"] * 10) + "]", max_nodes=10)  # 10 strings + the list
    with pytest.raises(YamlBoundError, match="nested too deeply"):
        load_yaml("[" * 20_000 + "]" * 20_000)


def test_error_messages_quote_a_bounded_prefix_of_any_value():
    from xenbench.errors import MAX_QUOTED_CHARS, ParameterError, bounded_repr

    small = [1, "a", (2,), {3: None}, {4}, frozenset(), 1.5, None, [[]]]
    assert bounded_repr(small) == repr(small)
    loop: list = [1]
    loop.append(loop)
    assert bounded_repr(loop) == repr(loop) == "[1, [...]]"
    wide = ["lol"] * 9
    for _ in range(8):  # 9**9 strings, shared: repr would build ~3 GB
        wide = [wide] * 9
    text = bounded_repr(wide)
    assert len(text) == MAX_QUOTED_CHARS + 3 and text.startswith("[[[[[[[[['lol', 'lol'") and text.endswith("...")
    assert len(str(ParameterError("x", "short", wide, "f"))) < 400


def test_a_sweep_grid_over_the_maximum_is_refused_before_any_value_is_read(tmp_path):
    """Before: a 10**6-point grid was validated point by point, printing nothing for minutes. "abc" is no seed: the
    refusal names the grid's size, not that value, since no value was read."""
    seeds = [str(k) for k in range(999)] + ["abc"]
    proc = _xenbench("sweep", "00_data", "-p", "seed", *seeds, "-p", "n_queries", *[str(k) for k in range(1, 1001)],
                     "--out", str(tmp_path / "s"))
    _refused(proc, r"The 'values' parameter of run_sweep must be a grid of at most 1,000 points \(sweep\.MAX_POINTS; "
                   r"split it into several sweeps\)\. Got '1000 seed x 1000 n_queries = 1,000,000 points' instead\.")
    assert not (tmp_path / "s").exists()
