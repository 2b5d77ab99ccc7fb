"""Tiny random-weight cross-encoders of every family, built offline in seconds from the bundled corpus text.

Each builder writes a Hugging Face folder (``save_pretrained`` of a model and of its family's real tokenizer
class) into ``folder``: a vocabulary trained with the ``tokenizers`` library on WordNet-EL glosses (WordPiece for
BERT/ELECTRA/ModernBERT-style, byte-level BPE for RoBERTa and Qwen3, Unigram for XLM-R and DeBERTa-v2), a model
from its config class with small sizes and ``initializer_range`` 0.3 (so the scores spread enough to compare,
FACTS.md). ``model_max_length`` is small (:data:`MAX_LEN`) so that long pairs are truncated.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import torch

MAX_LEN = 40  # tokenizer model_max_length: a gloss pair of ~30-60 tokens is often truncated
CAUSAL_MAX_LEN = 72  # the chat template adds ~30 tokens around the pair
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
         "initializer_range": 0.3}

#: A Qwen3-Reranker-style chat template rendering sentence-transformers' ``query``/``document`` roles and an
#: optional system prompt; the answer is read at the last token after the generation prompt.
CHAT_TEMPLATE = (
    "{%- set sys = messages | selectattr('role', 'eq', 'system') | list -%}"
    "<|im_start|>system\n{{ sys[0].content if sys else 'Answer yes or no.' }}"
    "<|im_end|>\n<|im_start|>user\n"
    "<Query>: {{ (messages | selectattr('role', 'eq', 'query') | first).content }}\n"
    "<Document>: {{ (messages | selectattr('role', 'eq', 'document') | first).content }}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
CHAT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    """Query and item texts of the bundled noun.cognition set (plus 'yes'/'no' so a causal LM has the tokens)."""
    from xenbench.data.sources import load_dataset

    ds = load_dataset("wordnet-el:noun.cognition")
    texts = [q.text for q in ds.queries] + [f"{it.title} {it.text}" for it in ds.items]
    return tuple(texts + ["yes no Yes No"] * 50 + ["<Query>: <Document>: Answer yes or no."] * 20)


def _train(model, trainer, pre, texts) -> dict:
    import json

    from tokenizers import Tokenizer

    tok = Tokenizer(model)
    if pre is not None:
        tok.pre_tokenizer = pre
    tok.train_from_iterator(texts, trainer)
    return json.loads(tok.to_str())["model"]


def wordpiece_vocab(size: int = 1500) -> dict[str, int]:
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    texts = [normalizers.BertNormalizer(lowercase=True).normalize_str(t) for t in corpus()]
    model = _train(models.WordPiece(unk_token="[UNK]"), trainers.WordPieceTrainer(vocab_size=size,
                   special_tokens=specials), pre_tokenizers.BertPreTokenizer(), texts)
    return model["vocab"]


def bpe_vocab(specials: list[str], size: int = 1500) -> tuple[dict[str, int], list[tuple[str, str]]]:
    from tokenizers import models, pre_tokenizers, trainers

    model = _train(models.BPE(), trainers.BpeTrainer(vocab_size=size, special_tokens=specials,
                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                   pre_tokenizers.ByteLevel(add_prefix_space=False), corpus())
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def unigram_vocab(specials: list[str], size: int = 1500) -> list[tuple[str, float]]:
    from tokenizers import models, pre_tokenizers, trainers

    model = _train(models.Unigram(), trainers.UnigramTrainer(vocab_size=size, special_tokens=specials,
                   unk_token="<unk>" if "<unk>" in specials else "[UNK]"), pre_tokenizers.Metaspace(), corpus())
    return [(p, float(s)) for p, s in model["vocab"]]


def _save(model, tokenizer, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _seeded(build: Callable[..., Path]) -> Callable[..., Path]:
    @functools.wraps(build)
    def run(folder: Path, **options) -> Path:
        torch.manual_seed(0)
        return build(Path(folder), **options)

    return run


@_seeded
def bert(folder: Path, sizes: dict | None = None, max_len: int = MAX_LEN) -> Path:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    tok = BertTokenizer(vocab=wordpiece_vocab(), model_max_length=max_len)
    cfg = BertConfig(vocab_size=len(tok), max_position_embeddings=max(64, max_len), num_labels=1,
                     **(sizes or SIZES))
    return _save(BertForSequenceClassification(cfg), tok, folder)


@_seeded
def electra(folder: Path, sizes: dict | None = None, max_len: int = MAX_LEN) -> Path:
    from transformers import ElectraConfig, ElectraForSequenceClassification, ElectraTokenizer

    tok = ElectraTokenizer(vocab=wordpiece_vocab(), model_max_length=max_len)
    cfg = ElectraConfig(vocab_size=len(tok), embedding_size=(sizes or SIZES)["hidden_size"] // 2,  # projected up
                        max_position_embeddings=max(64, max_len), num_labels=1,
                     **(sizes or SIZES))
    return _save(ElectraForSequenceClassification(cfg), tok, folder)


@_seeded
def roberta(folder: Path, sizes: dict | None = None, max_len: int = MAX_LEN) -> Path:
    from transformers import RobertaConfig, RobertaForSequenceClassification, RobertaTokenizer

    vocab, merges = bpe_vocab(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok = RobertaTokenizer(vocab=vocab, merges=merges, model_max_length=max_len)
    cfg = RobertaConfig(vocab_size=len(tok), max_position_embeddings=max_len + 2, type_vocab_size=1,
                        pad_token_id=tok.pad_token_id, num_labels=1, **(sizes or SIZES))
    return _save(RobertaForSequenceClassification(cfg), tok, folder)


@_seeded
def xlm_roberta(folder: Path, sizes: dict | None = None, max_len: int = MAX_LEN) -> Path:
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification, XLMRobertaTokenizer

    vocab = unigram_vocab(["<s>", "<pad>", "</s>", "<unk>"]) + [("<mask>", 0.0)]
    tok = XLMRobertaTokenizer(vocab=vocab, model_max_length=max_len)
    cfg = XLMRobertaConfig(vocab_size=len(tok), max_position_embeddings=max_len + 2, type_vocab_size=1,
                           pad_token_id=tok.pad_token_id, num_labels=1, **(sizes or SIZES))
    return _save(XLMRobertaForSequenceClassification(cfg), tok, folder)


@_seeded
def modernbert(folder: Path, sizes: dict | None = None, max_len: int = MAX_LEN) -> Path:
    from transformers import ModernBertConfig, ModernBertForSequenceClassification, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = wordpiece_vocab()
    backend = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = vocab["[CLS]"], vocab["[SEP]"]
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    # ModernBERT's published tokenizer is a generic fast tokenizer without token type ids.
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                                  unk_token="[UNK]", mask_token="[MASK]", model_max_length=max_len,
                                  model_input_names=["input_ids", "attention_mask"])
    cfg = ModernBertConfig(vocab_size=len(tok), **(sizes or SIZES), max_position_embeddings=max(64, max_len),
                           pad_token_id=vocab["[PAD]"], cls_token_id=cls, sep_token_id=sep, bos_token_id=cls,
                           eos_token_id=sep, num_labels=1, local_attention=16, global_attn_every_n_layers=2,
                           classifier_pooling="mean")
    return _save(ModernBertForSequenceClassification(cfg), tok, folder)


@_seeded
def deberta_v2(folder: Path, sizes: dict | None = None, max_len: int = MAX_LEN) -> Path:
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification, DebertaV2Tokenizer

    vocab = unigram_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok = DebertaV2Tokenizer(vocab=vocab, model_max_length=max_len)
    cfg = DebertaV2Config(vocab_size=len(tok), max_position_embeddings=max(64, max_len), type_vocab_size=0,
                          relative_attention=True, position_buckets=16, max_relative_positions=max(64, max_len),
                          pos_att_type=["p2c", "c2p"], position_biased_input=False, pad_token_id=tok.pad_token_id,
                          num_labels=1, **(sizes or SIZES))
    return _save(DebertaV2ForSequenceClassification(cfg), tok, folder)


@_seeded
def qwen3(folder: Path, answers: bool = True, sizes: dict | None = None, max_len: int = CAUSAL_MAX_LEN) -> Path:
    """A Qwen3-Reranker-style causal LM: ``*ForCausalLM``, byte-level BPE with 'yes'/'no' (unless not
    ``answers``: then the words are split into smaller tokens), a chat template."""
    from transformers import Qwen2Tokenizer, Qwen3Config, Qwen3ForCausalLM

    vocab, merges = bpe_vocab(CHAT_SPECIALS)
    if not answers:
        vocab = {t: i for t, i in vocab.items() if t not in ("yes", "no")}
        merges = [m for m in merges if "".join(m) not in ("yes", "no")]
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, model_max_length=max_len)
    tok.add_tokens(CHAT_SPECIALS[1:], special_tokens=True)
    tok.chat_template = CHAT_TEMPLATE
    sz = {**SIZES, "num_attention_heads": 4, **(sizes or {})}
    cfg = Qwen3Config(vocab_size=max(tok.get_vocab().values()) + 1, **sz,
                      num_key_value_heads=sz["num_attention_heads"] // 2,
                      head_dim=sz["hidden_size"] // sz["num_attention_heads"], max_position_embeddings=max(128, max_len),
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id)
    model = Qwen3ForCausalLM(cfg)
    with torch.no_grad():  # Qwen3 normalizes q and k per head: sharper attention spreads the last token's scores
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.fill_(3.0)
            layer.self_attn.k_norm.weight.fill_(3.0)
    return _save(model, tok, folder)


def gemma_vocab(size: int = 1500) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A BPE vocabulary in Gemma's form (spaces as '▁', byte fallback) with the bge-reranker recipe's words."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="\u2581", behavior="merged_with_previous")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"] + [f"<0x{i:02X}>" for i in range(256)]
    tok.train_from_iterator(list(corpus()) + ["A: B: Yes No Yes\n"] * 50,
                            trainers.BpeTrainer(vocab_size=size, special_tokens=specials))
    import json

    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


@_seeded
def gemma(folder: Path, version: int = 1, sizes: dict | None = None, max_len: int = 1024) -> Path:
    """A bge-reranker-v2-gemma-style folder: ``GemmaForCausalLM`` (or Gemma-2, with its logit soft-capping) on a
    Gemma tokenizer, no chat template, no sentence-transformers config: what the card's recipe scores."""
    from transformers import Gemma2Config, Gemma2ForCausalLM, GemmaConfig, GemmaForCausalLM, GemmaTokenizer

    vocab, merges = gemma_vocab()
    tok = GemmaTokenizer(vocab=vocab, merges=merges, model_max_length=max_len)
    sz = {**SIZES, "num_attention_heads": 4, **(sizes or {})}
    config_cls, model_cls = (GemmaConfig, GemmaForCausalLM) if version == 1 else (Gemma2Config, Gemma2ForCausalLM)
    extra = {} if version == 1 else {"final_logit_softcapping": 5.0, "query_pre_attn_scalar": 8, "sliding_window": 64}
    cfg = config_cls(vocab_size=len(tok), **sz, num_key_value_heads=1, head_dim=sz["hidden_size"] // 4,
                     max_position_embeddings=512, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                     eos_token_id=tok.eos_token_id, tie_word_embeddings=True, **extra)
    return _save(model_cls(cfg), tok, folder)


def hub_cache(home: Path, repo_id: str, folder: Path, revision: str = "main") -> tuple[Path, str]:
    """Lay ``folder`` out in a Hugging Face cache at ``home`` as ``huggingface_hub`` does: file contents in
    ``hub/models--ORG--NAME/blobs/<sha256>``, ``snapshots/<commit>/<file>`` links to them, ``refs/<revision>`` holding the
    commit (40 hex digits, derived from the files). Returns (the snapshot folder, the commit)."""
    import hashlib
    import os

    repo = Path(home) / "hub" / ("models--" + repo_id.replace("/", "--"))
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    commit = hashlib.sha1("".join(f"{p.relative_to(folder)}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
                                  for p in files).encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    for f in files:
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(f.read_bytes())
        link = snapshot / f.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot, commit


FAMILIES: dict[str, Callable[..., Path]] = {
    "bert": bert, "electra": electra, "roberta": roberta, "xlm-roberta": xlm_roberta, "modernbert": modernbert,
    "deberta-v2": deberta_v2, "qwen3": qwen3,
}
