"""Witnesses: committed results re-derived with today's code. A changed committed value fails `--verify` even when the
docs were regenerated from it (which `findings --check` cannot see)."""
from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from xenbench._io import replace_blocks
from xenbench.cli import main
from xenbench.studies import findings, witnesses
from xenbench.studies.witnesses import Witness

RANK = "02_rank_cls_vs_emb"
RANK_FILE = findings.RESULTS_DIR / f"{RANK}.full.results.json"


def _pinned(value: Any) -> Any:
    """A hashable key of call arguments; arrays and mappings of arrays by identity (the memo keeps them alive)."""
    if isinstance(value, (np.ndarray, Mapping)):
        return ("id", id(value))
    if isinstance(value, (list, tuple)):
        return tuple(_pinned(v) for v in value)
    return str(value) if isinstance(value, Path) else value


@pytest.fixture(scope="module", autouse=True)
def _rank_computed_once():
    """02's witnesses read the same stores and compute the same grids, ranks and skewness for every copy of its
    results that these tests verify (the copies differ in committed values only; about 2 minutes each on 2 cores):
    each is computed once in this module, with today's code, then reused."""
    from xenbench.studies import rank

    def memo(fn: Callable[..., Any]) -> Callable[..., Any]:
        seen: dict[Any, tuple[tuple, dict, Any]] = {}

        def call(*args: Any, **kwargs: Any) -> Any:
            key = (_pinned(args), _pinned(tuple(sorted(kwargs.items()))))
            if key not in seen:
                seen[key] = (args, kwargs, fn(*args, **kwargs))
            out = seen[key][2]
            return out.copy() if isinstance(out, pd.DataFrame) else out

        return call

    with pytest.MonkeyPatch.context() as mp:
        for name in ("load_matrices", "cur_grid", "rank_table", "skew_table"):
            mp.setattr(rank, name, memo(getattr(rank, name)))
        yield


@pytest.mark.slow
def test_the_committed_results_hold_with_todays_code(capsys, ccsa_trained_once):
    """`make test`'s check of the committed results, `xenbench findings --verify` as the CLI runs it: here, so that it
    runs on one pytest-xdist worker while the others test (and shares 02's cells with the tests below; tests/test_tamper.py
    follows it on the same worker and reuses 06's λ = 0 model: ``ccsa_trained_once``). One process (--jobs 1): the
    shared cells live in this one, and under `make test` the other cores run the other workers' tests."""
    code = main(["findings", "--verify", "--jobs", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err[-4000:]
    assert "hold with today's code" in out


def test_witness_tolerance_and_line():
    assert Witness("n", "c", 1.0, 1.0 + 1e-7, rel_tol=1e-6, abs_tol=0.0).ok
    assert not Witness("n", "c", 1.0, 1.0 + 1e-5, rel_tol=1e-6, abs_tol=0.0).ok
    assert Witness("n", "c", math.nan, math.nan).ok and not Witness("n", "c", math.nan, 0.5).ok
    assert Witness("n", "c", 0.5, 0.25).line() == "n: c: committed 0.5, today 0.25 (tolerance 1e-09 absolute) MISMATCH"
    assert Witness("n", "c", 3.0, 3.0, abs_tol=0.0).line() == "n: c: committed 3, today 3 (tolerance exact)"


@pytest.mark.parametrize("recorded", [1, 3, None])
def test_witnesses_run_at_the_torch_thread_count_the_run_recorded(monkeypatch, recorded):
    """A CPU-trained model ends differently at another thread count: the witness re-derives it at the recorded one
    (a file from before the count was recorded: this process's), and leaves the process's count as it was."""
    import torch

    seen = []
    from xenbench.studies.notebooks import NOTEBOOKS, Notebook

    fn = lambda results: seen.append(torch.get_num_threads()) or []  # noqa: E731
    monkeypatch.setitem(NOTEBOOKS, "nb_threads", Notebook("nb_threads", "stats", "data", {"witnesses": fn}))
    before = torch.get_num_threads()
    machine = {"cores": 2} if recorded is None else {"cores": 2, "torch_threads": recorded}
    witnesses.witnesses({"notebook": "nb_threads", "results": {}, "provenance": {"machine": machine}})
    assert seen == [recorded or before] and torch.get_num_threads() == before


def test_every_notebook_declares_witnesses():
    from xenbench.harness import list_notebooks

    assert set(witnesses.registered()) == set(list_notebooks())


def test_notebook_02_witnesses_hold_on_the_committed_results():
    found = witnesses.verify(notebooks=[RANK])
    assert len(found) >= 10 and {w.notebook for w in found} == {RANK}
    assert {"plain", "cutoff"} <= {w.cell.split()[2] for w in found if w.source != "inputs"}  # both pinv rules witnessed
    assert witnesses.describe(found) == [], witnesses.describe(found)


def test_a_changed_committed_value_fails_verify_even_with_regenerated_docs(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    doc = json.loads(RANK_FILE.read_text(encoding="utf-8"))
    grid = pd.DataFrame(doc["results"]["grid"])
    cell = (grid["ce"] == "cls-ce") & (grid["pinv"] == "cutoff") & (grid["k_q"] == 400) & (grid["k_i"] == 100)
    assert cell.sum() == 1
    committed = float(grid.loc[cell, "recall_at_budget"].iloc[0])
    grid.loc[cell, "recall_at_budget"] = committed + 0.01
    doc["results"]["grid"] = grid.to_dict(orient="records")
    (results / RANK_FILE.name).write_text(json.dumps(doc), encoding="utf-8")

    # docs/FINDINGS.md regenerated from the changed file agrees with it: --check is satisfied ...
    doc = tmp_path / "FINDINGS.md"
    doc.write_text(f"x\n{findings.BEGIN}\n{findings.END}\n", encoding="utf-8")
    replace_blocks([findings.block(doc, results)])
    assert not replace_blocks([findings.block(doc, results)], write=False)
    # ... but the witness recomputed with today's code is not.
    bad = [w for w in witnesses.verify(results, notebooks=[RANK]) if not w.ok]
    assert [w.cell for w in bad] == ["results['grid'] sha256 (bound at the run to its commit)",  # the bound digest
                                     "grid cls-ce cutoff pinv k_q=400 k_i=100 recall_at_budget"]
    assert bad[1].committed == pytest.approx(committed + 0.01) and bad[1].today == pytest.approx(committed)

    capsys.readouterr()
    assert main(["findings", "--verify", "--results-dir", str(results)]) == 1
    err = capsys.readouterr().err
    assert (f"xenbench: error: {RANK}: grid cls-ce cutoff pinv k_q=400 k_i=100 recall_at_budget: committed "
            f"{committed + 0.01:.10g}, today {committed:.10g}") in err
    shutil.copy(RANK_FILE, results / RANK_FILE.name)  # the committed file itself passes
    assert main(["findings", "--verify", "--results-dir", str(results)]) == 0
    assert "hold with today's code" in capsys.readouterr().out


def _log_lines(lines: list[str]) -> list[str]:
    """Log lines of verify without their seconds (which differ between two runs)."""
    return [re.sub(r", [0-9.]+ s$", "", line) for line in lines]


def test_parallel_verify_gives_the_witnesses_and_lines_of_one_process():
    """--jobs: the files spread over processes give the same witnesses, in the same order, and the same log lines
    (each file's, in file order) as one process; the cheap checks of five files keep it short (about 2 CPU-s a run,
    and the workers' imports)."""
    names = ["02_rank_cls_vs_emb", "05_pefa_lambda", "06_ccsa_balance"]
    runs = {}
    for jobs in (1, 2):
        lines: list[str] = []
        runs[jobs] = witnesses.verify(notebooks=names, checks=("inputs", "records"), log=lines.append, jobs=jobs), lines
    (one, one_lines), (two, two_lines) = runs[1], runs[2]
    assert len(one) > 1000 and {w.notebook for w in one} == set(names)
    assert list(map(repr, two)) == list(map(repr, one))  # repr: a NaN value equals itself
    assert _log_lines(two_lines) == _log_lines(one_lines)
    assert [line.split(":")[0] for line in one_lines if "witnesses (" in line] == [
        f"{name}.{profile}.results.json" for name, profile in [(names[0], "full"), (names[1], "full"),
                                                               (names[2], "full"), (names[2], "large"),
                                                               (names[2], "regime")]]


def test_an_error_in_a_verify_process_is_the_one_line_of_one_process(tmp_path, capsys):
    """A file whose witnesses cannot read their cells fails with the same error line whether it was checked in this
    process or in a worker (xenbench's errors survive pickling); a malformed file fails before any worker starts."""
    for name in ("02_rank_cls_vs_emb", "03_adacur_rounds"):
        doc = json.loads((findings.RESULTS_DIR / f"{name}.full.results.json").read_text(encoding="utf-8"))
        del doc["results"]["params"]
        (tmp_path / f"{name}.full.results.json").write_text(json.dumps(doc), encoding="utf-8")
    errors = []
    for jobs in ("1", "2"):
        assert main(["findings", "--verify", "--results-dir", str(tmp_path), "--jobs", jobs]) == 2
        errors.append(capsys.readouterr().err.strip().splitlines()[-1])
    assert errors[0] == errors[1] and "02_rank_cls_vs_emb.full.results.json: lacks what its witnesses read" in errors[0]
    (tmp_path / "04_axn_lambda.full.results.json").write_text("{", encoding="utf-8")  # read before any witness runs
    assert main(["findings", "--verify", "--results-dir", str(tmp_path), "--jobs", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "04_axn_lambda.full.results.json" in err[-1] and not any("witnesses (" in line for line in err)
    assert main(["findings", "--verify", "--results-dir", str(tmp_path), "--jobs", "0"]) == 2
    assert capsys.readouterr().err.strip() == ("xenbench: error: The '--jobs' parameter of xenbench findings must be "
                                               "an int >= 1. Got 0 instead.")


def test_a_results_file_without_the_witnessed_cells_is_one_clear_error(tmp_path, capsys):
    doc = json.loads(RANK_FILE.read_text(encoding="utf-8"))
    del doc["results"]["params"]
    (tmp_path / RANK_FILE.name).write_text(json.dumps(doc), encoding="utf-8")
    assert main(["findings", "--verify", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("xenbench: error: ") and "lacks what its witnesses read" in err[-1]
    assert RANK_FILE.name in err[-1]



# ----------------------------------------------------------------------------------------------
# method constants: every default a method reads is witnessed state (a committed table checked against the code)
# ----------------------------------------------------------------------------------------------
#: The committed table of method constants (``xenbench.methods``' and ``xenbench.studies.protocol``'s module constants
#: and every default argument of their functions and classes) and, per module, the committed results its constants move. Regenerate it after a re-run
#: that follows a changed constant: ``PYTHONPATH=$PWD .venv/bin/python -c "import tests.test_witnesses as t;
#: t.write_method_constants()"``.
METHOD_CONSTANTS = Path(__file__).with_name("method_constants.json")
_CONSTANT_NAME = re.compile(r"_?[A-Z][A-Z0-9_]*")


def _constant_value(value: Any) -> str | None:
    """A constant's committed form: ``repr`` of a plain value (an array's by its SHA-256); None for what is no
    constant (a function, a class, a registry of objects)."""
    import hashlib

    if isinstance(value, np.ndarray):
        return f"ndarray {value.dtype} {value.shape} sha256 {hashlib.sha256(value.tobytes()).hexdigest()}"
    if isinstance(value, (bool, int, float, str, type(None), np.generic)):
        return repr(value)
    if isinstance(value, (tuple, list, frozenset)) and all(_constant_value(v) is not None for v in value):
        return repr(value)
    return None


def method_constants() -> dict[str, str]:
    """``"<module>: <NAME>"`` and ``"<module>: <qualname>(<argument>)"`` -> the value's committed form, for every
    module of ``xenbench.methods``: its module-level constants and each default argument of the functions, classes
    and methods it defines (what a method reads when a driver does not pass the argument)."""
    import importlib
    import inspect
    import pkgutil

    import xenbench.methods as methods

    out: dict[str, str] = {}
    # the evaluation protocol (its α, the label measure settings are chosen by, its defaults) moves committed numbers
    # as a method's constants do: it is in the table although it judges methods from xenbench.studies
    names = ["xenbench.methods", "xenbench.studies.protocol"] + [
        m.name for m in pkgutil.walk_packages(methods.__path__, "xenbench.methods.")]
    for name in sorted(names):
        module = importlib.import_module(name)
        for attr, value in sorted(vars(module).items()):
            if _CONSTANT_NAME.fullmatch(attr) and (form := _constant_value(value)) is not None:
                out[f"{name}: {attr}"] = form
            if not (inspect.isfunction(value) or inspect.isclass(value)) or value.__module__ != name:
                continue
            callables = [(value.__qualname__, value)]
            if inspect.isclass(value):
                callables = [(f.__qualname__, f) for f in vars(value).values() if inspect.isfunction(f)]
                for key, const in vars(value).items():
                    if _CONSTANT_NAME.fullmatch(key) and (form := _constant_value(const)) is not None:
                        out[f"{name}: {value.__qualname__}.{key}"] = form
            for qualname, fn in callables:
                for param in inspect.signature(fn).parameters.values():
                    if param.default is not inspect.Parameter.empty:
                        form = _constant_value(param.default)
                        out[f"{name}: {qualname}({param.name})"] = form if form is not None else repr(param.default)
    return out


def constant_changes(committed: Mapping[str, Any], today: Mapping[str, str]) -> list[str]:
    """One line per constant added, removed or changed since the committed table, naming the committed results its
    module's constants move (``committed["affects"]``)."""
    affects, saved = committed["affects"], committed["constants"]
    lines = []
    for key in sorted(set(saved) | set(today)):
        if saved.get(key) == today.get(key):
            continue
        module = key.split(":")[0]
        moved = next((v for m, v in sorted(affects.items(), key=lambda kv: -len(kv[0]))
                      if module == m or module.startswith(m + ".")), "no committed result named")
        lines.append(f"method constant {key}: committed {saved.get(key, 'absent')}, code {today.get(key, 'absent')}; "
                     f"moves {moved}: re-run those notebooks, then regenerate {METHOD_CONSTANTS.name}")
    return lines


def write_method_constants() -> None:
    """Rewrite the table's constants from the code, keeping its ``affects`` (after the re-runs a change asks for)."""
    doc = json.loads(METHOD_CONSTANTS.read_text(encoding="utf-8"))
    doc["constants"] = method_constants()
    METHOD_CONSTANTS.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def test_every_method_constant_is_the_committed_one():
    """A default a method reads moves committed numbers that no witness recomputes (MF-IND is not recomputed; 1024 ->
    512 in its batch size moved a claimed cell by 5.1 points): each is checked against the committed table."""
    committed = json.loads(METHOD_CONSTANTS.read_text(encoding="utf-8"))
    today = method_constants()
    assert "xenbench.methods.mf: MatrixFactorization.__init__(batch_size)" in today
    assert constant_changes(committed, today) == []
    modules = {key.split(":")[0] for key in today}
    assert all(any(m == a or m.startswith(a + ".") for a in committed["affects"]) for m in modules), modules


@pytest.mark.parametrize("change, named", [
    (("mf", "MatrixFactorization.__init__", "batch_size", 512),
     "method constant xenbench.methods.mf: MatrixFactorization.__init__(batch_size): committed 1024, code 512; moves "
     "04_axn_lambda.full"),
    (("cur", None, "_PLAIN_RCOND", 1e-12), "method constant xenbench.methods.cur: _PLAIN_RCOND: committed 1e-15, "
                                            "code 1e-12; moves 02_rank_cls_vs_emb.full"),
])
def test_a_changed_method_constant_is_named_with_the_results_it_moves(monkeypatch, change, named):
    import importlib

    module, owner, name, value = change
    mod = importlib.import_module(f"xenbench.methods.{module}")
    if owner is None:
        monkeypatch.setattr(mod, name, value)
    else:
        cls, fn = owner.split(".")
        target = getattr(getattr(mod, cls), fn)
        monkeypatch.setattr(target, "__kwdefaults__", {**target.__kwdefaults__, name: value})
    lines = constant_changes(json.loads(METHOD_CONSTANTS.read_text(encoding="utf-8")), method_constants())
    assert len(lines) == 1 and lines[0].startswith(named), lines


# ----------------------------------------------------------------------------------------------
# a notebook's witness list: pinned here, and each declared table needs a witness
# ----------------------------------------------------------------------------------------------
#: What each notebook's witnesses recompute from the stores: removing a table here or from witnesses.WITNESSED, or a
#: notebook, fails the pin below; removing a witness block from a notebook's function fails --verify (next test).
PINNED_WITNESSED = {
    "00_data": ("domain", "baselines", "label_metrics"), "01_score_matrices": ("score_summary", "bundled", "agreement"),
    "02_rank_cls_vs_emb": ("grid", "ranks", "skew"), "03_adacur_rounds": ("runs", "budget_rules"),
    "04_axn_lambda": ("beta_first_split", "runs", "sweep_dev_first_run"),
    "05_pefa_lambda": ("coverage", "sweep_dev", "chosen", "gains"), "06_ccsa_balance": ("by_reg", "baselines"),
    "07_compare_methods": ("summary",),
}


def test_every_notebook_s_witness_list_is_the_pinned_one():
    assert witnesses.WITNESSED == PINNED_WITNESSED
    assert set(witnesses.registered()) == set(PINNED_WITNESSED)


def test_a_removed_witness_block_fails_verify(monkeypatch):
    """06's function without its faiss-baseline block (here: its by_reg witnesses only) leaves results['baselines']
    unrecomputed: a failing witness names it."""
    by_reg = Witness("06_ccsa_balance", "by_reg λ=0 B=1000 seed 0 dev imbalance", 1.1, 1.1)
    from xenbench.studies.notebooks import NOTEBOOKS

    monkeypatch.setitem(NOTEBOOKS["06_ccsa_balance"].functions, "witnesses", lambda results: [by_reg])
    results = {"by_reg": [{"reg": 0.0}], "baselines": [{"method": "IVF-PQ"}]}
    found = witnesses.witnesses({"notebook": "06_ccsa_balance", "results": results, "provenance": {}})
    bad = [w for w in found if not w.ok]
    assert [w.cell for w in bad] == ["witnesses of results['baselines'] (witnesses.WITNESSED declares them)"]
    assert bad[0].line() == ("06_ccsa_balance: witnesses of results['baselines'] (witnesses.WITNESSED declares them): "
                             "committed present, today none recomputed MISMATCH")
    del results["baselines"]  # a results file without the table needs no witness of it
    assert all(w.ok for w in witnesses.witnesses({"notebook": "06_ccsa_balance", "results": results,
                                                  "provenance": {}}))
