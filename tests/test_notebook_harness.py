"""Tests of the notebook harness (xenbench.harness): profiles, validation, execution, reports.

Unit tests use small profiles files written into ``tmp_path``; the execution tests (marked
``notebook``) run a throwaway notebook through papermill. The last tests check that every notebook in
notebooks/ follows the template: its ``quick`` profile equals its parameters cell, it validates its
parameters right after that cell and saves its results last.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import papermill as pm
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from xenbench import harness as xh
from xenbench.errors import DataError, ParameterError

TINY_YAML = """\
params:
  n: {type: int, min: 1, max: 10, help: bars}
  scale: {type: float, min: 0.0}
  label: {type: str, choices: [a, b]}
  tags: {type: list, items: str, min: 1, choices: [x, y, z]}
  limit: {type: int, min: 1, nullable: true}
  flag: {type: bool}
profiles:
  quick: {n: 3, scale: 1.0, label: a, tags: [x], limit: null, flag: false}
  small: {n: 2, tags: [x, y]}
"""

TINY_PARAMETERS = """\
profile = "quick"
n = 3
scale = 1.0
label = "a"
tags = ["x"]
limit = None
flag = False"""


def write_tiny(folder: Path, name: str = "tiny", body: list[str] | None = None, yaml_text: str = TINY_YAML) -> Path:
    """A notebook following the template (imports, parameters, check, figure, save_results) + its profiles."""
    folder.mkdir(parents=True, exist_ok=True)
    if body is None:
        body = [
            "import plotly.graph_objects as go\ngo.Figure(go.Bar(x=list(range(n)), y=[scale] * n, name=label))",
            f'xb.harness.save_results("{name}", profile, {{"n": n, "tags": tags, "arr": np.arange(n)}})',
        ]
    nb = new_notebook(
        cells=[
            new_markdown_cell(f"# {name}"),
            new_code_cell("import numpy as np\n\nimport xenbench as xb\nimport xenbench.harness\n\n"
                          "xb.harness.setup_plotly()"),
            new_code_cell(TINY_PARAMETERS, metadata={"tags": ["parameters"]}),
            new_code_cell(f'params = xb.harness.check_namespace(globals(), "{name}")'),
            *(new_code_cell(src) for src in body),
        ],
        metadata={"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}},
    )
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    (folder / f"{name}.yaml").write_text(yaml_text, encoding="utf-8")
    return path


def earlier_run(folder: Path, names: tuple[str, ...], text: str = "earlier") -> dict[str, str]:
    """An earlier good run's files in ``folder``, each holding ``text``; its ``.ipynb`` is one xenbench wrote for the
    profile's values (their digest in its metadata), so a run of the same parameters may replace the set."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in names:
        content = text
        if name.endswith(".ipynb") and not name.endswith(".failed.ipynb"):
            meta = {"xenbench": {"stem": name.removesuffix(".ipynb"), "params_sha256": hashlib.sha256(b"{}").hexdigest()}}
            content = json.dumps({"cells": [], "metadata": {**meta, "note": text}, "nbformat": 4, "nbformat_minor": 5})
        (folder / name).write_text(content)
        written[name] = content
    return written


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny(tmp_path / "nbs")


# ------------------------------------------------------------------------------------------------
# profiles files
# ------------------------------------------------------------------------------------------------


def test_load_spec_reads_params_and_profiles(tiny):
    spec = xh.load_spec(tiny)
    assert spec.name == "tiny"
    assert list(spec.params) == ["n", "scale", "label", "tags", "limit", "flag"]
    assert spec.params["n"].help == "bars"
    assert xh.profile_values(spec, "quick") == {
        "n": 3, "scale": 1.0, "label": "a", "tags": ["x"], "limit": None, "flag": False,
    }
    # other profiles override quick
    assert xh.profile_values(spec, "small") == {
        "n": 2, "scale": 1.0, "label": "a", "tags": ["x", "y"], "limit": None, "flag": False,
    }


def test_unknown_profile_lists_the_profiles(tiny):
    with pytest.raises(ParameterError, match=r"The 'profile' parameter of notebook tiny must be one of "
                                             r"\['quick', 'small'\]. Got 'cii' instead."):
        xh.profile_values(tiny, "cii")


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("params: {}\nprofiles: {small: {}}\n", r"at least a 'quick' mapping"),
        ("params: {n: {type: integer}}\nprofiles: {quick: {n: 1}}\n", r"parameter 'n': expected a mapping with 'type' one of"),
        ("params: {n: {type: int, maximum: 3}}\nprofiles: {quick: {n: 1}}\n", r"unknown keys \['maximum'\]"),
        ("params: {n: {type: int}, m: {type: int}}\nprofiles: {quick: {n: 1}}\n", r"missing \['m'\]"),
        ("params: {n: {type: int, max: 3}}\nprofiles: {quick: {n: 1}, small: {n: 5}}\n",
         r"profile 'small': The 'n' parameter of notebook tiny must be an int <= 3. Got 5 instead."),
        ("params: {n: {type: int}}\nprofiles: {quick: {n: 1}, small: {m: 5}}\n", r"profile 'small': The 'm' parameter"),
        ("params: {profile: {type: str}}\nprofiles: {quick: {profile: a}}\n", r"other than 'profile'"),
        ("params: [n\n", r"not valid YAML"),
        ("params: {n: {type: int, at_most: items}}\nprofiles: {quick: {n: 1}}\n", r"no 'data' section"),
        ("params: {n: {type: float, at_most: items}}\ndata: {dataset: n}\nprofiles: {quick: {n: 1.0}}\n",
         r"'at_most' must be one of \['items', 'queries'\], on an int or int-list"),
        ("params: {n: {type: int, at_most: rows}}\ndata: {dataset: n}\nprofiles: {quick: {n: 1}}\n",
         r"'at_most' must be one of"),
        ("params: {n: {type: int, at_most: items}}\ndata: {dataset: d}\nprofiles: {quick: {n: 1}}\n",
         r"the 'data' section names \['d'\], which are not parameters"),
        ("params: {n: {type: int}}\ndata: {store: n}\nprofiles: {quick: {n: 1}}\n",
         r"'store' must list two parameters"),
    ],
)
def test_malformed_profiles_file_names_the_file_and_problem(tmp_path, yaml_text, message):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(str(path)) + ".*" + message):
        xh.load_spec(path)


def test_missing_profiles_file(tmp_path):
    with pytest.raises(DataError, match=r"tiny\.yaml: no such file: every notebook needs a profiles file"):
        xh.load_spec(tmp_path / "tiny.ipynb")


# ------------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"n": -3}, r"The 'n' parameter of notebook tiny must be an int in \[1, 10\]. Got -3 instead."),
        ({"n": 2.0}, r"The 'n' parameter of notebook tiny must be an int in \[1, 10\]. Got 2.0 instead."),
        ({"n": True}, r"The 'n' parameter of notebook tiny must be an int in \[1, 10\]. Got True instead."),
        ({"scale": -1}, r"The 'scale' parameter of notebook tiny must be a float >= 0.0. Got -1 instead."),
        ({"scale": float("nan")}, r"must be a float >= 0.0. Got nan instead."),
        ({"label": "c"}, r"The 'label' parameter of notebook tiny must be one of \['a', 'b'\]. Got 'c' instead."),
        ({"tags": "x"}, r"The 'tags' parameter of notebook tiny must be a list of str with length >= 1, "
                        r"each one of \['x', 'y', 'z'\]. Got 'x' instead."),
        ({"tags": []}, r"must be a list of str with length >= 1.*Got \[\] instead."),
        ({"tags": ["x", "w"]}, r"each one of \['x', 'y', 'z'\] \(\['w'\] not allowed\). Got \['x', 'w'\] instead."),
        ({"limit": 0}, r"The 'limit' parameter of notebook tiny must be None or an int >= 1. Got 0 instead."),
        ({"flag": "yes"}, r"The 'flag' parameter of notebook tiny must be a bool \(True or False\). Got 'yes' instead."),
        ({"profile": "../x"}, r"The 'profile' parameter of notebook tiny must be a profile name"),
    ],
)
def test_bad_values_are_rejected_with_the_rule(tiny, values, message):
    with pytest.raises(ParameterError, match=message):
        xh.validate_params(xh.load_spec(tiny), values)


def test_unknown_name_names_notebook_bad_name_and_allowed_names(tiny):
    with pytest.raises(
        ParameterError,
        match=r"The 'nn' parameter of notebook tiny must be one of the declared parameters "
              r"\['flag', 'label', 'limit', 'n', 'scale', 'tags', 'profile'\] \(did you mean 'n'\?\). "
              r"Got 'nn' instead.",
    ):
        xh.validate_params(xh.load_spec(tiny), {"nn": 3})


def test_close_choice_is_suggested(tmp_path):
    path = tmp_path / "nb.yaml"
    path.write_text("params: {domain: {type: str, choices: [noun.food, verb.contact]}}\n"
                    "profiles: {quick: {domain: noun.food}}\n", encoding="utf-8")
    with pytest.raises(ParameterError, match=r"\(did you mean 'noun.food'\?\). Got 'noun.fod' instead."):
        xh.validate_params(xh.load_spec(path), {"domain": "noun.fod"})


def test_valid_values_are_cleaned(tiny):
    cleaned = xh.validate_params(xh.load_spec(tiny), {"n": 10, "scale": 2, "tags": ("z",), "limit": None, "profile": "small"})
    assert cleaned == {"n": 10, "scale": 2.0, "tags": ["z"], "limit": None, "profile": "small"}
    assert isinstance(cleaned["scale"], float)


def test_parse_cli_params_types_text_by_the_spec(tiny):
    pairs = [("n", "4"), ("scale", "0.5"), ("label", "b"), ("tags", "x,z"), ("limit", "null"), ("flag", "true")]
    assert xh.parse_cli_params(xh.load_spec(tiny), pairs) == {
        "n": 4, "scale": 0.5, "label": "b", "tags": ["x", "z"], "limit": None, "flag": True,
    }
    assert xh.parse_cli_params(xh.load_spec(tiny), {"tags": "[y, z]"}) == {"tags": ["y", "z"]}
    with pytest.raises(ParameterError, match=r"The 'n' parameter of notebook tiny must be an int in \[1, 10\]. "
                                             r"Got 'four' instead."):
        xh.parse_cli_params(xh.load_spec(tiny), [("n", "four")])
    with pytest.raises(ParameterError, match=r"The 'lable' parameter .* \(did you mean 'label'\?\)"):
        xh.parse_cli_params(xh.load_spec(tiny), [("lable", "a")])


def test_check_validates_a_notebook_namespace(tiny, monkeypatch):
    monkeypatch.chdir(tiny.parent)  # as in a kernel: the profiles file is found beside the notebook
    namespace = {"profile": "quick", "n": 3, "scale": 1.0, "label": "a", "tags": ["x"], "limit": None,
                 "flag": False, "unrelated": object()}
    assert xh.check_namespace(namespace, "tiny") == {**xh.profile_values(tiny), "profile": "quick"}
    with pytest.raises(ParameterError, match=r"The 'n' parameter of notebook tiny must be an int in \[1, 10\]. "
                                             r"Got 11 instead."):
        xh.check_namespace({**namespace, "n": 11}, "tiny")
    del namespace["flag"]
    with pytest.raises(DataError, match=r"declares \['flag'\] but the notebook's parameters cell does not define"):
        xh.check_namespace(namespace, "tiny")


def test_check_switches_the_profile_but_keeps_edited_values(tiny, monkeypatch):
    # JupyterLab: the parameters cell holds the quick values; profile = "small" switches every value still at
    # its quick value, in the namespace too, and keeps the ones the user edited.
    monkeypatch.chdir(tiny.parent)
    monkeypatch.delenv(xh.REPORTS_ENV, raising=False)
    cell = {"n": 3, "scale": 1.0, "label": "a", "tags": ["x"], "limit": None, "flag": False}
    namespace = {**cell, "profile": "small"}
    assert xh.check_namespace(namespace, "tiny") == {**xh.profile_values(tiny, "small"), "profile": "small"}
    assert namespace["n"] == 2 and namespace["tags"] == ["x", "y"]
    edited = {**cell, "n": 7, "profile": "small"}
    assert xh.check_namespace(edited, "tiny") == {**xh.profile_values(tiny, "small"), "n": 7, "profile": "small"}
    # Under run_notebook every value is already resolved and injected: only validated.
    monkeypatch.setenv(xh.REPORTS_ENV, str(tiny.parent))
    injected = {**cell, "profile": "small"}
    assert xh.check_namespace(injected, "tiny") == injected


def test_profiles_extend_another_profile(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("params: {n: {type: int}, m: {type: int}}\n"
                    "profiles: {quick: {n: 1, m: 1}, full: {n: 5}, paper: {extends: full, m: 9}}\n", encoding="utf-8")
    assert xh.profile_values(xh.load_spec(path), "paper") == {"n": 5, "m": 9}
    path.write_text("params: {n: {type: int}}\nprofiles: {quick: {n: 1}, a: {extends: b}, b: {extends: a}}\n",
                    encoding="utf-8")
    with pytest.raises(DataError, match=r"cycle: a -> b -> a"):
        xh.load_spec(path)
    path.write_text("params: {n: {type: int}}\nprofiles: {quick: {n: 1}, a: {extends: nope}}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"profile 'a' extends 'nope', which is not another profile"):
        xh.load_spec(path)


def test_unknown_notebook_lists_the_notebooks():
    with pytest.raises(ParameterError, match=r"The 'notebook' parameter of run_notebook must be one of "
                                             r"\[.*'00_data'.*\] or the path of an existing .ipynb file. "
                                             r"Got '99_nope' instead."):
        xh.run_notebook("99_nope")


def test_invalid_parameters_fail_before_anything_is_written(tiny, reports_dir):
    with pytest.raises(ParameterError, match=r"The 'n' parameter of notebook tiny must be an int in \[1, 10\]"):
        xh.run_notebook(tiny, params={"n": 0}, out_dir=reports_dir)
    with pytest.raises(ParameterError, match=r"must be one of \['quick', 'small'\]"):
        xh.run_notebook(tiny, profile="full", out_dir=reports_dir)
    with pytest.raises(ParameterError, match=r"choose the profile with profile="):
        xh.run_notebook(tiny, params={"profile": "small"}, out_dir=reports_dir)
    assert not reports_dir.exists()


# ------------------------------------------------------------------------------------------------
# results and plotly
# ------------------------------------------------------------------------------------------------


def test_save_results_writes_json_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv(xh.REPORTS_ENV, str(tmp_path / "out"))
    path = xh.save_results("00_x", "small", {"acc": np.float32(0.5), "ks": np.array([1, 64]), "n": np.int64(3)})
    assert path == tmp_path / "out" / "00_x.small.results.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["notebook"] == "00_x" and doc["profile"] == "small"
    assert doc["results"] == {"acc": 0.5, "ks": [1, 64], "n": 3}
    assert doc["resources"]["seconds"] >= 0
    status = Path("/proc/self/status")
    if status.exists():  # the peak resident memory, as the kernel reports it
        hwm = int(re.search(r"VmHWM:\s+(\d+) kB", status.read_text()).group(1)) / 1024
        assert abs(doc["resources"]["peak_rss_mb"] - hwm) < 0.05 * hwm
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    with pytest.raises(TypeError, match="cannot store a object in results JSON"):
        xh.save_results("00_x", "small", {"bad": object()})
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    with pytest.raises(ParameterError, match=r"The 'profile' parameter of save_results"):
        xh.save_results("00_x", "a/b", {})


def test_setup_plotly_keeps_figures_in_html_exports():
    import plotly.io as pio

    old = pio.renderers.default
    try:
        xh.setup_plotly()
        assert pio.renderers.default == "plotly_mimetype+notebook"
    finally:
        pio.renderers.default = old


# ------------------------------------------------------------------------------------------------
# execution (papermill)
# ------------------------------------------------------------------------------------------------


@pytest.mark.notebook
def test_run_notebook_writes_executed_notebook_html_and_results(tiny, reports_dir, notebook_kwargs):
    executed = xh.run_notebook(tiny, profile="small", params={"n": 4}, out_dir=reports_dir, **notebook_kwargs)

    stem = executed.name.removesuffix(".ipynb")  # n = 4 is not the profile's 2: the name carries a hash of it
    assert re.fullmatch(r"tiny\.small\.p[0-9a-f]{16}", stem)
    assert executed == (reports_dir / f"{stem}.ipynb").resolve()
    assert sorted(p.name for p in reports_dir.iterdir()) == [f"{stem}.html", f"{stem}.ipynb", f"{stem}.results.json"]
    nb = nbformat.read(executed, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1
    # every value is injected, `profile` included: the profile's, then the overrides
    assert 'profile = "small"' in injected[0].source and "n = 4" in injected[0].source
    assert "tags = [\"x\", \"y\"]" in injected[0].source

    results = json.loads((reports_dir / f"{stem}.results.json").read_text(encoding="utf-8"))
    assert results["results"] == {"n": 4, "tags": ["x", "y"], "arr": [0, 1, 2, 3]}

    # Self-contained by default: plotly.js inside the report, which draws its figure wherever it is copied.
    html = (reports_dir / f"{stem}.html").read_text(encoding="utf-8")
    assert html.count('class="plotly-graph-div"') == 1  # the figure's div ...
    assert "Plotly.newPlot" in html and f"plotly.js v{plotly_version()}" in html
    assert not re.search(r'src="https?://', html)  # nothing fetched from a CDN: the report works offline
    assert not re.search(r'<script[^>]*src="plotly', html)

    # Opt-in: one shared plotly.js beside the reports, 4.6 MB less per report.
    shared = f"plotly-{plotly_version()}.min.js"
    light = xh.run_notebook(tiny, profile="small", out_dir=reports_dir / "shared", self_contained=False,
                             **notebook_kwargs)
    body = light.with_suffix(".html").read_text(encoding="utf-8")
    assert f'<script type="text/javascript" src="{shared}"></script>' in body
    assert "plotly.js v" not in body  # the 4.6 MB bundle is the shared file beside the report, not inline ...
    assert (reports_dir / "shared" / shared).read_text(encoding="utf-8").lstrip().startswith("/**")  # ... plotly.js
    assert len(body) < 2 * 2**20 < len(html)


def plotly_version() -> str:
    """The version in the header of the plotly.js bundle that the plotly package ships."""
    import plotly

    head = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")[:200]
    return re.search(r"plotly\.js v([0-9][\w.-]*)", head).group(1)


@pytest.mark.notebook
def test_the_kernel_freezes_its_heap_after_the_exit_handlers_and_skips_the_iri_grammar(tmp_path, reports_dir,
                                                                                      notebook_kwargs):
    """A kernel that had run a notebook outlasted jupyter_client's shutdown grace in its final garbage collections
    (xenbench.harness.runner.KERNEL_EXEC_LINES): run_notebook's kernel runs the lines that freeze the heap at exit,
    and a process running them freezes it after the handlers registered later (a cell's) and before the earlier.
    The kernel's jsonschema (plotly's renderers import it through nbformat) loads without rfc3987_syntax, and the
    figure is still rendered."""
    from xenbench.harness.runner import KERNEL_EXEC_LINES

    body = ["import plotly.graph_objects as go\ngo.Figure(go.Bar(x=[0, 1], y=[1, 2]))",
            "import sys\nfrom ipykernel.kernelapp import IPKernelApp",
            'xb.harness.save_results("tiny", profile, {"lines": list(IPKernelApp.instance().exec_lines), '
            '"jsonschema": "jsonschema._format" in sys.modules, '
            '"rfc3987_syntax": repr(sys.modules.get("rfc3987_syntax", "never imported"))})']
    executed = xh.run_notebook(write_tiny(tmp_path / "nbs", body=body), out_dir=reports_dir, **notebook_kwargs)
    results = json.loads(executed.with_suffix(".results.json").read_text(encoding="utf-8"))["results"]
    assert results == {"lines": list(KERNEL_EXEC_LINES), "jsonschema": True, "rfc3987_syntax": "None"}
    [figure] = [c.outputs for c in nbformat.read(executed, as_version=4).cells if c.source.startswith("import plotly")]
    plotly_json = [o["data"]["application/vnd.plotly.v1+json"] for o in figure
                   if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert [f["data"][0]["type"] for f in plotly_json] == ["bar"]

    probe = "import atexit, gc\natexit.register(lambda: print('earlier', gc.get_freeze_count() > 0))\n{}\n" \
            "atexit.register(lambda: print('later', gc.get_freeze_count() > 0))"
    out = subprocess.run([sys.executable, "-c", probe.format("\n".join(KERNEL_EXEC_LINES))], capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == ["later", "False", "earlier", "True"]


@pytest.mark.notebook
def test_failed_run_keeps_the_previous_report(tmp_path, reports_dir, notebook_kwargs):
    path = write_tiny(tmp_path / "nbs", body=['raise RuntimeError("boom in cell")'])
    earlier = earlier_run(reports_dir, ("tiny.quick.ipynb", "tiny.quick.html", "tiny.quick.results.json"),
                          "from an earlier good run")

    with pytest.raises(pm.PapermillExecutionError, match="boom in cell"):
        xh.run_notebook(path, out_dir=reports_dir, **notebook_kwargs)

    assert sorted(p.name for p in reports_dir.iterdir()) == sorted([*earlier, "tiny.quick.failed.ipynb"])
    assert all((reports_dir / n).read_text() == text for n, text in earlier.items())
    failed = nbformat.read(reports_dir / "tiny.quick.failed.ipynb", as_version=4)
    assert any(o.get("ename") == "RuntimeError" for c in failed.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.notebook
def test_a_cell_past_its_timeout_keeps_the_partly_executed_notebook(tmp_path, reports_dir, notebook_kwargs):
    """A timeout stops the run outside any cell's error (papermill writes the notebook only at the end or on a cell's
    error): the notebook is kept as executed so far, the cell before it with its output."""
    from nbclient.exceptions import CellTimeoutError

    path = write_tiny(tmp_path / "nbs", body=["print('before the slow cell')", "import time; time.sleep(600)"])
    with pytest.raises(CellTimeoutError):
        xh.run_notebook(path, out_dir=reports_dir, **{**notebook_kwargs, "timeout": 3})
    failed = nbformat.read(reports_dir / "tiny.quick.failed.ipynb", as_version=4)
    [printed] = [c for c in failed.cells if c.source == "print('before the slow cell')"]
    assert [o.get("text") for o in printed.outputs] == ["before the slow cell\n"]
    assert sorted(p.name for p in reports_dir.iterdir()) == ["tiny.quick.failed.ipynb"]


@pytest.mark.notebook
def test_killed_run_keeps_the_previous_report_and_success_replaces_it(tmp_path, reports_dir, notebook_kwargs):
    import signal
    import subprocess
    import sys
    import time

    slow = write_tiny(tmp_path / "nbs", body=["open('in_cell', 'w').close(); import time; time.sleep(600)"])
    earlier = earlier_run(reports_dir, ("tiny.quick.ipynb", "tiny.quick.html", "tiny.quick.results.json",
                                        "tiny.quick.failed.ipynb"))
    code = (f"import xenbench.harness as x; x.run_notebook({str(slow)!r}, out_dir={str(reports_dir)!r}, "
            f"kernel={notebook_kwargs['kernel']!r}, progress_bar=False)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    deadline = time.time() + 120
    while not (tmp_path / "nbs" / "in_cell").exists() and time.time() < deadline:  # the kernel is in the cell
        time.sleep(0.2)
    assert list(reports_dir.glob(".tiny.quick.*.staging")), "the run stages its outputs in a hidden folder"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    visible = sorted(p.name for p in reports_dir.iterdir() if not p.name.startswith("."))
    assert visible == ["tiny.quick.failed.ipynb", "tiny.quick.html", "tiny.quick.ipynb",
                       "tiny.quick.results.json"]
    assert all((reports_dir / n).read_text() == earlier[n] for n in visible)

    # The next successful run replaces the whole set, drops the stale failed notebook and the killed run's staging.
    good = write_tiny(tmp_path / "nbs2")
    xh.run_notebook(good, out_dir=reports_dir, **notebook_kwargs)
    assert sorted(p.name for p in reports_dir.iterdir() if not p.name.startswith("plotly-")) == [
        "tiny.quick.html", "tiny.quick.ipynb", "tiny.quick.results.json"]
    assert (reports_dir / "tiny.quick.results.json").read_text() != "earlier"


@pytest.mark.notebook
def test_ctrl_c_during_xenbench_run_is_one_line_and_keeps_the_previous_report(tmp_path, reports_dir):
    """Ctrl-C in a terminal sends SIGINT to the command's process group: the run stops with one line naming the partly
    executed notebook it kept, exit code 130, and the previous report untouched (before: a traceback, and the
    kernel's own closed-socket traceback)."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    slow = write_tiny(tmp_path / "nbs", body=["open('in_cell', 'w').close(); import time; time.sleep(600)"])
    earlier_run(reports_dir, ("tiny.quick.ipynb", "tiny.quick.html"))
    cli = Path(sys.executable).with_name("xenbench")
    # Output to a file, not a pipe: a kernel that outlived the run would hold a pipe open (and the test would hang).
    with open(tmp_path / "err", "w") as err_file:
        # As from a terminal: SIGINT handled (a shell's background job, such as a CI script run with `&`, would
        # hand down an ignored SIGINT, and Python keeps it ignored).
        proc = subprocess.Popen([str(cli), "run", str(slow), "--out", str(reports_dir)], stdout=subprocess.DEVNULL,
                                stderr=err_file, text=True, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.time() + 120
        while not (tmp_path / "nbs" / "in_cell").exists() and time.time() < deadline:  # the kernel is in the cell
            time.sleep(0.2)
        kernels = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    err = (tmp_path / "err").read_text()
    assert proc.returncode == 130, err
    assert kernels and psutil.wait_procs(kernels, timeout=10)[1] == []  # no kernel outlives the run
    assert "Traceback" not in err and "ERROR" not in err, err
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last == (f"xenbench: interrupted: the partly executed notebook is kept in {reports_dir.resolve()}/"
                    "tiny.quick.failed.ipynb; the previous report is untouched")
    assert (reports_dir / "tiny.quick.html").read_text() == "earlier"
    assert sorted(p.name for p in reports_dir.iterdir() if not p.name.startswith(".")) == [
        "tiny.quick.failed.ipynb", "tiny.quick.html", "tiny.quick.ipynb"]


def test_results_outside_run_notebook_get_their_own_name(tmp_path, monkeypatch):
    monkeypatch.delenv(xh.REPORTS_ENV, raising=False)
    lab = xh.save_results("tiny", "quick", {"n": 1}, out_dir=tmp_path)
    assert lab.name == "tiny.quick.lab.results.json"
    monkeypatch.setenv(xh.REPORTS_ENV, str(tmp_path))
    assert xh.save_results("tiny", "quick", {"n": 1}).name == "tiny.quick.results.json"


@pytest.mark.notebook
def test_check_cell_stops_raw_papermill_with_the_same_message(tiny, tmp_path, notebook_kwargs):
    # Raw papermill bypasses run_notebook's validation; the notebook's own check cell catches the value.
    with pytest.raises(pm.PapermillExecutionError,
                       match=r"The 'n' parameter of notebook tiny must be an int in \[1, 10\]. Got 0 instead."):
        pm.execute_notebook(tiny, tmp_path / "raw.ipynb", parameters={"n": 0}, cwd=tiny.parent,
                            kernel_name=notebook_kwargs["kernel"], progress_bar=False)


# ------------------------------------------------------------------------------------------------
# every notebook in notebooks/ follows the template
# ------------------------------------------------------------------------------------------------


def test_list_notebooks_finds_the_workbench_notebooks():
    assert "00_data" in xh.list_notebooks()


@pytest.mark.parametrize("name", xh.list_notebooks())
def test_quick_profile_equals_parameters_cell(name):
    path = xh.NOTEBOOKS_DIR / f"{name}.ipynb"
    declared = pm.inspect_notebook(str(path))
    cell = {key: ast.literal_eval(p["default"]) for key, p in declared.items()}
    assert cell.pop("profile", None) == "quick", 'the parameters cell must declare profile = "quick"'
    assert cell == xh.profile_values(name, "quick")
    assert "full" in xh.load_spec(name).profiles, "every notebook needs the `full` profile of the study"


@pytest.mark.parametrize("name", xh.list_notebooks())
def test_notebook_follows_the_template(name):
    nb = nbformat.read(xh.NOTEBOOKS_DIR / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "title first"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert not any(c.outputs or c.execution_count for c in code), "commit notebooks without outputs"
    tags = [c.metadata.get("tags", []) for c in code]
    at = [i for i, t in enumerate(tags) if "parameters" in t]
    assert len(at) == 1, "exactly one cell tagged `parameters`"
    assert "setup_plotly()" in "\n".join(c.source for c in code[: at[0]]), "setup_plotly() before the parameters"
    check_call = re.compile(r'=\s*xb\.harness\.check_namespace\(globals\(\),\s*"' + re.escape(name) + r'"\)')
    assert check_call.search(code[at[0] + 1].source), "validate the parameters right after their cell"
    assert re.search(r'xb\.harness\.save_results\(\s*"' + re.escape(name) + r'",\s*profile', code[-1].source), (
        "the last cell saves the results"
    )
    # ... and shows the findings generated from them, a cell the HTML report repeats at the top (the answer first)
    assert "xb.findings.show(path)" in code[-1].source and xh.FINDINGS_TAG in tags[-1]
    assert sum(xh.FINDINGS_TAG in t for t in tags) == 1


def test_one_name_per_knob_across_notebooks():
    """A knob that two notebooks share has one name: 04 said dev_queries where 03 and 07 say n_dev_queries."""
    params = {}
    for name in xh.list_notebooks():
        for p in xh.load_spec(name).params.values():
            params.setdefault(p.name, set()).add((p.type, p.items))
    twins = [(x, f"n_{x}") for x in params if f"n_{x}" in params and params[x] & params[f"n_{x}"]]
    assert not twins, f"the same knob under two names: {twins}"


def test_readme_format_example_in_module_docstring_parses(tmp_path):
    # The format documented in xenbench/harness/spec.py is a valid profiles file.
    doc = xh.spec.__doc__.split("::", 1)[1].split("\n\n", 2)[1]
    (tmp_path / "doc.yaml").write_text(textwrap.dedent(doc), encoding="utf-8")
    spec = xh.load_spec(tmp_path / "doc.yaml")
    assert xh.profile_values(spec, "quick")["max_queries"] == 100
    assert xh.check_sizes(spec, xh.profile_values(spec, "quick")) == {"queries": 100, "items": 2964}
    with pytest.raises(ParameterError, match=r"'k_values' parameter of notebook doc must be ints each <= the 2964 "
                                             r"items of its data \(dataset 'wordnet-el:noun.cognition', max_queries"):
        xh.check_sizes(spec, {**xh.profile_values(spec, "quick"), "k_values": [1, 5000]})
    assert xh.profile_values(spec, "full")["max_queries"] is None
    assert xh.profile_values(spec, "paper") == {**xh.profile_values(spec, "full"), "lambdas": [0.0, 0.1, 0.5]}


def test_run_stem_names_other_data_models_and_sizes():
    assert xh.run_stem("00_data", "quick", xh.profile_values("00_data", "quick")) == "00_data.quick"
    h = r"\.p[0-9a-f]{16}"  # 64 bits of a SHA-256 of every value that differs from the profile
    values = {**xh.profile_values("00_data", "quick"), "dataset": "beir:/data/scifact/"}
    assert re.fullmatch(r"00_data\.quick\.beir-scifact" + h, xh.run_stem("00_data", "quick", values))
    values = {**xh.profile_values("01_score_matrices", "full"), "ces": ["../models/cls-ce", "/x/my ce"]}
    assert re.fullmatch(r"01_score_matrices\.full\.cls-ce-my-ce" + h, xh.run_stem("01_score_matrices", "full", values))
    # the scheme once, however the folder is named; one tag for the same data in two parameters
    values = {**xh.profile_values("00_data", "quick"), "dataset": "beir:/tmp/beir-adverbs",
              "eval_datasets": ["beir:/tmp/beir-adverbs"]}
    assert re.fullmatch(r"00_data\.quick\.beir-adverbs" + h, xh.run_stem("00_data", "quick", values))
    values = {**xh.profile_values("00_data", "quick"), "dataset": "zeshel:/data/zeshel:yugioh@test"}
    assert re.fullmatch(r"00_data\.quick\.zeshel-yugioh-test" + h, xh.run_stem("00_data", "quick", values))
    # two folders of the same name are two reports: the tag is for the reader, the digest tells them apart
    a, b = ({**xh.profile_values("00_data", "quick"), "dataset": f"beir:/{d}/mine"} for d in ("a", "b"))
    assert xh.run_stem("00_data", "quick", a) != xh.run_stem("00_data", "quick", b)
    # other sizes: a hash of the values that differ from the profile (the same values: the same name)
    mine = {**xh.profile_values("03_adacur_rounds", "quick"), "dataset": "beir:/data/mine", "model": "/m/my-ce"}
    stems = {xh.run_stem("03_adacur_rounds", "quick", {**mine, "max_queries": q, "max_items": i})
             for q, i in ((100, 300), (100, 300), (200, 300), (100, 600))}
    assert len(stems) == 3 and all(re.fullmatch(r"03_adacur_rounds\.quick\.beir-mine\.my-ce" + h, s) for s in stems)


def test_the_seeds_that_shared_a_24_bit_name_get_two_names():
    """Issue 54: ``-p seed 1665`` and ``-p seed 6387`` of 05 both named their report ``p6b68e9`` (24 bits), and the second
    run replaced the first's; 64 bits tell them apart."""
    base = xh.profile_values("05_pefa_lambda", "quick")
    old = [hashlib.sha256(json.dumps({"seed": s}, sort_keys=True).encode()).hexdigest()[:6] for s in (1665, 6387)]
    assert old[0] == old[1] == "6b68e9"  # the collision as the old rule computed it
    stems = [xh.run_stem("05_pefa_lambda", "quick", {**base, "seed": s}) for s in (1665, 6387)]
    assert stems[0] != stems[1] and all(re.fullmatch(r"05_pefa_lambda\.quick\.p[0-9a-f]{16}", s) for s in stems)


def test_the_executed_notebook_keeps_no_plotly_bundle_and_the_report_puts_the_findings_under_the_summary():
    bundle = '<script type="text/javascript">/**\n* plotly.js v3.0.1\n*/ window.Plotly = {};</script>'
    figure = '<div id="0f0e0d0c-0b0a-4909-8807-060504030201"></div><script>Plotly.newPlot("x", [])</script>'
    findings = {"output_type": "display_data", "data": {"text/markdown": "**Findings of this run**: ..."}}
    nb = {"cells": [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# Title"},
                    {"cell_type": "code", "id": "b", "metadata": {"tags": [xh.SUMMARY_TAG]}, "source": "fig",
                     "outputs": [{"output_type": "display_data", "data": {"text/html": bundle + figure}}]},
                    {"cell_type": "code", "id": "c", "metadata": {}, "source": "x = 1", "outputs": []},
                    {"cell_type": "code", "id": "d", "metadata": {"tags": [xh.FINDINGS_TAG]},
                     "source": "xb.findings.show(path)", "outputs": [findings]}]}
    light = xh.report.without_plotly_bundle(nb)
    assert light["cells"][1]["outputs"][0]["data"]["text/html"] == figure  # the figure stays, the 4.6 MB go
    assert nb["cells"][1]["outputs"][0]["data"]["text/html"] == bundle + figure  # the notebook itself is unchanged
    out = xh.summary_first(nb)
    assert [c["metadata"].get("tags") for c in out["cells"]][:3] == [None, [f"{xh.SUMMARY_TAG}-copy"],
                                                                     [f"{xh.FINDINGS_TAG}-copy"]]
    assert out["cells"][2]["outputs"] == [findings] and "findings" in out["cells"][2]["source"]
    assert out["cells"][1]["outputs"][0]["data"]["text/html"].startswith(bundle)  # drawn first, with plotly.js
    no_summary = {"cells": [nb["cells"][0], *nb["cells"][2:]]}  # 00_data: the findings alone come first
    assert [c["metadata"].get("tags") for c in xh.summary_first(no_summary)["cells"]][:2] == [
        None, [f"{xh.FINDINGS_TAG}-copy"]]


@pytest.mark.notebook
def test_a_run_on_other_data_keeps_the_default_runs_report(tmp_path, reports_dir, notebook_kwargs):
    yaml_text = TINY_YAML.replace("params:\n", "params:\n  dataset: {type: str}\n", 1).replace(
        "  quick: {", "  quick: {dataset: 'wordnet-el:verb.weather', ", 1)
    path = write_tiny(tmp_path / "nbs", yaml_text=yaml_text)
    nb = nbformat.read(path, as_version=4)
    nb.cells[2].source += '\ndataset = "wordnet-el:verb.weather"'
    nbformat.write(nb, path)
    xh.run_notebook(path, out_dir=reports_dir, **notebook_kwargs)
    xh.run_notebook(path, out_dir=reports_dir, params={"dataset": "wordnet-el:noun.food"}, **notebook_kwargs)
    food = xh.run_stem(xh.load_spec(path), "quick", {**xh.profile_values(xh.load_spec(path)),
                                                     "dataset": "wordnet-el:noun.food"})
    names = sorted(p.name for p in reports_dir.iterdir() if p.suffix in (".ipynb", ".json"))
    assert names == ["tiny.quick.ipynb", "tiny.quick.results.json", f"{food}.ipynb", f"{food}.results.json"]
    # a second run on that data with another size is a third report, not an overwrite of the second
    xh.run_notebook(path, out_dir=reports_dir, params={"dataset": "wordnet-el:noun.food", "n": 5}, **notebook_kwargs)
    sized = xh.run_stem(xh.load_spec(path), "quick", {**xh.profile_values(xh.load_spec(path)),
                                                      "dataset": "wordnet-el:noun.food", "n": 5})
    assert sized.startswith("tiny.quick.wordnet-el-noun.food.p")
    assert sorted(p.name for p in reports_dir.iterdir() if p.suffix == ".html") == sorted([
        "tiny.quick.html", f"{sized}.html", f"{food}.html"])
    assert json.loads((reports_dir / f"{sized}.results.json").read_text())["results"]["n"] == 5
