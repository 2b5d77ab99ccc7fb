"""README "Your own data, step by step", executed: a user's tiny BEIR folder and ZESHEL world through the
command line and the notebooks that take a dataset spec."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xenbench.cli import main
from xenbench.data import load_dataset
from xenbench.store import ScoreStore

pytestmark = pytest.mark.notebook

WORDS = "apple river stone cloud music garden window pencil ladder candle bridge forest".split()


def tiny_beir(root: Path) -> Path:
    """12 items, 10 queries with mention spans, a test split: a user's BEIR folder."""
    folder = root / "my-beir"
    (folder / "qrels").mkdir(parents=True)
    items = [{"_id": f"doc{k}", "title": w, "text": f"a {w} is a thing people talk about, number {k}"}
             for k, w in enumerate(WORDS)]
    queries = []
    for k in range(10):
        text = f"she saw the {WORDS[k]} yesterday"
        start = text.index(WORDS[k])
        queries.append({"_id": f"q{k}", "text": text, "mention": [start, start + len(WORDS[k])]})
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{k}\tdoc{k}\t1\n" for k in range(10)), encoding="utf-8")
    return folder


def tiny_zeshel(root: Path) -> Path:
    """One world, only mentions/test.json (the split files a user has)."""
    folder = root / "my-zeshel"
    (folder / "documents").mkdir(parents=True)
    (folder / "mentions").mkdir()
    docs = [{"document_id": f"e{k}", "title": w, "text": f"{w} is an entity of this world number {k}"}
            for k, w in enumerate(WORDS)]
    context = {"document_id": "ctx", "title": "story", "text": " ".join(f"then the {w} came" for w in WORDS)}
    tokens = context["text"].split()
    mentions = [{"mention_id": f"m{k}", "context_document_id": "ctx", "corpus": "w", "start_index": 4 * k + 2,
                 "end_index": 4 * k + 2, "text": tokens[4 * k + 2], "label_document_id": f"e{k}"}
                for k in range(len(WORDS))]
    (folder / "documents" / "w.json").write_text("".join(json.dumps(r) + "\n" for r in [*docs, context]),
                                                 encoding="utf-8")
    (folder / "mentions" / "test.json").write_text("".join(json.dumps(r) + "\n" for r in mentions), encoding="utf-8")
    return folder


def test_own_data_step_by_step(tmp_path, monkeypatch):
    monkeypatch.setenv("CI", "true")  # no progress bars in the test log
    beir, zeshel = tiny_beir(tmp_path), tiny_zeshel(tmp_path)
    beir_spec, zeshel_spec = f"beir:{beir}", f"zeshel:{zeshel}:w"
    assert len(load_dataset(zeshel_spec).queries) == len(WORDS)  # only test.json: loads

    # Step 2: an exact score matrix of your data with a bundled (or your own) CE, resumable, small blocks.
    out = tmp_path / "scores" / "cls-ce"
    assert main(["score", str(_repo() / "models" / "cls-ce"), beir_spec, "--out", str(out), "--chunk-pairs", "24"]) == 0
    store = ScoreStore.open(out)
    assert store.is_complete and store.shape == (10, 12) and store.chunks[0] == 2
    assert np.isfinite(store.to_numpy()).all()

    # Step 3: the notebooks that take a dataset spec, on both datasets; reports named after the data.
    reports = tmp_path / "reports"
    assert main(["run", "00_data", "--profile", "quick", "--out", str(reports), "-p", "dataset", beir_spec,
                 "-p", "eval_datasets", f"{beir_spec},{zeshel_spec}", "-p", "n_candidates", "5"]) == 0
    assert main(["run", "01_score_matrices", "--profile", "quick", "--out", str(reports), "-p", "dataset", zeshel_spec,
                 "-p", "n_queries", "3", "-p", "n_items", "6", "-p", "bundled_scores", ""]) == 0
    names = sorted(p.name for p in reports.glob("*.results.json"))
    assert len(names) == 2
    assert names[0].startswith("00_data.quick.beir-my-beir.") and names[1].startswith("01_score_matrices.quick.zeshel-")
    results = json.loads(next(reports.glob("00_data.quick.beir-*.results.json")).read_text(encoding="utf-8"))
    assert {r["dataset"] for r in results["results"]["baselines"]} == {"my-beir", "zeshel:w"}


def _repo() -> Path:
    return Path(__file__).resolve().parent.parent
