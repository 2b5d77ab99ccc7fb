"""A user's inputs to the command line written by hand: BEIR folders (``corpus.jsonl``, ``queries.jsonl``,
``qrels/test.tsv``), not through :func:`xenbench.data.beir.save_beir`, whose reader is what the tests check."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

WORDS = "apple river stone cloud music garden window pencil ladder candle bridge forest".split()


def write_beir(folder: Path, items: list[dict], queries: list[dict], qrels: Iterable[tuple[str, str, int]]) -> Path:
    """``folder`` with the corpus, the queries and the test split's (query id, corpus id, grade) rows."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels), encoding="utf-8")
    return folder


def word_pair_texts(n_items: int, n_queries: int, n_gold: int) -> tuple[list[dict], list[dict]]:
    """Items named by two words (``d0`` ...), each query about item ``k % n_gold``; seeded (0)."""
    rng = np.random.default_rng(0)
    names = [f"{a}{b}" for a in WORDS for b in WORDS][:n_items]
    items = [{"_id": f"d{k}", "title": n, "text": f"{n} is a {rng.choice(WORDS)} near the {rng.choice(WORDS)}"}
             for k, n in enumerate(names)]
    queries = [{"_id": f"q{k}", "text": f"we talked about {names[k % n_gold]} and the {rng.choice(WORDS)}"}
               for k in range(n_queries)]
    return items, queries
