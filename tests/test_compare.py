"""Notebook 07's pieces (xenbench.studies.compare): every method on the same splits, costs, the Pareto front, the best
per budget, its findings, its figure, and the report's summary-first order."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from xenbench import findings
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.errors import ParameterError
from xenbench.studies.protocol import query_splits
from xenbench.metrics import topk_of_lists
from xenbench.harness import SUMMARY_TAG, summary_first
from xenbench.studies import compare, records
from xenbench.studies.setup import Setup
from xenbench.viz.plots import recall_vs_cost


# ----------------------------------------------------------------------------------------------
# a small exact matrix with texts and gold labels
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small():
    """60 queries x 80 items; M = U Vᵀ-like scores of rank 6 plus noise, the DE a noisy view of the same factors; every
    query's gold item is its CE top-1 (so PEFA's labelled training queries point where the CE does)."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((60, 6)), rng.standard_normal((80, 6))
    M = A @ B.T + 0.1 * rng.standard_normal((60, 80))
    U = A + 0.5 * rng.standard_normal(A.shape)
    V = B + 0.5 * rng.standard_normal(B.shape)
    U, V = (np.hstack([X, np.zeros((len(X), 2))]) for X in (U, V))  # d = 8: divisible by the PQ's sub-quantizers
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    items = [Item(f"i{j}", f"item {j}", f"text {j}") for j in range(80)]
    queries = [Query(f"q{r}", f"query {r}") for r in range(60)]
    gold = {f"q{r}": [f"i{int(np.argmax(M[r]))}"] for r in range(60)}
    ds = Dataset("small", items, queries, gold)
    splits = query_splits(60, 20, 10, [0, 1])
    setup = Setup(M=M, dataset=ds, items=np.arange(80), attrs={})
    return setup, splits, V, U


@pytest.fixture(scope="module")
def ran(small):
    setup, splits, V, U = small
    runs, info = compare.compare_protocol_runs(setup, splits, [0, 1], [10, 20], V=V, U=U, k_values=(1, 5), n_rounds=2,
                                               axn_lambdas=(0.0, 1.0), mf_items_per_query=10, mf_epochs=1,
                                               pefa_lambdas=(0.5, 1.0), pefa_neighbors=4, pq_bytes=2, device="cpu",
                                               progress=False)
    return runs, info


def test_every_method_runs_on_every_split_seed_budget_and_k(ran):
    runs, info = ran
    assert set(runs["method"]) == set(compare.STAGES)
    assert info["first_stages"] == ["PEFA-XL re-rank", "PEFA-XS re-rank", "PQ codes re-rank"]
    assert info["pq"]["bytes_per_item"] == 2.0  # equal bytes: 4 sub-quantizers x 4 bits (80 items < 39 x 256)
    cells = runs.groupby(["method", "budget", "k"]).size()
    seeded = cells.index.get_level_values("method").isin(["ANNCUR", "ADACUR TopK No-Split"])
    assert len(cells) == 10 * 2 * 2  # every method, budget and k
    assert (cells[seeded] == 4).all() and (cells[~seeded] == 2).all()  # 2 splits x 2 anchor seeds; seed-free: 2 splits
    assert runs["dev_value"].notna().all()
    assert list(runs.columns) == [c for c in records.RUN_FIELDS if c not in ("measure", "n_rounds")] + ["rows"]
    assert (runs["n_queries"] == runs["per_query"].map(len)).all()
    for _, r in runs.iterrows():  # every run is read on its split's test rows
        split = {s.seed: s for s in query_splits(60, 20, 10, [0, 1])}[r["split_seed"]]
        assert np.array_equal(r["rows"], split.test) and np.isclose(r["value"], r["per_query"].mean())


def test_seed_free_methods_keep_one_run_per_split_and_do_not_depend_on_the_seed(small, ran):
    runs, _ = ran
    for method, g in runs.groupby("method"):
        per_split = g.groupby(["split_seed", "budget", "k"])["value"].nunique()
        if method in ("ANNCUR", "ADACUR TopK No-Split"):
            assert (per_split > 1).any(), method  # the anchor seed changes the anchors
        else:
            assert set(g["anchor_seed"]) == {0}, method
    # the claim behind it: 03's protocol run with another anchor seed gives them the same recall
    from xenbench.studies import adacur as adacur_study

    setup, splits, V, U = small
    by_seed = adacur_study.adacur_protocol_runs(setup.M, splits[:1], [0, 1], [10],
                                                methods=("anncur_de", "adacur_de_nosplit", "de_rerank"), k_values=[1, 5],
                                                de_scores=U @ V.T, n_rounds=2, device="cpu")
    for _, g in by_seed.groupby(["method", "part", "k", "n_anchor_items"]):
        assert g["recall"].nunique() == 1


def test_pefa_at_lambda_one_is_the_de_and_its_rerank_equals_de_rerank(small):
    """PEFA's Eq. 2 with λ = 1 is the ERM alone: re-ranking its top B_CE is DE re-rank, query by query."""
    setup, splits, V, U = small
    scores, seconds = compare.first_stage_scores(setup, splits[0], V, U, depth=20, pefa_lambdas=(1.0,),
                                                 pefa_neighbors=4)
    assert set(scores) == {"PEFA-XS", "PEFA-XL"} and {"DE", "PEFA-XS", "PEFA-XL"} <= set(seconds)
    de_top = np.argsort(-(U @ V.T), axis=1, kind="stable")[:, :20]
    for name in ("PEFA-XS", "PEFA-XL"):
        D, I = scores[name][1.0]
        assert D.shape == I.shape == (60, 20)  # top-depth lists of every query, not (queries, items) rows
        np.testing.assert_array_equal(topk_of_lists(D, I, V.shape[0], 20), de_top)
    a, _ = compare._rerank_runs(setup.M, splits[0], scores["PEFA-XS"], "PEFA-XS re-rank", [10], [1, 5])
    de_lists = (np.take_along_axis(U @ V.T, de_top, axis=1), de_top)
    b, _ = compare._rerank_runs(setup.M, splits[0], {float("nan"): de_lists}, "DE re-rank", [10], [1, 5])
    for (_, x), (_, y) in zip(a.iterrows(), b.iterrows()):
        np.testing.assert_array_equal(x["per_query"], y["per_query"])


def test_pefa_is_skipped_without_labelled_training_queries(small):
    setup, splits, V, U = small
    unlabelled = Setup(M=setup.M, items=setup.items, attrs={},
                       dataset=Dataset("nolabels", setup.dataset.items, setup.dataset.queries, {}))
    scores, _ = compare.first_stage_scores(unlabelled, splits[0], V, U, depth=10)
    assert scores == {}


@pytest.mark.slow
def test_first_stages_return_lists_and_never_a_queries_by_items_array():
    """At corpus scale 07's first stages are top-``depth`` lists, (n_queries, depth), never a (n_queries, n_items)
    score array: on 3,000 queries x 5,000 items (one float64 such array: 120 MB) the first stages of a split (PEFA-XS,
    PEFA-XL, PQ codes, TF-IDF; their indices built beforehand) peak below one such array (measured: 60 MB, the
    blocks of query rows they search in; as dense score rows: 538 MB)."""
    import tracemalloc

    from xenbench.studies.setup import fitted_first_stage

    rng = np.random.default_rng(0)
    n_queries, n_items, depth = 3000, 5000, 20
    V, U = rng.standard_normal((n_items, 8)), rng.standard_normal((n_queries, 8))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    words = [f"w{j}" for j in range(500)]
    items = [Item(f"i{j}", "", " ".join(rng.choice(words, 5))) for j in range(n_items)]
    queries = [Query(f"q{r}", " ".join(rng.choice(words, 3))) for r in range(n_queries)]
    gold = {f"q{r}": [f"i{int(rng.integers(n_items))}"] for r in range(n_queries)}
    setup = Setup(M=np.zeros((1, 1)), dataset=Dataset("wide", items, queries, gold), items=np.arange(n_items),
                  attrs={})
    split = query_splits(n_queries, 200, 100, [0])[0]
    pq, _ = compare.pq_codes(V, 2)
    fitted_first_stage("tfidf", items)  # the offline index (its vocabulary) is not a first stage's search
    tracemalloc.start()
    try:
        named = compare.named_first_stages(setup, ["tfidf"], depth=depth)
        scores, _ = compare.first_stage_scores(setup, split, V, U, depth=depth, pefa_lambdas=(0.5,), pefa_neighbors=4,
                                               pq=pq, named=named)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert set(scores) == {"PEFA-XS", "PEFA-XL", "PQ", "TF-IDF"}
    for by_setting in scores.values():
        for D, I in by_setting.values():
            assert D.shape == I.shape == (n_queries, depth) and I.dtype == np.int64
    assert peak < n_queries * n_items * 8, f"peak {peak / 1e6:.0f} MB"


def test_pq_codes_take_the_bytes_asked_and_rank_by_decoded_inner_products(small):
    _, _, V, U = small
    index, info = compare.pq_codes(V, 2)
    assert info["M"] * info["nbits"] == 16 and index.sa_code_size() == 2
    D, I = index.search(np.ascontiguousarray(U, np.float32), 5)
    decoded = index.sa_decode(index.sa_encode(np.ascontiguousarray(V, np.float32)))
    np.testing.assert_allclose(D, np.take_along_axis(U @ decoded.T, I, axis=1), rtol=1e-4, atol=1e-5)
    order = topk_of_lists(D, I, V.shape[0], 5)  # how a re-ranking reads the lists: only what it found,
    for d, i, o in zip(D, I, order):  # ranked by its scores (ties: lower item)
        np.testing.assert_array_equal(o, sorted(i, key=lambda j: (-d[list(i).index(j)], j)))
    with pytest.raises(ParameterError, match="'pq_bytes'"):
        compare.pq_codes(V, 3)  # 24 bits split into sub-quantizers dividing d = 8: none of 8 or 4 bits


# ----------------------------------------------------------------------------------------------
# costs, the summary and the Pareto front
# ----------------------------------------------------------------------------------------------
def test_search_seconds_covers_every_method_and_budget(small, ran):
    setup, splits, V, U = small
    _, info = ran
    sec = compare.search_seconds(setup.M, splits[0], [10, 20], V=V, U=U, embed_seconds=0.5,
                                 first_stage_seconds=info["first_stage_seconds"], n_rounds=2, device="cpu")
    assert set(sec["method"]) == set(compare.STAGES) and len(sec) == 2 * len(compare.STAGES)
    uses_de = sec["method"].map(lambda m: compare.STAGES[m]["uses_de"])
    assert (sec.loc[uses_de, "search_s"] >= 0.5).all()  # they pay the query's DE embedding
    assert (sec.loc[~uses_de, "search_s"] < 0.5).all()


def test_summary_costs_and_deterministic_runs_count_once(ran):
    runs, _ = ran
    sec = pd.DataFrame([{"method": m, "budget": b, "search_s": 0.002} for m in compare.STAGES for b in (10, 20)])
    s = compare.compare_summary(runs, sec, 0.01)
    np.testing.assert_allclose(s["wall_ms"], 2.0 + s["budget"] * 10.0)
    assert (s["calls"] == s["budget"]).all()
    n_runs = s.set_index("method")["n_runs"]
    assert (n_runs[["ANNCUR", "ADACUR TopK No-Split"]] == 4).all() and (n_runs.drop(["ANNCUR", "ADACUR TopK No-Split"]) == 2).all()
    anncur = runs[(runs["method"] == "ANNCUR") & (runs["budget"] == 10) & (runs["k"] == 1)]
    row = s[(s["method"] == "ANNCUR") & (s["budget"] == 10) & (s["k"] == 1)].iloc[0]
    assert np.isclose(row["mean"], anncur["value"].mean()) and row["lo"] <= row["mean"] <= row["hi"]
    with pytest.raises(ParameterError, match="'ce_seconds'"):
        compare.compare_summary(runs, sec, -1.0)


def test_pareto_front_is_the_set_of_undominated_points():
    rng = np.random.default_rng(3)
    pts = pd.DataFrame({"k": rng.integers(0, 2, 200), "wall_ms": rng.integers(1, 30, 200).astype(float),
                        "mean": rng.integers(0, 30, 200) / 30})
    on = compare.pareto_front(pts)
    for _, g in pts.groupby("k"):
        front, rest = g[on[g.index]], g[~on[g.index]]
        for _, p in front.iterrows():  # no point beats a front point on both axes
            assert not ((g["wall_ms"] <= p["wall_ms"]) & (g["mean"] >= p["mean"])
                        & ((g["wall_ms"] < p["wall_ms"]) | (g["mean"] > p["mean"]))).any()
        for _, p in rest.iterrows():  # and every other point is beaten by a front point
            assert ((front["wall_ms"] <= p["wall_ms"]) & (front["mean"] >= p["mean"])).any()
    # hand-checkable: the cheapest, then only strict improvements in recall
    hand = pd.DataFrame({"k": 1, "wall_ms": [1.0, 1.0, 2.0, 3.0, 4.0], "mean": [0.2, 0.3, 0.3, 0.5, 0.5]})
    assert compare.pareto_front(hand).tolist() == [False, True, False, True, False]
    # costs within rel_tol are level: a 0.1 ms cheaper search at the same B_CE does not buy a place on the front
    near = pd.DataFrame({"k": 1, "wall_ms": [386.0, 386.1, 772.0], "mean": [0.30, 0.60, 0.70]})
    assert compare.pareto_front(near).tolist() == [False, True, True]
    assert compare.pareto_front(near, rel_tol=0.0).tolist() == [True, True, True]
    with pytest.raises(ParameterError, match="'rel_tol'"):
        compare.pareto_front(near, rel_tol=1.5)


# ----------------------------------------------------------------------------------------------
# the best per budget, named on dev, tested on test
# ----------------------------------------------------------------------------------------------
def _synthetic_runs(shift_test: float = 0.0) -> pd.DataFrame:
    """Methods A, B, C on 3 splits x 2 seeds of 40 test queries: A = B + 0.4 to 0.5 on every query, C = A exactly; dev
    recall ranks A first. ``shift_test`` lowers A's test recall (a dev choice that does not hold on test)."""
    rng = np.random.default_rng(1)
    rows = []
    for split in range(3):
        test = np.arange(40) + 100 * split
        base, gap = rng.uniform(0, 0.5, 40), rng.uniform(0.4, 0.5, 40)
        for seed in range(2):
            for method, values, dev in (("A", base + gap - shift_test * rng.uniform(0.9, 1.1, 40), 0.9), ("B", base, 0.5), ("C", base + gap, 0.8)):
                rows.append({"split_seed": split, "anchor_seed": seed, "method": method, "budget": 10, "k": 1,
                             "value": values.mean(), "value_se": 0.01, "dev_value": dev, "setting": np.nan,
                             "rows": test, "per_query": values})
    return pd.DataFrame(rows)


def test_best_is_named_on_dev_and_compared_on_test():
    table, comps = compare.best_per_budget(_synthetic_runs())
    row = table.iloc[0]
    assert row["best"] == "A" and row["below"] == ["B"] and row["within_noise"] == ["C"] and row["above"] == []
    assert set(comps["baseline"]) == {"B", "C"} and (comps["challenger"] == "A").all()
    assert np.isclose(row["best_mean"], _synthetic_runs().query("method == 'A'")["value"].mean())

    flipped = compare.best_per_budget(_synthetic_runs(shift_test=0.8))[0].iloc[0]
    assert flipped["best"] == "A" and set(flipped["above"]) == {"B", "C"}  # dev's choice, honestly reported


# ----------------------------------------------------------------------------------------------
# findings and figure
# ----------------------------------------------------------------------------------------------
def _results(runs: pd.DataFrame) -> dict:
    sec = pd.DataFrame([{"method": m, "budget": b, "search_s": 0.001} for m in compare.STAGES for b in (10, 20)])
    s = compare.compare_summary(runs, sec, 0.004)
    s["pareto_wall"] = compare.pareto_front(s)
    best, comps = compare.best_per_budget(runs)
    return {"protocol": {"ce": "cls-ce", "n_items": 80, "dataset": "small", "n_dev_queries": 10, "n_splits": 2,
                         "n_anchor_seeds": 2, "n_test_queries": 30},
            "ce_cost": {"seconds_per_pair": 0.004, "source": "given"},
            "summary": s.to_dict("records"), "best": best.to_dict("records"), "comparisons": comps.to_dict("records")}


def test_findings_state_the_best_cells_gains_and_front(ran):
    runs, _ = ran
    results = _results(runs)
    text = "\n".join(findings.lines("07_compare_methods", results))
    best = pd.DataFrame(results["best"])
    for _, r in best.iterrows():
        assert f"**B_CE = {r['budget']}, k = {r['k']}**: best on dev **{r['best']}**, test recall {r['best_mean']:.3f}" in text
    s = pd.DataFrame(results["summary"])
    g = findings.compare.stage_gains(s)
    cell = s[(s["budget"] == 20) & (s["k"] == 5)]
    de = cell.loc[cell["method"] == "DE re-rank", "mean"].iloc[0]
    ce_best = cell[cell["stage"] == "CE stage"]["mean"].max()
    assert np.isclose(g.query("budget == 20 and k == 5")["ce_gain"].iloc[0], ce_best - de)
    assert "One CE call costs 4 ms (given)" in text
    assert text.count("Pareto front on wall time per query") == 2


def test_recall_vs_cost_draws_one_line_per_method_and_k_and_the_front(ran):
    runs, _ = ran
    s = pd.DataFrame(_results(runs)["summary"])
    fig = recall_vs_cost(s, cost="wall_ms", front="pareto_wall")
    lines = [t for t in fig.data if t.name != "Pareto front"]
    assert len(lines) == 10 * 2  # methods x k facets
    fronts = [t for t in fig.data if t.name == "Pareto front"]
    assert sum(len(t.x) for t in fronts) == int(s["pareto_wall"].sum())
    with pytest.raises(ParameterError, match="'cost' parameter of recall_vs_cost"):
        recall_vs_cost(s, cost="euros")
    with pytest.raises(ParameterError, match="'summary' parameter of recall_vs_cost"):
        recall_vs_cost(s.drop(columns="lo"))


def test_summary_first_repeats_the_tagged_outputs_after_the_title():
    html = '<div id="0f0e0d0c-0b0a-4909-8807-060504030201" class="plotly-graph-div"></div><script>' \
           'Plotly.newPlot("0f0e0d0c-0b0a-4909-8807-060504030201", [])</script>'
    nb = {"cells": [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "# Title"},
                    {"cell_type": "code", "id": "b", "metadata": {}, "source": "x = 1", "outputs": []},
                    {"cell_type": "code", "id": "c", "metadata": {"tags": [SUMMARY_TAG]}, "source": "fig",
                     "outputs": [{"output_type": "display_data", "data": {"text/html": html}}]}]}
    out = summary_first(nb)
    assert [c["id"] for c in nb["cells"]] == ["a", "b", "c"]  # the notebook itself is unchanged
    assert [c["source"] for c in out["cells"]][0] == "# Title" and out["cells"][2]["id"] == "b"
    copy = out["cells"][1]
    assert copy["id"] not in {"a", "b", "c"} and SUMMARY_TAG in copy["source"]
    new_html = copy["outputs"][0]["data"]["text/html"]
    assert "0f0e0d0c" not in new_html and new_html.count(new_html.split('"')[1]) == 2  # renamed, consistently
    bundle = '<script type="text/javascript">/**\n* plotly.js v3.0.1\n*/ window.Plotly = {};</script>'
    nb["cells"][2]["outputs"][0]["data"]["text/html"] = bundle + html  # the first figure carries plotly.js
    out = summary_first(nb)
    assert out["cells"][1]["outputs"][0]["data"]["text/html"].startswith(bundle)  # before the first figure drawn
    assert "plotly.js" not in out["cells"][3]["outputs"][0]["data"]["text/html"]  # and only once per page
    untagged = {"cells": nb["cells"][:2]}
    assert summary_first(untagged) is untagged


def test_de_query_time_is_measured_without_the_embedding_cache(small, monkeypatch):
    """U may come from the DE's disk cache (:func:`xenbench.studies.setup.de_embeddings`); the time per query must
    not: it is measured on uncached passes (a one-query warm-up, then the timed queries)."""
    from xenbench.models.retrievers import DualEncoder

    setup, _, _, _ = small
    seen = []
    encode = DualEncoder.encode
    monkeypatch.setattr(DualEncoder, "encode", lambda self, texts, **kw: seen.append((self.cache_dir, len(texts)))
                        or encode(self, texts, **kw))
    from xenbench.studies.setup import de_embeddings

    V, U = de_embeddings(setup, device="cpu")
    seconds = compare.query_embedding_seconds(setup, n_timed=8, device="cpu")
    assert V.shape == (80, 384) and U.shape == (60, 384) and seconds > 0
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, rtol=1e-5)
    assert [n for _, n in seen] == [80, 60, 1, 8]  # items, every query, then the warm-up and the timed pass
    assert seen[1][0] is not None and seen[2][0] is None and seen[3][0] is None  # only the timing skips the cache


# ----------------------------------------------------------------------------------------------
# the second currency and the first-stage axis
# ----------------------------------------------------------------------------------------------
def test_the_second_currency_and_more_first_stages(small, ran, tmp_path):
    from xenbench.data.trec import write_trec_run

    setup, splits, V, U = small
    # a run file ranking every query by its exact scores: its re-rank finds the CE's top-k at every budget
    order = np.argsort(-setup.M, axis=1, kind="stable")
    path = write_trec_run(tmp_path / "oracle.trec", {q.id: [f"i{j}" for j in order[r]]
                                                      for r, q in enumerate(setup.dataset.queries)}, tag="oracle")
    runs, info = compare.compare_protocol_runs(setup, splits, [0, 1], [10, 20], V=V, U=U, k_values=(1, 5), n_rounds=2,
                                               axn_lambdas=(0.0, 1.0), mf_items_per_query=10, mf_epochs=1,
                                               pefa_lambdas=(0.5, 1.0), pefa_neighbors=4, pq_bytes=2, device="cpu",
                                               progress=False, first_stages=["bm25", f"run:{path}"],
                                               labels=setup.grades())
    plain, _ = ran
    same = runs[runs["method"].isin(set(plain["method"]))].reset_index(drop=True)
    pd.testing.assert_frame_equal(plain.drop(columns=["rows", "per_query"]), same.drop(columns=["rows", "per_query"]))
    assert info["first_stages"] == ["BM25 re-rank", "PEFA-XL re-rank", "PEFA-XS re-rank", "PQ codes re-rank",
                                    "run oracle re-rank"]
    assert (runs.loc[runs["method"] == "run oracle re-rank", "value"] == 1.0).all()
    labels = info["label_runs"]
    assert set(labels["method"]) == set(runs["method"])
    # the labels are each query's CE top-1 (the fixture's gold): the oracle's lists have it first
    oracle = labels[(labels["method"] == "run oracle re-rank") & (labels["measure"] == "Success@1")]
    assert (oracle["value"] == 1.0).all() and (oracle["anchor_seed"] == 0).all()
    seconds = pd.DataFrame([{"method": m, "budget": b, "search_s": 0.001} for m in set(runs["method"])
                            for b in (10, 20)])
    summary = compare.compare_summary(labels, seconds, 0.01, cell="measure")
    assert {"measure", "value", "value_se"} <= set(summary.columns) and "k" not in summary.columns
    assert set(summary.loc[summary["method"] == "BM25 re-rank", "stage"]) == {"first stage: BM25"}
    front = compare.pareto_front(summary, cost="calls", by=("measure",))
    nd = summary[front & (summary["measure"] == "nDCG@10")]
    assert "run oracle re-rank" in set(nd["method"])  # nothing beats the CE's own ranking against these labels
    best, comp = compare.best_per_budget(labels[labels["measure"] == "nDCG@10"], cell="measure")
    assert list(best["budget"]) == [10, 20] and set(best["measure"]) == {"nDCG@10"}
    assert set(comp["measure"]) == {"nDCG@10"} and len(comp) == 2 * (labels["method"].nunique() - 1)
    fig = recall_vs_cost(summary[summary["measure"] == "nDCG@10"], cost="calls", front=None, facet="measure",
                         value_name="nDCG@10")
    assert fig.layout.yaxis.title.text == "nDCG@10 (test)"
