"""The CE check: its statistics against brute force, and its thresholds calibrated on trained and untrained heads.

Calibration: the bundled trained CEs (their noun.cognition score stores) are never flagged, at the probe's size and
up to the whole matrix; untrained heads (``untrained-cls``, the trained cls-ce with its head re-drawn) are flagged by
each test alone (the labels, and the label-free query dependence) on noun.cognition and on a BEIR folder of another
shape built here from the bundled texts (5,464 items of three held-out domains, queries joining 1-3
examples, so 1-3 relevant items each), where the trained cls-ce is not flagged. The trained cls-ce with its head
re-drawn is flagged exactly when it ranks the relevant items at or below chance: the others rank as the trained head
does (some seeds: the same rankings, per-query Spearman >= 0.9 with its scores), which no check of the scores can
tell from training. ``pytest -s`` prints the table that docs/USAGE.md ("Bounds and checks") quotes.
"""
from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from xenbench.data.sources import load_dataset
from xenbench.data.store import ScoreStore
from xenbench.models.ce_check import (MIN_FIRST_STAGE_AGREEMENT, MIN_QUERY_DEPENDENCE, P_MAX, check_ce,
                                      labels_of_sample, query_dependence, sample_evidence, success_at_k, success_k)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import write_beir  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TRAINED = ("cls-ce", "emb-ce", "emb-ce-marker")


# ------------------------------------------------------------------------------------------------
# The statistics, by hand and against brute force
# ------------------------------------------------------------------------------------------------


def test_chance_and_p_value_equal_brute_force_over_every_ranking():
    """On 6 items, k = 2: the chance of each query (r = 1 and r = 2 relevant) is the share of the 720 orders that put
    a relevant item in the top 2, and the p-value is the share of joint orders hitting at least as many queries."""
    scores = np.array([[5.0, 4, 3, 2, 1, 0], [0.0, 1, 2, 3, 4, 5], [5.0, 4, 3, 2, 1, 0]])
    rel = np.zeros((3, 6), dtype=bool)
    rel[0, 0] = True  # hit
    rel[1, [0, 1]] = True  # missed (ranked last)
    rel[2, [1, 4]] = True  # hit
    success, chance, p_value, n = success_at_k(scores, rel, 2)
    orders = list(itertools.permutations(range(6)))
    p_hit = [np.mean([bool(set(o[:2]) & set(np.flatnonzero(r))) for o in orders]) for r in rel]
    assert p_hit == pytest.approx([1 / 3, 1 - 6 / 15, 1 - 6 / 15])
    assert (success, n) == (2 / 3, 3) and chance == pytest.approx(np.mean(p_hit), abs=1e-12)
    tail = sum(math.prod(p if h else 1 - p for p, h in zip(p_hit, hits))
               for hits in itertools.product([0, 1], repeat=3) if sum(hits) >= 2)
    assert p_value == pytest.approx(tail, abs=1e-12)


def test_ties_count_against_the_ce():
    """Constant scores put no relevant item in the top k (all n items tie for first): Success@k 0, never 1."""
    rel = np.eye(20, dtype=bool)
    success, chance, p_value, _ = success_at_k(np.ones((20, 20)), rel, 2)
    assert success == 0.0 and chance == pytest.approx(0.1) and p_value == 1.0
    assert query_dependence(np.ones((20, 20))) == 0.0


def test_query_dependence_tells_a_query_blind_ce_from_one_that_reads_the_query():
    rng = np.random.default_rng(0)
    items, offsets = rng.normal(size=120), rng.normal(size=(100, 1))
    blind = offsets + items + 0.1 * rng.normal(size=(100, 120))  # an offset per query + the same order for all
    reading = offsets + 0.3 * items + rng.normal(size=(100, 120))  # mostly each query's own order
    assert query_dependence(blind) < 0.05 and query_dependence(reading) > 0.6
    assert query_dependence(blind, seed=1) == pytest.approx(query_dependence(blind), abs=0.01)  # seeds agree
    warning = check_ce(blind, "my-ce").warning()
    assert warning.startswith("the CE my-ce does not read the query on 100 queries x 120 items: its rankings barely "
                              "depend on the query (query dependence 0.0")
    assert warning.endswith("Conclusions drawn from its scores are not to be trusted")
    assert check_ce(reading, "my-ce").warning() is None
    assert check_ce(blind[:7], "my-ce").warning() is None  # fewer than MIN_QUERIES: not judged


def test_the_label_test_flags_chance_level_and_a_ce_far_below_the_first_stage():
    rng = np.random.default_rng(1)
    rel = np.zeros((200, 50), dtype=bool)
    rel[np.arange(200), rng.integers(0, 50, 200)] = True
    noise = rng.normal(size=(200, 50))
    good = noise + 5 * rel
    weak = noise + 0.5 * rel  # significantly above chance (Success@5 0.23 vs 0.10), far below the first stage (1.00)
    assert check_ce(good, "ce", relevant=rel, first_stage=good).warning() is None
    chance_level = check_ce(noise, "ce", relevant=rel)
    assert chance_level.p_value >= P_MAX and "it does not beat chance on the labels (Success@5" in \
        chance_level.warning()
    below = check_ce(weak, "ce", relevant=rel, first_stage=good + 10 * rel)
    assert below.p_value < P_MAX and "it gains less than 25% of the first stage's gain over chance (Success@5 0.23 " \
        "on the 200 queries with a relevant item in the sample, chance 0.10 (p = 2.3e-08); BM25 on the same sample " \
        "1.00)" in below.warning()
    assert check_ce(noise, "ce", relevant=rel[:, :0].repeat(50, axis=1)).n_labelled == 0  # no labels: not judged


def test_relevance_matrix_and_sample_evidence():
    from xenbench.data.datasets import Item, Query

    items = [Item("a", "apple", "a red fruit"), Item("b", "bread", "baked dough"), Item("c", "cheese", "milk curd")]
    queries = [Query("q1", "a red apple"), Query("q2", "what is rye")]
    gold = {"q1": ["a", "z"], "q2": ["z"]}  # z is not in the sample
    assert labels_of_sample(gold, ["q1", "q2"], ["a", "b", "c"]).tolist() == [[True, False, False], [False] * 3]
    evidence = sample_evidence(gold, queries, items)
    assert evidence["first_stage"].shape == (2, 3) and evidence["first_stage"][0].argmax() == 0  # BM25 finds apple
    unlabelled = sample_evidence({"q2": ["z"]}, queries, items)
    assert unlabelled["relevant"] is None and np.array_equal(unlabelled["first_stage"], evidence["first_stage"])


# ------------------------------------------------------------------------------------------------
# Calibration
# ------------------------------------------------------------------------------------------------


def labelled_sample(n_queries: int, gold: dict, query_ids: list[str], item_ids: list[str], n_items: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of a sample that keeps labels: ``n_queries`` labelled queries, their relevant items and a
    seeded draw of the others, ``n_items`` columns in all."""
    rng = np.random.default_rng(seed)
    col = {i: c for c, i in enumerate(item_ids)}
    labelled = [r for r, q in enumerate(query_ids) if gold.get(q)]
    rows = np.sort(rng.choice(labelled, min(n_queries, len(labelled)), replace=False))
    rel = list(dict.fromkeys(col[g] for r in rows for g in gold[query_ids[r]]))[:n_items]
    others = np.setdiff1d(np.arange(len(item_ids)), rel)
    cols = np.concatenate([rel, rng.choice(others, n_items - len(rel), replace=False)]).astype(np.int64)
    return rows, np.sort(cols)


def _row(data: str, ce: str, scores, relevant, first_stage) -> dict:
    full = check_ce(scores, ce, relevant=relevant, first_stage=first_stage)
    row = {"data": data, "ce": ce, "shape": f"{scores.shape[0]}x{scores.shape[1]}",
           "first_stage_agreement": round(full.first_stage_agreement, 3), "agreement_t": round(full.agreement_t, 1),
           "query_dependence": round(full.query_dependence, 3), f"success@{full.k}": round(full.success, 2),
           "chance": round(full.chance, 3), "p": float(f"{full.p_value:.2g}"), "bm25": round(full.first_stage, 2),
           "flagged": full.flagged}
    print(json.dumps(row))
    return row


def test_the_bundled_trained_ces_are_not_flagged_on_noun_cognition_at_any_size():
    """Each trained CE's store, in label-keeping samples from the probe's size (16 x 32) to 100 x 300 and in plain
    seeded samples of 100 x 100 (few labels: the label-free tests decide), three seeds each, and the whole matrix: not
    flagged, and above both label-free thresholds."""
    from xenbench.sampling import sample_rows

    ds = load_dataset("wordnet-el:noun.cognition")
    for ce in TRAINED:
        store = ScoreStore.open(REPO / "data" / "scores" / "noun.cognition" / ce)
        M, q_ids, i_ids = store.to_numpy(), list(store.attrs["query_ids"]), list(store.attrs["item_ids"])
        for (nq, ni), seed in itertools.product([(16, 32), (24, 64), (50, 160), (100, 300), (100, 100)], range(3)):
            if ni == nq == 100:  # plain
                rows = sample_rows(len(q_ids), nq, seed, kind="queries")
                cols = sample_rows(len(i_ids), ni, seed, kind="items")
            else:
                rows, cols = labelled_sample(nq, ds.gold, q_ids, i_ids, ni, seed)
            evidence = sample_evidence(ds.gold, [ds.queries[ds.query_index[q_ids[r]]] for r in rows],
                                       [ds.items[ds.item_index[i_ids[c]]] for c in cols])
            row = _row("noun.cognition", ce, M[np.ix_(rows, cols)], **evidence)
            assert not row["flagged"] and row["query_dependence"] >= MIN_QUERY_DEPENDENCE, row
            assert row["first_stage_agreement"] >= MIN_FIRST_STAGE_AGREEMENT, row
        whole = check_ce(M, ce, relevant=labels_of_sample(ds.gold, q_ids, i_ids))
        assert not whole.flagged and whole.query_dependence >= MIN_QUERY_DEPENDENCE, whole


def mixed_beir(root: Path, n_queries: int = 400) -> Path:
    """A BEIR folder of another shape from the bundled texts: the items of verb.contact, verb.cognition and noun.food
    (5,464, verbs and nouns mixed), queries that join 1-3 example sentences of the verb domains with "; ", each
    relevant to the synsets of its examples (1-3 items). Seeded (0)."""
    items, examples = [], []
    for domain in ("verb.contact", "verb.cognition", "noun.food"):
        ds = load_dataset(f"wordnet-el:{domain}")
        items += [{"_id": i.id, "title": i.title, "text": i.text} for i in ds.items]
        examples += [(q.text, ds.gold[q.id][0]) for q in ds.queries if domain.startswith("verb")]
    rng = np.random.default_rng(0)
    order, start, queries, qrels = rng.permutation(len(examples)), 0, [], []
    for n in range(n_queries):
        parts = [examples[j] for j in order[start:start + int(rng.integers(1, 4))]]
        start += len(parts)
        queries.append({"_id": f"q{n}", "text": "; ".join(text for text, _ in parts)})
        qrels += [(f"q{n}", g, 1) for g in dict.fromkeys(g for _, g in parts)]
    return write_beir(root / "mixed", items, queries, qrels)


def _scores_and_cls_states(ce, queries, items):
    """The CE's scores of ``queries`` x ``items`` and the states its [CLS] head reads, one row per pair in the scores'
    order: a re-drawn head is a new linear map of the same states (scores = states @ w)."""
    import torch

    from xenbench.models.scoring import score_matrix

    seen = []
    hook = ce.model.classifier.register_forward_hook(lambda m, inputs, out: seen.append((inputs[0], out.ravel())))
    with torch.no_grad():
        scores = score_matrix(ce, queries, items, device="cpu", progress=False).scores
    hook.remove()
    states, outs = torch.cat([s for s, _ in seen]).double(), torch.cat([o for _, o in seen]).double()
    where = torch.cdist(outs[:, None], torch.tensor(scores, dtype=torch.float64).reshape(-1, 1)).argmin(dim=1)
    ordered = torch.zeros_like(states)
    ordered[where] = states  # the engine sorts pairs by length: back to the scores' order
    head = ce.model.classifier
    weight, bias = head.weight.detach().double().ravel(), head.bias.detach().double()
    assert np.allclose((ordered @ weight + bias).numpy(), scores.ravel(), atol=1e-4)
    return scores, ordered.numpy()


def _by_labels(check) -> bool:
    """Whether the label test failed (the others aside)."""
    return any(f.startswith(("it does not beat chance", "it gains less")) for f in check.failures)


@pytest.mark.slow  # scores 4 x 1,536 pairs with MiniLM-L6 CEs on the CPU: 3-4 min on 2 loaded cores
def test_untrained_heads_are_flagged_by_each_test_on_two_corpora_and_the_trained_ce_is_not(tmp_path):
    """On label-keeping samples of 24 queries x 64 items of noun.cognition and of the mixed BEIR folder, and at the
    probe's size (the first 16 queries, their relevant items, 32 items in all):

    * the trained cls-ce passes the label test and the label-free test;
    * ``untrained-cls`` (the pretrained MiniLM under a random head) and 11 more random heads on the same backbone
      (seeds 1-11, drawn as transformers initializes a head) fail each test alone;
    * the trained cls-ce with its head re-drawn (seeds 0-11): its trained layers put relevance in the [CLS] state, so
      a random head ranks the relevant items first or last by the sign it happens to draw. Those that rank them last
      (Success@k 0) fail each test alone; those that rank them first pass the label test, as they should (Success@6
      0.54-1.00); the label-free test may flag the weakest of them (seed 3 on the mixed folder, 0.54 against BM25's
      0.71: first-stage agreement 0.10, under 2 standard errors on 24 queries).

    Why no check can flag every re-drawn head (issue 53 asked for it): the trained layers collapse the state the head
    reads onto one direction (its first principal component holds >= 90% of the variance: 0.934 on noun.cognition,
    0.957 on mixed), so a random head is, up to sign and an affine map, the trained head. Some seeds rank each
    query's items as the trained CE does (mean per-query Spearman >= 0.9 with its scores: seeds 0, 7, 9 on
    noun.cognition; 0, 4, 6, 7, 9 on mixed): their rankings are the trained CE's, and a ranking is all the check (and
    every method here) reads. Only the scale and offset of their scores differ, and those are no evidence of training
    (a CE with a sigmoid activation scores in [0, 1]). Such heads are asserted to pass, the others to be flagged
    exactly when they rank the relevant items at or below chance.
    """
    import torch
    from scipy.stats import spearmanr

    from xenbench.models.crossencoder import CEConfig
    from xenbench.models.loading import build_cross_encoder, load_cross_encoder

    corpora = {"noun.cognition": load_dataset("wordnet-el:noun.cognition"),
               "mixed BEIR": load_dataset(f"beir:{mixed_beir(tmp_path)}")}
    assert len(corpora["mixed BEIR"].items) >= 3000
    assert {len(g) for g in corpora["mixed BEIR"].gold.values()} == {1, 2, 3}
    ces = {"cls-ce": lambda: load_cross_encoder(REPO / "models" / "cls-ce"),
           "untrained-cls": lambda: build_cross_encoder(CEConfig(kind="cls"), seed=0)}
    redrawn_verdicts, copies = set(), set()
    for (data, ds), (name, build) in itertools.product(corpora.items(), ces.items()):
        rows, cols = labelled_sample(24, ds.gold, ds.query_ids, ds.item_ids, 64, 0)
        queries, items = [ds.queries[r] for r in rows], [ds.items[c] for c in cols]
        scores, states = _scores_and_cls_states(build(), queries, items)
        evidence = sample_evidence(ds.gold, queries, items)
        rel, bm25 = evidence["relevant"], evidence["first_stage"]
        keep = np.flatnonzero(rel[:16].any(axis=0))  # the probe's size
        small = np.sort(np.concatenate([keep, np.setdiff1d(np.arange(64), keep)[: 32 - len(keep)]]))
        heads = {name: scores}
        for seed in range(12):  # transformers' initialization of a head: normal(0, 0.02), bias 0
            w = torch.randn(states.shape[1], generator=torch.Generator().manual_seed(seed)).numpy() * 0.02
            heads[f"{name}, head re-drawn (seed {seed})"] = (states @ w).reshape(scores.shape)
        if name == "cls-ce":  # the state a head reads, after training: nearly one direction
            centred = states - states.mean(axis=0)
            variance = np.linalg.svd(centred, compute_uv=False) ** 2
            print(json.dumps({"data": data, "trained [CLS] state: first component's share": round(
                float(variance[0] / variance.sum()), 3)}))
            assert variance[0] / variance.sum() >= 0.9
        for head, s in heads.items():
            row = _row(data, head, s, rel, bm25)
            # how alike each query's ranking is to the trained CE's (for a head re-drawn on the trained layers)
            like_trained = float(np.mean([spearmanr(s[q], scores[q])[0] for q in range(len(s))]))
            if name == "cls-ce":
                print(json.dumps({"data": data, "ce": head, "per-query Spearman with the trained head": round(
                    like_trained, 3)}))
            _row(data + " (probe size)", head, s[:16][:, small], rel[:16][:, small], bm25[:16][:, small])
            verdicts = {  # each test alone: the labels without a first stage, the first stage without labels
                "labels": _by_labels(check_ce(s, head, relevant=rel)),
                "no labels": check_ce(s, head, first_stage=bm25).flagged,
                "probe, labels": _by_labels(check_ce(s[:16][:, small], head, relevant=rel[:16][:, small])),
                "probe, no labels": check_ce(s[:16][:, small], head, first_stage=bm25[:16][:, small]).flagged,
            }
            if head == "cls-ce":
                assert not any(verdicts.values()) and not row["flagged"], (row, verdicts)
            elif name == "untrained-cls":
                assert all(verdicts.values()), (row, verdicts)
            else:  # a re-drawn head on the trained layers: one ranking the relevant items last fails every test
                last = row[f"success@{success_k(64)}"] <= row["chance"]
                assert verdicts["labels"] == verdicts["probe, labels"] == last, (row, verdicts)
                if last:
                    assert all(verdicts.values()), (row, verdicts)
                else:  # not flagged: it beats chance on the labels, as the trained CE does
                    assert row["p"] < P_MAX and not row["flagged"], row
                if like_trained >= 0.9:  # the trained CE's rankings: nothing the check reads tells them apart
                    assert not last and not row["flagged"], (row, like_trained)
                    copies.add((data, head))
                redrawn_verdicts.add(last)
    assert redrawn_verdicts == {True, False}  # both signs were drawn
    assert {data for data, _ in copies} == set(corpora)  # on both corpora some re-drawn heads rank as trained


def test_a_corpus_scale_sample_is_judged_on_its_relevant_items_and_a_seeded_bounded_fill():
    from types import SimpleNamespace

    from xenbench.models.ce_check import MAX_JUDGED_ITEMS, judged_items

    items = [SimpleNamespace(id=f"d{j}") for j in range(20_000)]
    queries = [SimpleNamespace(id=f"q{a}") for a in range(300)]
    gold = {f"q{a}": [f"d{(37 * a + b) % 20_000}" for b in range(1 + a % 3)] for a in range(300)}
    cols = judged_items(gold, queries, items, seed=3)
    relevant = {int(g[1:]) for gs in gold.values() for g in gs}
    assert len(cols) == MAX_JUDGED_ITEMS and relevant <= set(cols.tolist())  # every relevant item kept
    assert np.all(np.diff(cols) > 0)  # column order, no repeats
    np.testing.assert_array_equal(cols, judged_items(gold, queries, items, seed=3))  # seeded
    assert not np.array_equal(cols, judged_items(gold, queries, items, seed=4))
    np.testing.assert_array_equal(judged_items(gold, queries, items[:3000]), np.arange(3000))  # small: all of it
    few = judged_items(gold, queries, items, max_items=100)  # relevant items alone exceed the bound: all kept
    assert set(few.tolist()) == relevant
