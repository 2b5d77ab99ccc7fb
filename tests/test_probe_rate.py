"""The speed probe: timed batches after a warm-up, the estimate printed as a range, the probe's cost bounded.

No timing in these tests: a fake scorer (the scorer protocol) advances a fake clock that the probe reads, by a
controlled cost per pair, so every rate below is known exactly.
"""
from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import xenbench.models.probe as probe
from xenbench.cli import main
from xenbench.data.datasets import Item, Query
from xenbench.models.scoring import score_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import smallest_beir  # noqa: E402

QUERIES = [Query(f"q{k}", f"query {k}") for k in range(40)]
ITEMS = [Item(f"d{k}", f"item {k}", f"text {k}") for k in range(100)]


class SleepyScorer:
    """Scores ``len(query) + len(item)``, and 'sleeps' ``cost(pair index)`` seconds per pair on a fake clock."""

    name, fingerprint = "sleepy", None

    def __init__(self, cost):
        self.cost, self.now, self.pairs = cost, 0.0, 0

    def clock(self) -> float:
        return self.now

    def score(self, query_texts, item_texts):
        for _ in query_texts:
            self.now += self.cost(self.pairs)
            self.pairs += 1
        return np.array([len(q) + len(i) for q, i in zip(query_texts, item_texts)], dtype=np.float32)


def _sleepy(monkeypatch, cost) -> SleepyScorer:
    scorer = SleepyScorer(cost)
    monkeypatch.setattr(probe, "_clock", scorer.clock)
    return scorer


def test_the_range_brackets_the_known_rates_and_leaves_out_the_warm_up(monkeypatch):
    """A warm-up batch 10x slower (lazy initialization), then batches alternating 2 ms and 4 ms per pair: the range is
    exactly 250-500 pairs/s, and the scores are the scorer's own, for every probe pair."""
    batch = probe.PROBE_BATCH_QUERIES * probe.PROBE_ITEMS  # 64 pairs

    def cost(k):
        return 0.02 if k < batch else (0.002 if (k // batch) % 2 else 0.004)

    scorer = _sleepy(monkeypatch, cost)
    measured = probe.probe_rate(scorer, QUERIES, ITEMS, seed=1, device="cpu")
    n_q = probe.PROBE_PAIRS // probe.PROBE_ITEMS
    assert measured.scores.shape == (n_q, probe.PROBE_ITEMS) and scorer.pairs == probe.PROBE_PAIRS  # no pair twice
    assert len(measured.batch_rates) == n_q // probe.PROBE_BATCH_QUERIES - 1  # the warm-up is not timed
    np.testing.assert_allclose(measured.rate_range, (250.0, 500.0), rtol=1e-9)
    np.testing.assert_allclose(measured.seconds(30_000), (60.0, 120.0), rtol=1e-9)
    expect = score_matrix(scorer, [QUERIES[r] for r in measured.rows], [ITEMS[c] for c in measured.cols],
                          device="cpu", progress=False).scores
    np.testing.assert_array_equal(measured.scores, expect)
    line = probe.scoring_line("sleepy", 100, 300, 30_000, measured)
    assert line == ("scoring 100 queries x 300 items = 30,000 pairs with sleepy takes about 60 s-2.0 min at "
                    "250-500 pairs/s measured here on cpu")


def test_a_slow_ce_stops_the_probe_after_its_time_once_enough_batches_are_timed(monkeypatch):
    """At 1 s per pair a full probe would take 512 s: it stops once PROBE_SECONDS have passed with MIN_TIMED_BATCHES
    timed (64 s each here), so the probe costs the warm-up and three batches."""
    scorer = _sleepy(monkeypatch, lambda k: 1.0)
    measured = probe.probe_rate(scorer, QUERIES, ITEMS, device="cpu")
    assert len(measured.batch_rates) == probe.MIN_TIMED_BATCHES
    assert scorer.pairs == (probe.MIN_TIMED_BATCHES + 1) * probe.PROBE_BATCH_QUERIES * probe.PROBE_ITEMS
    assert measured.scores.shape[0] == len(measured.rows) == (probe.MIN_TIMED_BATCHES + 1) * 2
    assert measured.rate_range == (1.0, 1.0)


def test_a_single_batch_is_scored_once_to_warm_up_and_once_timed(monkeypatch):
    scorer = _sleepy(monkeypatch, lambda k: 0.5 if k < 4 else 0.01)
    measured = probe.probe_rate(scorer, QUERIES[:1], ITEMS[:4], device="cpu")
    assert measured.scores.shape == (1, 4) and scorer.pairs == 8 and measured.rate_range == pytest.approx((100, 100))


def test_the_probe_keeps_the_labels_of_its_queries_in_its_sample():
    """With labels, every probe query has a relevant item among the probe's items (the CE check can judge them)."""
    gold = {f"q{k}": [f"d{(7 * k) % 100}"] for k in range(0, 40, 3)}  # 14 labelled queries
    rows, cols = probe._probe_sample(QUERIES, ITEMS, probe.PROBE_PAIRS, 0, gold)
    kept = {ITEMS[c].id for c in cols}
    assert len(cols) == probe.PROBE_ITEMS == len(set(cols.tolist()))
    assert len(rows) == 14 and all(set(gold[QUERIES[r].id]) <= kept for r in rows)
    plain_rows, plain_cols = probe._probe_sample(QUERIES, ITEMS, probe.PROBE_PAIRS, 0, None)
    assert len(plain_rows) == 16 and len(plain_cols) == 32


@pytest.mark.parametrize(("low", "high", "text"), [
    (45, 45, "45 s"), (30, 50, "30-50 s"), (50, 138, "50 s-2.3 min"), (90, 144, "1.5-2.4 min"),
    (6000, 9000, "1.7-2.5 h"),
])
def test_duration_range(low, high, text):
    assert probe.duration_range(low, high) == text


@pytest.mark.filterwarnings("ignore:untrained-cls:UserWarning")
def test_xenbench_score_untrained_cls_prints_its_estimate_as_a_range(tmp_path, caplog):
    """``xenbench score untrained-cls`` plans like a CE folder: the pairs and the time range, before it scores."""
    with caplog.at_level(logging.INFO, logger="xenbench.cli"):
        assert main(["score", "untrained-cls", f"beir:{smallest_beir(tmp_path)}", "--out", str(tmp_path / "s"),
                     "--device", "cpu"]) == 0
    lines = [r.getMessage() for r in caplog.records if "pairs with" in r.getMessage()]
    assert len(lines) == 1 and re.fullmatch(r"scoring 3 queries x 4 items = 12 pairs with untrained-cls takes about "
                                            r"\d+ s(?:-\d+ s)? at \d+(?:-\d+)? pairs/s measured here on cpu",
                                            lines[0]), lines
