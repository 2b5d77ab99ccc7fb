"""One registry, open to yours (xenbench.studies.methods): a method of your own and GAR (pyterrier-adaptive) run in
notebook 07's protocol beside the others, in both currencies, with their TREC runs; refusals are one line."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xenbench.data.datasets import Dataset, Item, Query
from xenbench.errors import ParameterError
from xenbench.studies.protocol import query_splits
from xenbench.metrics import BudgetCounter, topk_indices
from xenbench.studies import compare
from xenbench.studies.labels import export_runs
from xenbench.studies.methods import REGISTRY, SplitState, extra_entry, load_method
from xenbench.studies.setup import Setup

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the example methods: a user's module
import _example_methods as ex  # noqa: E402


@pytest.fixture(scope="module")
def small():
    """60 queries x 80 items, as tests/test_compare.py's: M of rank 6 plus noise, the DE a noisy view of it."""
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((60, 6)), rng.standard_normal((80, 6))
    M = A @ B.T + 0.1 * rng.standard_normal((60, 80))
    U = A + 0.5 * rng.standard_normal(A.shape)
    V = B + 0.5 * rng.standard_normal(B.shape)
    U, V = (np.hstack([X, np.zeros((len(X), 2))]) for X in (U, V))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    items = [Item(f"i{j}", f"item {j}", f"text {j}") for j in range(80)]
    queries = [Query(f"q{r}", f"query {r}") for r in range(60)]
    gold = {f"q{r}": [f"i{int(np.argmax(M[r]))}"] for r in range(60)}
    setup = Setup(M=M, dataset=Dataset("small", items, queries, gold), items=np.arange(80), attrs={})
    return setup, query_splits(60, 20, 10, [0, 1]), V, U


@pytest.fixture(scope="module")
def ran(small):
    setup, splits, V, U = small
    return compare.compare_protocol_runs(
        setup, splits, [0, 1], [10, 20], V=V, U=U, k_values=(1, 5), n_rounds=2, axn_lambdas=(0.0, 1.0),
        mf_items_per_query=10, mf_epochs=1, pefa_lambdas=(0.5,), pefa_neighbors=4, pq_bytes=None, device="cpu",
        progress=False, labels=setup.grades(), graph_neighbors=6,
        extra_methods=[ex.ReverseRerank, "_example_methods:RandomItems", "gar", "gar_anncur"])


@pytest.mark.parametrize("spec, why", [
    ("_example_methods.ReverseRerank", "no ':' between module and class"),
    ("no_such_module_xb:X", "module 'no_such_module_xb' does not import"),
    ("_example_methods:Nope", "'_example_methods' has no 'Nope'"),
    ("_example_methods:not_a_class", "it names a int, not a class"),
    ("_example_methods:NoState", "NoState.fit takes 0 required argument(s), not 1"),
    ("_example_methods:NeedsArgs", "NeedsArgs() needs 1 argument(s)"),
])
def test_a_method_that_cannot_run_is_refused_in_one_line_before_any_work(spec, why):
    with pytest.raises(ParameterError, match="extra_methods") as err:
        load_method(spec)
    assert why in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ParameterError, match="a registry key"):
        extra_entry("no_such_key")
    with pytest.raises(ParameterError, match="none of them one that 07 runs anyway"):
        compare.compare_protocol_runs(None, [], [0], [10], V=np.eye(3), U=np.eye(3), extra_methods=["anncur"])
    assert load_method("_example_methods:ReverseRerank") is ex.ReverseRerank


def test_the_notebook_refuses_a_bad_extra_method_before_the_kernel():
    from xenbench.harness.preflight import check_extra_methods
    from xenbench.harness.spec import as_spec

    spec = as_spec("07_compare_methods")
    check_extra_methods(spec, {"extra_methods": ["gar", "_example_methods:ReverseRerank"]})
    with pytest.raises(ParameterError, match="NoState.fit takes 0") as err:
        check_extra_methods(spec, {"extra_methods": ["_example_methods:NoState"]})
    assert "07_compare_methods" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("cls, why", [(ex.Greedy, "stays within its budget of 10 CE calls"),
                                      (ex.OutsideCorpus, "items of the corpus, in [0, 80)")])
def test_a_method_over_budget_or_outside_the_corpus_is_refused_at_run_time(small, cls, why):
    setup, splits, V, U = small
    with pytest.raises(ParameterError, match="extra_methods") as err:
        compare.compare_protocol_runs(setup, splits[:1], [0], [10], V=V, U=U, k_values=(1,), n_rounds=2,
                                      axn_lambdas=(0.0,), mf_epochs=0, pefa_lambdas=(0.5,), pq_bytes=None,
                                      device="cpu", progress=False, extra_methods=[cls])
    assert why in str(err.value) and "\n" not in str(err.value)


def test_your_method_runs_beside_the_others_in_both_currencies_with_its_trec_runs(small, ran, tmp_path):
    setup, splits, V, U = small
    runs, info = ran
    assert {"reversed DE top-B", "random items", "GAR DE", "GAR ANNCUR"} <= set(runs["method"])
    # GAR ANNCUR's k_i is chosen on dev from the budget's own grid (B_CE = 10: 1, 2, 5, 8; 20: 2, 5, 10, 15)
    chosen = runs[runs["method"] == "GAR ANNCUR"].groupby("budget")["setting"].agg(set)
    assert chosen[10] <= {1.0, 2.0, 5.0, 8.0} and chosen[20] <= {2.0, 5.0, 10.0, 15.0}
    # the reverse re-rank scores the same B_CE items as DE re-rank: the same per-query recall in every run
    rev = runs[runs["method"] == "reversed DE top-B"].sort_values(["split_seed", "budget", "k"])
    de = runs[runs["method"] == "DE re-rank"].sort_values(["split_seed", "budget", "k"])
    assert len(rev) == len(de) == 2 * 2 * 2  # splits x budgets x k, one run per split
    for a, b in zip(rev["per_query"], de["per_query"]):
        np.testing.assert_array_equal(a, b)
    # a random draw: one run per anchor seed, and the seeds draw differently
    rnd = runs[runs["method"] == "random items"]
    assert sorted(set(rnd["anchor_seed"])) == [0, 1] and len(rnd) == 2 * 2 * 2 * 2
    assert not np.array_equal(*(rnd[(rnd["split_seed"] == 0) & (rnd["budget"] == 20) & (rnd["k"] == 5)
                                    & (rnd["anchor_seed"] == s)]["per_query"].iloc[0] for s in (0, 1)))
    seconds = compare.search_seconds(setup.M, splits[0], [10, 20], V=V, U=U, embed_seconds=0.0,
                                     first_stage_seconds=info["first_stage_seconds"], n_rounds=2, seed=0,
                                     device="cpu", extra=info["extra"], graph=info["graph"])
    assert {"reversed DE top-B", "random items", "GAR DE"} <= set(seconds["method"])
    summary = compare.compare_summary(runs, seconds, 0.001)
    assert set(summary.loc[summary["method"] == "reversed DE top-B", "stage"]) == {"CE stage"}
    assert summary["wall_ms"].notna().all()
    for cost in ("wall_ms", "calls"):  # on the fronts' input; the reverse re-rank ties DE re-rank's recall
        front = compare.pareto_front(summary, cost=cost)
        assert len(front) == len(summary)
    best, comp = compare.best_per_budget(runs)
    assert {"reversed DE top-B", "random items", "GAR DE"} <= set(comp["baseline"]) | set(comp["challenger"])
    labels = info["label_runs"]
    assert {"reversed DE top-B", "random items", "GAR DE"} <= set(labels["method"])
    nd = labels[labels["measure"] == "nDCG@10"]
    label_best, label_comp = compare.best_per_budget(nd, cell="measure")
    assert "reversed DE top-B" in set(label_comp["baseline"]) | set(label_comp["challenger"])
    r, d = (nd[nd["method"] == m].sort_values(["split_seed", "budget"])["value"].to_numpy()
            for m in ("reversed DE top-B", "DE re-rank"))
    np.testing.assert_array_equal(r, d)  # the same items by the same exact scores: the same ranked lists
    exported = export_runs(tmp_path / "runs", labels, setup.dataset, setup.items)
    files = pd.DataFrame(exported["files"])
    assert {"reversed DE top-B", "random items", "GAR DE"} <= set(files["method"])
    first = files[files["method"] == "reversed DE top-B"].iloc[0]
    lines = (tmp_path / first["file"]).read_text().splitlines() if not str(first["file"]).endswith(".gz") else []
    assert lines and all(line.split()[2].startswith("i") for line in lines)


def test_gar_stays_in_budget_and_matches_pyterrier_adaptive_used_directly(small, tmp_path):
    """xenbench's GAR (a corpus graph written from the DE's item neighbours, the CE through the counter) against
    pyterrier_adaptive.GAR given a graph built by the package's own CorpusGraph.from_retriever and a scorer reading M."""
    import pyterrier as pt
    from pyterrier_adaptive import GAR, CorpusGraph

    from xenbench.methods.gar import item_graph, item_neighbors

    setup, splits, V, U = small
    M, rows, budget, n_nb = setup.M, splits[0].test, 20, 6
    order = topk_indices(U[rows] @ V.T, budget)
    state = SplitState(M[splits[0].anchor], rows, {"de_scores": order}, 2, (0.5,), 1.0, 0, None,
                       graph=item_graph(item_neighbors(V, n_nb)))
    counter = BudgetCounter(M[rows], budget)
    D, I = REGISTRY["gar"].variants(state, budget)[0].search(counter, budget)
    assert (counter.calls == budget).all()

    S = V @ V.T

    class Neighbours(pt.Transformer):  # a retriever of items by the DE's inner products (the item itself first)
        def transform(self, df):
            out = []
            for qid in df["qid"]:
                top = np.argsort(-S[int(qid)], kind="stable")[:n_nb + 1]
                out += [{"qid": qid, "docno": str(j), "score": float(S[int(qid), j])} for j in top]
            return pd.DataFrame(out)

    graph = CorpusGraph.from_retriever(Neighbours(), [{"docno": str(j), "text": ""} for j in range(V.shape[0])],
                                       tmp_path / "graph", k=n_nb)

    class Exact(pt.Transformer):
        def transform(self, df):
            return df.assign(score=[float(M[rows[int(q)], int(d)]) for q, d in zip(df["qid"], df["docno"])])

    initial = pd.DataFrame([{"qid": str(r), "query": "", "docno": str(j), "score": -float(c), "rank": c}
                            for r in range(len(rows)) for c, j in enumerate(order[r])])
    direct = GAR(Exact(), graph, num_results=budget, batch_size=16, backfill=False)(initial)
    for r in range(len(rows)):
        g = direct[direct["qid"] == str(r)]
        assert len(g) == budget
        want_items = sorted(g["docno"].astype(int), key=lambda j: (-M[rows[r], j], j))
        assert I[r].tolist() == want_items, r
        np.testing.assert_allclose(D[r], M[rows[r], want_items].astype(np.float32))
    # GAR reaches past the first stage: some query scores an item outside the DE's top B_CE
    assert any(set(I[r]) - set(order[r]) for r in range(len(rows)))


@pytest.mark.parametrize("budget", [3, 7, 20])
def test_registry_baselines_of_04_are_the_direct_calls(budget):
    """04's baselines come from the registry: the same lists and CE calls as AdaCur No-Split (N_r capped at B_CE) and
    rerank_baseline called directly, as 04 called them before."""
    from xenbench.methods.adacur import AdaCur, SearchOptions, TopK
    from xenbench.methods.baselines import rerank_baseline
    from xenbench.studies.methods import SPLIT_FRACTIONS

    rng = np.random.default_rng(1)
    M, de = rng.normal(size=(50, 120)), rng.normal(size=(50, 120))
    anchor, test = np.arange(20), np.arange(30, 50)
    order = np.argsort(-de, axis=1, kind="stable")[test]
    options = SearchOptions(device="cpu")
    state = SplitState(M[anchor], test, {"de_scores": order}, min(5, budget), SPLIT_FRACTIONS, 1.0, 11, options)
    res = AdaCur(budget, n_rounds=min(5, budget), sampler=TopK(), seed=11, options=options).fit(M[anchor]).run(
        M[test], query_ids=test)
    counter = BudgetCounter(M[test], budget)
    _, I = REGISTRY["adacur_nosplit"].variants(state, budget)[0].search(counter, budget)
    np.testing.assert_array_equal(I, res.I)
    np.testing.assert_array_equal(counter.calls, res.calls)
    direct = BudgetCounter(M[test], budget)
    _, I_direct = rerank_baseline(direct, order, budget)
    counter = BudgetCounter(M[test], budget)
    _, I = REGISTRY["de_rerank"].variants(state, budget)[0].search(counter, budget)
    np.testing.assert_array_equal(I, I_direct)
    np.testing.assert_array_equal(counter.calls, direct.calls)


def test_gar_seeded_by_anncur_is_anncur_without_expansion_and_spends_exactly_its_budget(small):
    """GAR ANNCUR: ANNCUR's ŝ from k_i anchors is GAR's initial ranking. When the first batch (16) holds every call
    left (B_CE − k_i <= 16) GAR never reaches the graph, so it is ANNCUR with free anchors, item for item; past that
    the graph adds items ŝ did not rank, and every query spends exactly B_CE calls on distinct items."""
    from xenbench.methods.baselines import anncur_with_budget
    from xenbench.methods.cur import AnnCur
    from xenbench.methods.gar import item_graph, item_neighbors
    from xenbench.studies.methods import SPLIT_FRACTIONS

    setup, splits, V, U = small
    M, sp = setup.M, splits[0]
    graph = item_graph(item_neighbors(V, 6))
    for budget in (20, 40):
        state = SplitState(M[sp.anchor], sp.test, {}, 2, SPLIT_FRACTIONS, 1.0, 3, None, graph=graph)
        for variant in REGISTRY["gar_anncur"].variants(state, budget):
            k_i = int(variant.n_anchor_items)
            counter = BudgetCounter(M[sp.test], budget)
            D, I = variant.search(counter, budget)
            assert (counter.calls == budget).all() and all(len(set(row)) == budget for row in I)
            np.testing.assert_array_equal(D, M[sp.test][np.arange(len(I))[:, None], I].astype(np.float32))
            _, I_cur = anncur_with_budget(AnnCur(k_i, seed=3).fit(M[sp.anchor]), BudgetCounter(M[sp.test], budget),
                                          budget)
            if budget - k_i <= 16:
                np.testing.assert_array_equal(I, I_cur)
            elif budget == 40 and k_i == 4:
                assert any(set(I[r]) != set(I_cur[r]) for r in range(len(I)))  # the graph found other items
