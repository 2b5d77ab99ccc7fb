"""A TREC run file as a first stage (``-p first_stage run:<path>``): refused before any kernel starts, in one line
naming the file, when it cannot be one; and where the ranked lists of a run land (``harness.runs_dir``)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from xenbench import harness as xh
from xenbench.cli import main
from xenbench.data.sources import load_dataset
from xenbench.data.trec import write_trec_run

COGNITION = "wordnet-el:noun.cognition"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    """Run files over the bundled noun.cognition: a good one, and one per way a run can be wrong."""
    ds = load_dataset(COGNITION)
    root = tmp_path_factory.mktemp("runs")
    every = {q.id: [ds.items[r % len(ds.items)].id, ds.items[(r + 1) % len(ds.items)].id]
             for r, q in enumerate(ds.queries)}
    out = {"good": write_trec_run(root / "good.trec", every, tag="t")}
    first = ds.queries[0].id
    out["unknown_doc"] = write_trec_run(root / "unknown_doc.trec", {**every, first: ["not-an-item"]}, tag="t")
    out["unknown_query"] = write_trec_run(root / "unknown_query.trec", {**every, "q-from-elsewhere": [every[first][0]]},
                                          tag="t")
    out["missing"] = write_trec_run(root / "missing.trec", {q: v for q, v in list(every.items())[5:]}, tag="t")
    dup = root / "dup_rank.trec"
    dup.write_text(f"{first} Q0 {every[first][0]} 1 2.0 t\n{first} Q0 {every[first][1]} 1 1.0 t\n")
    out["dup_rank"] = dup
    five = root / "five.trec"
    five.write_text(f"{first} Q0 {every[first][0]} 1 2.0\n")
    out["five_columns"] = five
    return {k: str(v) for k, v in out.items()}


CASES = [
    ("03_adacur_rounds", lambda r: ["first_stage", f"run:{r['unknown_doc']}"],
     r"unknown_doc\.trec:1: doc id 'not-an-item' is not an item of wordnet-el:noun\.cognition \(1 such id\(s\) in "
     r"query '.*'s list; the 'first_stage' run must rank that dataset's items\)"),
    ("04_axn_lambda", lambda r: ["first_stage", f"run:{r['unknown_query']}"],
     r"unknown_query\.trec:\d+: query id 'q-from-elsewhere' is not a query of wordnet-el:noun\.cognition"),
    ("03_adacur_rounds", lambda r: ["first_stage", f"run:{r['missing']}", "max_queries", "null", "max_items", "null"],
     r"missing\.trec: misses 5 of the 1001 queries the notebook ranks with the 'first_stage' run \(first: '.*'\): a "
     r"first stage must rank every one"),
    ("07_compare_methods", lambda r: ["first_stages", f"[bm25, 'run:{r['dup_rank']}']"],
     r"dup_rank\.trec:2: duplicate rank 1 for query '.*' \(first on line 1\): each row of a query needs its own rank"),
    ("04_axn_lambda", lambda r: ["first_stage", f"run:{r['five_columns']}"],
     r"five\.trec:1: expected 6 whitespace-separated columns \(query-id Q0 doc-id rank score tag\), got 5"),
    ("03_adacur_rounds", lambda r: ["first_stage", "BM25"],
     r"The 'first_stage' parameter of notebook 03_adacur_rounds must be 'de', 'tfidf', 'bm25' or 'run:<path of a "
     r"TREC run file>'\. Got 'BM25' instead\."),
    ("03_adacur_rounds", lambda r: ["first_stage", "run:/no/such/run.trec"], r"/no/such/run\.trec: no such file"),
    ("00_data", lambda r: ["first_stages", f"[de, 'run:{r['good']}']",
                           "eval_datasets", "[wordnet-el:noun.cognition, wordnet-el:verb.cognition]"],
     r"The 'eval_datasets' parameter of notebook 00_data must be one dataset when first_stages holds a run file"),
    # 00 ranks a seeded sample of queries with gold: the run must hold each of them
    ("00_data", lambda r: ["first_stages", f"['run:{r['missing']}']", "eval_datasets", f"[{COGNITION}]",
                           "max_queries", "null"],
     r"missing\.trec: misses \d+ of the \d+ queries the notebook ranks"),
]


@pytest.mark.parametrize(("name", "params", "message"), CASES)
def test_a_run_that_cannot_be_a_first_stage_is_refused_before_the_kernel(tmp_path, capsys, kernel_calls, runs, name,
                                                                          params, message):
    out = tmp_path / "reports"
    pairs = params(runs)
    argv = ["run", name, "--out", str(out)]
    for k in range(0, len(pairs), 2):
        argv += ["-p", pairs[k], pairs[k + 1]]
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("xenbench: error: "), err
    assert re.search(message, lines[0]), lines[0]
    assert not kernel_calls and not out.exists()


def test_a_good_run_passes_the_checks(runs):
    values = {**xh.profile_values("03_adacur_rounds"), "first_stage": f"run:{runs['good']}"}
    xh.preflight("03_adacur_rounds", values)  # no error: every query ranked, every id the dataset's
    values = {**xh.profile_values("00_data"), "first_stages": ["de", f"run:{runs['good']}"],
              "eval_datasets": [COGNITION]}
    xh.preflight("00_data", values)


def test_runs_land_beside_the_results_named_like_them(tmp_path, monkeypatch):
    monkeypatch.delenv(xh.REPORTS_ENV, raising=False)
    assert xh.runs_dir("03_adacur_rounds", "quick", out_dir=tmp_path) == tmp_path / "03_adacur_rounds.quick.lab.runs"
    monkeypatch.setenv(xh.REPORTS_ENV, str(tmp_path))
    monkeypatch.delenv("XENBENCH_RUN_STEM", raising=False)
    assert xh.runs_dir("03_adacur_rounds", "quick") == tmp_path / "03_adacur_rounds.quick.runs"
    # under run_notebook the run's stem names it (another dataset, another first stage: another report)
    values = {**xh.profile_values("03_adacur_rounds"), "first_stage": "bm25"}
    stem = xh.run_stem("03_adacur_rounds", "quick", values)
    assert stem == "03_adacur_rounds.quick.bm25"
    monkeypatch.setenv("XENBENCH_RUN_STEM", stem)
    assert xh.runs_dir("03_adacur_rounds", "quick") == Path(tmp_path) / f"{stem}.runs"


@pytest.mark.parametrize("notebook", ["00_data", "05_pefa_lambda"])
def test_checking_a_run_without_a_model_imports_no_torch_or_scikit_learn(notebook):
    """The preflight of every `xenbench run` checks the named first stages by name: the retrievers (torch, the
    transformers, scikit-learn: seconds of imports) are the kernel's to load."""
    import subprocess
    import sys

    code = ("import sys; from xenbench import harness as xh; "
            f"xh.preflight({notebook!r}, {{**xh.profile_values({notebook!r}), 'profile': 'quick'}}); "
            "print(sorted(m for m in ('torch', 'transformers', 'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
