"""Every ``xenbench`` subcommand in-process (``xenbench.cli.main``): a happy path on tiny inputs and one error.

The heavy paths are covered elsewhere and only wired here: ``run`` (tests/test_own_data.py runs notebooks),
``sweep`` (tests/test_sweep.py), ``score`` with a CE (tests/test_own_data.py, tests/test_bad_inputs.py has
the malformed inputs), ``findings`` (tests/test_findings.py); ``train-ce`` and ``eval-ce`` call stand-ins
for the training and evaluation functions, so these tests check the command line, not the models.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xenbench.cli import main
from xenbench.data.wordnet import DEFAULT_WORDNET_DIR


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("xenbench: error: "), err
    return err


def _usage_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


# -- data --------------------------------------------------------------------------------------------------

def test_data_list(capsys):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "noun.Tops" in out and "domain" in out.splitlines()[0]
    assert "the following arguments are required: data_cmd" in _usage_error(["data"], capsys)


@pytest.mark.skipif(not (Path(DEFAULT_WORDNET_DIR) / "data.verb").is_file(), reason="needs WordNet 3.0 files")
def test_data_build_wordnet_one_domain(tmp_path, capsys):
    out = tmp_path / "wn"
    assert main(["data", "build-wordnet", "--out", str(out), "--domain", "verb.weather"]) == 0
    assert "verb.weather" in capsys.readouterr().out
    assert (out / "domains.tsv").is_file() and (out / "verb.weather" / "corpus.jsonl").is_file()
    # byte-identical to the bundled copy of that domain
    bundled = Path(__file__).resolve().parent.parent / "data" / "wordnet-el" / "verb.weather" / "corpus.jsonl"
    assert (out / "verb.weather" / "corpus.jsonl").read_bytes() == bundled.read_bytes()


def test_data_build_wordnet_without_wordnet_files(tmp_path, capsys):
    assert main(["data", "build-wordnet", "--wordnet-dir", str(tmp_path / "none"), "--out", str(tmp_path / "wn"),
                 "--domain", "verb.weather"]) == 2
    assert str(tmp_path / "none") in _error(capsys)


def test_data_check_counts_and_resolves_without_embedding(tmp_path, capsys, monkeypatch):
    """The first-run "load it" step: opens the folder as every command does and prints counts and ids, in seconds
    (before, the README's step embedded every item with the DE: 61 s on a small corpus)."""
    import xenbench.models.retrievers as retrievers

    monkeypatch.setattr(retrievers, "DualEncoder", None)  # anything that embedded would fail here
    folder = tmp_path / "mine"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{k}", "title": f"t{k}", "text": "x"}) + "\n"
                                                 for k in range(5)), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{k}", "text": "y"}) + "\n" for k in range(3)),
                                          encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t1\nq0\td2\t1\nq2\td4\t1\n",
                                               encoding="utf-8")
    assert main(["data", "check", f"beir:{folder}"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"beir:{folder}: readable",
        "  items            5  ids 'd0' ... 'd4'",
        "  queries          3  ids 'q0' ... 'q2'",
        "  gold             3  pairs (query, relevant item) for 2 queries, every id resolved",
        "  grades           3  judged pairs: grade 1: 3",
        "  grade<=0         0  pairs judged not relevant (of queries with a relevant item; the others cannot be evaluated "
        "and are left out)",
        "  splits   test 2",
    ]
    # graded qrels (as TREC-style BEIR sets have): each grade counted, grade 0 judged not relevant
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t2\nq0\td2\t1\nq0\td3\t0\n"
                                               "q1\td0\t0\nq1\td4\t0\nq2\td4\t1\n", encoding="utf-8")
    assert main(["data", "check", f"beir:{folder}"]) == 0
    assert capsys.readouterr().out.splitlines()[3:6] == [
        "  gold             3  pairs (query, relevant item) for 2 queries, every id resolved",
        "  grades           4  judged pairs: grade 2: 1, grade 1: 2, grade 0: 1",  # q1 has no relevant item: left out
        "  grade<=0         1  pairs judged not relevant (of queries with a relevant item; the others cannot be evaluated "
        "and are left out)",
    ]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td9\t1\n", encoding="utf-8")
    assert main(["data", "check", f"beir:{folder}"]) == 2
    assert "test.tsv:2" in _error(capsys)  # an id the corpus lacks: its file and line


# -- score -------------------------------------------------------------------------------------------------

def test_score_tfidf_sample(tmp_path, capsys):
    from xenbench.data.sources import load_dataset
    from xenbench.models.retrievers import TfidfRetriever
    from xenbench.data.store import ScoreStore

    out = tmp_path / "tfidf"
    assert main(["score", "tfidf", "wordnet-el:noun.Tops", "--out", str(out), "--n-queries", "3", "--n-items", "5",
                 "--seed", "1"]) == 0
    assert str(out) in capsys.readouterr().out
    store = ScoreStore.open(out)
    M = store.to_numpy()
    assert M.shape == (3, 5) and store.is_complete
    ds = load_dataset("wordnet-el:noun.Tops")
    q_ids, i_ids = store.attrs["query_ids"], store.attrs["item_ids"]
    queries = [next(q for q in ds.queries if q.id == i) for i in q_ids]
    items = [ds.item(i) for i in i_ids]
    np.testing.assert_allclose(M, TfidfRetriever().fit(items).scores(queries), rtol=1e-6)


def test_score_retriever_on_ray_is_refused(tmp_path, capsys):
    assert main(["score", "tfidf", "wordnet-el:noun.Tops", "--out", str(tmp_path / "s"), "--backend", "ray"]) == 2
    assert "'--backend' parameter of xenbench score must be 'local' for de/tfidf" in _error(capsys)
    assert not (tmp_path / "s").exists()


# -- train-ce and eval-ce (stand-ins for the models) -----------------------------------------------------------

class _StandInCE:
    def to(self, device):
        return self


def test_train_ce_builds_the_config(tmp_path, monkeypatch, capsys):
    import xenbench.models.train as train

    seen = {}

    def fake_train(cfg, out, *, device="auto", data=None):
        seen.update(cfg=cfg, out=Path(out), device=device)
        return _StandInCE()

    monkeypatch.setattr(train, "train_cross_encoder", fake_train)
    assert main(["train-ce", "--kind", "emb", "--pooling", "markers", "--out", str(tmp_path / "ce"), "--domains",
                 "noun.Tops", "--epochs", "1", "--negatives", "3", "--lr", "5e-5", "--seed", "4", "--device", "cpu"]) == 0
    cfg = seen["cfg"]
    assert (cfg.kind, cfg.pooling, list(cfg.domains), cfg.epochs, cfg.n_negatives, cfg.lr, cfg.seed) == \
        ("emb", "markers", ["noun.Tops"], 1, 3, 5e-5, 4)
    assert seen["out"] == tmp_path / "ce" and seen["device"] == "cpu"


def test_train_ce_rejects_markers_for_a_cls_ce(tmp_path, capsys):
    assert main(["train-ce", "--kind", "cls", "--pooling", "markers", "--out", str(tmp_path / "ce"),
                 "--domains", "noun.Tops"]) == 2
    assert "'--pooling' parameter of xenbench train-ce must be 'mean' when --kind is 'cls'" in _error(capsys)
    assert not (tmp_path / "ce").exists()


def test_eval_ce_writes_the_table(tmp_path, monkeypatch, capsys):
    import xenbench.models.loading as loading
    import xenbench.models.train as train

    rows = [{"domain": "noun.Tops", "n_queries": 2, "accuracy@1": 0.5}]
    calls = {}
    monkeypatch.setattr(loading, "load_cross_encoder", lambda path: _StandInCE())

    def fake_eval(ce, domains, *, max_queries=None, progress=False):
        calls.update(domains=domains, max_queries=max_queries, progress=progress)
        return rows

    monkeypatch.setattr(train, "evaluate_rerank", fake_eval)
    out = tmp_path / "eval.json"
    assert main(["eval-ce", "some-ce", "--domains", "noun.Tops", "--max-queries", "2", "--device", "cpu",
                 "--out", str(out)]) == 0
    assert calls == {"domains": ["noun.Tops"], "max_queries": 2, "progress": True}  # a bar of pairs on stderr
    assert json.loads(out.read_text()) == rows and json.loads(capsys.readouterr().out) == rows


def test_eval_ce_without_a_model(tmp_path, capsys):
    assert main(["eval-ce", str(tmp_path / "none"), "--domains", "noun.Tops"]) == 2
    assert "no such file or folder" in _error(capsys)


# -- run, sweep, findings: errors only (their happy paths run notebooks; see the module docstring) ---------------

def test_run_unknown_notebook(capsys):
    assert main(["run", "99_no_such_notebook"]) == 2
    assert "99_no_such_notebook" in _error(capsys)


def test_sweep_needs_a_swept_parameter(capsys):
    assert main(["sweep", "05_pefa_lambda"]) == 2
    assert "at least one swept parameter" in _error(capsys)


def test_findings_write_and_check_exclude_each_other(capsys):
    assert "not allowed with argument" in _usage_error(["findings", "--write", "--check"], capsys)


def test_param_belongs_to_run_and_sweep(capsys):
    assert "-p/--param belongs to" in _usage_error(["score", "tfidf", "x", "--out", "y", "-p", "a", "1"], capsys)
