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


@pytest.fixture(scope="module")
def ray_cluster():
    from xenbench._ray import ray_session

    with ray_session(num_cpus=2) as ray:
        yield ray


def test_ray_backend_gives_the_library_scores(ray_cluster, folders, data, reference, tmp_path) -> None:
    queries, items = data
    for name in ("xlm-roberta", "qwen3", "modernbert"):
        ce = load_cross_encoder(folders[name])
        store = score_to_store(ce, queries, items, tmp_path / name, batch_size=8, device="cpu", progress=False,
                               query_chunk=2, backend="ray", ray_options={"workers": 2})
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
        assert scoring._forward(ce) is ce
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
