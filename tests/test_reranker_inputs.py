"""Cross-encoder folders that cannot be scored as their library scores them, table-driven: ``xenbench score`` on
each prints one line naming the folder and what was expected, exits 2 before any scoring and writes nothing.

The folders are tiny offline models (tests/_tiny_models.py) or a copy of the bundled [CLS]-CE, each damaged one way.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tiny_models as tiny  # noqa: E402

from xenbench.cli import main  # noqa: E402

MODELS = Path(__file__).resolve().parent.parent / "models"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Healthy tiny folders, built once; each case damages a copy."""
    root = tmp_path_factory.mktemp("healthy")
    return {"bert": tiny.bert(root / "bert"), "qwen3": tiny.qwen3(root / "qwen3")}


def _copy(built: dict[str, Path], name: str, tmp: Path) -> Path:
    return Path(shutil.copytree(built[name], tmp / "ce"))


def _edit_json(path: Path, **changes) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def no_head(built, tmp):  # the classifier tensors are gone: transformers would draw a random head
    from safetensors.torch import load_file, save_file

    folder = _copy(built, "bert", tmp)
    state = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in state.items() if not k.startswith("classifier.")}, str(folder / "model.safetensors"))
    return folder


def multi_label(built, tmp):
    from transformers import BertConfig, BertForSequenceClassification

    folder = _copy(built, "bert", tmp)
    cfg = BertConfig.from_pretrained(folder)
    cfg.num_labels = 3
    BertForSequenceClassification(cfg).save_pretrained(folder)
    return folder


def lm_without_answer_tokens(built, tmp):
    return tiny.qwen3(tmp / "ce", answers=False)


def vocab_beyond_embeddings(built, tmp):
    from transformers import BertConfig, BertForSequenceClassification

    folder = _copy(built, "bert", tmp)
    cfg = BertConfig.from_pretrained(folder)
    cfg.vocab_size = 100
    BertForSequenceClassification(cfg).save_pretrained(folder)
    return folder


def masked_lm(built, tmp):
    from transformers import BertConfig, BertForMaskedLM

    folder = _copy(built, "bert", tmp)
    BertForMaskedLM(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    return folder


def unknown_model_type(built, tmp):
    folder = _copy(built, "bert", tmp)
    _edit_json(folder / "config.json", model_type="no-such-model", architectures=["NoSuchForSequenceClassification"])
    return folder


def st_unknown_module(built, tmp):
    folder = _copy(built, "bert", tmp)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Dense", "type": "sentence_transformers.base.modules.dense.Dense"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def chat_without_roles(built, tmp):
    folder = _copy(built, "qwen3", tmp)
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        .replace("{{ m['content'] }}", "{{ m['content'] if m['role'] == 'query' else '' }}"))
    _edit_json(folder / "tokenizer_config.json", chat_template=None)
    return folder


def _chat_template(text: str) -> Callable:
    def damage(built, tmp):
        folder = _copy(built, "qwen3", tmp)
        (folder / "chat_template.jinja").write_text(text)
        return folder

    return damage


#: A chat template that raises (as templates do for inputs they do not support).
RAISES = "{{ raise_exception('this template needs a tools list') }}"
#: 10^10 steps of two nested loops: rendering it never ends (each range is within jinja2's sandbox cap).
LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
#: 10^7 characters around a few of text.
HUGE = "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"


def _logit_score(true_id, false_id="keep") -> Callable:
    """A sentence-transformers LLM-reranker folder (Transformer + LogitScore) whose answer-token ids are set by hand."""
    def damage(built, tmp):
        folder = _copy(built, "qwen3", tmp)
        vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer."
                                                                   "Transformer"},
                   {"idx": 1, "name": "1", "path": "1_LogitScore",
                    "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"}]
        (folder / "modules.json").write_text(json.dumps(modules))
        (folder / "1_LogitScore").mkdir()
        (folder / "1_LogitScore" / "config.json").write_text(json.dumps(
            {"true_token_id": true_id, "false_token_id": vocab["no"] if false_id == "keep" else false_id}))
        return folder

    return damage


def prompt_without_room(built, tmp):  # a default prompt longer than the 72 tokens of max_length
    folder = _copy(built, "qwen3", tmp)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"rank": "Judge whether the document answers the query. " * 20}, "default_prompt_name": "rank"}))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer."
                                                               "Transformer"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


def max_seq_length_past_positions(built, tmp):  # sentence_bert_config.json asks for more than the 64 positions
    folder = _copy(built, "bert", tmp)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer."
                                                               "Transformer"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512}))
    return folder


def _xenbench_tensors(edit: Callable[[dict], dict]) -> Callable:
    def damage(built, tmp):
        from safetensors.torch import load_file, save_file

        from xenbench import integrity
        from xenbench.models.crossencoder import bundled_backbone

        folder = Path(shutil.copytree(MODELS / "cls-ce", tmp / "ce"))
        save_file(edit(load_file(str(folder / "trained.safetensors"))), str(folder / "trained.safetensors"))
        # Recorded again: the file is consistent, only its tensors do not fit the backbone.
        integrity.record(folder, ["trained.safetensors", "xenbench_ce.json"], bundled_backbone(), "bundled")
        return folder

    return damage


def _renamed(state: dict) -> dict:
    key = "classifier.bias"
    return {("classifier.b" if k == key else k): v for k, v in state.items()} | {key: state[key].clone()}


def _reshaped(state: dict) -> dict:
    return {**state, "classifier.weight": torch.zeros(2, state["classifier.weight"].shape[1], dtype=torch.float16)}


@dataclass
class Case:
    id: str
    folder: Callable[[dict, Path], Path]
    match: str  # regex the single error line must match (after the folder name)


CASES = [
    Case("no-classifier-head", no_head, r"missing tensors \['classifier\.bias', 'classifier\.weight'\] that "
                                        r"transformers would initialize randomly: expected a trained classifier head"),
    Case("multi-label-head", multi_label, r"has a 3-label head: expected one score per pair"),
    Case("lm-without-yes-no", lm_without_answer_tokens, r"the tokenizer has no 'yes' or 'no' token"),
    Case("vocab-beyond-embeddings", vocab_beyond_embeddings, r"token ids up to \d+ but the model's embeddings hold "
                                                             r"100 rows"),
    Case("masked-lm", masked_lm, r"architecture 'BertForMaskedLM' is not a cross-encoder: expected "
                                 r"\*ForSequenceClassification, \*ForCausalLM"),
    Case("unknown-model-type", unknown_model_type, r"config\.json: not a config transformers knows"),
    Case("st-unknown-module", st_unknown_module, r"modules\.json: module '.*Dense' is not supported"),
    Case("chat-without-document-role", chat_without_roles, r"chat template does not render sentence-transformers' "
                                                            r"'document' role"),
    # issue 39: what a model folder runs is bounded, and its answer-token ids are ids of its vocabulary
    Case("chat-template-raises", _chat_template(RAISES), r"chat_template\.jinja: the chat template fails to render .*"
                                                         r"TemplateError: this template needs a tools list"),
    Case("chat-template-never-ends", _chat_template(LOOPS), r"chat_template\.jinja: the chat template renders for "
                                                            r"more than 2 s"),
    Case("chat-template-huge", _chat_template(HUGE), r"chat_template\.jinja: the chat template renders 10,000,000 "
                                                     r"characters"),
    Case("answer-token-minus-one", _logit_score(-1), r"1_LogitScore/config\.json: true_token_id is -1: expected a "
                                                     r"token id"),
    Case("answer-token-a-string", _logit_score("yes"), r"1_LogitScore/config\.json: true_token_id is 'yes'"),
    Case("answer-token-false-a-string", _logit_score(5, "no"), r"false_token_id is 'no': expected a token id \(an "
                                                                r"int >= 0, or null\)"),
    Case("answer-token-out-of-range", _logit_score(10**6), r"the true answer-token id is 1000000: expected a token id "
                                                           r"in \[0, \d+\]"),
    # issue 40: a prompt with no room for the pair, positions past the model's limit
    Case("prompt-without-room", prompt_without_room, r"the prompt and the chat template take \d+ of the 72 tokens of "
                                                     r"max_length: no room for the query and the document"),
    Case("max-seq-length-past-positions", max_seq_length_past_positions,
         r"sentence_bert_config\.json: max_seq_length 512 is above the model's position limit \(64 tokens\)"),
    Case("xenbench-renamed-tensor", _xenbench_tensors(_renamed), r"trained\.safetensors: holds tensors the backbone "
                                                                 r"does not have \['classifier\.b'\]"),
    Case("xenbench-wrong-shape", _xenbench_tensors(_reshaped), r"trained\.safetensors: tensor shapes do not fit the "
                                                               r"backbone: \['classifier\.weight \(2, 384\)"),
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def beir(root: Path) -> Path:
    folder = root / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{k}", "title": f"t{k}", "text": "x"}) + "\n"
                                                 for k in range(3)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{k}", "text": "y"}) + "\n" for k in range(2)))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\n")
    return folder


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_cross_encoder_fails_with_one_clear_line(case, built, tmp_path, capsys):
    folder = case.folder(built, tmp_path)
    data = beir(tmp_path)
    before = _tree(tmp_path)
    rc = main(["score", str(folder), f"beir:{data}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("xenbench: error: ")]
    assert rc == 2 and len(errors) == 1, err
    assert not any("Traceback" in line for line in err)
    assert str(folder) in errors[0], errors[0]  # names the folder (or a file in it)
    assert re.search(case.match, errors[0]), errors[0]
    assert _tree(tmp_path) == before, "a failed command left files behind"
