"""Notebooks JupyterLab leaves clean (issue 53, item 4): the tracked notebooks are in the normalized form, and the
Jupyter server of `make lab` saves a xenbench notebook that was opened and run as exactly those bytes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from xenbench.cli import main
from xenbench.harness import lab
from xenbench.harness.spec import NOTEBOOKS_DIR, list_notebooks

NOTEBOOKS = list_notebooks()

#: What JupyterLab's kernel connection writes into a notebook's metadata (Python 3.11 here; another machine's differs).
LAB_LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                     "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                     "pygments_lexer": "ipython3", "version": "3.11.2"}


def test_every_tracked_notebook_is_in_the_normalized_form():
    """Reading a tracked notebook and writing it as the Jupyter server does gives the same bytes (so a lab save of an
    unchanged notebook changes nothing), with no outputs and no execution counts."""
    assert NOTEBOOKS, "no notebooks found"
    assert lab.normalize_files(write=False) == []  # if this fails: xenbench notebooks normalize
    for name in NOTEBOOKS:
        nb = nbformat.read(NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")
        assert nb.metadata["language_info"] == {"name": "python"} and nb.metadata["kernelspec"] == lab.KERNELSPEC


def _as_the_lab_sends_it(content: dict) -> dict:
    """A notebook model's content after opening it in JupyterLab and running every cell (as the frontend sends it)."""
    sent = json.loads(json.dumps(content))
    sent["metadata"]["language_info"] = dict(LAB_LANGUAGE_INFO)
    sent["metadata"]["kernelspec"]["display_name"] = "Python 3 (ipykernel)"
    for k, cell in enumerate(sent["cells"]):
        if cell["cell_type"] == "code":
            cell["execution_count"] = k + 1
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
            cell["metadata"]["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00.000Z"}
            cell["metadata"]["scrolled"] = True
        cell["metadata"]["jupyter"] = {"source_hidden": False}
    return sent


# jupyter_server's own validator warns when the hook is given to the constructor ("Overriding existing pre_save_hook
# (lab_pre_save_hook) with a new one (lab_pre_save_hook)"): the same hook, set once.
pytestmark = pytest.mark.filterwarnings("ignore:Overriding existing pre_save_hook:UserWarning")


@pytest.fixture
def lab_folder(tmp_path, monkeypatch) -> Path:
    """A copy of notebooks/ (notebooks and profiles files) standing in for it, so a save never touches the checkout."""
    folder = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS_DIR, folder, ignore=shutil.ignore_patterns("results", ".ipynb_checkpoints"))
    monkeypatch.setattr(lab, "NOTEBOOKS_DIR", folder)
    return folder


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_lab_save_of_an_opened_and_run_notebook_writes_the_tracked_bytes(lab_folder, name):
    from jupyter_server.services.contents.filemanager import FileContentsManager

    tracked = (NOTEBOOKS_DIR / f"{name}.ipynb").read_bytes()
    cm = FileContentsManager(root_dir=str(lab_folder), pre_save_hook=lab.lab_pre_save_hook)
    model = cm.get(f"{name}.ipynb")
    cm.save({"type": "notebook", "format": "json", "content": _as_the_lab_sends_it(model["content"])},
            f"{name}.ipynb")
    assert (lab_folder / f"{name}.ipynb").read_bytes() == tracked


def test_the_hook_keeps_an_edit_and_leaves_other_notebooks_alone(lab_folder):
    from jupyter_server.services.contents.filemanager import FileContentsManager

    cm = FileContentsManager(root_dir=str(lab_folder), pre_save_hook=lab.lab_pre_save_hook)
    content = _as_the_lab_sends_it(cm.get("00_data.ipynb")["content"])
    content["cells"][0]["source"] = "# 00 · edited in the lab"
    cm.save({"type": "notebook", "format": "json", "content": content}, "00_data.ipynb")
    saved = nbformat.read(lab_folder / "00_data.ipynb", as_version=4)
    assert saved.cells[0].source == "# 00 · edited in the lab"  # the edit is the user's: kept
    assert all(not c.get("outputs") for c in saved.cells if c.cell_type == "code")
    cm.save({"type": "notebook", "format": "json", "content": content}, "scratch.ipynb")  # no profiles file
    scratch = nbformat.read(lab_folder / "scratch.ipynb", as_version=4)
    assert scratch.cells[2].outputs and scratch.metadata["language_info"]["version"] == "3.11.2"  # saved as sent
    assert not lab._is_xenbench_notebook("../x/00_data.ipynb", cm)


def test_normalize_command_rewrites_and_checks(tmp_path, capsys):
    path = tmp_path / "00_data.ipynb"
    nb = nbformat.read(NOTEBOOKS_DIR / "00_data.ipynb", as_version=4)
    nb = nbformat.from_dict(_as_the_lab_sends_it(nb))
    nbformat.write(nb, path)
    assert main(["notebooks", "normalize", "--check", str(path)]) == 1
    assert capsys.readouterr().out == f"not normalized: {path}\n"
    assert main(["notebooks", "normalize", str(path)]) == 0
    assert capsys.readouterr().out == f"normalized: {path}\n"
    assert main(["notebooks", "normalize", "--check", str(path)]) == 0
    assert path.read_bytes() == (NOTEBOOKS_DIR / "00_data.ipynb").read_bytes()
    (tmp_path / "bad.ipynb").write_text("{", encoding="utf-8")
    assert main(["notebooks", "normalize", str(tmp_path / "bad.ipynb")]) == 2
    assert "bad.ipynb: not a readable notebook" in capsys.readouterr().err


def test_normalizing_is_idempotent_and_keeps_sources_ids_and_tags():
    nb = nbformat.read(NOTEBOOKS_DIR / "03_adacur_rounds.ipynb", as_version=4)
    once = lab.normalize_notebook(_as_the_lab_sends_it(nb))
    assert lab.normalized_text(once) == lab.normalized_text(lab.normalize_notebook(once))
    assert [(c.id, c.source, c.metadata.get("tags")) for c in once.cells] == [
        (c.id, c.source, c.metadata.get("tags")) for c in nb.cells]


# ------------------------------------------------------------------------------------------------
# A real Jupyter server, as `jupyter lab` starts it from the checkout (no command-line hook)
# ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(port: int, token: str, method: str, path: str, body: dict | None = None) -> dict:
    import urllib.request

    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/contents/{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _scratch_checkout(root: Path) -> Path:
    """A git repository holding copies of the package, the notebooks and their profiles files, .gitignore and the
    Jupyter config `make setup` installs: a server started there imports this copy, and a save never touches the real checkout."""
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    shutil.copytree(repo / "xenbench", root / "xenbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(repo / "jupyter-config", root / "jupyter-config")
    shutil.copy2(repo / ".gitignore", root / ".gitignore")  # the lab's .ipynb_checkpoints/ are ignored, as here
    (root / "notebooks").mkdir()
    for name in NOTEBOOKS:
        for ext in (".ipynb", ".yaml"):
            shutil.copy2(NOTEBOOKS_DIR / f"{name}{ext}", root / "notebooks" / f"{name}{ext}")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "scratch"], check=True)
    return root


@pytest.mark.slow  # two Jupyter servers start (10-30 s each on 2 loaded cores)
def test_plain_jupyter_lab_from_the_repo_root_or_notebooks_saves_the_tracked_bytes(tmp_path):
    """`python -m jupyterlab` from the root of a (scratch) checkout and `python -m jupyter_server` from its notebooks/,
    with only the config `make setup` installs in the environment (here through JUPYTER_CONFIG_PATH; no hook on the
    command line): a PUT through the contents API of a tracked notebook as the lab sends it after a run (outputs,
    execution counts, the kernel's language_info, keys in another order) writes the committed bytes, and `git status`
    stays clean. Without that config the same save dirties the checkout (the control)."""
    import os
    import subprocess
    import sys
    import time
    import urllib.error

    repo = _scratch_checkout(tmp_path / "checkout")
    name = "03_adacur_rounds"
    committed = (repo / "notebooks" / f"{name}.ipynb").read_bytes()

    def save_through_a_server(module: str, cwd: Path, api_path: str, config: bool) -> bytes:
        port, token = _free_port(), "xenbench-test-token"
        env = {**os.environ, "PYTHONPATH": str(repo), "JUPYTER_CONFIG_DIR": str(tmp_path / "user-config"),
               "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
               "JUPYTER_PLATFORM_DIRS": "1"}
        env.pop("JUPYTER_CONFIG_PATH", None)
        cmd = [sys.executable, "-m", module, "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
               f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0"]
        if config:
            env["JUPYTER_CONFIG_PATH"] = str(repo / "jupyter-config")
        else:  # the control: the extension off even where `make setup` enabled it in this environment's etc/jupyter
            cmd.append("--ServerApp.jpserver_extensions=xenbench.harness.lab=False")
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        log = (tmp_path / f"{module}.{config}.log").open("w")
        server = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    model = _api(port, token, "GET", api_path)
                    break
                except (urllib.error.URLError, ConnectionError):
                    assert server.poll() is None and time.monotonic() < deadline, \
                        (tmp_path / f"{module}.{config}.log").read_text()[-2000:]
                    time.sleep(0.5)
            sent = _as_the_lab_sends_it(model["content"])
            sent = {key: sent[key] for key in reversed(list(sent))}  # keys in another order
            sent["metadata"] = {key: sent["metadata"][key] for key in reversed(list(sent["metadata"]))}
            _api(port, token, "PUT", api_path, {"type": "notebook", "format": "json", "content": sent})
        finally:
            server.terminate()
            server.wait(timeout=60)
            log.close()
        saved = (repo / "notebooks" / f"{name}.ipynb").read_bytes()
        status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                                check=True).stdout
        subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--", "."], check=True)
        return saved, status

    saved, status = save_through_a_server("jupyterlab", repo, f"notebooks/{name}.ipynb", config=True)
    assert saved == committed and status == ""
    saved, status = save_through_a_server("jupyter_server", repo / "notebooks", f"{name}.ipynb", config=True)
    assert saved == committed and status == ""
    saved, status = save_through_a_server("jupyter_server", repo / "notebooks", f"{name}.ipynb", config=False)
    assert saved != committed and status == f" M notebooks/{name}.ipynb\n"  # the control: the hook is what keeps it
