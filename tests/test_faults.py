"""Faults and hostile inputs of issue 39: nothing of the user's deleted, nothing unbounded, nothing hangs, and no
write error leaves a state that blocks the retry.

Each test is one case of the audit, run as the user runs it: the command line (in-process ``xenbench.cli.main``,
or a child process where the case needs one: a file-size limit, a hanging peer) on tiny inputs. The one-line
refusals that leave nothing behind are rows of ``tests/test_bad_inputs.py`` (``out-*``, ``overwrite-*``, ``ray-*``,
``findings-*``, ``train-state-*``).
"""
from __future__ import annotations

import json
import re
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from xenbench.cli import main
from xenbench.data.store import ScoreStore
from xenbench.errors import DataError, ParameterError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import one_error, smallest_beir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- 1. --overwrite replaces only a store xenbench wrote -----------------------------------------------------


def _foreign_group(folder: Path) -> Path:
    """A zarr v3 group of the user's own (another array, its own attributes) with a file of theirs beside it."""
    import zarr

    group = zarr.open_group(str(folder), mode="w", attributes={"project": "mine"})
    group.create_array("embeddings", shape=(2, 3), dtype="float32")[:] = np.arange(6, dtype=np.float32).reshape(2, 3)
    (folder / "notes.txt").write_text("a week of notes", encoding="utf-8")
    return folder


@pytest.mark.filterwarnings("ignore:untrained-cls:UserWarning")
@pytest.mark.parametrize("model", ["tfidf", "de", "untrained-cls"])
def test_overwrite_never_deletes_a_foreign_zarr_group(tmp_path, capsys, model):
    out = _foreign_group(tmp_path / "mine")
    before = _contents(out)
    args = ["score", model, f"beir:{smallest_beir(tmp_path)}", "--out", str(out), "--device", "cpu"]
    assert main([*args, "--overwrite"]) == 2
    line = one_error(capsys)
    assert f"{out}: is not a score store xenbench wrote: it holds a zarr group that xenbench did not write (no " \
           "'format' attribute, not 'xenbench-scores/1')" in line and "nothing there was changed" in line, line
    assert _contents(out) == before
    assert main(args) == 2 and main([*args, "--resume"]) == 2  # nor resumed into
    assert _contents(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["beir", "mine"]


def test_overwrite_refuses_a_store_holding_a_file_of_the_user(tmp_path, capsys):
    out, folder = tmp_path / "out", smallest_beir(tmp_path)
    args = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]
    assert main(args) == 0
    (out / "results-draft.md").write_text("mine", encoding="utf-8")
    assert main([*args, "--overwrite", "--n-items", "2"]) == 2
    assert "holds 1 file(s) or folder(s) that are not part of a score store (first: 'results-draft.md')" in \
        one_error(capsys)
    assert (out / "results-draft.md").read_text() == "mine" and ScoreStore.open(out).shape == (3, 4)
    (out / "results-draft.md").unlink()
    assert main([*args, "--overwrite", "--n-items", "2"]) == 0  # a store of its own is replaced
    assert ScoreStore.open(out).shape == (3, 2)


def test_the_library_refuses_a_foreign_folder_too(tmp_path):
    from xenbench.data.datasets import Item, Query
    from xenbench.models.jobs import score_to_store

    out = _foreign_group(tmp_path / "mine")
    before = _contents(out)
    with pytest.raises(DataError, match=r"mine: is a folder that is not a score store xenbench wrote: it holds a zarr "
                                        r"group that xenbench did not write"):
        ScoreStore.create(out, 2, 2, overwrite=True)
    with pytest.raises(DataError, match=r"mine: is not a score store xenbench wrote"):
        score_to_store(object(), [Query("q", "x")], [Item("i", "t", "x")], out, overwrite=True)  # before the CE
    assert _contents(out) == before


def test_create_is_atomic_and_follows_a_link(tmp_path, monkeypatch):
    """A failure while a store is built leaves nothing at its path (it is built beside it and renamed); a store
    created through a symbolic link is built where the link points, the link kept."""
    def full(src, dst):  # zarr writes each metadata file to a temporary file, then renames it
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as err:
        ScoreStore.create(tmp_path / "s", 3, 2)
    assert err.value.filename == str(tmp_path / "s") and err.value.errno == 28
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    store = ScoreStore.create(tmp_path / "link", 3, 2)
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target" / "zarr.json").is_file()
    assert store.shape == (3, 2)


# -- 5. a write error leaves no lock that blocks the retry ---------------------------------------------------

_LIMITED = """
import resource, signal, sys, tempfile
from xenbench.cli import main
tempfile.gettempdir()  # found before the limit, as in any process that ran a while (dill, under torch, asks at import)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as a full disk does
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("limit, fails", [(0, "the writer lock"), (300, "the store's metadata")])
def test_a_failed_write_names_its_path_and_the_same_command_then_finishes(tmp_path, limit, fails):
    """Files may grow to ``limit`` bytes only (``RLIMIT_FSIZE``): at 0 the writer lock cannot be written, at 300 the
    store's ``zarr.json`` cannot. Each run fails with one line naming where, leaves no lock and no half store, and
    the same command then finishes."""
    folder, out = smallest_beir(tmp_path), tmp_path / "out"
    args = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", _LIMITED, str(limit), *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    errors = [line for line in done.stderr.splitlines() if line.startswith("xenbench: error: ")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    where = tmp_path / ".out.lock" if limit == 0 else out
    assert errors == [f"xenbench: error: {where}: File too large"], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beir"]  # no lock, no store, no temporary file
    done = subprocess.run([sys.executable, "-m", "xenbench.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert ScoreStore.open(out).is_complete


def test_a_full_disk_while_the_lock_is_written_leaves_no_lock(tmp_path, monkeypatch, capsys):
    import xenbench._io as io

    folder, out = smallest_beir(tmp_path), tmp_path / "out"
    args = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]
    real = io._write_temp

    def full(tmp, text, fsync):
        Path(tmp).write_text("")  # the file exists, its content never arrives
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io, "_write_temp", full)
    assert main(args) == 2
    assert one_error(capsys) == f"xenbench: error: {tmp_path / '.out.lock'}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beir"]
    monkeypatch.setattr(io, "_write_temp", real)
    assert main(args) == 0


def test_a_lock_of_a_dead_writer_is_taken_over_and_an_empty_one_is_named(tmp_path, capsys):
    folder, out = smallest_beir(tmp_path), tmp_path / "out"
    args = ["score", "tfidf", f"beir:{folder}", "--out", str(out)]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket as sock

    lock = tmp_path / ".out.lock"
    lock.write_text(json.dumps({"pid": int(dead.stdout), "host": sock.gethostname(), "started": "earlier"}))
    assert main(args) == 0 and not lock.exists()
    lock.write_text("")  # what an older xenbench left after a full disk
    assert main(args) == 2
    assert one_error(capsys).startswith(f"xenbench: error: {lock}: unreadable writer lock")


# -- 3. a Ray address that does not answer ----------------------------------------------------------------


def test_a_ray_address_that_never_answers_is_one_line_within_the_timeout(tmp_path, monkeypatch, capsys):
    """A peer that accepts the TCP connection and then says nothing (Ray's own client retries it for many minutes):
    the Ray driver probing it is killed at :data:`xenbench._ray.CONNECT_TIMEOUT_S`, before any model loads."""
    import xenbench._ray as xray
    import xenbench.models.jobs as jobs

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []
    threading.Thread(target=lambda: [accepted.append(server.accept()) for _ in range(8)], daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setattr(xray, "CONNECT_TIMEOUT_S", 3.0)
    monkeypatch.setattr(jobs, "untrained_cross_encoder", lambda *a, **k: pytest.fail("the model loaded"))
    rc = main(["score", "untrained-cls", f"beir:{smallest_beir(tmp_path)}", "--out", str(tmp_path / "out"), "--backend",
               "ray", "--address", address])
    server.close()
    assert rc == 2
    assert one_error(capsys) == (
        "xenbench: error: The 'address' parameter of Ray must be the address of a running Ray cluster that answers "
        "within 3 s (no Ray driver could connect within 3 s; start one with `ray start --head`, or leave the address "
        f"out for a local Ray). Got '{address}' instead.")
    assert accepted and not (tmp_path / "out").exists()
    with pytest.raises(ParameterError, match=r"'address' parameter of Ray .* Connection refused"):
        xray.check_address("127.0.0.1:1")


# -- 4. train states: safetensors + JSON, every part checked before it is used -----------------------------------

# The config `xenbench train-ce --kind cls --domains noun.Tops --trainable-layers 1` builds (the CLI's defaults).
TRAIN_ARGS = ["--kind", "cls", "--domains", "noun.Tops", "--trainable-layers", "1", "--device", "cpu"]


def _tiny_data():
    from xenbench.data.datasets import Dataset, Item, Query
    from xenbench.models.train import TrainingData

    items = [Item(f"i{k}", f"title {k}", f"text about thing number {k}") for k in range(6)]
    queries = [Query(f"q{k}", f"a query mentioning thing {k}", (2, 11)) for k in range(8)]
    ds = Dataset("tiny", items, queries, {q.id: [f"i{k % 6}"] for k, q in enumerate(queries)})
    return TrainingData([ds], [(0, k, np.array([k % 6, (k + 1) % 6, (k + 2) % 6], dtype=np.int64)) for k in range(8)])


@pytest.fixture(scope="module")
def one_step_state(tmp_path_factory) -> Path:
    """The resume state `train-ce` writes after its first step (2 steps of 8 queries: 8 tiny examples, 2 epochs),
    under the CLI's config, read from a run killed right after it."""
    import xenbench.models.train as train

    cfg = train.TrainConfig(kind="cls", domains=["noun.Tops"], trainable_layers=1, checkpoint_every=1)
    out = tmp_path_factory.mktemp("killed")
    real = train._save_state

    def save_then_die(path, *args):
        real(path, *args)
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train, "_save_state", save_then_die)
        with pytest.raises(KeyboardInterrupt):
            train.train_cross_encoder(cfg, out, data=_tiny_data(), device="cpu")
    return out / train.STATE_NAME


def _tampered(state: Path, folder: Path, tensors=None, header=None) -> Path:
    """A copy of ``state`` in ``folder`` with ``tensors(dict)`` and ``header(dict)`` applied in place."""
    import xenbench.models.train as train
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(state), framework="pt") as f:
        meta, values = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    head = json.loads(meta[train._META_KEY])
    if tensors:
        tensors(values)
    if header:
        header(head)
    folder.mkdir(exist_ok=True)
    save_file(values, folder / train.STATE_NAME, metadata={train._META_KEY: json.dumps(head)})
    return folder


def _first_weight(values: dict) -> str:
    """The first weight matrix of the state."""
    return next(k for k in values if k.startswith("model.") and k.endswith(".weight") and values[k].dim() == 2)


def _set(key, fn):
    return lambda values: values.__setitem__(key(values), fn(values[key(values)]))


STATE_CASES = {
    "int64-weight": (dict(tensors=_set(_first_weight, lambda t: t.to(dtype=__import__("torch").int64))),
                     r"model\.\S+\.weight is torch\.int64 of shape \(\d+, \d+\), the parameter torch\.float32"),
    "float64-weight": (dict(tensors=_set(_first_weight, lambda t: t.double())), r"is torch\.float64 of shape"),
    "wrong-shape": (dict(tensors=_set(_first_weight, lambda t: t[:-1].clone())),
                    r"weight is torch\.float32 of shape \(383, 384\), the parameter torch\.float32 of shape \(384, 384\)"),
    "nan-weight": (dict(tensors=_set(_first_weight, lambda t: t.fill_(float("nan")))), r"weight holds NaN or inf"),
    "missing-weight": (dict(tensors=lambda v: v.pop(_first_weight(v))), r"its weights are not the ones this run "
                                                                          r"trains \(1 missing, 0 unexpected"),
    "rng-dtype": (dict(tensors=_set(lambda v: "torch_rng", lambda t: t.long())),
                  r"'torch_rng' must be torch\.uint8 of shape \(5056,\), got torch\.int64"),
    "losses-type": (dict(header=lambda h: h.__setitem__("losses", "0.7")),
                    r"'losses' must be a list of 1 finite numbers \(one per step\), got str"),
    "step-1e9": (dict(header=lambda h: h.__setitem__("step", 10**9)),
                 r"'losses' must be a list of 1000000000 finite numbers"),
    "step-bool": (dict(header=lambda h: h.__setitem__("step", True)), r"'step' must be a non-negative int"),
    "adam-negative": (dict(tensors=_set(lambda v: "optimizer.0.exp_avg_sq", lambda t: -t - 1)),
                      r"optimizer\.0\.exp_avg_sq holds negative values"),
    "adam-step": (dict(tensors=_set(lambda v: "optimizer.0.step", lambda t: t + 10)),
                  r"optimizer\.0\.step must be a float32 scalar in \[1, 1\]"),
    "pickle-in-header": (dict(header=lambda h: h.__setitem__("format", "torch")), r"its header has no "),
}


@pytest.mark.parametrize("case", STATE_CASES)
def test_a_tampered_train_state_is_one_line_before_any_mining(one_step_state, tmp_path, monkeypatch, capsys, case):
    import xenbench.models.train as train

    kw, match = STATE_CASES[case]
    run = _tampered(one_step_state, tmp_path / "run", **kw)
    monkeypatch.setattr(train, "mine_training_data", lambda *a, **k: pytest.fail("mined negatives"))
    before = _contents(run)
    assert main(["train-ce", "--out", str(run), *TRAIN_ARGS]) == 2
    line = one_error(capsys)
    assert f"{run / train.STATE_NAME}: not a resume state written by xenbench train-ce: " in line, line
    assert re.search(match, line), line
    assert _contents(run) == before  # nothing trained, nothing saved


def test_the_untampered_state_passes_and_a_step_beyond_the_run_is_refused(one_step_state, tmp_path):
    """The same file untouched resumes (the control of the cases above); a step the run never reaches (a state
    consistent in itself: losses and counters of 3 steps, for a run of 2) is refused before any training."""
    import xenbench.models.train as train

    cfg = train.TrainConfig(kind="cls", domains=["noun.Tops"], trainable_layers=1)

    def three_steps(head):
        head.update(step=3, losses=[0.7, 0.7, 0.7])
        head["scheduler"].update(last_epoch=3, _step_count=4)

    run = _tampered(one_step_state, tmp_path / "beyond", header=three_steps)
    with pytest.raises(DataError, match=r"its step 3 is beyond the run's 2 steps"):
        train.train_cross_encoder(cfg, run, data=_tiny_data(), device="cpu")
    assert not (run / "xenbench_ce.json").exists()
    ok = _tampered(one_step_state, tmp_path / "ok")
    ce = train.train_cross_encoder(cfg, ok, data=_tiny_data(), device="cpu")
    assert ce.config.notes["steps"] == 2 and not (ok / train.STATE_NAME).exists()


# -- 6. results files: a forged commit, emptied witness cells, a hand-edited number, a marker in a name ---------------

RESULTS = ROOT / "notebooks" / "results"
GENERATED = [ROOT / "README.md", ROOT / "docs" / "FINDINGS.md", ROOT / "docs" / "MODELS.md"]


def _results(tmp_path: Path, names: list[str], edit=None) -> Path:
    folder = tmp_path / "results"
    folder.mkdir(parents=True)
    for name in names:
        doc = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        if edit is not None:
            edit(doc)
        (folder / name).write_text(json.dumps(doc), encoding="utf-8")
    return folder


def _forty_zeros(doc: dict) -> None:
    doc["provenance"]["git"]["commit"] = "0" * 40


def test_a_commit_this_repository_lacks_is_marked_refused_and_fails_verify(tmp_path, capsys):
    from xenbench import provenance
    from xenbench.studies import witnesses

    folder = _results(tmp_path, ["00_data.full.results.json"], _forty_zeros)
    assert main(["findings", "--results-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "Produced at commit `000000000000` (**not a commit of this repository**: its provenance is not what " \
           "produced it)" in out and "(a clean tree)" not in out
    before = [p.read_text(encoding="utf-8") for p in GENERATED]
    assert main(["findings", "--write", "--results-dir", str(folder)]) == 2
    assert "00_data.full.results.json: refused: this results file names commit '" + "0" * 40 + "', which is not a " \
           "commit of this repository" in one_error(capsys)
    assert [p.read_text(encoding="utf-8") for p in GENERATED] == before
    doc = json.loads((folder / "00_data.full.results.json").read_text())
    [commit] = [w for w in witnesses.input_witnesses(doc) if w.cell == "provenance commit"]
    assert not commit.ok and commit.today == "not a commit of this repository"
    real = json.loads((RESULTS / "00_data.full.results.json").read_text())
    assert [w.ok for w in witnesses.input_witnesses(real) if w.cell == "provenance commit"] == [True]
    assert provenance.commit_known("c6c7eba") is False  # only a full object name counts
    assert provenance.commit_known(real["provenance"]["git"]["commit"]) is True


def test_results_emptied_of_their_witness_cells_fail_verify(tmp_path, capsys):
    def emptied(doc):
        from xenbench import provenance

        doc["results"].update(score_summary=[], agreement=[], bundled={})
        doc.update(provenance.bind_results(doc))  # its digest bound again: only the emptied cells are seen

    folder = _results(tmp_path, ["01_score_matrices.full.results.json"], emptied)
    assert main(["findings", "--verify", "--results-dir", str(folder)]) == 1
    captured = capsys.readouterr()
    assert "01_score_matrices: results['score_summary']: committed absent or empty, today required (its witnessed " \
           "cells) MISMATCH" in captured.err
    assert captured.out.strip().endswith("1 do not: re-run those notebooks")


def test_every_witness_function_must_give_a_witness(monkeypatch):
    from xenbench.studies import witnesses

    doc = json.loads((RESULTS / "01_score_matrices.full.results.json").read_text())
    from xenbench.studies.notebooks import NOTEBOOKS

    monkeypatch.setitem(NOTEBOOKS["01_score_matrices"].functions, "witnesses", lambda results: [])
    [w] = witnesses.witnesses(doc)
    assert not w.ok and w.cell == "every witness cell"


@pytest.mark.slow
def test_a_hand_edited_de_accuracy_fails_verify(tmp_path):
    """0.362 -> 0.999: edited alone, the mean disagrees with its own records; edited with every DE row it rests on,
    the DE's accuracy recomputed from the data disagrees (one dataset, to keep the test short)."""
    from xenbench.studies import witnesses

    def mean_only(doc):
        doc["results"]["baselines_mean"]["DE"]["accuracy@1"] = 0.999

    folder = _results(tmp_path / "a", ["00_data.full.results.json"], mean_only)
    bad = [w for w in witnesses.verify(folder, checks=("records",)) if not w.ok]
    assert [w.cell for w in bad] == ["baselines_mean DE accuracy@1"]

    def every_row(doc):
        r = doc["results"]
        for table in ("baselines", "label_metrics"):  # one dataset's first stages retrieved, not four
            r[table] = [row for row in r[table] if row["dataset"] == "wordnet-el:noun.food"]
        for row in r["baselines"]:
            if row["retriever"] == "DE" and row["k"] == 1:
                row["accuracy"] = 0.999
        r["baselines_mean"] = {"DE": {"accuracy@1": 0.999, "accuracy@64": r["baselines"][1]["accuracy"]}}

    folder = _results(tmp_path / "b", ["00_data.full.results.json"], every_row)
    bad = [w for w in witnesses.verify(folder, checks=("records", "stores")) if not w.ok]
    assert [w.cell for w in bad] == ["baselines wordnet-el:noun.food DE accuracy@1"], [w.line() for w in bad]


def test_a_generated_block_never_takes_a_comment_marker_or_a_second_marker(tmp_path):
    from xenbench._io import Block, replace_blocks

    path = tmp_path / "doc.md"
    path.write_text("head\n<!-- x:begin -->\nold\n<!-- x:end -->\ntail\n", encoding="utf-8")
    for body in ("a name <!-- x:end --> here", "a name --> here"):
        with pytest.raises(DataError, match=r"doc\.md: the results block generated from results/ holds '(<!--|-->)'"):
            replace_blocks([Block(path, "<!-- x:begin -->", "<!-- x:end -->", body, "results block", "results/")])
    path.write_text("<!-- x:begin -->\nold\n<!-- x:end -->\n<!-- x:end -->\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"doc\.md: holds the line '<!-- x:end -->' 2 times, expected once"):
        replace_blocks([Block(path, "<!-- x:begin -->", "<!-- x:end -->", "new")])
    assert path.read_text(encoding="utf-8") == "<!-- x:begin -->\nold\n<!-- x:end -->\n<!-- x:end -->\n"
