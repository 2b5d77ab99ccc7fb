"""Issue 54's runner and model-folder cases, each through the door a user takes (the ``xenbench`` command in a
subprocess where nothing needs replacing; :func:`xenbench.cli.main` in this process where a fault is injected):

* a report and its ``<stem>.runs/`` are replaced only when xenbench wrote them for the same parameters: a user's file
  in ``.runs/`` survives a rerun, a regular file named ``<stem>.runs`` is refused and kept, a report of other
  parameters under the same name is refused (the 24-bit names that collided: tests/test_notebook_harness.py);
* a model folder that needs its own code (``auto_map`` + a ``.py`` file) is refused in one line pointing to the scorer
  protocol, its code never runs and nothing asks on the terminal; every load passes ``trust_remote_code=False``;
* ``run --out <symlink loop>/rep``, ``score --out <dangling link>``, a relative ``-p model`` or ``run:`` file not
  found, a broken ``tokenizer.json``, a full disk during ``run``, a second ``score`` on a store being written: one
  line each, naming the path, before the expensive work.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xenbench import harness as xh
from xenbench.cli import main
from xenbench.errors import DataError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
import _tiny_models as tiny_models  # noqa: E402
from test_notebook_harness import write_tiny  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).with_name("xenbench")


def xenbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``xenbench ARGS`` in a subprocess with stdin closed (a prompt would read EOF, never wait)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "CI": "true"}
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL)


def refused(proc: subprocess.CompletedProcess | str, pattern: str, rc: int | None = 2) -> str:
    """The one ``xenbench: error:`` line of a refusal, matching ``pattern``; no traceback."""
    stderr = proc if isinstance(proc, str) else proc.stderr
    if rc is not None and not isinstance(proc, str):
        assert proc.returncode == rc, proc.stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = [line for line in stderr.splitlines() if line.startswith("xenbench: error:")]
    assert len(lines) == 1, stderr[-2000:]
    import re

    assert re.search(pattern, lines[0]), lines[0]
    return lines[0]


# ------------------------------------------------------------------------------------------------
# Reports and their .runs/ folder: only what xenbench wrote for these parameters is replaced
# ------------------------------------------------------------------------------------------------

RUNS_BODY = [
    "import uuid\nfolder = xb.harness.runs_dir('tiny', profile)\nfolder.mkdir(parents=True, exist_ok=True)\n"
    "(folder / 'list.trec').write_text(uuid.uuid4().hex)",
    'xb.harness.save_results("tiny", profile, {"n": n})',
]


@pytest.mark.notebook
def test_a_users_file_in_the_runs_folder_survives_a_rerun(tmp_path, notebook_kwargs):
    path = write_tiny(tmp_path / "nbs", body=RUNS_BODY)
    out = tmp_path / "reports"
    xh.run_notebook(path, out_dir=out, **notebook_kwargs)
    runs = out / "tiny.quick.runs"
    first = (runs / "list.trec").read_text()
    (runs / "trec_eval.out").write_text("mine: P@10 0.5\n")  # e.g. trec_eval's output, put beside the runs
    (runs / "notes").mkdir()
    (runs / "notes" / "todo.txt").write_text("mine too\n")
    xh.run_notebook(path, out_dir=out, **notebook_kwargs)
    assert (runs / "list.trec").read_text() != first  # xenbench's own file: replaced by this run's
    assert (runs / "trec_eval.out").read_text() == "mine: P@10 0.5\n"  # the user's: kept (the old code deleted both)
    assert (runs / "notes" / "todo.txt").read_text() == "mine too\n"
    manifest = json.loads((runs / xh.runner.RUNS_MANIFEST).read_text())
    assert manifest["files"] == ["list.trec"]
    # a user's file of the name this run writes is refused, kept, and the previous report is left as it was
    report = (out / "tiny.quick.ipynb").read_bytes()
    (runs / xh.runner.RUNS_MANIFEST).write_text(json.dumps({**manifest, "files": []}))
    (runs / "list.trec").write_text("my own list\n")
    with pytest.raises(DataError, match="not written by xenbench"):
        xh.run_notebook(path, out_dir=out, **notebook_kwargs)
    assert (runs / "list.trec").read_text() == "my own list\n" and (out / "tiny.quick.ipynb").read_bytes() == report


def test_a_regular_file_named_like_the_runs_folder_is_refused_and_kept(tmp_path):
    path = write_tiny(tmp_path / "nbs", body=RUNS_BODY)
    out = tmp_path / "reports"
    out.mkdir()
    (out / "tiny.quick.runs").write_text("my notes, not a folder\n")
    proc = xenbench("run", str(path), "--out", str(out))
    refused(proc, r"tiny\.quick\.runs: is not a folder .* never deletes a file of yours")
    assert (out / "tiny.quick.runs").read_text() == "my notes, not a folder\n"  # the old code deleted it
    assert not list(out.glob("*.ipynb"))  # refused before the kernel


def test_a_report_of_other_parameters_or_not_of_xenbench_is_not_replaced(tmp_path, kernel_calls, capsys):
    path = write_tiny(tmp_path / "nbs")
    out = tmp_path / "reports"
    out.mkdir()
    # a notebook xenbench wrote for other parameters under this name (a digest collision): refused
    nb = {"cells": [], "metadata": {"xenbench": {"stem": "tiny.quick", "params_sha256": "0" * 64}}, "nbformat": 4,
          "nbformat_minor": 5}
    (out / "tiny.quick.ipynb").write_text(json.dumps(nb))
    assert main(["run", str(path), "--out", str(out)]) == 2
    refused(capsys.readouterr().err, r"tiny\.quick\.ipynb: was written by xenbench for other parameters", rc=None)
    # a file of the user's with a report's name, and no notebook of that run: refused
    (out / "tiny.quick.ipynb").unlink()
    (out / "tiny.quick.html").write_text("<p>my page</p>")
    assert main(["run", str(path), "--out", str(out)]) == 2
    refused(capsys.readouterr().err, r"tiny\.quick\.html: exists without the notebook", rc=None)
    assert (out / "tiny.quick.html").read_text() == "<p>my page</p>" and not kernel_calls
    # a runs folder holding files but no manifest (the user's, or an older xenbench's): refused, nothing deleted
    (out / "tiny.quick.html").unlink()
    (out / "tiny.quick.runs").mkdir()
    (out / "tiny.quick.runs" / "mine.txt").write_text("x")
    assert main(["run", str(path), "--out", str(out)]) == 2
    refused(capsys.readouterr().err, r"tiny\.quick\.runs: holds files but no manifest", rc=None)
    assert (out / "tiny.quick.runs" / "mine.txt").read_text() == "x" and not kernel_calls


# ------------------------------------------------------------------------------------------------
# Runner and score doors: one line, naming the path, before the work
# ------------------------------------------------------------------------------------------------


def test_run_out_below_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    proc = xenbench("run", "00_data", "--out", str(tmp_path / "a" / "rep"))
    refused(proc, rf"{tmp_path / 'a'}: is a symbolic link loop")  # the old code: RuntimeError traceback


def test_score_out_a_dangling_link_is_refused_before_the_embeddings(tmp_path):
    (tmp_path / "st").symlink_to(tmp_path / "gone")
    cache = tmp_path / "cache"
    proc = xenbench("score", "de", "wordnet-el:verb.weather", "--out", str(tmp_path / "st"))
    refused(proc, rf"{tmp_path / 'st'}: is a dangling symbolic link \(to {tmp_path / 'gone'}\)")
    assert "Loading weights" not in proc.stderr  # the old code embedded every text first, then failed on the link
    assert not cache.exists() and not (tmp_path / "gone").exists()


def test_a_relative_model_or_run_file_not_found_says_it_looked_under_notebooks(tmp_path, kernel_calls, capsys):
    assert main(["run", "03_adacur_rounds", "--out", str(tmp_path), "-p", "model", "models/cls-ce"]) == 2
    line = refused(capsys.readouterr().err, r"relative paths are read from notebooks/", rc=None)
    assert str(REPO / "notebooks" / "models" / "cls-ce") in line  # the old line: "not in the Hugging Face cache"
    assert main(["run", "00_data", "--out", str(tmp_path), "-p", "first_stages", '[de, "run:r.trec"]']) == 2
    line = refused(capsys.readouterr().err, r"^xenbench: error: r\.trec: no such file .*relative paths are "
                                            r"read from notebooks/", rc=None)
    assert str(REPO / "notebooks" / "r.trec") in line and not kernel_calls  # the old line: "r.trec: no such file"


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory) -> Path:
    return tiny_models.bert(tmp_path_factory.mktemp("tiny-ce") / "bert")


def test_a_broken_tokenizer_json_is_one_line_naming_it(tmp_path, tiny_ce):
    import shutil

    folder = tmp_path / "ce"
    shutil.copytree(tiny_ce, folder)
    text = (folder / "tokenizer.json").read_text(encoding="utf-8")
    (folder / "tokenizer.json").write_text(text[: len(text) // 2], encoding="utf-8")  # cut off mid-file
    proc = xenbench("score", str(folder), "wordnet-el:verb.weather", "--out", str(tmp_path / "st"), "--n-queries", "3",
                    "--n-items", "4")
    refused(proc, rf"{folder / 'tokenizer.json'}: transformers cannot read the tokenizer")
    assert not (tmp_path / "st").exists()


def test_a_full_disk_during_run_names_the_path(tmp_path, monkeypatch, capsys):
    import papermill

    def full(*args, **kwargs):  # the executed notebook cannot be written: a write() error carries no file name
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(papermill, "execute_notebook", full)
    monkeypatch.setenv("CI", "true")
    path = write_tiny(tmp_path / "nbs")
    out = tmp_path / "reports"
    assert main(["run", str(path), "--out", str(out)]) == 2
    refused(capsys.readouterr().err, rf"^xenbench: error: {out}: No space left on device$", rc=None)


def test_a_second_score_on_a_store_being_written_is_refused_before_its_ce_loads(tmp_path, monkeypatch, capsys):
    from xenbench.models import fingerprint

    def no_load(*args, **kwargs):
        raise AssertionError("the CE was loaded")

    monkeypatch.setattr(fingerprint, "load_shared", no_load)
    store = tmp_path / "st"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the first job, alive
    try:
        lock = tmp_path / ".st.lock"
        lock.write_text(json.dumps({"pid": other.pid, "host": socket.gethostname(),
                                    "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        code = main(["score", str(REPO / "models" / "cls-ce"), "wordnet-el:verb.weather", "--out", str(store),
                     "--n-queries", "3", "--n-items", "4"])
    finally:
        other.kill()
        other.wait()
    assert code == 2
    refused(capsys.readouterr().err, rf"{store}: is being written by process {other.pid}", rc=None)


# ------------------------------------------------------------------------------------------------
# A model folder's own code: never run, refused in one line
# ------------------------------------------------------------------------------------------------


def remote_code_folder(tiny_ce: Path, folder: Path, marker: Path) -> Path:
    """A copy of a tiny CE whose config maps its classes to a ``.py`` file of the folder that writes ``marker``."""
    import shutil

    shutil.copytree(tiny_ce, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig",
                          "AutoModelForSequenceClassification": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import BertConfig as EvilConfig, BertForSequenceClassification as EvilModel\n",
        encoding="utf-8")
    return folder


def test_a_folder_that_needs_its_own_code_is_refused_and_its_code_never_runs(tmp_path, tiny_ce):
    marker = tmp_path / "marker"
    folder = remote_code_folder(tiny_ce, tmp_path / "remote", marker)
    proc = xenbench("score", str(folder), "wordnet-el:verb.weather", "--out", str(tmp_path / "st"), "--n-queries", "3",
                    "--n-items", "4")
    refused(proc, rf"{folder / 'config.json'}: has an auto_map: the model needs its own code \(evil\.py\), which "
                  r"xenbench never runs .*scorer \(docs/MODELS\.md")
    assert "[y/N]" not in proc.stdout + proc.stderr  # transformers' "run the custom code?" prompt: never shown
    assert not marker.exists() and not (tmp_path / "st").exists()
    # the Python API and the dual encoder refuse it the same way
    from xenbench.errors import DataError
    from xenbench.models.loading import load_cross_encoder
    from xenbench.models.retrievers import DualEncoder

    with pytest.raises(DataError, match="auto_map"):
        load_cross_encoder(folder)
    with pytest.raises(DataError, match="auto_map"):
        DualEncoder(folder, cache_dir=False)
    assert not marker.exists()


def test_every_load_passes_trust_remote_code_false(tiny_ce, monkeypatch):
    import transformers

    from xenbench.models.loading import load_cross_encoder

    seen: list[tuple[str, object]] = []
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModelForSequenceClassification):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, _name=cls.__name__, **kwargs):
            seen.append((_name, kwargs.get("trust_remote_code", "missing")))
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    load_cross_encoder(tiny_ce)
    assert {name for name, _ in seen} == {"AutoConfig", "AutoTokenizer", "AutoModelForSequenceClassification"}
    assert all(value is False for _, value in seen), seen
