"""Every new input is bounded (issue 54, item 4): relevance grades as trec_eval reads them and at most
:data:`xenbench.metrics.MAX_GRADE`, run files bounded in lines and (decompressed) bytes and read as a stream, hub
revisions that stay inside the Hugging Face cache, and hub requests under a timeout.

Each case was an audit finding: grade 10^9 passed ``data check`` (then one label-measure call took 7.8 GB), ``1_0``
and ``٣`` were read as 10 and 3 (trec_eval reads 1 and 0), a 2 MB gzip of blank lines ran for minutes silently,
``org/name@../../…/dev/zero`` read /dev/zero, and an endpoint that never answers hung ``xenbench score``.
"""
from __future__ import annotations

import gzip
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cli_inputs import CORPUS, QUERIES, write_beir  # noqa: E402

from xenbench.data import trec  # noqa: E402
from xenbench.data.beir import load_beir  # noqa: E402
from xenbench.errors import DataError, ParameterError  # noqa: E402
from xenbench.metrics import MAX_GRADE, label_metrics  # noqa: E402
from xenbench.models.references import resolve_model  # noqa: E402

CLI = Path(sys.executable).with_name("xenbench")


def _xenbench(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _one_line(proc: subprocess.CompletedProcess, *parts: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("xenbench: error: "), proc.stderr[-3000:]
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


# ----------------------------------------------------------------------------------------------- grades


@pytest.mark.parametrize("grade", ["1_0", "٣", "1e1", "0x1", "²"])
def test_a_grade_python_reads_but_trec_eval_reads_otherwise_is_refused_with_file_and_line(tmp_path, grade):
    """Before: ``1_0`` and ``٣`` were read as 10 and 3 (float() takes them), trec_eval's atol as 1 and 0."""
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, [("q0", "d0", 1), ("q1", "d1", grade)])
    with pytest.raises(DataError, match=r"test\.tsv:3: grade .* not an integer of ASCII digits"):
        load_beir(folder)
    qrels = tmp_path / "q.qrels"
    qrels.write_text(f"q0 0 d0 1\nq1 0 d1 {grade}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"q\.qrels:2: grade .* not an integer of ASCII digits"):
        trec.read_trec_qrels(qrels)


def test_grades_at_the_bound_are_read_and_past_it_refused(tmp_path):
    qrels = tmp_path / "q.qrels"
    qrels.write_text(f"q0 0 d0 {MAX_GRADE}\nq0 0 d1 -{MAX_GRADE}\nq1 0 d1 +2\nq1 0 d2 3.0\n", encoding="utf-8")
    assert trec.read_trec_qrels(qrels) == {"q0": {"d0": MAX_GRADE, "d1": -MAX_GRADE}, "q1": {"d1": 2, "d2": 3}}
    qrels.write_text(f"q0 0 d0 1\nq0 0 d1 {MAX_GRADE + 1}\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"q\.qrels:2: grade {MAX_GRADE + 1} is outside"):
        trec.read_trec_qrels(qrels)
    with pytest.raises(ParameterError, match="'relevance' parameter of label_metrics must be integer grades within"):
        label_metrics(np.array([[0, 1]]), np.array([[10**9, 1]]), ["nDCG@10"])


def test_data_check_refuses_grade_a_billion_naming_file_and_line(tmp_path):
    """Before: ``xenbench data check`` passed it; one nDCG call then took 7.8 GB and 20 s."""
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, [("q0", "d0", 1), ("q1", "d1", 10**9)])
    _one_line(_xenbench("data", "check", f"beir:{folder}"), "test.tsv:3:", "grade 1000000000 is outside [-1000, 1000]")


# ----------------------------------------------------------------------------------------------- run files


def test_a_gzip_of_blank_lines_is_refused_by_the_streamed_line_bound(tmp_path):
    """A 64 KB gzip expanding to 64 MiB of blank lines, through the notebook check of ``xenbench run``.

    Before: every blank line was skipped and the file read to its end (a 2 GiB one: nothing printed in 240 s), then
    "no run lines"."""
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, [(f"q{k}", f"d{k}", 1) for k in range(3)])
    bomb = tmp_path / "bomb.trec.gz"
    bomb.write_bytes(gzip.compress(b"\n" * 2**26, compresslevel=9))
    proc = _xenbench("run", "00_data", "-p", "eval_datasets", f"beir:{folder}", "-p", "first_stages",
                     f"run:{bomb}", "--out", str(tmp_path / "rep"))
    _one_line(proc, f"{bomb}:{trec.MAX_RUN_LINES + 1}:", f"more than {trec.MAX_RUN_LINES:,} lines")


def test_run_files_are_bounded_in_lines_and_decompressed_bytes(tmp_path, monkeypatch):
    lines = "".join(f"q0 Q0 d{k} {k + 1} {10 - k} t\n" for k in range(4))
    plain, packed = tmp_path / "r.trec", tmp_path / "r.trec.gz"
    plain.write_text(lines, encoding="utf-8")
    packed.write_bytes(gzip.compress(lines.encode()))
    assert trec.read_trec_run(packed).lists == {"q0": ["d0", "d1", "d2", "d3"]}
    monkeypatch.setattr(trec, "MAX_RUN_LINES", 3)
    for path in (plain, packed):
        with pytest.raises(DataError, match=r":4: more than 3 lines"):
            trec.read_trec_run(path)
    monkeypatch.setattr(trec, "MAX_RUN_LINES", 10)
    monkeypatch.setattr(trec, "MAX_RUN_BYTES", len(lines) - 1)
    n = len(lines)
    with pytest.raises(DataError, match=rf"r\.trec: {n} bytes: more than the {n - 1}"):  # a plain file: by its size
        trec.read_trec_run(plain)
    with pytest.raises(DataError, match=rf"r\.trec\.gz:4: more than {n - 1} bytes once decompressed"):
        trec.read_trec_run(packed)


# ----------------------------------------------------------------------------------------------- hub references


@pytest.mark.parametrize("revision", ["../../../../../../../../dev/zero", "../../../outside/ref", "/etc/passwd",
                                      "main/../../x", "a//b"])
def test_a_revision_leaving_the_cache_is_refused_before_anything_is_read(tmp_path, monkeypatch, revision):
    """Before: offline, huggingface_hub read ``refs/<revision>``: /dev/zero (2.5 GB in 12 s), or a file outside the
    cache naming another snapshot, which was then scored under this id."""
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def read(*args, **kwargs):
        raise AssertionError("the hub cache was read")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", read)
    with pytest.raises(ParameterError, match="hub revision that is a branch, tag or commit .* no '..', no absolute"):
        resolve_model(f"org/name@{revision}")


def test_score_refuses_a_revision_pointing_outside_the_cache_in_one_line(tmp_path):
    """The ``@../../../outside/ref`` case through ``xenbench score``: the ref file outside the cache names a snapshot
    that exists. Before: it was scored and recorded as ``model_id org/name``, ``model_revision "None"``."""
    cache, commit = tmp_path / "hub", "a" * 40
    (cache / "models--org--name" / "snapshots" / commit).mkdir(parents=True)
    (cache / "models--org--name" / "refs").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "ref").write_text(commit)
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, [(f"q{k}", f"d{k}", 1) for k in range(3)])
    proc = _xenbench("score", "org/name@../../../outside/ref", f"beir:{folder}", "--out", str(tmp_path / "st"),
                     env={"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})
    _one_line(proc, "org/name@../../../outside/ref", "no '..'")
    assert not (tmp_path / "st").exists()


@pytest.fixture
def silent_endpoint():
    """A local server that accepts connections and never answers; yields its URL."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # closed at teardown
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


def test_a_hub_that_never_answers_fails_within_the_timeout_in_one_line(tmp_path, silent_endpoint):
    """Before: snapshot_download asked for the revision's commit without a timeout: silent for 240 s (here the
    subprocess's 120 s guard would end the test)."""
    folder = write_beir(tmp_path / "b", CORPUS, QUERIES, [(f"q{k}", f"d{k}", 1) for k in range(3)])
    env = {"HF_ENDPOINT": silent_endpoint, "HF_HUB_DOWNLOAD_TIMEOUT": "1", "HF_HUB_CACHE": str(tmp_path / "hub"),
           "HF_HUB_OFFLINE": "0"}
    proc = _xenbench("score", "org/name", f"beir:{folder}", "--out", str(tmp_path / "st"), env=env, timeout=120)
    _one_line(proc, "org/name: could not be fetched", "Timeout", "waits at most 1 s, HF_HUB_DOWNLOAD_TIMEOUT")


# ----------------------------------------------------------------------------------------------- ids


@pytest.mark.parametrize(("where", "bad"), [("corpus", "d 2"), ("corpus", " d2"), ("queries", "q\u00a01"),
                                            ("queries", "q1\u2003")])
def test_an_id_a_trec_file_cannot_hold_is_refused_at_load_with_file_line_and_id(tmp_path, where, bad):
    """Before: only tabs and newlines were refused; 05 then ran to its end and failed in its TREC export."""
    corpus, queries = [dict(r) for r in CORPUS], [dict(r) for r in QUERIES]
    rows = corpus if where == "corpus" else queries
    rows[1 if where == "queries" else 2]["_id"] = bad
    qrels = [("q0", "d0", 1)]
    folder = write_beir(tmp_path / "b", corpus, queries, qrels)
    line = 3 if where == "corpus" else 2
    with pytest.raises(DataError, match=rf"{where}\.jsonl:{line}: field '_id' must be a non-empty id without "
                                        rf"whitespace .* got {re.escape(repr(bad))}$"):
        load_beir(folder)


def test_notebook_05_refuses_an_id_with_a_space_before_its_kernel_starts(tmp_path):
    corpus = [dict(r) for r in CORPUS]
    corpus[2]["_id"] = "d 2"
    folder = write_beir(tmp_path / "b", corpus, QUERIES, [("q0", "d0", 1), ("q1", "d1", 1)])
    proc = _xenbench("run", "05_pefa_lambda", "-p", "datasets", f"[beir:{folder}]", "--out", str(tmp_path / "rep"))
    _one_line(proc, f"{folder / 'corpus.jsonl'}:3:", "without whitespace", "got 'd 2'")
    assert not (tmp_path / "rep").exists() or not any((tmp_path / "rep").iterdir())
