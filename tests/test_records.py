"""Raw records in a results file and every summary re-derived from them (xenbench.studies.records): packing is exact,
a protocol's saved summaries re-derive from its saved per-query records, and a tampered record or summary is named.

The protocol cases run the notebooks' own functions on a small synthetic low-rank score matrix and save what the
notebooks save (after their re-run: with per-query records), so they exercise the path the committed files take once
re-run, in seconds.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from xenbench.errors import ParameterError
from xenbench.studies import records


def _bad(nb: str, results: dict, profile: str = "full") -> list[str]:
    # through JSON, as a results file reads back
    doc = {"notebook": nb, "profile": profile, "results": json.loads(json.dumps(results, default=_json))}
    return [w.line() for w in records.rederive(doc) if not w.ok]


def _json(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value).__name__)


def test_packed_values_read_back_bit_for_bit():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.random(50), [0.0, 1.0, 1 / 3, 1e-300, -2.5e17]])
    rows = rng.integers(0, 10**9, 40)
    df = pd.DataFrame({"run": [0], "per_query": [values], "rows": [rows]})
    packed = json.loads(json.dumps(records.pack_records(df)))
    back = records.unpack_records(packed)
    assert back["per_query"][0].tobytes() == values.tobytes() and back["rows"][0].dtype == np.int64
    assert np.array_equal(back["rows"][0], rows) and isinstance(packed[0]["per_query"], str)
    assert records.unpack_array("").size == 0


def test_pack_runs_keeps_each_split_s_rows_once_and_refuses_two_orders():
    df = pd.DataFrame({"split": [0, 0, 1], "per_query": [np.ones(2), np.zeros(2), np.ones(1)],
                       "rows": [np.array([3, 5]), np.array([3, 5]), np.array([7])]})
    per_run, rows = records.pack_runs(df, split="split")
    assert rows == {"0": "3 5", "1": "7"} and "rows" not in per_run[0] and per_run[1]["per_query"] == "0.0 0.0"
    df.at[1, "rows"] = np.array([5, 3])
    with pytest.raises(ParameterError, match="the same test rows in every run of a split"):
        records.pack_runs(df, split="split")


def test_pack_groups_round_trip():
    df = pd.DataFrame({"k": [1, 1, 10], "row": [4, 9, 4], "seen": [True, False, True], "recall": [0.0, 1.0, 0.3],
                       "de_recall": [1.0, 0.0, 0.2]})
    packed = records.pack_groups(df, ["k"], records.PEFA_ARRAYS)
    back = records.unpack_groups(json.loads(json.dumps(packed)), records.PEFA_ARRAYS)
    pd.testing.assert_frame_equal(back[df.columns.tolist()], df, check_dtype=False)
    assert back["seen"].dtype == bool


def test_t_row_implies_the_paired_test_scipy_computes():
    """Independent truth: scipy's paired t-test and t-interval on random per-query differences."""
    rng = np.random.default_rng(1)
    a, b = rng.random(200), rng.random(200) - 0.05
    d = a - b
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    row = {"mean": d.mean(), "lo": d.mean() - half, "hi": d.mean() + half, "p": stats.ttest_rel(a, b).pvalue,
           "se": d.std(ddof=1) / np.sqrt(d.size)}
    assert all(w.ok for w in records.t_row("nb", "x", row, d.size, se="se"))
    for key, by in (("mean", 0.01), ("p", 0.5 * row["p"]), ("se", 0.001), ("hi", 0.01)):
        bad = [w.cell for w in records.t_row("nb", "x", {**row, key: row[key] + by}, d.size, se="se") if not w.ok]
        assert bad, key


# ----------------------------------------------------------------------------------------------
# the protocols of 03, 04, 05 and 07 on a small synthetic matrix, saved as their notebooks now save them
# ----------------------------------------------------------------------------------------------
def _matrix(n_queries: int = 90, n_items: int = 200, rank: int = 6) -> np.ndarray:
    rng = np.random.default_rng(7)
    M = rng.standard_normal((n_queries, rank)) @ rng.standard_normal((rank, n_items))
    return (M + 0.3 * rng.standard_normal(M.shape)).astype(np.float32)


@pytest.fixture(scope="module")
def adacur_results():
    from xenbench.studies.protocol import query_splits
    from xenbench.studies import adacur as ex

    M = _matrix()
    splits = query_splits(M.shape[0], 30, 20, [0, 1], max_test=40)
    runs = ex.adacur_protocol_runs(M, splits, [0, 1, 2], [20, 40], methods=["anncur", "adacur_nosplit"], k_values=[1, 10],
                            n_rounds=2, device="cpu")
    test = ex.chosen_on_dev(runs)
    per_run, rows = records.pack_runs(test, split="split_seed")
    pairs = [(ex.METHODS["adacur_nosplit"], ex.METHODS["anncur"])]
    return {"protocol": {"alpha": 0.05}, "summary": ex.adacur_protocol_summary(test).to_dict("records"),
            "comparisons": ex.adacur_paired_comparisons(test, pairs=pairs).to_dict("records"),
            "seed_spread": ex.seed_spread(test).to_dict("records"), "runs": per_run, "test_rows": rows}


def test_03_summaries_and_paired_tests_re_derive_from_the_saved_per_query_records(adacur_results):
    assert _bad("03_adacur_rounds", adacur_results) == []
    found = records.rederive({"notebook": "03_adacur_rounds", "results": json.loads(json.dumps(
        adacur_results, default=_json))})
    cells = {w.cell.split("] ")[-1] for w in found if w.cell.startswith("comparisons")}
    assert {"p", "p_wilcoxon", "n_queries", "mean", "verdict"} <= cells  # the per-query test, not only its arithmetic
    assert all(w.source == "records" for w in found)


def test_03_a_tampered_per_query_record_or_summary_is_named(adacur_results):
    tampered = copy.deepcopy(adacur_results)
    run = tampered["runs"][0]
    values = records.unpack_array(run["per_query"])
    values[0] = 1.0 - values[0]
    run["per_query"] = records._pack_array(values)
    bad = _bad("03_adacur_rounds", tampered)
    assert any("value:" in line and f"split_seed={run['split_seed']}" in line for line in bad)  # the run's recall
    assert any(line.startswith("03_adacur_rounds: comparisons [") and "] mean:" in line for line in bad)
    tampered = copy.deepcopy(adacur_results)
    tampered["comparisons"][0]["p_wilcoxon"] *= 3  # a p-value no arithmetic of its row can check
    assert any("p_wilcoxon:" in line for line in _bad("03_adacur_rounds", tampered))


def test_04_summaries_and_paired_tests_re_derive_from_the_saved_per_query_records():
    from xenbench.studies import axn
    from xenbench.studies.protocol import query_splits

    M = _matrix()
    rng = np.random.default_rng(3)
    V, U = rng.standard_normal((M.shape[1], 8)), rng.standard_normal((M.shape[0], 8))
    splits = query_splits(M.shape[0], 30, 20, [0, 1], max_test=40)
    runs, dev = axn.axn_protocol_runs(M, splits, V, U, seeds=[0, 1], lambdas=[0.0, 0.5], budgets=[20], k_values=[1, 5],
                                  n_rounds=2, progress=False, device="cpu")
    per_run, rows = records.pack_runs(runs, split="split_seed")
    results = {"summary": axn.axn_protocol_summary(runs).to_dict("records"),
               "comparisons": axn.axn_paired_comparisons(runs, pairs=[("AXN, tuned λ", "AXN, λ = 0")]).to_dict("records"),
               "runs": per_run, "test_rows": rows}
    assert _bad("04_axn_lambda", results) == []
    results["summary"][0]["hi"] += 0.01
    bad = _bad("04_axn_lambda", results)
    assert len(bad) == 1 and "04_axn_lambda: summary [" in bad[0] and "] hi: committed" in bad[0]


def test_05_gains_and_paired_tests_re_derive_from_the_saved_per_query_records():
    from xenbench.studies import pefa

    rng = np.random.default_rng(5)
    frames, sweeps = [], []
    for split in ("random", "by_item"):
        for seed in (0, 1, 2):
            n = 30
            rows = rng.choice(200, n, replace=False)
            for method, k, lam, nn in (("PEFA-XS", 1, 0.5, 0), ("PEFA-XS", 10, 0.9, 0)):
                frames.append(pd.DataFrame({"method": method, "k": k, "lam": lam, "n_neighbors": nn,
                                            "query": np.arange(n), "row": rows, "seen": rng.random(n) < 0.4,
                                            "recall": rng.integers(0, 2, n).astype(float),
                                            "de_recall": rng.integers(0, 2, n).astype(float), "split": split,
                                            "seed": seed}))
                for grid_lam in (0.5, 0.9):
                    sweeps.append({"method": method, "lam": grid_lam, "k": k, "recall": 0.4 + (grid_lam == lam) / 10,
                                   "split": split, "seed": seed})
    per_query = pd.concat(frames, ignore_index=True)
    gains = pd.concat([pefa.subset_gains(g.drop(columns=["split", "seed"])).assign(split=s, seed=d)
                       for (s, d), g in per_query.groupby(["split", "seed"], sort=False)], ignore_index=True)
    sweep = pd.DataFrame(sweeps)
    chosen = pd.concat([pefa.pefa_choose_on_dev(g.drop(columns=["split", "seed"])).assign(split=s, seed=d)
                        for (s, d), g in sweep.groupby(["split", "seed"], sort=False)], ignore_index=True)
    results = {"gains": gains.to_dict("records"), "summary": pefa.across_seeds(gains).to_dict("records"),
               "comparisons": pefa.pefa_paired_comparisons(per_query).to_dict("records"),
               "sweep_dev": sweeps, "chosen": chosen.to_dict("records"),
               "per_query": records.pack_groups(per_query, ["split", "seed", "method", "k", "lam", "n_neighbors"],
                                                records.PEFA_ARRAYS)}
    assert _bad("05_pefa_lambda", results) == []
    results["chosen"][0]["lam"] = 0.7  # a setting the sweep did not choose
    assert any("chosen [" in line and "] lam:" in line for line in _bad("05_pefa_lambda", results))


def test_07_summary_best_and_comparisons_re_derive_from_the_saved_runs():
    from xenbench.studies.protocol import query_splits
    from xenbench.studies import compare
    from xenbench.studies import adacur as ex

    M = _matrix()
    splits = query_splits(M.shape[0], 30, 20, [0, 1], max_test=40)
    runs = ex.chosen_on_dev(ex.adacur_protocol_runs(M, splits, [0, 1], [20, 40], methods=["anncur", "adacur_nosplit"],
                                             k_values=[1, 10], n_rounds=2, device="cpu"))
    seconds = pd.DataFrame([{"method": m, "budget": b, "search_s": 0.001 * b} for m in runs["method"].unique()
                            for b in (20, 40)])
    summary = compare.compare_summary(runs, seconds, 0.01)
    best, comparisons = compare.best_per_budget(runs)
    per_run, rows = records.pack_runs(runs, split="split_seed")
    results = {"ce_cost": {"seconds_per_pair": 0.01}, "summary": summary.to_dict("records"),
               "best": best.to_dict("records"), "comparisons": comparisons.to_dict("records"), "runs": per_run,
               "test_rows": rows}
    assert _bad("07_compare_methods", results) == []
    results["best"][0]["best_mean"] += 0.01
    assert any("best [" in line and "best_mean" in line for line in _bad("07_compare_methods", results))


def test_unwitnessed_lists_what_a_committed_file_lacks_until_its_re_run():
    from xenbench.studies import findings

    doc = findings.load_results(findings.RESULTS_DIR / "07_compare_methods.full.results.json")
    # the committed file was written with its per-run records: only what verify does not recompute is listed
    assert records.unwitnessed(doc) == [f"not recomputed from the inputs: {records.NOT_RECOMPUTED['07_compare_methods']}"]
    doc["results"]["runs"] = [{"value": 1.0}]  # a file written before the notebooks saved per-query records
    assert "no per-run records: re-run 07" in records.unwitnessed(doc)[0]
    rank = findings.load_results(findings.RESULTS_DIR / "02_rank_cls_vs_emb.full.results.json")
    assert records.unwitnessed(rank) == []  # every grid cell, rank and skew is a witness
    large = findings.load_results(findings.RESULTS_DIR / "06_ccsa_balance.large.results.json")
    assert records.unwitnessed(large) == ["every raw record of the large run (no store witnesses for this profile)"]


# ----------------------------------------------------------------------------------------------
# the one record schema of 03, 04 and 07, and the migration of files written under the older ones
# ----------------------------------------------------------------------------------------------
def _old_04() -> dict:
    """A results document of 04 as written before the one schema (split/seed/lam, recall, n/n_a_better), bound."""
    from xenbench import provenance

    runs = [{"split": 0, "seed": s, "method": m, "budget": 50, "k": 1, "lam": lam, "recall": 0.25 + s / 8,
             "recall_se": 0.125, "n_test_queries": 4, "per_query": "0.0 0.5 0.25 1.0"}
            for s in (0, 1) for m, lam in (("AXN, tuned λ", 0.5), ("DE re-rank", float("nan")))]
    labels = [{"split": 0, "seed": 0, "method": "DE re-rank", "budget": 50, "setting": float("nan"),
               "measure": "nDCG@10", "value": 0.5, "value_se": 0.1, "dev_value": float("nan"), "n_queries": 4}]
    comp = [{"challenger": "AXN, tuned λ", "baseline": "DE re-rank", "budget": 50, "k": 1, "sanity_check": False,
             "mean": 0.1, "se": 0.05, "lo": 0.0, "hi": 0.2, "p": 0.04, "p_wilcoxon": 0.05, "n": 4, "n_a_better": 2,
             "n_b_better": 1, "run_mean": 0.1, "run_lo": 0.0, "run_hi": 0.2, "n_runs": 2, "p_holm": 0.04,
             "p_wilcoxon_holm": 0.05, "verdict": "level"}]
    sweep = [{"method": "AXN", "lam": 0.5, "budget": 50, "k": 1, "recall": 0.5, "split": 0, "seed": 0}]
    doc = {"notebook": "04_axn_lambda", "profile": "full", "provenance": {"git": {"commit": "0" * 40}},
           "results": {"runs": runs, "test_rows": {"0": "3 5 8 9"}, "label_runs": labels, "comparisons": comp,
                       "label_comparisons": copy.deepcopy(comp), "sweep_dev_first_run": sweep}}
    return provenance.bind_results(doc)


def _numbers(value) -> list[float]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def test_migration_renames_old_records_into_the_schema_without_changing_a_number():
    from xenbench import provenance

    old = _old_04()
    new, changed = records.migrate_results(old)
    assert changed
    run = new["results"]["runs"][0]
    assert list(run) == ["split_seed", "anchor_seed", "method", "budget", "k", "setting", "value", "value_se",
                         "n_queries", "per_query"]
    assert (run["setting"], run["value"], run["n_queries"]) == (0.5, 0.25, 4)
    assert set(new["results"]["label_runs"][0]) == set(records.RUN_FIELDS) - {"k", "per_query", "n_rounds"}
    for name in ("comparisons", "label_comparisons"):
        c = new["results"][name][0]
        assert list(c) == [f for f in records.COMPARISON_FIELDS if f != "measure"]
        assert (c["n_queries"], c["n_better"], c["n_worse"]) == (4, 2, 1)
    assert set(new["results"]["sweep_dev_first_run"][0]) == {"method", "lam", "budget", "k", "recall", "split_seed",
                                                             "anchor_seed"}
    # the same numbers (as a multiset; NaN compared as a string), the digest bound again and holding
    assert sorted(map(repr, _numbers(old["results"]))) == sorted(map(repr, _numbers(new["results"])))
    assert all(recorded == today for _, recorded, today in provenance.check_results_digest(new))
    # idempotent: a second migration changes nothing
    again, changed = records.migrate_results(new)
    assert not changed and again == json.loads(json.dumps(new))


def test_migration_of_03_and_07_and_refusals():
    from xenbench.errors import DataError

    run03 = {"split_seed": 0, "anchor_seed": 0, "part": "test", "method": "ANNCUR", "budget": 50, "k": 1,
             "recall": 0.5, "recall_se": 0.25, "n_anchor_items": 12, "n_rounds": float("nan"), "n_test_queries": 2,
             "per_query": "0.0 1.0", "dev_recall": 0.4}
    doc03, changed = records.migrate_results({"notebook": "03_adacur_rounds", "results": {"test_at_dev_choice": [run03]}})
    assert changed and "test_at_dev_choice" not in doc03["results"]
    [run] = doc03["results"]["runs"]
    assert list(run) == [f for f in records.RUN_FIELDS if f != "measure"]
    assert run["setting"] == 12.0 and isinstance(run["setting"], float) and run["dev_value"] == 0.4
    run07 = {"split_seed": 1, "anchor_seed": 0, "method": "DE re-rank", "budget": 25, "k": 1, "recall": 0.5,
             "recall_se": 0.25, "dev_recall": 0.4, "setting": float("nan"), "per_query": "0.0 1.0 0.5"}
    [run] = records.migrate_results({"notebook": "07_compare_methods", "results": {"runs": [run07]}})[0]["results"]["runs"]
    assert run["n_queries"] == 3 and run["value"] == 0.5 and run["dev_value"] == 0.4  # its count, from its values
    other = {"notebook": "05_pefa_lambda", "results": {"comparisons": [{"n": 3, "n_a_better": 1}]}}
    assert records.migrate_results(other) == (other, False)  # 05 keeps its own tables
    with pytest.raises(DataError, match="part 'dev'"):
        records.migrate_results({"notebook": "03_adacur_rounds", "results": {"test_at_dev_choice": [
            {**run03, "part": "dev"}]}})
    edited = _old_04()
    edited["results"]["runs"][0]["recall"] = 0.9  # edited after its run: the digest no longer holds
    with pytest.raises(DataError, match="refused to migrate: its results digest does not hold"):
        records.migrate_results(edited)


def test_the_committed_results_of_03_04_and_07_are_in_the_one_schema():
    from xenbench.studies import findings

    required_run = {"split_seed", "anchor_seed", "method", "budget", "setting", "value", "value_se", "n_queries"}
    required_comparison = {f for f in records.COMPARISON_FIELDS if f not in ("k", "measure", "se", "sanity_check")}
    for nb in ("03_adacur_rounds", "04_axn_lambda", "07_compare_methods"):
        doc = findings.load_results(findings.RESULTS_DIR / f"{nb}.full.results.json")
        assert records.migrate_results(doc)[1] is False, nb  # nothing left to migrate
        for table, cell in (("runs", "k"), ("label_runs", "measure")):
            for r in doc["results"][table]:
                assert required_run | {cell} <= set(r) <= set(records.RUN_FIELDS), (nb, table, sorted(r))
        for table, cell in (("comparisons", "k"), ("label_comparisons", "measure")):
            for r in doc["results"].get(table) or []:
                assert required_comparison | {cell} <= set(r) <= set(records.COMPARISON_FIELDS), (nb, table, sorted(r))
