"""Cross-encoders: pair assembly, the three [EMB] poolings, save/load round-trips, the authors' layouts."""
from __future__ import annotations

import json

import pytest
import torch

from xenbench.models.crossencoder import CEConfig
from xenbench.models.loading import build_cross_encoder, load_cross_encoder
from xenbench.models.pairs import InputFormat
from xenbench.data.datasets import Item, Query
from xenbench.errors import DataError, ParameterError

QUERIES = [
    Query("q0", "She runs the company every day.", (4, 8)),
    Query("q1", "a thought crossed my mind", (2, 9)),
    Query("q2", "no mention here"),
]
ITEMS = [
    Item("i0", "run, operate", "direct or control a business"),
    Item("i1", "thought, idea", "the content of cognition"),
    Item("i2", "mind", "that which is responsible for your thoughts"),
]


@pytest.fixture(scope="module")
def cls_ce():
    return build_cross_encoder(CEConfig(kind="cls"), seed=0)


@pytest.fixture(scope="module")
def emb_ce():
    return build_cross_encoder(CEConfig(kind="emb"))


def test_query_tokens_mark_the_mention(cls_ce) -> None:
    tok = cls_ce.pairs.tokenizer
    ids = cls_ce.pairs.encode_queries(QUERIES)
    assert tok.convert_ids_to_tokens(ids[0]) == [
        "she", "[unused0]", "runs", "[unused1]", "the", "company", "every", "day", ".",
    ]
    assert "[unused0]" not in tok.convert_ids_to_tokens(ids[2])  # no span, no markers


def test_long_query_keeps_a_window_around_the_mention(cls_ce) -> None:
    text = " ".join(f"w{k}" for k in range(200)) + " target " + " ".join(f"v{k}" for k in range(200))
    start = text.index("target")
    q = Query("long", text, (start, start + len("target")))
    pe = cls_ce.pairs
    ids = pe.encode_queries([q])[0]
    assert len(ids) == pe.fmt.max_query_tokens
    toks = pe.tokenizer.convert_ids_to_tokens(ids)
    m = toks.index("[unused0]")
    assert toks[m + 1] == "target" and toks[m + 2] == "[unused1]"
    # centred: the context on each side differs by at most one token
    assert abs(m - (len(toks) - m - 3)) <= 1


def test_item_tokens_separate_title_and_text(cls_ce) -> None:
    toks = cls_ce.pairs.tokenizer.convert_ids_to_tokens(cls_ce.pairs.encode_items(ITEMS[:1])[0])
    assert toks == ["run", ",", "operate", "[unused2]", "direct", "or", "control", "a", "business"]


def test_collate_layout_and_padding(cls_ce) -> None:
    pe = cls_ce.pairs
    q, i = pe.encode_queries(QUERIES), pe.encode_items(ITEMS)
    b = pe.collate(q, i)
    for r in range(3):
        n_q, n_i = len(q[r]) + 2, len(i[r]) + 1
        assert b["query_len"][r] == n_q
        assert b["input_ids"][r, 0] == pe.cls_id and b["input_ids"][r, n_q - 1] == pe.sep_id
        assert b["input_ids"][r, n_q + n_i - 1] == pe.sep_id
        assert b["attention_mask"][r].sum() == n_q + n_i
        assert b["token_type_ids"][r, :n_q].sum() == 0 and b["token_type_ids"][r, n_q : n_q + n_i].min() == 1


def test_scores_do_not_depend_on_batch_padding(cls_ce, emb_ce) -> None:
    for ce in (cls_ce, emb_ce):
        together = ce.score_pairs(QUERIES, ITEMS)
        alone = torch.cat([ce.score_pairs([q], [i]) for q, i in zip(QUERIES, ITEMS)])
        torch.testing.assert_close(together, alone, atol=1e-4, rtol=1e-4)


def test_emb_mean_pooling_is_scaled_cosine_of_segment_means(emb_ce) -> None:
    pe = emb_ce.pairs
    batch = pe.collate(pe.encode_queries(QUERIES[:1]), pe.encode_items(ITEMS[:1]))
    with torch.inference_mode():
        hidden = emb_ce.model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).last_hidden_state[0]
        n_q = int(batch["query_len"][0])
        q, i = hidden[:n_q].mean(0), hidden[n_q:].mean(0)  # no padding in a batch of one
        expected = 20.0 * torch.nn.functional.cosine_similarity(q, i, dim=0)
        torch.testing.assert_close(emb_ce(batch)[0], expected, atol=1e-4, rtol=1e-4)


def test_marker_and_cls_sep_poolings(emb_ce) -> None:
    pe = emb_ce.pairs
    batch = pe.collate(pe.encode_queries(QUERIES[:1]), pe.encode_items(ITEMS[:1]))
    ids = batch["input_ids"][0]
    hidden = torch.randn(1, ids.shape[0], 8)
    emb_ce.config.pooling = "markers"
    try:
        q, i = emb_ce.embed_pair(hidden, batch)
        m0, m1 = (ids == pe.m_start).nonzero()[0, 0], (ids == pe.m_end).nonzero()[0, 0]
        torch.testing.assert_close(q[0], (hidden[0, m0] + hidden[0, m1]) / 2)
        torch.testing.assert_close(i[0], hidden[0, (ids == pe.t_sep).nonzero()[0, 0]])
        emb_ce.config.pooling = "cls-sep"
        q, i = emb_ce.embed_pair(hidden, batch)
        torch.testing.assert_close(q[0], hidden[0, 0])
        torch.testing.assert_close(i[0], hidden[0, (ids == pe.sep_id).nonzero()[0, 0]])
    finally:
        emb_ce.config.pooling = "mean"


def test_save_load_round_trip_keeps_only_trained_tensors(tmp_path) -> None:
    ce = build_cross_encoder(CEConfig(kind="cls"), seed=3)
    with torch.no_grad():  # pretend training changed the top layer and the head
        for name, p in ce.model.named_parameters():
            if name.startswith(("bert.encoder.layer.5.", "classifier.")):
                p.add_(0.01 * torch.randn_like(p))
    ce.config.trained = [n for n, _ in ce.model.named_parameters() if n.startswith(("bert.encoder.layer.5.", "classifier."))]
    ce.save(tmp_path / "m")
    loaded = load_cross_encoder(tmp_path / "m")
    # fp16 storage of the trained tensors: scores agree to fp16 rounding of weights
    torch.testing.assert_close(loaded.score_pairs(QUERIES, ITEMS), ce.score_pairs(QUERIES, ITEMS), atol=2e-3, rtol=1e-3)
    assert json.loads((tmp_path / "m" / "xenbench_ce.json").read_text())["kind"] == "cls"


def test_hf_folder_loads_as_cls_ce(tmp_path, cls_ce) -> None:
    cls_ce.model.save_pretrained(tmp_path / "hf")
    cls_ce.pairs.tokenizer.save_pretrained(tmp_path / "hf")
    loaded = load_cross_encoder(tmp_path / "hf")
    assert loaded.config.kind == "cls" and not loaded.config.input_format.markers
    # same weights, same [CLS] q [SEP] title text [SEP] input -> same logits as the source model
    pe = loaded.pairs
    batch = pe.collate(pe.encode_queries(QUERIES), pe.encode_items(ITEMS))
    with torch.inference_mode():
        ref = cls_ce.model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits[:, 0]
        torch.testing.assert_close(loaded(batch), ref)


def test_lightning_checkpoint_maps_onto_transformers(tmp_path, cls_ce) -> None:
    base = tmp_path / "base"
    cls_ce.model.bert.save_pretrained(base)
    cls_ce.pairs.tokenizer.save_pretrained(base)
    state = {"model.encoder.bert_model." + k: v for k, v in cls_ce.model.bert.state_dict().items()}
    state.update({"model.encoder.additional_linear." + k: v for k, v in cls_ce.model.classifier.state_dict().items()})
    torch.save({"state_dict": state, "epoch": 3}, tmp_path / "cls.ckpt")
    loaded = load_cross_encoder(tmp_path / "cls.ckpt", base=base)
    assert loaded.config.kind == "cls" and loaded.config.input_format.query_pad_to == 128
    for name, p in cls_ce.model.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], p)
    batch = loaded.pairs.collate(loaded.pairs.encode_queries(QUERIES[:1]), loaded.pairs.encode_items(ITEMS[:1]))
    assert int(batch["query_len"][0]) == 128 and int(batch["token_type_ids"][0, 128]) == 1

    emb_state = {k: v for k, v in state.items() if "additional_linear" not in k}
    torch.save({"state_dict": emb_state}, tmp_path / "emb.ckpt")
    emb = load_cross_encoder(tmp_path / "emb.ckpt", base=base)
    assert emb.config.kind == "emb" and emb.config.pooling == "markers" and emb.config.scale is None


def test_loader_errors(tmp_path) -> None:
    with pytest.raises(DataError, match="no such file or folder"):
        load_cross_encoder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="not a cross-encoder"):
        load_cross_encoder(tmp_path / "empty")
    torch.save({"state_dict": {"foo": torch.zeros(1)}}, tmp_path / "x.ckpt")
    with pytest.raises(ParameterError, match="'base' parameter"):
        load_cross_encoder(tmp_path / "x.ckpt")
    with pytest.raises(DataError, match="not an ANNCUR/ZESHEL Lightning checkpoint"):
        load_cross_encoder(tmp_path / "x.ckpt", base=tmp_path)


def test_marker_format_needs_marker_tokens() -> None:
    from xenbench.models.pairs import PairEncoder

    class NoMarkers:
        cls_token_id, sep_token_id, pad_token_id = 101, 102, 0

        def get_vocab(self):
            return {"[CLS]": 101}

    with pytest.raises(ParameterError, match="input_format.markers"):
        PairEncoder(NoMarkers(), InputFormat(markers=True))


def test_built_and_loaded_models_are_in_eval_mode(tmp_path, cls_ce) -> None:
    # dropout must be off for scoring: a wrapper left in training mode would re-enable it on .train(self.training)
    assert not cls_ce.training and not any(m.training for m in cls_ce.modules())
    cls_ce.config.trained = ["classifier.weight"]
    cls_ce.save(tmp_path / "m")
    loaded = load_cross_encoder(tmp_path / "m")
    assert not any(m.training for m in loaded.modules())


def test_a_marker_emb_ce_reads_a_query_without_a_span_as_its_own_mention() -> None:
    """Its query embedding is the mean of the marker states: a query with no span (plain BEIR) is wrapped whole in
    the markers, exactly as if its span were the whole text; without them every score would be 0."""
    ce = build_cross_encoder(CEConfig(kind="emb", pooling="markers", scale=None))
    bare, spanned = QUERIES[2], Query("q2", QUERIES[2].text, (0, len(QUERIES[2].text)))
    assert ce.pairs.encode_queries([bare]) == ce.pairs.encode_queries([spanned])
    scores = ce.score_pairs([bare] * len(ITEMS), ITEMS)
    torch.testing.assert_close(scores, ce.score_pairs([spanned] * len(ITEMS), ITEMS), rtol=0, atol=0)
    assert (scores != 0).all()
    mean = build_cross_encoder(CEConfig(kind="emb")).pairs  # other layouts keep a span-less query unmarked
    assert mean.m_start not in mean.encode_queries([bare])[0]
    with pytest.raises(ParameterError, match=r"'input_format' parameter of PairEncoder must be markers=True"):
        build_cross_encoder(CEConfig(kind="emb", pooling="markers", scale=None, input_format=InputFormat(markers=False)))


def test_marker_layout_registers_the_markers_as_special_tokens(tmp_path) -> None:
    from xenbench.models.pairs import register_markers

    ce = build_cross_encoder(CEConfig(kind="emb", pooling="markers", scale=None))
    tok, pe = ce.pairs.tokenizer, ce.pairs
    # "[unused0]" spelled out in text is the marker id, not "[ unused ##0 ]"; the vocabulary does not grow.
    ids = tok("x [unused0] y [unused1] [unused2]", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and [ids[1], ids[3], ids[4]] == [pe.m_start, pe.m_end, pe.t_sep]
    assert len(tok) == 30522
    # The mean layout keeps the plain tokenizer (its bundled scores were computed with it).
    plain = build_cross_encoder(CEConfig(kind="emb")).pairs.tokenizer
    assert len(plain("[unused0]", add_special_tokens=False)["input_ids"]) > 1
    # A saved marker model loads with the markers registered again.
    ce.config.trained = ["encoder.layer.5.output.dense.bias"]
    ce.save(tmp_path / "m")
    again = load_cross_encoder(tmp_path / "m").pairs
    assert again.tokenizer("[unused1]", add_special_tokens=False)["input_ids"] == [again.m_end]

    class NoMarkers:
        def get_vocab(self):
            return {"[CLS]": 101}

    with pytest.raises(ParameterError, match="'backbone' parameter of register_markers"):
        register_markers(NoMarkers())
