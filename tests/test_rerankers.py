"""Every cross-encoder family scored exactly as sentence-transformers scores it, offline.

Reference: ``sentence_transformers.CrossEncoder(folder, activation_fn=Identity()).predict`` (raw scores) on the same
(query, "title text") pairs. Tiny random-weight models of each family are built from the bundled corpus text
(tests/_tiny_models.py); their ``model_max_length`` is small, so many pairs are truncated. Tolerance: max |xenbench -
library| <= 1e-4 of the library scores' standard deviation, on the default path and on the Ray backend.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tiny_models as tiny  # noqa: E402

from xenbench.data.datasets import Item, Query  # noqa: E402
from xenbench.data.sources import load_dataset  # noqa: E402
from xenbench.models.jobs import score_to_store  # noqa: E402
from xenbench.models.loading import load_cross_encoder  # noqa: E402
from xenbench.models.pairs import PairAssembler, document_text  # noqa: E402
from xenbench.models.scoring import score_matrix  # noqa: E402

TOL = 1e-4  # of the reference scores' std
#: Which families the padding-free forward reproduces (docs/MODELS.md's "Supported cross-encoders" table says the same).
PACKED = {"bert", "electra", "roberta", "xlm-roberta", "qwen3", "qwen3-plain"}
KINDS = {"bert": "cls", "electra": "cls", "roberta": "cls", "xlm-roberta": "cls", "modernbert": "cls",
         "deberta-v2": "cls", "qwen3": "lm", "qwen3-plain": "lm"}
NAMES = sorted(KINDS)


@pytest.fixture(scope="module", autouse=True)
def _threads(one_thread):
    yield


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-ce")
    out = {name: build(root / name) for name, build in tiny.FAMILIES.items()}
    # The same causal LM without a chat template: the library then scores tokenizer(query, document), left-padded.
    out["qwen3-plain"] = Path(shutil.copytree(out["qwen3"], root / "qwen3-plain"))
    (out["qwen3-plain"] / "chat_template.jinja").unlink()
    return out


@pytest.fixture(scope="module")
def data() -> tuple[list[Query], list[Item]]:
    """6 queries x 9 items: short glosses, and long ones (some pairs exceed every model's maximum length)."""
    ds = load_dataset("wordnet-el:noun.cognition")
    by_len = sorted(ds.items, key=lambda it: len(document_text(it)))
    items = by_len[:3] + by_len[len(by_len) // 2: len(by_len) // 2 + 3] + by_len[-3:]
    queries = list(ds.queries[:5]) + [Query("long", " ".join(q.text for q in ds.queries[5:12]))]
    return queries, items


def library_scores(folder: Path, queries, items) -> np.ndarray:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu")
    pairs = [(q.text, document_text(it)) for q in queries for it in items]
    return np.asarray(model.predict(pairs, batch_size=16, show_progress_bar=False)).reshape(len(queries), len(items))


@pytest.fixture(scope="module")
def reference(folders, data) -> dict[str, np.ndarray]:
    return {name: library_scores(folder, *data) for name, folder in folders.items()}


def assert_exact(got: np.ndarray, ref: np.ndarray, name: str) -> None:
    std = float(ref.std())
    assert std > 1e-2, f"{name}: the library's scores barely vary ({std}): the comparison would be vacuous"
    err = float(np.abs(got - ref).max())
    assert err <= TOL * std, f"{name}: max |xenbench - sentence-transformers| = {err:.2e} > {TOL} x std {std:.3g}"


@pytest.mark.parametrize("name", NAMES)
def test_scores_equal_sentence_transformers(name, folders, data, reference) -> None:
    queries, items = data
    ce = load_cross_encoder(folders[name])
    assert ce.config.kind == KINDS[name]
    got = score_matrix(ce, queries, items, batch_size=8, device="cpu", progress=False).scores
    assert_exact(got, reference[name], name)
    # Some pairs were cut to the model's maximum length, and the cut happened where the library cuts.
    asm = PairAssembler(ce.pairs, ce.pairs.encode_queries(queries), ce.pairs.encode_items(items))
    rows, cols = np.meshgrid(np.arange(len(queries)), np.arange(len(items)), indexing="ij")
    lengths = asm.lengths(rows.ravel(), cols.ravel())
    assert lengths.max() == ce.config.max_length


@pytest.mark.parametrize("name", NAMES)
def test_pair_ids_equal_the_library_tokenization(name, folders, data) -> None:
    """The assembled ids (one tokenization per query and per item) are the ids sentence-transformers feeds the
    model for every pair, truncated ones included."""
    from sentence_transformers import CrossEncoder

    queries, items = data
    ce = load_cross_encoder(folders[name])
    st = CrossEncoder(str(folders[name]), local_files_only=True, device="cpu")
    batch = ce.pairs.collate(*zip(*[(q, i) for q in ce.pairs.encode_queries(queries)
                                    for i in ce.pairs.encode_items(items)]))
    features = st.preprocess([(q.text, document_text(it)) for q in queries for it in items])
    mask = features["attention_mask"].bool()
    n_truncated = 0
    for r in range(mask.shape[0]):
        want = features["input_ids"][r][mask[r]].tolist()
        got = batch["input_ids"][r][batch["attention_mask"][r].bool()].tolist()
        assert got == want, f"{name}: pair {r}"
        n_truncated += len(want) == ce.config.max_length
        if "token_type_ids" in features and "token_type_ids" in ce.input_names:
            assert batch["token_type_ids"][r][: len(got)].tolist() == features["token_type_ids"][r][mask[r]].tolist()
    assert n_truncated >= 3, f"{name}: only {n_truncated} pairs reach the maximum length"
    assert set(ce.input_names) == set(k for k in features if k in ("input_ids", "attention_mask", "token_type_ids"))


def test_sentence_transformers_folder_with_logit_score_and_prompt(folders, data, tmp_path) -> None:
    """A saved sentence-transformers folder: its LogitScore token ids and its default prompt are used."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder.modules import LogitScore

    queries, items = data
    st = CrossEncoder(str(folders["qwen3"]), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu",
                      prompts={"rank": "Answer yes or no."}, default_prompt_name="rank")
    vocab = st.tokenizer.get_vocab()
    st[1] = LogitScore(true_token_id=vocab["Yes"], false_token_id=vocab["No"]) if "Yes" in vocab and "No" in vocab \
        else LogitScore(true_token_id=vocab["no"], false_token_id=vocab["yes"])
    st.save(str(tmp_path / "st"))
    again = CrossEncoder(str(tmp_path / "st"), local_files_only=True, device="cpu", activation_fn=torch.nn.Identity())
    ref = np.asarray(again.predict([(q.text, document_text(it)) for q in queries for it in items],
                                   show_progress_bar=False)).reshape(len(queries), len(items))
    ce = load_cross_encoder(tmp_path / "st")
    assert ce.config.prompt == "Answer yes or no." and ce.config.answer_tokens == [st[1].true_token_id,
                                                                                   st[1].false_token_id]
    assert_exact(score_matrix(ce, queries, items, device="cpu", progress=False).scores, ref, "st-folder")


def test_truncation_equals_the_tokenizer_on_a_grid(folders) -> None:
    """The assembled pair == ``tokenizer(a, b, truncation="longest_first")`` for every length combination around
    the budget (both cut, only the longer cut, ties), on RoBERTa's and BERT's templates."""
    from transformers import AutoTokenizer

    for name in ("roberta", "bert"):
        ce = load_cross_encoder(folders[name])
        tok = AutoTokenizer.from_pretrained(folders[name])
        budget = ce.pairs.template.budget
        for a in range(1, budget + 6, 3):
            for b in range(1, budget + 6, 2):
                ta, tb = " ".join(["mind"] * a), " ".join(["thought"] * b)
                want = tok(ta, tb, truncation="longest_first", max_length=ce.config.max_length)["input_ids"]
                ia, ib = (tok(t, add_special_tokens=False)["input_ids"] for t in (ta, tb))
                assert ce.pairs.assemble(ia, ib)[0] == want, (name, a, b)


def test_ray_backend_gives_the_library_scores(ray_cluster, folders, data, reference, tmp_path) -> None:
    queries, items = data
    for name in ("xlm-roberta", "qwen3", "modernbert"):
        ce = load_cross_encoder(folders[name])
        # one actor: each is a fresh Ray worker process that imports torch and transformers (about 9 CPU-s); blocks
        # spread over two actors are tests/test_scoring.py's
        store = score_to_store(ce, queries, items, tmp_path / name, batch_size=8, device="cpu", progress=False,
                               query_chunk=2, backend="ray", ray_options={"workers": 1})
        assert_exact(store.to_numpy(), reference[name], f"{name} (ray)")


@pytest.mark.parametrize("name", NAMES)
def test_packed_path_equals_the_padded_forward(name, folders, data) -> None:
    """Each family the packed forward supports gives the padded scores on the scorer's own length-sorted batches
    (the [CLS] head, and the same encoder as an [EMB]-CE); the others are refused and scored padded."""
    from xenbench.models import packed, scoring

    queries, items = data
    ce = load_cross_encoder(folders[name])
    assert packed.supports(ce) == (name in PACKED)
    if name not in PACKED:
        assert scoring._forward(ce, torch.device("cpu")) is ce
        return
    models = [ce] if ce.config.kind == "lm" else [ce, load_cross_encoder(folders[name], kind="emb")]
    for model in models:
        asm = PairAssembler(model.pairs, model.pairs.encode_queries(queries), model.pairs.encode_items(items))
        rows, cols = (a.ravel() for a in np.meshgrid(np.arange(len(queries)), np.arange(len(items)), indexing="ij"))
        order = np.argsort(asm.lengths(rows, cols), kind="stable")
        for s in range(0, len(order), 16):
            batch = asm.batch(rows[order[s:s + 16]], cols[order[s:s + 16]])
            with torch.inference_mode():
                ref, got = model(batch), packed.packed_forward(model, batch, attention="padded")
            assert float((got - ref).abs().max()) <= 1e-5 * max(1.0, float(ref.abs().max())), name


def test_docs_table_states_each_familys_path() -> None:
    """docs/MODELS.md's "Supported cross-encoders" table says packed exactly for the families packed_forward
    reproduces."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "MODELS.md").read_text(encoding="utf-8")
    section = doc.split("## Supported cross-encoders", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    paths = {r[0].strip(): r[2].strip() for r in rows[1:]}
    names = {"BERT": "bert", "ELECTRA": "electra", "RoBERTa": "roberta", "XLM-R": "xlm-roberta",
             "ModernBERT": "modernbert", "DeBERTa-v2": "deberta-v2", "LLM reranker (causal LM)": "qwen3"}
    assert set(names) <= set(paths), paths
    for row, fam in names.items():
        assert paths[row].startswith("packed" if fam in PACKED else "padded"), (row, paths[row])


def test_llm_rows_share_the_query_prefix_and_score_the_same(folders, data, monkeypatch) -> None:
    """A causal reranker's row runs its prefix (system text, query) once and reuses its key/value cache for every
    item batch; the scores equal the whole-pair forward (``ce.score_pairs``), truncated pairs included."""
    queries, items = data
    ce = load_cross_encoder(folders["qwen3"])
    assert ce.reuses_prefix
    calls = []
    real = ce.encode_prefix
    monkeypatch.setattr(ce, "encode_prefix", lambda ids: calls.append(len(ids)) or real(ids))
    got = score_matrix(ce, queries, items, batch_size=4, device="cpu", progress=False).scores
    assert len(calls) == len(queries)  # one prefix per query, not per batch (3 batches per row here)
    whole = ce.score_pairs([q for q in queries for _ in items], [it for _ in queries for it in items]).numpy()
    whole = whole.reshape(len(queries), len(items))
    assert float(np.abs(got - whole).max()) <= 1e-5 * float(whole.std())
    # The long query's prefix was cut to the model's maximum length minus the template's tail, as the library cuts.
    assert max(calls) == ce.config.max_length - len(ce.pairs.template.suffix)


# -- max_length, position limits, prompts, model-card recipes -------------------------------------------------------


@pytest.mark.parametrize("name", ["bert", "roberta", "qwen3"])
def test_max_length_truncates_as_sentence_transformers_does(name, folders, data) -> None:
    """``load_cross_encoder(..., max_length=N)`` feeds the model the ids ``CrossEncoder(..., max_length=N)`` feeds it
    (pair template or chat template, cut the library's way) and scores what it scores."""
    from sentence_transformers import CrossEncoder

    queries, items = data
    n = 24 if name != "qwen3" else 60  # the chat template alone takes 50 tokens
    ce = load_cross_encoder(folders[name], max_length=n)
    assert ce.config.max_length == n
    st = CrossEncoder(str(folders[name]), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu",
                      max_length=n)
    pairs = [(q.text, document_text(it)) for q in queries for it in items]
    features = st.preprocess(pairs)
    batch = ce.pairs.collate(*zip(*[(q, i) for q in ce.pairs.encode_queries(queries)
                                    for i in ce.pairs.encode_items(items)]))
    mask = features["attention_mask"].bool()
    for r in range(mask.shape[0]):
        assert batch["input_ids"][r][batch["attention_mask"][r].bool()].tolist() == \
            features["input_ids"][r][mask[r]].tolist(), (name, r)
    assert int(mask.sum(1).max()) == n  # some pairs were cut to n
    ref = np.asarray(st.predict(pairs, batch_size=16, show_progress_bar=False)).reshape(len(queries), len(items))
    assert_exact(score_matrix(ce, queries, items, batch_size=8, device="cpu", progress=False).scores, ref,
                 f"{name} max_length={n}")


def test_max_length_past_the_position_limit_is_refused_before_any_work(folders) -> None:
    from xenbench.errors import ParameterError

    # RoBERTa's positions start after its pad: 42 rows hold 40 positions
    with pytest.raises(ParameterError, match=r"'max_length' parameter of load_cross_encoder must be at most 40 for "
                                             r".*roberta \(its position limit is 40 tokens\)\. Got 41"):
        load_cross_encoder(folders["roberta"], max_length=41)
    with pytest.raises(ParameterError, match=r"'max_length' parameter of load_cross_encoder must be at most 64 .*"
                                             r"Got 65"):
        load_cross_encoder(folders["bert"], max_length=65)
    with pytest.raises(ParameterError, match=r"'max_length' parameter of load_cross_encoder must be None for .*"
                                             r"laid out in segments"):
        load_cross_encoder(Path(__file__).resolve().parents[1] / "models" / "cls-ce", max_length=32)
    with pytest.raises(ParameterError, match=r"'max_length' parameter of load_cross_encoder must be an int >= 1"):
        load_cross_encoder(folders["bert"], max_length=0)


def test_a_roberta_tokenizer_without_a_maximum_is_cut_at_the_position_limit(folders, data, tmp_path) -> None:
    """A RoBERTa folder whose tokenizer states no maximum: sentence-transformers caps pairs at
    max_position_embeddings (42) and its longest pairs fail deep in the embeddings (positions start at 2: an
    IndexError, or a RuntimeError of the token-type buffer); xenbench cuts them at
    the 40 positions the model has, as the library does when told max_length=40."""
    import json

    from sentence_transformers import CrossEncoder

    folder = Path(shutil.copytree(folders["roberta"], tmp_path / "roberta"))
    config = folder / "tokenizer_config.json"
    doc = json.loads(config.read_text())
    doc["model_max_length"] = int(1e30)
    config.write_text(json.dumps(doc))
    queries, items = data
    pairs = [(q.text, document_text(it)) for q in queries for it in items]
    st = CrossEncoder(str(folder), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu")
    with pytest.raises((IndexError, RuntimeError), match="out of"):  # the library (and xenbench before) fail deep inside
        st.predict(pairs, batch_size=16, show_progress_bar=False)
    ce = load_cross_encoder(folder)
    assert ce.config.max_length == 40
    st = CrossEncoder(str(folder), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu",
                      max_length=40)
    ref = np.asarray(st.predict(pairs, batch_size=16, show_progress_bar=False)).reshape(len(queries), len(items))
    assert_exact(score_matrix(ce, queries, items, batch_size=8, device="cpu", progress=False).scores, ref, "roberta")


def _card_inputs(pairs, tokenizer, prompt: str, max_length: int) -> list[list[int]]:
    """The bge-reranker-v2-gemma model card's ``get_inputs``, written out for transformers 5 (which has no
    ``prepare_for_model``): ``[bos] + ids('A: q')[:3L/4]``, then ``sep + ids('B: p')[:L]`` cut by
    ``truncation='only_second'`` to L in all (uncut when the passage is too short to cut, as transformers 4 did), then
    ``sep + prompt``."""
    sep = tokenizer("\n", add_special_tokens=False)["input_ids"]
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    out = []
    for query, passage in pairs:
        first = [tokenizer.bos_token_id] + tokenizer(f"A: {query}", add_special_tokens=False)["input_ids"][
            : max_length * 3 // 4]
        second = sep + tokenizer(f"B: {passage}", add_special_tokens=False)["input_ids"][:max_length]
        remove = len(first) + len(second) - max_length
        if 0 < remove < len(second):
            second = second[:-remove]
        out.append(first + second + sep + prompt_ids)
    return out


@pytest.mark.parametrize("version", [1, 2])
def test_a_gemma_reranker_is_scored_by_its_cards_recipe(version, data, tmp_path) -> None:
    """A bge-reranker-v2-gemma-style folder (a Gemma causal LM, no chat template, no sentence-transformers config):
    the scores are the card's — logit('Yes') at the last token of ``<bos> A: q \\n B: p \\n prompt`` — computed here
    pair by pair, unpadded, with the model itself."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from xenbench.models.pairs import BGE_LLM_PROMPT

    folder = tiny.gemma(tmp_path / "gemma", version=version)
    queries, items = data
    L = 40
    ce = load_cross_encoder(folder, max_length=L)
    tok = AutoTokenizer.from_pretrained(folder)
    yes = tok("Yes", add_special_tokens=False)["input_ids"][0]
    assert ce.config.layout == "bge-llm" and ce.config.answer_tokens == [yes, None]
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    inputs = _card_inputs([(q.text, document_text(it)) for q in queries for it in items], tok, BGE_LLM_PROMPT, L)
    with torch.inference_mode():
        ref = np.array([float(model(input_ids=torch.tensor([ids])).logits[0, -1, yes]) for ids in inputs])
    ref = ref.reshape(len(queries), len(items))
    got = score_matrix(ce, queries, items, batch_size=8, device="cpu", progress=False).scores
    assert_exact(got, ref, f"gemma{version}")
    # the assembled ids are the card's, truncated pairs included
    batch = ce.pairs.collate(*zip(*[(q, i) for q in ce.pairs.encode_queries(queries)
                                    for i in ce.pairs.encode_items(items)]))
    n_cut = 0
    for r, ids in enumerate(inputs):
        assert batch["input_ids"][r][batch["attention_mask"][r].bool()].tolist() == ids, r
        n_cut += len(ids) == ce.pairs.longest()
    assert n_cut >= 3, "no pair reached the maximum length"
