"""docs/USAGE.md "Your own data, step by step", executed: a user's tiny BEIR folder and ZESHEL world through the
command line and the notebooks that take a dataset spec."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from xenbench import findings
from xenbench.cli import main
from xenbench.data.sources import load_dataset
from xenbench.data.store import ScoreStore

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared test helpers
from _cli_inputs import WORDS, word_pair_texts, write_beir  # noqa: E402

pytestmark = pytest.mark.notebook


def tiny_beir(root: Path) -> Path:
    """12 items, 10 queries with mention spans, a test split: a user's BEIR folder."""
    items = [{"_id": f"doc{k}", "title": w, "text": f"a {w} is a thing people talk about, number {k}"}
             for k, w in enumerate(WORDS)]
    queries = []
    for k in range(10):
        text = f"she saw the {WORDS[k]} yesterday"
        start = text.index(WORDS[k])
        queries.append({"_id": f"q{k}", "text": text, "mention": [start, start + len(WORDS[k])]})
    return write_beir(root / "my-beir", items, queries, [(f"q{k}", f"doc{k}", 1) for k in range(10)])


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


def small_beir(root: Path, n_items: int = 40, n_queries: int = 36, n_gold: int = 12) -> Path:
    """A user's BEIR folder big enough for the ADACUR/AXN protocols: every query names one of the first ``n_gold``
    items (so items have several queries, as PEFA's in-domain split needs)."""
    items, queries = word_pair_texts(n_items, n_queries, n_gold)
    return write_beir(root / "small-beir", items, queries, [(f"q{k}", f"d{k % n_gold}", 1) for k in range(n_queries)])


def test_adacur_and_axn_notebooks_score_your_data_on_demand(tmp_path, monkeypatch):
    """03 and 04 with `model`: no precomputed matrix; the CE scores a seeded sample once (cached by model + texts)."""
    monkeypatch.setenv("CI", "true")
    spec, model = f"beir:{small_beir(tmp_path)}", str(_repo() / "models" / "cls-ce")
    reports = tmp_path / "reports"
    common = ["--out", str(reports), "-p", "dataset", spec, "-p", "model", model, "-p", "max_queries", "34",
              "-p", "max_items", "null", "-p", "max_test_queries", "null", "-p", "k_values", "[1, 5]",
              "-p", "n_rounds", "2", "-p", "split_seeds", "[0, 1]"]
    assert main(["run", "04_axn_lambda", *common, "-p", "n_anchor_queries", "14", "-p", "n_dev_queries", "8",
                 "-p", "budgets", "[10, 20]", "-p", "first_round_seeds", "[0, 1]", "-p", "mf_items_per_query", "10",
                 "-p", "mf_epochs", "1"]) == 0
    cached = list((Path(__import__("os").environ["XENBENCH_CACHE"]) / "scores").iterdir())
    assert len(cached) == 1 and ScoreStore.open(cached[0]).shape == (34, 40)  # the sample, not the whole data
    assert main(["run", "03_adacur_rounds", *common, "-p", "n_anchor_queries", "14", "-p", "n_dev_queries", "8",
                 "-p", "budgets", "[10, 20]", "-p", "focus_budgets", "[10, 20]", "-p", "anchor_seeds", "[0, 1]",
                 "-p", "rounds_grid", "[1, 2]", "-p", "latency_queries", "2"]) == 0
    assert len(list(cached[0].parent.iterdir())) == 1  # 03 reused 04's scores: same model, same sample
    for name in ("04_axn_lambda", "03_adacur_rounds"):
        results = json.loads(next(reports.glob(f"{name}.quick.beir-small-beir.cls-ce.*results.json"))
                             .read_text(encoding="utf-8"))
        assert results["results"]["params"]["model"] == model


def small_zeshel(root: Path, n_entities: int = 40, n_mentions: int = 36) -> Path:
    """A ZESHEL world big enough for the protocols, with only mentions/test.json. Each entity's page is its name, "near"
    and the names of the next ones (mention k sits on page k mod n_entities): pages of a few tokens, so that a CE scores
    the world in seconds (a nine-word lead on every page made the four tests that score these worlds 73 of 367 s
    longer)."""
    folder = root / "small-zeshel"
    (folder / "documents").mkdir(parents=True)
    (folder / "mentions").mkdir()
    names = [f"{a}{b}" for a in WORDS for b in WORDS][:n_entities]
    slots = -(-n_mentions // n_entities)  # mentions per page
    lead = "near"
    first = 1 + len(lead.split())  # token of a page's first mentioned name (after its own name and the lead)
    docs = []
    for k, name in enumerate(names):
        mentioned = " and ".join(names[(k + 1 + s) % n_entities] for s in range(slots))
        docs.append({"document_id": f"e{k}", "title": name, "text": f"{name} {lead} {mentioned}"})
    mentions = []
    for k in range(n_mentions):
        page, slot = k % n_entities, k // n_entities
        target, at = (page + 1 + slot) % n_entities, first + 2 * slot  # names are joined by "and"
        mentions.append({"mention_id": f"m{k}", "context_document_id": f"e{page}", "corpus": "w", "start_index": at,
                         "end_index": at, "text": names[target], "label_document_id": f"e{target}"})
    (folder / "documents" / "w.json").write_text("".join(json.dumps(r) + "\n" for r in docs), encoding="utf-8")
    (folder / "mentions" / "test.json").write_text("".join(json.dumps(r) + "\n" for r in mentions), encoding="utf-8")
    return folder


def tiny_store_and_corpus_runs(scores: Path, corpus: str) -> dict[str, list[str]]:
    """Settings sized for the tiny folders: 02 on the stores in ``scores``, 06 on the ``corpus`` spec (>= 144 items:
    faiss's OPQ trains on at least d rows). The BEIR and ZESHEL tests run the same protocol."""
    return {
        "02_rank_cls_vs_emb": ["-p", "scores_dir", str(scores), "-p", "k_q_values", "[5, 10]", "-p", "k_i_values",
                               "[5, 10]", "-p", "n_test", "10", "-p", "budget", "20", "-p", "k", "5", "-p", "m", "10",
                               "-p", "max_queries", "null"],
        "06_ccsa_balance": ["-p", "dataset", corpus, "-p", "n_chunks", "3", "-p", "chunk_size", "4", "-p", "batch_size",
                            "20", "-p", "batch_sizes", "[10, 20]", "-p", "steps", "5", "-p", "k", "5", "-p", "m", "10",
                            "-p", "nprobes", "[1, 2]", "-p", "shortlist", "20", "-p", "binary_bits", "8",
                            "-p", "n_eval_queries", "20", "-p", "seeds", "[0]"],
    }


def test_every_other_notebook_runs_on_your_data(tmp_path, monkeypatch):
    """05 and 06 on a user's BEIR folder; 04 on a ZESHEL world (scored on demand). 02 runs on stores that step 2
    scored on a BEIR folder in tests/test_first_hour.py (test_02_runs_on_your_stores_and_its_report_names_the_ces_and_
    the_data) and on a ZESHEL world below (test_02_compares_the_paper_layout_emb_ce_on_your_mentions): one kernel and
    two scorings fewer than a third 02 run here."""
    monkeypatch.setenv("CI", "true")
    beir, zeshel = f"beir:{small_beir(tmp_path)}", f"zeshel:{small_zeshel(tmp_path)}:w@test"
    larger = f"beir:{small_beir(tmp_path / 'larger', n_items=144, n_queries=260)}"  # faiss's OPQ trains on >= d rows
    assert len(load_dataset(zeshel).queries) == 36
    reports = tmp_path / "reports"
    runs = {
        "06_ccsa_balance": tiny_store_and_corpus_runs(tmp_path / "scores", larger)["06_ccsa_balance"],
        "05_pefa_lambda": ["-p", "datasets", f"[{beir}]", "-p", "splits", "[random]", "-p", "k_values", "[1, 5]",
                           "-p", "n_neighbors", "[4]", "-p", "n_seeds", "1"],
        "04_axn_lambda": ["-p", "dataset", zeshel, "-p", "model", str(_repo() / "models" / "cls-ce"),
                          "-p", "max_items", "null", "-p", "max_test_queries", "null", "-p", "k_values", "[1, 5]",
                          "-p", "n_rounds", "2", "-p", "split_seeds", "[0]", "-p", "n_anchor_queries", "14",
                          "-p", "n_dev_queries", "8", "-p", "budgets", "[10]", "-p", "first_round_seeds", "[0]",
                          "-p", "mf_items_per_query", "10", "-p", "mf_epochs", "1"],
    }
    for name, params in runs.items():
        assert main(["run", name, "--out", str(reports), *params]) == 0, name
        assert len(list(reports.glob(f"{name}.quick.*.results.json"))) == 1, name  # named after the data


def test_02_compares_the_paper_layout_emb_ce_on_your_mentions(tmp_path, monkeypatch):
    """emb-ce-marker joins 02 when its store is in scores_dir, and the findings speak of each [EMB]-CE. This is 02's
    run on a ZESHEL world (with tests/test_first_hour.py's on a BEIR folder's stores: 02 on both formats)."""
    monkeypatch.setenv("CI", "true")
    zeshel, scores, reports = f"zeshel:{small_zeshel(tmp_path)}:w@test", tmp_path / "scores", tmp_path / "reports"
    for ce in ("cls-ce", "emb-ce", "emb-ce-marker"):
        assert main(["score", str(_repo() / "models" / ce), zeshel, "--out", str(scores / ce)]) == 0
    assert main(["run", "02_rank_cls_vs_emb", "--out", str(reports),
                 *tiny_store_and_corpus_runs(scores, "")["02_rank_cls_vs_emb"]]) == 0
    [path] = reports.glob("02_rank_cls_vs_emb.quick.*.results.json")
    results = json.loads(path.read_text(encoding="utf-8"))["results"]
    assert results["ces"] == ["cls-ce", "emb-ce", "emb-ce-marker"]
    assert results["layouts"]["emb-ce-marker"] == {"kind": "emb", "pooling": "markers", "scale": None}
    lines = findings.lines("02_rank_cls_vs_emb", results)
    for emb_ce in ("emb-ce", "emb-ce-marker"):
        assert any(line.startswith(f"ANNCUR's rank({emb_ce}) ≪ rank(cls-ce)") for line in lines), emb_ce


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("03_adacur_rounds", ["-p", "k_values", "[1, 100]"], r"'k_values' parameter of notebook 03_adacur_rounds must "
                                                             r"be ints each <= the 40 items of its data \(dataset"),
        ("03_adacur_rounds", ["-p", "budgets", "[10, 50]"], r"'budgets' .* <= the 40 items"),
        ("04_axn_lambda", ["-p", "k_values", "[1, 41]"], r"'k_values' parameter of notebook 04_axn_lambda .* 40 items"),
        ("04_axn_lambda", ["-p", "n_anchor_queries", "35"], r"'n_anchor_queries' .* <= the 34 queries .*max_queries 34\). Got 35"),
        ("05_pefa_lambda", ["-p", "k_values", "[1, 64]"], r"'k_values' .* <= the 40 items"),
        ("06_ccsa_balance", ["-p", "m", "50"], r"'m' parameter of notebook 06_ccsa_balance must be an int <= the 40"),
    ],
)
def test_sizes_are_checked_against_your_data_before_the_kernel_starts(tmp_path, monkeypatch, capsys, name, params,
                                                                     message):
    """k values and budgets larger than the data fail at once, naming the parameter and the data's size, and
    nothing is written (no kernel, no staging folder)."""
    monkeypatch.setenv("CI", "true")
    beir = f"beir:{small_beir(tmp_path)}"
    fits = {  # every other bounded parameter within the 40 items / 34 queries
        "03_adacur_rounds": ["-p", "n_anchor_queries", "14", "-p", "n_dev_queries", "8", "-p", "budgets", "[10, 20]",
                             "-p", "focus_budgets", "[10, 20]"],
        "04_axn_lambda": ["-p", "n_anchor_queries", "14", "-p", "n_dev_queries", "8", "-p", "budgets", "[10, 20]",
                          "-p", "mf_items_per_query", "10"],
        "05_pefa_lambda": ["-p", "datasets", f"[{beir}]"],
        "06_ccsa_balance": ["-p", "dataset", beir, "-p", "k", "5"],
    }[name]
    if name in ("03_adacur_rounds", "04_axn_lambda"):
        fits += ["-p", "dataset", beir, "-p", "model", str(_repo() / "models" / "cls-ce"), "-p", "max_queries", "34",
                 "-p", "max_items", "null"]
    reports = tmp_path / "reports"
    assert main(["run", name, "--out", str(reports), *fits, *params]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not reports.exists() or not any(reports.rglob("*"))


def test_a_store_notebook_checks_sizes_against_the_store(tmp_path):
    """02 reads its sizes from the first store's shape (capped by max_queries)."""
    from xenbench import harness as xh
    from xenbench.errors import ParameterError

    scores = tmp_path / "scores"
    beir = f"beir:{small_beir(tmp_path, n_items=25, n_queries=30)}"
    for ce in ("cls-ce", "emb-ce"):
        assert main(["score", "tfidf", beir, "--out", str(scores / ce)]) == 0
    values = {**xh.profile_values("02_rank_cls_vs_emb"), "scores_dir": str(scores), "max_queries": None,
              "k_q_values": [5, 10], "k_i_values": [5, 10], "n_test": 10, "budget": 20, "k": 5, "m": 10}
    assert xh.check_sizes("02_rank_cls_vs_emb", values) == {"queries": 30, "items": 25}
    assert xh.data_sizes("02_rank_cls_vs_emb", values) == {"queries": 30, "items": 25}
    with pytest.raises(ParameterError, match=r"'k_i_values' parameter of notebook 02_rank_cls_vs_emb must be ints "
                                             r"each <= the 25 items of its data \(store .*scores/cls-ce, "
                                             r"max_queries None\). Got \[5, 30\] instead."):
        xh.check_sizes("02_rank_cls_vs_emb", {**values, "k_i_values": [5, 30]})
