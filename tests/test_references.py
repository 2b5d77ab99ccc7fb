"""A model named as users name it: a local folder, a ``.ckpt`` with its base, or a Hugging Face hub id resolved through
``huggingface_hub`` from a local cache (offline, as the Makefile and CI run), the same way in ``xenbench score``, the
notebooks' ``-p model`` and the Python API.

The hub cache is built here from a tiny offline model, laid out as ``huggingface_hub`` lays it out
(``<HF_HOME>/hub/models--ORG--NAME/{blobs,snapshots/<commit>,refs/main}``): nothing is downloaded.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tiny_models as tiny  # noqa: E402
from test_reranker_inputs import beir  # noqa: E402

from xenbench import provenance  # noqa: E402
from xenbench.cli import main  # noqa: E402
from xenbench.data.sources import load_dataset  # noqa: E402
from xenbench.data.store import ScoreStore  # noqa: E402
from xenbench.errors import DataError, ParameterError  # noqa: E402
from xenbench.models.loading import load_cross_encoder  # noqa: E402
from xenbench.models.references import model_name, parse_hub_id, resolve_model  # noqa: E402
from xenbench.models.scoring import score_matrix  # noqa: E402

REPO = "tiny-org/tiny-bert"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny.bert(tmp_path_factory.mktemp("tiny") / "bert")


@pytest.fixture
def hub(folder, tmp_path, monkeypatch) -> tuple[Path, str]:
    """A Hugging Face cache holding ``REPO`` at ``$HF_HOME``, offline."""
    snapshot, commit = tiny.hub_cache(tmp_path / "hf", REPO, folder)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot, commit


@pytest.fixture(scope="module")
def data():
    ds = load_dataset("wordnet-el:noun.cognition")
    return list(ds.queries[:4]), list(ds.items[:7])


def test_hub_ids_are_told_from_paths():
    assert parse_hub_id("cross-encoder/ms-marco-MiniLM-L6-v2") == ("cross-encoder/ms-marco-MiniLM-L6-v2", None)
    assert parse_hub_id("BAAI/bge-reranker-v2-m3@refs/pr/3") == ("BAAI/bge-reranker-v2-m3", "refs/pr/3")
    assert parse_hub_id("BAAI/bge-reranker-v2-m3@v1.0") == ("BAAI/bge-reranker-v2-m3", "v1.0")
    for path in ("../models/cls-ce", "/data/ce", "models/a/b", "org--x/name", "org/na..me", "my-ce", "./org/name"):
        assert parse_hub_id(path) is None, path
    assert model_name("org/name@main") == "org/name" and model_name("../models/my-ce/") == "my-ce"


def test_a_hub_id_scores_exactly_as_its_folder(hub, folder, data):
    snapshot, commit = hub
    queries, items = data
    ref = resolve_model(REPO)
    assert ref.path == snapshot and ref.commit == commit and ref.hub_id == REPO and ref.name == REPO
    assert ref.manifest() == {"model_id": REPO, "model_revision": commit}
    for name in (REPO, f"{REPO}@main", f"{REPO}@{commit}"):
        ce = load_cross_encoder(name)
        assert ce.name == REPO
        got = score_matrix(ce, queries, items, device="cpu", progress=False).scores
        want = score_matrix(load_cross_encoder(folder), queries, items, device="cpu", progress=False).scores
        assert np.array_equal(got, want), name


def test_a_local_folder_wins_over_a_hub_id_of_the_same_spelling(hub, folder, tmp_path, monkeypatch):
    (tmp_path / "tiny-org").mkdir()
    (tmp_path / "tiny-org" / "tiny-bert").symlink_to(folder)
    monkeypatch.chdir(tmp_path)
    assert resolve_model(REPO).hub_id is None and resolve_model(REPO).path == Path(REPO)


def test_an_uncached_id_offline_is_one_line_naming_the_id_the_cache_and_the_fetch(hub, tmp_path):
    with pytest.raises(DataError) as err:
        resolve_model("nobody/no-such-reranker@v2")
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("nobody/no-such-reranker@v2: not in the Hugging Face cache ")
    assert str(tmp_path / "hf" / "hub") in line and "hf download nobody/no-such-reranker --revision v2" in line
    assert "HF_HUB_OFFLINE" in line


def test_a_revision_not_cached_is_refused_too(hub):
    with pytest.raises(DataError, match=r"tiny-org/tiny-bert@v9: not in the Hugging Face cache"):
        load_cross_encoder(f"{REPO}@v9")


def test_xenbench_score_takes_a_hub_id_and_records_its_commit(hub, folder, tmp_path, capsys):
    snapshot, commit = hub
    data = beir(tmp_path)
    assert main(["score", REPO, f"beir:{data}", "--out", str(tmp_path / "by-id")]) == 0
    assert main(["score", str(folder), f"beir:{data}", "--out", str(tmp_path / "by-folder")]) == 0
    by_id, by_folder = ScoreStore.open(tmp_path / "by-id"), ScoreStore.open(tmp_path / "by-folder")
    assert np.array_equal(by_id.to_numpy(), by_folder.to_numpy())
    assert by_id.attrs["model"] == REPO and by_id.attrs["model_id"] == REPO
    assert by_id.attrs["model_revision"] == commit
    assert by_id.attrs["max_length"] == by_folder.attrs["max_length"] == tiny.MAX_LEN
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["score", "nobody/nothing", f"beir:{data}", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xenbench: error: nobody/nothing: not in the Hugging Face cache"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_xenbench_score_max_length_is_recorded_and_bounded(folder, tmp_path, capsys):
    data = beir(tmp_path)
    assert main(["score", str(folder), f"beir:{data}", "--out", str(tmp_path / "s"), "--max-length", "12"]) == 0
    store = ScoreStore.open(tmp_path / "s")
    assert store.attrs["max_length"] == 12 and store.attrs["model_config"]["max_length"] == 12
    capsys.readouterr()
    assert main(["score", str(folder), f"beir:{data}", "--out", str(tmp_path / "t"), "--max-length", "999"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("xenbench: error: ")]
    assert len(err) == 1 and "'max_length' parameter of load_cross_encoder must be at most 64" in err[0], err
    assert not (tmp_path / "t").exists()
    assert main(["score", "tfidf", f"beir:{data}", "--out", str(tmp_path / "u"), "--max-length", "9"]) == 2
    assert "'--max-length' parameter of xenbench score must be left out for de, tfidf" in capsys.readouterr().err


def test_provenance_records_the_hub_id_and_commit(hub):
    snapshot, commit = hub
    provenance.clear_inputs()
    load_cross_encoder(REPO)
    (entry,) = [provenance.describe_input(k, p) for k, p in provenance.recorded_inputs() if k == "model"]
    assert entry["hub"] == {"id": REPO, "commit": commit} and entry["sha256"]
    assert provenance.hub_snapshot("/x/models--a--b/snapshots/" + "0" * 40 + "/config.json") == {
        "id": "a/b", "commit": "0" * 40}
    assert provenance.hub_snapshot("/data/models/cls-ce") is None


def test_a_checkpoint_takes_its_base_by_folder_or_hub_id(hub, tmp_path, capsys):
    """An authors' Lightning .ckpt with its base model (config and tokenizer), named by hub id: in Python and in
    ``xenbench score --base``; without a base, one line naming --base."""
    from xenbench.models.crossencoder import CEConfig
    from xenbench.models.loading import build_cross_encoder

    ce = build_cross_encoder(CEConfig(kind="cls"), seed=0)
    base = tmp_path / "base"
    ce.model.bert.save_pretrained(base)
    ce.pairs.tokenizer.save_pretrained(base)
    _, commit = tiny.hub_cache(tmp_path / "hf", "tiny-org/minilm-base", base)
    state = {"model.encoder.bert_model." + k: v for k, v in ce.model.bert.state_dict().items()}
    state.update({"model.encoder.additional_linear." + k: v for k, v in ce.model.classifier.state_dict().items()})
    torch.save({"state_dict": state}, tmp_path / "cls.ckpt")
    by_id = load_cross_encoder(tmp_path / "cls.ckpt", base="tiny-org/minilm-base")
    by_folder = load_cross_encoder(tmp_path / "cls.ckpt", base=base)
    assert by_id.config.input_format.query_pad_to == 128 and by_id.name == "cls.ckpt"
    for key, value in by_folder.model.state_dict().items():
        assert torch.equal(by_id.model.state_dict()[key], value), key
    data = beir(tmp_path)
    assert main(["score", str(tmp_path / "cls.ckpt"), f"beir:{data}", "--out", str(tmp_path / "s"),
                 "--base", "tiny-org/minilm-base"]) == 0
    attrs = ScoreStore.open(tmp_path / "s").attrs
    assert attrs["base_id"] == "tiny-org/minilm-base" and attrs["base_revision"] == commit
    capsys.readouterr()
    assert main(["score", str(tmp_path / "cls.ckpt"), f"beir:{data}", "--out", str(tmp_path / "t")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("xenbench: error: ")]
    assert len(err) == 1 and "'base' parameter of xenbench score must be a folder or hub id" in err[0], err
    with pytest.raises(ParameterError, match=r"'base' parameter of load_cross_encoder must be None: only a Lightning"):
        load_cross_encoder(REPO, base=base)


def test_the_notebook_check_resolves_a_hub_id_and_names_the_model_by_it(hub, tmp_path):
    from xenbench.harness.preflight import ce_name, check_ce_path

    snapshot, _ = hub
    assert check_ce_path(REPO, "model", "notebook 03_adacur_rounds") == snapshot
    assert ce_name(REPO) == REPO
    with pytest.raises(DataError, match=r"^nobody/nothing: not in the Hugging Face cache"):
        check_ce_path("nobody/nothing", "model", "notebook 03_adacur_rounds")
    # a store scored on demand names the model by its id, with the snapshot's commit
    from xenbench.models.cache import cached_scores

    ds = load_dataset("wordnet-el:noun.cognition")
    sub = ds.subset([q.id for q in ds.queries[:3]], [it.id for it in ds.items[:5]])
    store = cached_scores(REPO, sub, cache=tmp_path / "cache", device="cpu", progress=False)
    assert store.attrs["model"] == REPO and store.attrs["model_revision"] == hub[1]
