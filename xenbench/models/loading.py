"""Where a cross-encoder comes from: a fresh head on a backbone, or a local folder or checkpoint, checked.

:func:`load_cross_encoder` reads a xenbench folder, a sentence-transformers CrossEncoder folder, a Hugging Face
``save_pretrained`` folder or an authors' Lightning ``.ckpt`` (nothing is downloaded), picks the family
(``"cls"``/``"emb"``/``"lm"``, :mod:`xenbench.models.crossencoder`) and the pair layout
(:mod:`xenbench.models.pairs`) the folder implies, and refuses a folder it cannot score faithfully (a head
transformers would fill with random numbers, a multi-label head, a tokenizer beyond the embeddings, ...) before any
scoring. :func:`build_cross_encoder` puts a new seeded head on a backbone (for training).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import logging as hf_logging
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from xenbench import integrity
from xenbench._device import resolve_device
from xenbench._validation import check_int
from xenbench.errors import DataError, ParameterError
from xenbench.models.crossencoder import CONFIG_NAME, WEIGHTS_NAME, CEConfig, CrossEncoder, backbone_folder
from xenbench.models.pairs import BGE_LLM_PROMPT, InputFormat, register_markers
from xenbench.models.references import ModelRef, refuse_custom_code, resolve_model
from xenbench.provenance import record_input

log = logging.getLogger(__name__)


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' load reports (an expected "newly initialized head" or unused pooler) while loading,
    then restore the user's verbosity: loading a model never changes global logging. Only for loads whose
    missing tensors are expected or checked (:func:`_load_hf` turns any missing tensor into an error)."""
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def _auto_class(kind: str):
    if kind == "cls":
        return AutoModelForSequenceClassification
    if kind == "lm":
        return AutoModelForCausalLM
    if kind == "emb":
        return AutoModel
    raise ParameterError("kind", "'cls', 'emb' or 'lm'", kind, "CEConfig")


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """``AutoTokenizer.from_pretrained(path, trust_remote_code=False)``; a tokenizer file the tokenizers library
    cannot read (a truncated or edited ``tokenizer.json``) is one error naming the file, not its traceback.

    Raises
    ------
    DataError
        Naming ``tokenizer.json`` (or the folder) and the library's first line.
    """
    folder = Path(path)
    try:
        return AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except Exception as err:  # tokenizers raises a bare Exception for a file it cannot parse
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        file = folder / "tokenizer.json"
        where = file if file.is_file() else folder
        raise DataError(where, f"transformers cannot read the tokenizer ({type(err).__name__}: {first}): expected "
                               "the tokenizer files saved with the model (save_pretrained)") from None


def _from_pretrained(model_cls, path: Path, **kwargs):
    """``model_cls.from_pretrained`` without remote code; a bare encoder without its pooler where the class has one
    (unused weights)."""
    kwargs["trust_remote_code"] = False
    if model_cls is AutoModel:
        try:
            return model_cls.from_pretrained(path, add_pooling_layer=False, **kwargs)
        except TypeError:  # e.g. ELECTRA has no pooler argument
            pass
    return model_cls.from_pretrained(path, **kwargs)


def build_cross_encoder(config: CEConfig, seed: int = 0) -> CrossEncoder:
    """A fresh cross-encoder on ``config.backbone``; a new [CLS] head is initialized from ``seed``."""
    path = backbone_folder(config.backbone)
    model_cls = _auto_class(config.kind)
    tokenizer = load_tokenizer(path)
    if config.pooling == "markers":
        register_markers(tokenizer)
    torch.manual_seed(seed)
    with quiet_loading():  # the "newly initialized head" report is expected here
        if config.kind == "cls":
            model = model_cls.from_pretrained(path, num_labels=1, trust_remote_code=False)
        else:
            model = _from_pretrained(model_cls, path)
    return CrossEncoder(model.float(), tokenizer, config, where=path).eval()


#: The names of the CEs with a randomly initialised head on the bundled backbone (:func:`untrained_cross_encoder`): only
#: for testing the pipeline, in ``xenbench score`` and as a notebook's ``model``. Their scores carry no meaning.
UNTRAINED = {"untrained-cls": "cls", "untrained-emb": "emb"}


def untrained_cross_encoder(name: str, seed: int = 0, *, owner: str = "untrained_cross_encoder",
                            param: str = "ce") -> CrossEncoder:
    """The CE :data:`UNTRAINED` names: the bundled MiniLM with a random head seeded with ``seed``, named ``name`` (so
    reports and the score cache know it; its fingerprint is that of its weights). Warns: its scores are meaningless.

    Raises
    ------
    ParameterError
        ``name`` is not one of :data:`UNTRAINED` (named as the parameter ``param`` of ``owner``).
    """
    if name not in UNTRAINED:
        raise ParameterError(param, f"one of {sorted(UNTRAINED)} (an untrained head, for testing only), or a CE "
                             "folder such as models/cls-ce", name, owner)
    warnings.warn(f"{name}: the head is random (seed {seed}), so its scores carry no meaning; use a trained CE "
                  "folder such as models/cls-ce for experiments", UserWarning, stacklevel=2)
    ce = build_cross_encoder(CEConfig(kind=UNTRAINED[name]), seed=seed)  # type: ignore[arg-type]
    ce.name = name
    return ce


def load_cross_encoder(path: str | os.PathLike[str], *, kind: str | None = None,
                       base: str | os.PathLike[str] | None = None, device: str = "cpu",
                       max_length: int | None = None) -> CrossEncoder:
    """Load a cross-encoder from a local path or a Hugging Face hub id (:func:`~xenbench.models.references.resolve_model`:
    ``org/name[@revision]`` from the local hub cache when ``HF_HUB_OFFLINE`` is set, downloaded otherwise).

    * a xenbench folder (``xenbench_ce.json`` + ``trained.safetensors``): backbone + trained parameters;
    * a sentence-transformers CrossEncoder folder (``modules.json``): its ``Transformer`` module, a ``LogitScore``
      module's token ids, its ``max_seq_length``, chat-template kwargs and default prompt;
    * a Hugging Face ``save_pretrained`` folder: ``*ForSequenceClassification`` (one label) is a [CLS]-CE on the
      tokenizer's pair template (or chat template, if it has one), ``*ForCausalLM`` an LLM reranker scored
      logit("yes") − logit("no") at the last token of the chat template (sentence-transformers' default), a bare
      encoder an [EMB]-CE with the MS-MARCO ``"cls-sep"`` pooling (``kind`` overrides the [CLS]/[EMB] choice);
      pairs are truncated to the model's maximum length as sentence-transformers truncates them; a Gemma or Gemma-2
      causal LM (bge-reranker-v2-gemma) is scored by its model card's recipe (:mod:`xenbench.models.pairs`,
      ``"bge-llm"``: ``A:``/``B:`` layout and prompt, logit("Yes"));
    * an authors' Lightning ``.ckpt`` file (keys ``model.encoder.bert_model.*``, plus
      ``model.encoder.additional_linear.*`` for a [CLS]-CE): ``base`` must name a Hugging Face folder or hub id with
      the matching config and tokenizer (e.g. bert-base-uncased); ZESHEL layout with markers, query padded to 128.

    Scores are raw: a [CLS]-CE's logit, an LLM reranker's log-odds; sentence-transformers' default activation for a
    one-label model is the sigmoid of that logit (a monotone map: the same rankings).

    Parameters
    ----------
    max_length
        Tokens per pair, as ``sentence_transformers.CrossEncoder(..., max_length=)`` applies it (the pair truncated
        to it; for a chat template, the template's tail kept); default the folder's (``max_seq_length``, else the
        tokenizer's ``model_max_length`` capped at the model's position limit). Not for the ``"segments"`` layout
        of xenbench's own CEs and the ZESHEL checkpoints, whose segment budgets bound the pair.

    Raises
    ------
    DataError
        Naming the folder and what was expected, before any scoring: no classifier head (its tensors missing, which
        transformers would fill with random numbers), a multi-label head, a causal LM whose tokenizer lacks the
        answer tokens or whose answer-token ids are not ids of its vocabulary, a tokenizer with ids beyond the
        model's embeddings, an unknown architecture or module, a xenbench folder whose tensors do not fit its
        backbone, a chat template that fails or runs past its bounds (:mod:`xenbench.models.templates`), a prompt
        that leaves no room for the pair, pairs longer than the model's position limit; a hub id not in the cache
        while offline.
    ParameterError
        A ``max_length`` that is not an int >= 1, above the model's position limit, or given for a layout without one.
    """
    ref = resolve_model(path, base=base)
    check_int(max_length, "max_length", 1, None, "load_cross_encoder", allow_none=True, expected="an int >= 1 or None")
    ce = _load(ref, kind, max_length)
    ce.name = ref.name
    ce.reference = ref
    return ce.to(resolve_device(device))


def _load(ref: ModelRef, kind: str | None, max_length: int | None) -> CrossEncoder:
    path = ref.path
    if not path.exists():
        raise DataError(path, "no such file or folder: expected a xenbench CE folder, a HF folder or a .ckpt file")
    refuse_custom_code(path)
    if ref.base is not None:
        refuse_custom_code(ref.base.path)
    segments = True  # xenbench's own CEs and the ZESHEL checkpoints: segment budgets, no max_length
    if path.is_file() and path.suffix == ".ckpt":
        assert ref.base is not None  # resolve_model refuses a .ckpt without its base
        ce = _load_lightning(path, kind, ref.base.path)
    elif (path / CONFIG_NAME).is_file():
        ce = _load_xenbench(path)
    elif (path / "modules.json").is_file():
        ce, segments = _load_sentence_transformers(path, kind, max_length), False
    elif (path / "config.json").is_file():
        ce, segments = _load_hf(path, kind, max_length=max_length), False
    else:
        raise DataError(path, f"not a cross-encoder: expected {CONFIG_NAME}, modules.json, config.json or a .ckpt file")
    if segments:
        if max_length is not None:
            raise ParameterError("max_length", f"None for {path}: its pairs are laid out in segments with budgets of "
                                 f"their own ({ce.config.input_format})", max_length, "load_cross_encoder")
        _check_positions(ce, path, None)
    # Only a model that loaded and passed its checks is an input of the run: a refused folder must not reach its
    # provenance. Its digest goes there (and a hub snapshot's commit).
    record_input("model", path)
    return ce


def _load_xenbench(path: Path) -> CrossEncoder:
    try:
        config = CEConfig.from_json((path / CONFIG_NAME).read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError) as err:  # malformed JSON or fields
        raise DataError(path / CONFIG_NAME, f"not a valid xenbench CE config ({type(err).__name__}: {err})") from None
    if not (path / WEIGHTS_NAME).is_file():
        raise DataError(path / WEIGHTS_NAME, "missing: the folder has a config but no trained weights")
    # Before the bytes become tensors: a corrupted file must fail here, not score silently.
    integrity.verify(path, backbone_folder(config.backbone))
    ce = build_cross_encoder(config)
    try:
        trained = load_file(str(path / WEIGHTS_NAME))
    except Exception as err:  # safetensors raises its own error type for truncated or foreign files
        raise DataError(path / WEIGHTS_NAME, f"not a readable safetensors file ({err})") from None
    missing = set(config.trained) - set(trained)
    if missing:
        raise DataError(path / WEIGHTS_NAME, f"missing trained tensors {sorted(missing)[:3]}")
    state = ce.model.state_dict()
    unknown = sorted(set(trained) - set(state))
    if unknown:
        raise DataError(path / WEIGHTS_NAME, f"holds tensors the backbone does not have {unknown[:3]}: expected "
                                             f"parameter names of {type(ce.model).__name__} on {config.backbone}")
    bad = [f"{k} {tuple(v.shape)} (backbone {tuple(state[k].shape)})" for k, v in trained.items()
           if tuple(v.shape) != tuple(state[k].shape)]
    if bad:
        raise DataError(path / WEIGHTS_NAME, f"tensor shapes do not fit the backbone: {bad[:3]}")
    ce.model.load_state_dict({k: v.float() for k, v in trained.items()}, strict=False)
    return ce


def record_checksums(folder: str | os.PathLike[str]) -> Path:
    """Record the SHA-256 of a xenbench CE folder's weights, config and backbone in its ``checksums.json``
    (:mod:`xenbench.integrity`), as :meth:`CrossEncoder.save` does: for a folder made or changed by hand (a
    ``trained.safetensors`` written by other code, an edited ``xenbench_ce.json``), so that loading it verifies those
    bytes from now on instead of refusing them. Record only files you trust: the checksums then vouch for them.

    ``python -c "import xenbench as xb; xb.loading.record_checksums('path/to/my-ce')"``

    Returns
    -------
    Path
        The ``checksums.json`` written.

    Raises
    ------
    DataError
        The folder has no readable ``xenbench_ce.json`` or no ``trained.safetensors``.
    """
    path = Path(folder)
    try:
        config = CEConfig.from_json((path / CONFIG_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path / CONFIG_NAME, "missing: not a xenbench CE folder (a Hugging Face or sentence-"
                                            "transformers folder has no checksums to record)") from None
    except (ValueError, TypeError, KeyError) as err:
        raise DataError(path / CONFIG_NAME, f"not a valid xenbench CE config ({type(err).__name__}: {err})") from None
    if not (path / WEIGHTS_NAME).is_file():
        raise DataError(path / WEIGHTS_NAME, "missing: the folder has a config but no trained weights")
    return integrity.record(path, [WEIGHTS_NAME, CONFIG_NAME], backbone_folder(config.backbone), config.backbone)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (ValueError, UnicodeDecodeError) as err:
        raise DataError(path, f"not valid JSON ({err})") from None


def _load_sentence_transformers(path: Path, kind: str | None, max_length: int | None) -> CrossEncoder:
    """A sentence-transformers CrossEncoder folder: ``Transformer`` (+ ``LogitScore``) modules, as its loader reads
    them (``modules.json``, ``sentence_bert_config.json``, ``config_sentence_transformers.json``)."""
    modules = _read_json(path / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise DataError(path / "modules.json", "expected a non-empty list of modules")
    transformer, answers = None, None
    for m in modules:
        name = str(m.get("type", "")).rsplit(".", 1)[-1]
        if name == "Transformer" and transformer is None:
            transformer = path / m.get("path", "")
        elif name == "LogitScore":
            cfg_path = path / m.get("path", "") / "config.json"
            cfg = _read_json(cfg_path)
            answers = [cfg.get("true_token_id"), cfg.get("false_token_id")]
            for key, value in zip(("true_token_id", "false_token_id"), answers):
                if not _is_token_id(value) and not (key == "false_token_id" and value is None):
                    raise DataError(cfg_path, f"{key} is {value!r}: expected a token id (an int >= 0"
                                              f"{'' if key == 'true_token_id' else ', or null'})")
        else:
            raise DataError(path / "modules.json", f"module {m.get('type')!r} is not supported: expected a "
                                                   "Transformer module, optionally followed by LogitScore")
    if transformer is None:
        raise DataError(path / "modules.json", "has no Transformer module")
    refuse_custom_code(transformer)
    sbert = _read_json(transformer / "sentence_bert_config.json")
    st_config = _read_json(path / "config_sentence_transformers.json")
    prompts, prompt_name = st_config.get("prompts") or {}, st_config.get("default_prompt_name")
    modality = sbert.get("modality_config") or {}
    options = {
        "answers": answers,
        "max_seq_length": sbert.get("max_seq_length"),
        "chat_kwargs": ((sbert.get("processing_kwargs") or {}).get("chat_template") or {}),
        "prompt": prompts.get(prompt_name) if prompt_name else None,
        "chat": None if not modality else "message" in modality,
        "message_format": (modality.get("message") or {}).get("format", "flat"),
        "task": sbert.get("transformer_task"),
        "config_file": transformer / "sentence_bert_config.json",
    }
    return _load_hf(transformer, kind, options, max_length=max_length)


#: Causal LMs published as rerankers with a recipe of their own, not a chat template: scored by their card's recipe
#: (bge-reranker-v2-gemma: :data:`~xenbench.models.pairs.BGE_LLM_PROMPT`, the ``"bge-llm"`` layout, logit("Yes")).
BGE_LLM_ARCHITECTURES = ("GemmaForCausalLM", "Gemma2ForCausalLM")
#: The card's maximum length (its ``get_inputs(..., max_length=1024)``).
BGE_LLM_MAX_LENGTH = 1024


def _load_hf(path: Path, kind: str | None, st: dict | None = None, *, max_length: int | None = None) -> CrossEncoder:
    """A Hugging Face folder (``st``: what a sentence-transformers folder adds), checked before any scoring."""
    st = st or {}
    try:
        hf = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (ValueError, KeyError, OSError) as err:
        raise DataError(path / "config.json", f"not a config transformers knows ({err})".splitlines()[0]) from None
    archs = list(getattr(hf, "architectures", None) or [])
    arch = archs[0] if archs else f"{type(hf).__name__} without architectures"
    if st.get("answers") is not None or st.get("task") == "text-generation" or arch.endswith("ForCausalLM"):
        kind = "lm"
    elif arch.endswith("ForSequenceClassification"):
        kind = kind or "cls"
    elif arch.endswith("Model") and not arch.endswith(("LMHeadModel", "PreTrainedModel")):
        kind = kind or "emb"
    else:
        raise DataError(path / "config.json", f"architecture {arch!r} is not a cross-encoder: expected "
                                              "*ForSequenceClassification, *ForCausalLM (an LLM reranker) or a "
                                              "bare encoder (*Model)")
    if kind == "cls" and getattr(hf, "num_labels", 1) != 1:
        raise DataError(path / "config.json", f"has a {hf.num_labels}-label head: expected one score per pair "
                                              "(num_labels 1)")
    tokenizer = load_tokenizer(path)
    model_cls = _auto_class(kind)
    with quiet_loading():  # every missing tensor becomes the error below, so the report is not lost
        try:
            model, info = _from_pretrained(model_cls, path, output_loading_info=True)
        except (ValueError, OSError, RuntimeError) as err:
            raise DataError(path, f"transformers cannot load it as {model_cls.__name__} "
                                  f"({str(err).splitlines()[0]})") from None
    missing = sorted(k for k in info.get("missing_keys", []) if "position_ids" not in k)
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", []))
    if missing or mismatched:
        what = {"cls": "a trained classifier head", "lm": "the LM head", "emb": "every encoder tensor"}[kind]
        raise DataError(path, f"{type(model).__name__} is missing tensors {(missing or mismatched)[:4]} that "
                              f"transformers would initialize randomly: expected {what} (a folder saved by "
                              "save_pretrained after training, or a LogitScore module for an LLM reranker)")
    n_emb = model.get_input_embeddings().num_embeddings
    top = max(max(tokenizer.get_vocab().values(), default=0), len(tokenizer) - 1)
    if top >= n_emb:
        raise DataError(path, f"the tokenizer has token ids up to {top} but the model's embeddings hold {n_emb} "
                              "rows: expected the tokenizer saved with this model")
    limit = position_limit(model)
    recipe = kind == "lm" and not st and arch in BGE_LLM_ARCHITECTURES
    if recipe:  # the card's recipe, not a chat template: layout, prompt, logit("Yes")
        layout, prompt, answers = "bge-llm", BGE_LLM_PROMPT, [_first_token(path, tokenizer, "Yes"), None]
        default = BGE_LLM_MAX_LENGTH if limit is None else min(BGE_LLM_MAX_LENGTH, limit - _suffix_length(tokenizer))
    else:
        chat_template = getattr(tokenizer, "chat_template", None)
        chat = bool(chat_template) if st.get("chat") is None else bool(st["chat"] and chat_template)
        layout, prompt = ("chat" if chat else "pair"), st.get("prompt")
        answers = _answer_tokens(path, tokenizer, st.get("answers")) if kind == "lm" else None
        default = _max_length(tokenizer, hf, st.get("max_seq_length"), limit)
    fmt = st.get("message_format", "flat")
    config = CEConfig(
        kind=kind, backbone=str(path), pooling="cls-sep", scale=None, input_format=InputFormat(markers=False),
        layout=layout, max_length=default if max_length is None else max_length, answer_tokens=answers,
        prompt=prompt, chat_kwargs=dict(st.get("chat_kwargs") or {}),
        message_format="structured" if fmt == "structured" else "flat",
    )
    if recipe:
        log.info("%s: a %s without a chat template for reranking, scored by the bge-reranker-v2-gemma card's recipe "
                 "(A:/B: layout, its prompt, logit('Yes'))", path, arch)
    ce = CrossEncoder(model.float(), tokenizer, config, where=path)
    _check_positions(ce, path, max_length, limit, st.get("config_file") if st.get("max_seq_length") else None)
    return ce.eval()


def position_limit(model: torch.nn.Module) -> int | None:
    """The most positions a model reads: the rows of an absolute position table (less RoBERTa's and XLM-R's offset
    of ``padding_idx + 1``: their positions start after the pad), else ``max_position_embeddings`` (the context a
    rotary or relative model was trained for); None when the model states neither."""
    emb = getattr(getattr(model, "base_model", model), "embeddings", None)
    table = getattr(emb, "position_embeddings", None)
    if isinstance(table, torch.nn.Embedding):
        pad = getattr(emb, "padding_idx", None)
        return int(table.num_embeddings) - (int(pad) + 1 if isinstance(pad, int) else 0)
    n = getattr(model.config, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and 0 < n < 10**9 else None


def _check_positions(ce: CrossEncoder, path: Path, max_length: int | None, limit: int | None = None,
                     config_file: Path | None = None) -> None:
    """Refuse a CE whose longest pair (:meth:`~xenbench.models.pairs.PairEncoder.longest`) has more tokens than the
    model has positions (an ``IndexError`` deep in the embeddings otherwise), naming what set the length."""
    limit = position_limit(ce.model) if limit is None else limit
    longest = ce.pairs.longest()
    if limit is None or longest is None or longest <= limit:
        return
    room = limit - (longest - int(ce.config.max_length or 0)) if ce.config.layout != "segments" else None
    if max_length is not None:
        raise ParameterError("max_length", f"at most {room} for {path} (its position limit is {limit} tokens)",
                             max_length, "load_cross_encoder")
    if config_file is not None:
        raise DataError(config_file, f"max_seq_length {ce.config.max_length} is above the model's position limit "
                                     f"({limit} tokens): pass max_length of at most {room}")
    raise DataError(path, f"its pairs take up to {longest} tokens but the model has {limit} positions: expected "
                          "segment budgets within the position limit")


def _max_length(tokenizer, hf, max_seq_length: int | None, limit: int | None = None) -> int | None:
    """sentence-transformers' bound: ``max_seq_length`` if the folder sets it, else the tokenizer's
    ``model_max_length`` capped at the model's ``max_position_embeddings`` (and at its position limit, which is 2 less
    for RoBERTa/XLM-R: sentence-transformers would run past it into an ``IndexError``); None if neither is finite."""
    if max_seq_length:
        return int(max_seq_length)
    bounds = [tokenizer.model_max_length, getattr(hf, "max_position_embeddings", None), limit]
    finite = [int(b) for b in bounds if isinstance(b, int) and 0 < b < 10**9]
    return min(finite) if finite else None


def _is_token_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _first_token(path: Path, tokenizer, word: str) -> int:
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if not ids:
        raise DataError(path, f"the tokenizer gives no token for {word!r}: the bge-reranker-v2-gemma recipe reads "
                              f"the logit of {word!r}")
    return int(ids[0])


def _suffix_length(tokenizer) -> int:
    """Tokens the bge-reranker-v2-gemma recipe appends after the pair: a newline and its prompt."""
    return sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in ("\n", BGE_LLM_PROMPT))


def _answer_tokens(path: Path, tokenizer, answers: list | None) -> list[int | None]:
    """(true, false) token ids: a LogitScore module's, else "yes"/"no" as sentence-transformers picks them."""
    if answers is not None:
        return list(answers)
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("yes", "no") if t not in vocab]
    if missing:
        raise DataError(path, f"the tokenizer has no {' or '.join(repr(t) for t in missing)} token: an LLM reranker "
                              "is scored logit('yes') - logit('no'); expected a tokenizer with both tokens, or a "
                              "sentence-transformers folder whose LogitScore module names the answer tokens")
    return [vocab["yes"], vocab["no"]]


def _load_lightning(path: Path, kind: str | None, base: Path) -> CrossEncoder:
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    state = ckpt.get("state_dict", ckpt)
    enc = "model.encoder.bert_model."
    head = "model.encoder.additional_linear."
    if not any(k.startswith(enc) for k in state):
        raise DataError(path, f"no keys start with {enc!r}: not an ANNCUR/ZESHEL Lightning checkpoint")
    kind = kind or ("cls" if any(k.startswith(head) for k in state) else "emb")
    fmt = InputFormat(markers=True, max_query_tokens=126, max_item_tokens=126, query_pad_to=128)
    config = CEConfig(kind=kind, backbone=str(base), pooling="markers", scale=None, input_format=fmt)
    ce = build_cross_encoder(config)
    bert = {k[len(enc) :]: v for k, v in state.items() if k.startswith(enc)}
    if kind == "cls":
        mapped = {"bert." + k: v for k, v in bert.items()}
        mapped.update({"classifier." + k[len(head) :]: v for k, v in state.items() if k.startswith(head)})
    else:
        mapped = {k: v for k, v in bert.items() if not k.startswith("pooler.")}
    result = ce.model.load_state_dict(mapped, strict=False)
    unexpected = [k for k in result.unexpected_keys if "position_ids" not in k]
    missing = [k for k in result.missing_keys if "position_ids" not in k]
    if unexpected or missing:
        raise DataError(path, f"checkpoint does not match {base}: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return ce
