"""A user's inputs to the command line written by hand (BEIR folders: ``corpus.jsonl``, ``queries.jsonl``,
``qrels/test.tsv``; not through :func:`xenbench.data.beir.save_beir`, whose reader is what the tests check), and the
check that the command line refused one with a single error line."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

WORDS = "apple river stone cloud music garden window pencil ladder candle bridge forest".split()
#: The smallest BEIR folder's rows: 4 items, 3 queries, query k judged relevant to item k.
CORPUS = [{"_id": f"d{k}", "title": f"title {k}", "text": f"text of item {k}"} for k in range(4)]
QUERIES = [{"_id": f"q{k}", "text": f"query number {k}"} for k in range(3)]


def write_beir(folder: Path, items: list[dict], queries: list[dict], qrels: Iterable[tuple[str, str, int]], *,
               bom: bool = False) -> Path:
    """``folder`` with the corpus, the queries and the test split's (query id, corpus id, grade) rows; ``bom``: each
    file starts with a UTF-8 byte-order mark, as some Windows editors write them."""
    (folder / "qrels").mkdir(parents=True)
    mark = "\ufeff" if bom else ""
    (folder / "corpus.jsonl").write_text(mark + "".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    (folder / "queries.jsonl").write_text(mark + "".join(json.dumps(r) + "\n" for r in queries), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(
        mark + "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels), encoding="utf-8")
    return folder


def smallest_beir(root: Path, *, bom: bool = False, corpus: list[dict] | None = None) -> Path:
    """``root/beir``: :data:`CORPUS` (or ``corpus``) and :data:`QUERIES`, query k relevant to item k."""
    return write_beir(root / "beir", CORPUS if corpus is None else corpus, QUERIES,
                      [(f"q{k}", f"d{k}", 1) for k in range(len(QUERIES))], bom=bom)


def word_pair_texts(n_items: int, n_queries: int, n_gold: int) -> tuple[list[dict], list[dict]]:
    """Items named by two words (``d0`` ...), each query about item ``k % n_gold``; seeded (0)."""
    rng = np.random.default_rng(0)
    names = [f"{a}{b}" for a in WORDS for b in WORDS][:n_items]
    items = [{"_id": f"d{k}", "title": n, "text": f"{n} is a {rng.choice(WORDS)} near the {rng.choice(WORDS)}"}
             for k, n in enumerate(names)]
    queries = [{"_id": f"q{k}", "text": f"we talked about {names[k % n_gold]} and the {rng.choice(WORDS)}"}
               for k in range(n_queries)]
    return items, queries


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's one ``xenbench: error:`` line on stderr (asserting there is exactly one and no traceback)."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("xenbench: error: ")]
    assert len(errors) == 1 and not any("Traceback" in line for line in err), err
    return errors[0]


def sparse_beir(folder: Path, n_items: int = 3000, n_queries: int = 240, labelled: float = 0.5,
                seed: int = 0) -> Path:
    """A BEIR folder shaped like a real corpus: ``n_items`` items, and of the ``n_queries`` queries only a share
    ``labelled`` judged, each with 1–3 relevant items (grades 1 or 2) and one judged not relevant (grade 0), as
    TREC-style qrels are; every query mentions the names of the items it is about, so a CE can find them. Seeded."""
    rng = np.random.default_rng(seed)
    names = [f"{WORDS[i % 12]}{WORDS[(i // 12) % 12]}{WORDS[(i // 144) % 12]}{i // 1728}" for i in range(n_items)]
    items = [{"_id": f"d{k}", "title": n, "text": f"{n} is a {rng.choice(WORDS)} near the {rng.choice(WORDS)}"}
             for k, n in enumerate(names)]
    queries, qrels = [], []
    for k in range(n_queries):
        about = rng.choice(n_items, size=int(rng.integers(1, 4)), replace=False)
        queries.append({"_id": f"q{k}", "text": "we talked about " + " and ".join(names[j] for j in about)})
        if rng.random() < labelled:
            qrels += [(f"q{k}", f"d{j}", int(rng.integers(1, 3))) for j in about]
            qrels.append((f"q{k}", f"d{int(rng.integers(n_items))}", 0))
    return write_beir(folder, items, queries, qrels)
