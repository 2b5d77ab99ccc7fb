"""Witnesses: committed results re-derived with today's code. A changed committed value fails `--verify` even when the
docs were regenerated from it (which `findings --check` cannot see)."""
from __future__ import annotations

import json
import math
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
    follows it on the same worker and reuses 06's λ = 0 model: ``ccsa_trained_once``)."""
    code = main(["findings", "--verify"])
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
    monkeypatch.setitem(witnesses._REGISTRY, "nb_threads", lambda results: seen.append(torch.get_num_threads()) or [])
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
    assert [w.cell for w in bad] == ["grid cls-ce cutoff pinv k_q=400 k_i=100 recall_at_budget"]
    assert bad[0].committed == pytest.approx(committed + 0.01) and bad[0].today == pytest.approx(committed)

    capsys.readouterr()
    assert main(["findings", "--verify", "--results-dir", str(results)]) == 1
    err = capsys.readouterr().err
    assert (f"xenbench: error: {RANK}: grid cls-ce cutoff pinv k_q=400 k_i=100 recall_at_budget: committed "
            f"{committed + 0.01:.10g}, today {committed:.10g}") in err
    shutil.copy(RANK_FILE, results / RANK_FILE.name)  # the committed file itself passes
    assert main(["findings", "--verify", "--results-dir", str(results)]) == 0
    assert "hold with today's code" in capsys.readouterr().out


def test_a_results_file_without_the_witnessed_cells_is_one_clear_error(tmp_path, capsys):
    doc = json.loads(RANK_FILE.read_text(encoding="utf-8"))
    del doc["results"]["params"]
    (tmp_path / RANK_FILE.name).write_text(json.dumps(doc), encoding="utf-8")
    assert main(["findings", "--verify", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("xenbench: error: ") and "lacks what its witnesses read" in err[-1]
    assert RANK_FILE.name in err[-1]
