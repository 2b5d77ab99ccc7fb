"""CE training: an interrupted run resumes to exactly the weights of an uninterrupted one."""
from __future__ import annotations

import dataclasses
import numpy as np
import pytest
import torch

import xenbench.models.train as train
from xenbench.models.loading import load_cross_encoder
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.errors import ParameterError


def _tiny_data() -> train.TrainingData:
    items = [Item(f"i{k}", f"title {k}", f"text about thing number {k}") for k in range(6)]
    queries = [Query(f"q{k}", f"a query mentioning thing {k}", (2, 11)) for k in range(8)]
    ds = Dataset("tiny", items, queries, {q.id: [f"i{k % 6}"] for k, q in enumerate(queries)})
    examples = [(0, k, np.array([k % 6, (k + 1) % 6, (k + 2) % 6], dtype=np.int64)) for k in range(8)]
    return train.TrainingData([ds], examples)


def _cfg(kind: str, pooling: str = "mean") -> train.TrainConfig:
    return train.TrainConfig(kind=kind, domains=["tiny"], n_negatives=2, queries_per_step=2, epochs=1,
                             trainable_layers=1, checkpoint_every=2, lr=1e-3, seed=5, pooling=pooling)


def _mean_loss(ce, data: train.TrainingData) -> float:
    """Softmax cross-entropy over (gold + negatives) of every training example, dropout off."""
    ds = data.datasets[0]
    ce.eval()
    losses = []
    for _, q, rows in data.examples:
        s = ce.score_pairs([ds.queries[q]] * len(rows), [ds.items[r] for r in rows])
        losses.append(torch.nn.functional.cross_entropy(s[None, :], torch.zeros(1, dtype=torch.long)).item())
    return float(np.mean(losses))


def _trained(path) -> dict[str, torch.Tensor]:
    ce = load_cross_encoder(path)
    return {n: p for n, p in ce.model.state_dict().items() if n in set(ce.config.trained)}


@pytest.mark.parametrize(("kind", "pooling"), [("cls", "mean"), ("emb", "mean"), ("emb", "markers")])
def test_interrupted_training_resumes_to_the_same_weights(tmp_path, monkeypatch, kind, pooling) -> None:
    data = _tiny_data()
    train.train_cross_encoder(_cfg(kind, pooling), tmp_path / "straight", data=data, device="cpu")

    real_save = train._save_state

    def save_then_die(path, ce, opt, sched, step, *args):
        real_save(path, ce, opt, sched, step, *args)
        if step == 2:
            raise KeyboardInterrupt  # killed right after the first checkpoint

    monkeypatch.setattr(train, "_save_state", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train.train_cross_encoder(_cfg(kind, pooling), tmp_path / "resumed", data=data, device="cpu")
    assert (tmp_path / "resumed" / train.STATE_NAME).is_file()
    monkeypatch.setattr(train, "_save_state", real_save)
    train.train_cross_encoder(_cfg(kind, pooling), tmp_path / "resumed", data=data, device="cpu")

    a, b = _trained(tmp_path / "straight"), _trained(tmp_path / "resumed")
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=0, rtol=0)
    assert not (tmp_path / "resumed" / train.STATE_NAME).exists()  # a finished run leaves no resume state


def test_training_moves_the_loss_and_only_trains_top_layers(tmp_path) -> None:
    ce = train.train_cross_encoder(_cfg("cls"), tmp_path / "m", data=_tiny_data(), device="cpu")
    assert ce.config.trained and all(
        n.startswith(("bert.encoder.layer.5.", "bert.pooler.", "classifier.")) for n in ce.config.trained
    )
    assert ce.config.notes["steps"] == 4 and ce.config.notes["n_examples"] == 8
    # The loss it minimizes, -log softmax(scores)[gold] over gold + negatives, falls on the examples it saw:
    untrained = train.build_cross_encoder(train.CEConfig(kind="cls"), seed=5)
    before, after = _mean_loss(untrained, _tiny_data()), _mean_loss(ce, _tiny_data())
    assert after < before
    # ... and _mean_loss is that loss: by hand with log-sum-exp for one example
    ds, (_, q, rows) = _tiny_data().datasets[0], _tiny_data().examples[0]
    s = ce.score_pairs([ds.queries[q]] * len(rows), [ds.items[r] for r in rows]).double().numpy()
    by_hand = np.log(np.exp(s - s.max()).sum()) + s.max() - s[0]
    one = train.TrainingData([ds], [_tiny_data().examples[0]])
    assert _mean_loss(ce, one) == pytest.approx(by_hand, rel=1e-5)


def test_resume_refuses_a_different_config(tmp_path, monkeypatch) -> None:
    def die(*args):
        raise KeyboardInterrupt

    real_save = train._save_state
    monkeypatch.setattr(train, "_save_state", lambda path, *a: (real_save(path, *a), die()))
    with pytest.raises(KeyboardInterrupt):
        train.train_cross_encoder(_cfg("cls"), tmp_path / "m", data=_tiny_data(), device="cpu")
    monkeypatch.setattr(train, "_save_state", real_save)
    other = _cfg("cls")
    other.lr = 5e-4
    with pytest.raises(ParameterError, match="the config the run in"):
        train.train_cross_encoder(other, tmp_path / "m", data=_tiny_data(), device="cpu")


def test_parameter_errors(tmp_path) -> None:
    with pytest.raises(ParameterError, match="'domains' parameter of TrainConfig"):
        train.train_cross_encoder(train.TrainConfig(kind="cls"), tmp_path)
    cfg = _cfg("cls")
    cfg.trainable_layers = 9
    with pytest.raises(ParameterError, match=r"'trainable_layers' parameter of TrainConfig must be an int in \[0, 6\]"):
        train.train_cross_encoder(cfg, tmp_path, data=_tiny_data(), device="cpu")


def test_marker_layout_trains_a_raw_dot_of_marker_states(tmp_path) -> None:
    """ANNCUR §2.6 [EMB]-CE: s = <(h[unused0] + h[unused1]) / 2, h[unused2]>, unnormalized; the loss falls."""
    data = _tiny_data()
    cfg = _cfg("emb", "markers")
    cfg.epochs, cfg.checkpoint_every = 6, 100
    before = _mean_loss(train.build_cross_encoder(train.CEConfig(kind="emb", pooling="markers", scale=None)), data)
    ce = train.train_cross_encoder(cfg, tmp_path / "m", data=data, device="cpu")
    assert ce.config.pooling == "markers" and ce.config.scale is None
    assert all(n.startswith("encoder.layer.5.") for n in ce.config.trained)
    after = _mean_loss(ce, data)
    assert after < before - 0.1, (before, after)
    # The saved model scores exactly the raw dot of the marker states (checked by hand on one pair).
    loaded = load_cross_encoder(tmp_path / "m")
    ds = data.datasets[0]
    pe = loaded.pairs
    batch = pe.collate(pe.encode_queries(ds.queries[:1]), pe.encode_items(ds.items[:1]))
    with torch.inference_mode():
        h = loaded.model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).last_hidden_state[0]
        ids = batch["input_ids"][0].tolist()
        q = (h[ids.index(pe.m_start)] + h[ids.index(pe.m_end)]) / 2
        expected = (q * h[ids.index(pe.t_sep)]).sum()
        torch.testing.assert_close(loaded(batch)[0], expected)
    # The markers are registered: the text "[unused0]" is one token.
    assert pe.tokenizer("[unused0]", add_special_tokens=False)["input_ids"] == [pe.m_start]


def test_runs_saved_before_the_pooling_key_still_match(tmp_path) -> None:
    cfg = _cfg("emb")
    saved = train._jsonable(train.asdict(cfg))
    del saved["pooling"]
    assert train._same_config(saved, cfg)
    assert not train._same_config(saved, _cfg("emb", "markers"))
    assert not train._same_config(None, cfg)


def test_a_resumed_run_may_checkpoint_more_often_but_not_change_what_it_trains() -> None:
    cfg = _cfg("emb")
    saved = train._jsonable(train.asdict(cfg))
    assert train._same_config(saved, dataclasses.replace(cfg, checkpoint_every=cfg.checkpoint_every * 10))
    assert not train._same_config(saved, dataclasses.replace(cfg, lr=cfg.lr * 2))


def test_marker_pooling_parameter_errors(tmp_path) -> None:
    with pytest.raises(ParameterError, match="'pooling' parameter of TrainConfig must be 'mean' or 'markers'"):
        train.train_cross_encoder(_cfg("emb", "max"), tmp_path, data=_tiny_data(), device="cpu")
    with pytest.raises(ParameterError, match="'pooling' parameter of TrainConfig"):
        train.train_cross_encoder(_cfg("cls", "markers"), tmp_path, data=_tiny_data(), device="cpu")


def test_mined_negatives_are_read_back_by_a_resumed_run(tmp_path, monkeypatch) -> None:
    """Mining (~11 CPU-min for the bundled CEs) runs once per run folder; a run with other domains mines anew."""
    calls = []
    rows = np.array([3, 1, 2], dtype=np.int64)

    def fake_mine(domains, n_negatives):
        calls.append(list(domains))
        return train.TrainingData([train.load_wordnet_el(d) for d in domains], [(0, 4, rows)])

    monkeypatch.setattr(train, "mine_training_data", fake_mine)
    cfg = dataclasses.replace(_cfg("emb"), domains=["noun.cognition"], n_negatives=2)
    path = tmp_path / train.MINED_NAME
    first = train._mined(path, cfg)
    again = train._mined(path, cfg)
    assert calls == [["noun.cognition"]] and path.is_file()
    assert [(d, q, r.tolist()) for d, q, r in again.examples] == [(0, 4, [3, 1, 2])]
    assert again.datasets[0].items == first.datasets[0].items
    train._mined(path, dataclasses.replace(cfg, domains=["noun.food"]))
    assert calls == [["noun.cognition"], ["noun.food"]]
