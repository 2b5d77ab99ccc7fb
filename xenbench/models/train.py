"""Training recipe for xenbench's cross-encoders (ANNCUR §4 setup, scaled down).

Each training query comes with its gold item and ``n_negatives`` hard negatives mined with the dual
encoder inside the query's own domain (a ZESHEL "world"). Loss = softmax cross-entropy over the
(1 + n_negatives) CE scores, gold at position 0. [CLS]-CE and [EMB]-CE get the *same* queries, negatives,
order and optimizer; only the scoring head differs.

An [EMB]-CE trains in one of two layouts (``TrainConfig.pooling``, see :mod:`xenbench.models.crossencoder`):

* ``"mean"`` (xenbench's bundled ``models/emb-ce``): s(q, i) = scale · cos(mean of the query segment's
  states, mean of the item segment's states);
* ``"markers"`` (ANNCUR §2.6 / the authors' ZESHEL [EMB]-CE): s(q, i) = ⟨(h[unused0] + h[unused1]) / 2,
  h[unused2]⟩, a raw dot product of final-layer states, no normalization and no projection (``scale`` unused).

Only the top ``trainable_layers`` transformer layers (+ the [CLS] head) are trained; the rest stays the
bundled backbone, so a checkpoint stores just the trained tensors. Training is resumable: a state file is
written every ``checkpoint_every`` steps and picked up on restart with the same config.

The resume state, ``train_state.safetensors``, is a safetensors file (tensors only: the trained weights, AdamW's
moments and step counts, the RNG) whose header holds the rest as JSON (step, losses, wall time, config, each
parameter group's learning rate, the scheduler's counters), like a model folder's ``trained.safetensors`` and
``xenbench_ce.json``; nothing in it is unpickled, so a planted file can never run code. Every part is checked
before it is used (:func:`load_state`, :func:`check_state`): tensor names, shapes and dtypes against the model being
trained, finite values, a ``step`` within the run's steps with one loss per step, counters that agree with it. An
older xenbench's ``train_state.pt`` (a torch pickle) is not read: the run must start over.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from xenbench._device import resolve_device
from xenbench._io import open_regular, read_json_bounded, write_text_atomic
from xenbench.models.crossencoder import CEConfig, CrossEncoder
from xenbench.models.loading import build_cross_encoder, load_cross_encoder
from xenbench.models.pairs import InputFormat
from xenbench.data.datasets import Dataset, sample_queries
from xenbench.data.sources import load_wordnet_el
from xenbench._validation import check_choice, check_float, check_int, check_seed
from xenbench.errors import DataError, ParameterError
from xenbench.models.linking import accuracy_at_k, gold_rows, rerank
from xenbench.models.retrievers import DualEncoder

log = logging.getLogger(__name__)
#: The resume state of a run in progress (module docstring); ``LEGACY_STATE_NAME``: an older xenbench's torch pickle.
STATE_NAME = "train_state.safetensors"
LEGACY_STATE_NAME = "train_state.pt"
#: The ``format`` of the JSON in a resume state's header, and the largest state file read (BERT-base with every layer
#: trainable and AdamW's two moments is about 1.3 GB).
STATE_FORMAT = "xenbench-train-state/1"
MAX_STATE_BYTES = 16 * 2**30
_META_KEY = "xenbench_train_state"
_ADAM_KEYS = {"step", "exp_avg", "exp_avg_sq"}
#: The mined examples of a run in progress (mining costs ~11 CPU-min; a resumed run reads them instead).
MINED_NAME = "train_mined.json"


@dataclass
class TrainConfig:
    """Hyper-parameters of :func:`train_cross_encoder` (all seeded, all saved with the checkpoint)."""

    kind: str = "emb"
    pooling: str = "mean"
    domains: list[str] = field(default_factory=list)
    n_negatives: int = 15
    queries_per_step: int = 8
    epochs: int = 2
    max_queries: int | None = None
    lr: float = 1e-4
    head_lr: float = 1e-3
    warmup: float = 0.05
    trainable_layers: int = 6
    scale: float = 20.0
    seed: int = 0
    checkpoint_every: int = 200
    input_format: InputFormat = field(default_factory=InputFormat)


@dataclass
class TrainingData:
    """Flattened training examples: per query, its domain's (queries, items) and 1 + n_negatives item rows."""

    datasets: list[Dataset]
    examples: list[tuple[int, int, np.ndarray]]  # (dataset index, query row, item rows: gold first)


#: The command-line name of each :class:`TrainConfig` field (``xenbench train-ce``), for messages in its words.
CLI_NAMES = {"kind": "--kind", "pooling": "--pooling", "domains": "--domains", "n_negatives": "--negatives",
             "queries_per_step": "--queries-per-step", "epochs": "--epochs", "max_queries": "--max-queries",
             "lr": "--lr", "head_lr": "--head-lr", "trainable_layers": "--trainable-layers", "seed": "--seed",
             "checkpoint_every": "--checkpoint-every"}


def check_config(cfg: TrainConfig, *, owner: str = "TrainConfig", names: dict[str, str] | None = None,
                 n_layers: int | None = None) -> None:
    """Every check of ``cfg`` that needs no model and no data: run before anything is created or loaded.

    Parameters
    ----------
    cfg
        The configuration to check.
    owner, names
        How messages name the owner and the fields (default ``TrainConfig`` and the field names;
        ``xenbench train-ce`` passes its own command and :data:`CLI_NAMES`).
    n_layers
        The backbone's number of layers (bounds ``trainable_layers``); ``None``: the bundled backbone's.

    Raises
    ------
    ParameterError
        Naming the first field that is wrong.
    """
    names = names or {}

    def n(field_name: str) -> str:
        return names.get(field_name, field_name)

    check_choice(cfg.kind, n("kind"), ("cls", "emb"), owner, expected="'cls' or 'emb'")
    check_choice(cfg.pooling, n("pooling"), ("mean", "markers"), owner, expected="'mean' or 'markers'")
    if cfg.pooling == "markers" and cfg.kind != "emb":
        raise ParameterError(n("pooling"), f"'mean' when {n('kind')} is 'cls' (markers is an [EMB]-CE layout)",
                             cfg.pooling, owner)
    if cfg.pooling == "markers" and not cfg.input_format.markers:
        raise ParameterError("input_format.markers", "True for pooling='markers'", False, owner)
    if not cfg.domains or not all(isinstance(d, str) and d for d in cfg.domains):
        raise ParameterError(n("domains"), "a non-empty list of WordNet-EL training domains", cfg.domains, owner)
    check_int(cfg.n_negatives, n("n_negatives"), 1, None, owner)
    check_int(cfg.queries_per_step, n("queries_per_step"), 1, None, owner)
    check_int(cfg.epochs, n("epochs"), 1, None, owner)
    check_int(cfg.max_queries, n("max_queries"), 1, None, owner, allow_none=True,
              expected="an int >= 1 (None: every example)" if not names else "an int >= 1")
    check_float(cfg.lr, n("lr"), 0, None, owner, closed="neither")
    check_float(cfg.head_lr, n("head_lr"), 0, None, owner, closed="neither")
    check_float(cfg.warmup, n("warmup"), 0, 1, owner)
    check_seed(cfg.seed, owner, n("seed"))
    check_int(cfg.checkpoint_every, n("checkpoint_every"), 1, None, owner)
    if n_layers is None:
        from transformers import AutoConfig

        from xenbench.models.crossencoder import bundled_backbone

        n_layers = AutoConfig.from_pretrained(bundled_backbone(), trust_remote_code=False).num_hidden_layers
    check_int(cfg.trainable_layers, n("trainable_layers"), 0, n_layers, owner)


def mine_training_data(domains: list[str], n_negatives: int, *, de: DualEncoder | None = None) -> TrainingData:
    """Gold + DE hard negatives (the top-scored non-gold items of the query's domain) for every query."""
    de = de or DualEncoder()
    datasets, examples = [], []
    for d, name in enumerate(tqdm(domains, desc="mining negatives")):
        ds = load_wordnet_el(name)
        gold = gold_rows(ds)
        _, I = de.fit(ds.items).search(ds.queries, n_negatives + 1)
        for q, g in enumerate(gold):
            if g < 0:
                continue
            negatives = [i for i in I[q] if i != g][:n_negatives]
            if len(negatives) == n_negatives:
                examples.append((d, q, np.array([g, *negatives], dtype=np.int64)))
        datasets.append(ds)
    return TrainingData(datasets, examples)


def _mined(path: Path, cfg: TrainConfig) -> TrainingData:
    """:func:`mine_training_data` for ``cfg``, read from ``path`` when a run with the same domains and negatives
    wrote it there (mining is deterministic: the bundled DE and exact search), else mined and written."""
    key = {"domains": list(cfg.domains), "n_negatives": int(cfg.n_negatives)}
    if path.exists() or path.is_symlink():
        try:
            saved = read_json_bounded(path, MAX_STATE_BYTES, "the mined examples of a run")
        except DataError as err:
            log.warning("%s; mining again", err)
            saved = None
        if isinstance(saved, dict) and saved.get("key") == key:
            datasets = [load_wordnet_el(name) for name in cfg.domains]
            examples = _mined_examples(saved.get("examples"), datasets, cfg.n_negatives)
            if examples is not None:
                return TrainingData(datasets, examples)
            log.warning("%s: its examples do not index the domains' queries and items; mining again", path)
    data = mine_training_data(cfg.domains, cfg.n_negatives)
    write_text_atomic(path, json.dumps({"key": key, "examples": [[d, q, rows.tolist()] for d, q, rows in data.examples]}))
    return data


def _mined_examples(rows: object, datasets: list[Dataset], n_negatives: int) -> list | None:
    """The saved examples as :class:`TrainingData` wants them, or None unless each is ``[d, q, items]`` with a domain
    index, a query row of that domain and ``1 + n_negatives`` item rows of it."""
    if not isinstance(rows, list) or not rows:
        return None
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(type(x) is int for x in row[:2])
                and 0 <= row[0] < len(datasets) and 0 <= row[1] < len(datasets[row[0]].queries)
                and isinstance(row[2], list) and len(row[2]) == n_negatives + 1
                and all(type(i) is int and 0 <= i < len(datasets[row[0]].items) for i in row[2])):
            return None
        out.append((row[0], row[1], np.asarray(row[2], dtype=np.int64)))
    return out


def trainable_parameter_names(ce: CrossEncoder, trainable_layers: int) -> list[str]:
    """Names of the parameters trained: the top ``trainable_layers`` encoder layers and any head."""
    n_layers = ce.model.config.num_hidden_layers
    if not 0 <= trainable_layers <= n_layers:
        raise ParameterError("trainable_layers", f"an int in [0, {n_layers}]", trainable_layers, "TrainConfig")
    layers = {f"encoder.layer.{k}." for k in range(n_layers - trainable_layers, n_layers)}
    names = []
    for name, _ in ce.model.named_parameters():
        bare = name.split(".", 1)[1] if name.startswith("bert.") else name
        if any(bare.startswith(p) for p in layers) or bare.startswith(("pooler.", "classifier.")):
            names.append(name)
    return names


def train_cross_encoder(cfg: TrainConfig, out: str | Path, *, data: TrainingData | None = None,
                        device: str = "auto") -> CrossEncoder:
    """Train a [CLS]-CE (``kind="cls"``) or [EMB]-CE (``kind="emb"``) and save it to ``out``.

    Resumes from ``out/train_state.pt`` when it exists. Returns the trained model (also saved).
    """
    check_config(cfg)  # before the folder exists: a wrong argument leaves nothing behind
    dev = resolve_device(device)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(out, "is a file: expected the training output folder (new, or a run to resume)")
    out.mkdir(parents=True, exist_ok=True)
    done = out / "xenbench_ce.json"
    finished = read_json_bounded(done, MAX_STATE_BYTES, "a trained CE's config") if done.exists() else None
    notes = finished.get("notes") if isinstance(finished, dict) else None
    if isinstance(notes, dict) and _same_config(notes.get("train_config"), cfg):
        log.info("%s already holds a finished run of this config", out)
        return load_cross_encoder(out, device=device)
    # Read (and vet) the resume state before any model is built or negative mined: a bad file costs nothing.
    state_path, legacy = out / STATE_NAME, out / LEGACY_STATE_NAME
    if legacy.exists() or legacy.is_symlink():
        raise DataError(legacy, "a resume state in the torch pickle format of an older xenbench, which is not read (a "
                                "pickle can run code; the state is a safetensors file now): delete it to start the run "
                                "over")
    state = load_state(state_path) if state_path.exists() or state_path.is_symlink() else None
    if state is not None and not _same_config(_jsonable(state["train_config"]), cfg):
        raise ParameterError("cfg", f"the config the run in {out} started with", "a different TrainConfig")
    config = CEConfig(kind=cfg.kind, pooling=cfg.pooling if cfg.kind == "emb" else "mean",
                      scale=cfg.scale if cfg.kind == "emb" and cfg.pooling == "mean" else None,
                      input_format=cfg.input_format)
    ce = build_cross_encoder(config, seed=cfg.seed)
    names = trainable_parameter_names(ce, cfg.trainable_layers)
    config.trained = names
    ce.to(dev)
    params = dict(ce.model.named_parameters())
    for name, p in params.items():
        p.requires_grad_(name in names)
    head = [params[n] for n in names if "classifier" in n or "pooler" in n]
    body = [params[n] for n in names if "classifier" not in n and "pooler" not in n]
    opt = torch.optim.AdamW([{"params": body, "lr": cfg.lr}, {"params": head, "lr": cfg.head_lr}], weight_decay=0.01)
    if state is not None:  # against the model: before the negatives are mined
        check_state(state_path, state, {n: params[n] for n in _optimizer_names(ce, opt)},
                    n_groups=len(opt.param_groups))

    data = data or _mined(out / MINED_NAME, cfg)
    rng = np.random.default_rng(cfg.seed)
    n_ex = len(data.examples) if cfg.max_queries is None else min(cfg.max_queries, len(data.examples))
    chosen = rng.permutation(len(data.examples))[:n_ex]
    # One permutation per epoch, fixed by the seed: a resumed run replays exactly the same batches.
    order = np.concatenate([rng.permutation(chosen) for _ in range(cfg.epochs)])
    steps = math.ceil(len(order) / cfg.queries_per_step)
    warm = max(1, int(cfg.warmup * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm)))
    )
    tokens = [(ce.pairs.encode_queries(ds.queries), ce.pairs.encode_items(ds.items)) for ds in data.datasets]

    step, losses, wall = 0, [], 0.0
    torch.manual_seed(cfg.seed)  # dropout draws; a resumed run restores the generator's state instead
    if state is not None:
        if state["step"] > steps:
            raise DataError(state_path, f"not a resume state of this run: its step {state['step']} is beyond the run's "
                                        f"{steps} steps; delete it to start the run over")
        _restore_state(state, ce, opt, sched)
        step, losses, wall = state["step"], list(state["losses"]), state["wall_s"]
        log.info("resuming %s at step %d/%d", out, step, steps)

    ce.train()
    bar = tqdm(total=steps, initial=step, desc=f"train {cfg.kind}-CE")
    t0 = time.perf_counter()
    while step < steps:
        batch_ex = [data.examples[e] for e in order[step * cfg.queries_per_step : (step + 1) * cfg.queries_per_step]]
        q_ids, i_ids = [], []
        for d, q, rows in batch_ex:
            qt, it = tokens[d]
            q_ids += [qt[q]] * len(rows)
            i_ids += [it[r] for r in rows]
        batch = {k: v.to(dev) for k, v in ce.pairs.collate(q_ids, i_ids).items()}
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            scores = ce(batch).float().view(len(batch_ex), -1)
        loss = torch.nn.functional.cross_entropy(scores, torch.zeros(len(batch_ex), dtype=torch.long, device=dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(body + head, 1.0)
        opt.step()
        sched.step()
        step += 1
        losses.append(loss.item())
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        if step % cfg.checkpoint_every == 0 or step == steps:
            _save_state(state_path, ce, opt, sched, step, losses, wall + time.perf_counter() - t0, cfg)
    bar.close()
    ce.eval()
    wall += time.perf_counter() - t0
    config.notes = {
        "train_config": _jsonable(asdict(cfg)), "steps": steps, "n_examples": int(n_ex),
        "train_wall_s": round(wall, 1), "device": str(dev), "torch": torch.__version__,
        "final_loss_mean_last_100": float(np.mean(losses[-100:])) if losses else None,
    }
    ce.save(out)
    state_path.unlink(missing_ok=True)  # finished: the saved model supersedes the resume state
    (out / MINED_NAME).unlink(missing_ok=True)
    return ce


def _refuse(path: Path, problem: str) -> DataError:
    return DataError(path, f"not a resume state written by xenbench train-ce: {problem}; delete it to start the run "
                           "over")


def _finite_number(value: object, low: float = 0.0) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= low


def load_state(path: Path) -> dict:
    """The resume state written by :func:`_save_state` (module docstring), read without unpickling anything.

    Checked here: a regular file of at most :data:`MAX_STATE_BYTES`, a safetensors file whose header JSON has the
    expected fields and types (``step`` a non-negative int, ``losses`` one finite float per step, ``wall_s`` a finite
    float >= 0, ``train_config`` an object, the learning rates and scheduler counters numbers that agree with
    ``step``), tensors named ``model.<parameter>``, ``optimizer.<index>.<step|exp_avg|exp_avg_sq>`` and ``torch_rng``
    (uint8, the generator's length). What depends on the model (names, shapes, dtypes, finite values) is checked by
    :func:`check_state`, and ``step`` against the run's steps when they are known.

    Returns
    -------
    dict
        ``model`` (name -> tensor), ``optimizer`` (index -> {key -> tensor}), ``torch_rng`` and the header's fields.

    Raises
    ------
    DataError
        Naming the file and the first part that is wrong.
    """
    from safetensors import safe_open

    open_regular(path, MAX_STATE_BYTES, "a resume state of xenbench train-ce").close()  # a FIFO, a device: refused
    try:
        with safe_open(str(path), framework="pt") as f:
            meta, keys = f.metadata() or {}, list(f.keys())
            tensors = {k: f.get_tensor(k) for k in keys}
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error (and others) for a foreign file
        raise _refuse(path, f"not a safetensors file ({type(err).__name__}: {str(err)[:120]})") from None
    try:
        head = json.loads(meta.get(_META_KEY, "null"))
    except (ValueError, RecursionError):
        head = None
    if not isinstance(head, dict) or head.get("format") != STATE_FORMAT:
        raise _refuse(path, f"its header has no {_META_KEY!r} JSON of format {STATE_FORMAT!r}")
    step, losses = head.get("step"), head.get("losses")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise _refuse(path, f"'step' must be a non-negative int, got {str(step)[:40]!r}")
    if not isinstance(losses, list) or len(losses) != step or not all(_finite_number(x, -math.inf) for x in losses):
        raise _refuse(path, f"'losses' must be a list of {step} finite numbers (one per step), got "
                            f"{type(losses).__name__} of {len(losses) if isinstance(losses, list) else '?'}")
    if not _finite_number(head.get("wall_s")):
        raise _refuse(path, f"'wall_s' must be a finite number >= 0, got {str(head.get('wall_s'))[:40]!r}")
    if not isinstance(head.get("train_config"), dict):
        raise _refuse(path, "'train_config' must be an object")
    group_lr, sched = head.get("group_lr"), head.get("scheduler")
    if not isinstance(group_lr, list) or not group_lr or not all(_finite_number(x) for x in group_lr):
        raise _refuse(path, "'group_lr' must be the parameter groups' learning rates (finite numbers >= 0)")
    if not isinstance(sched, dict) or sched.get("last_epoch") != step or sched.get("_step_count") != step + 1 or not (
            isinstance(sched.get("_last_lr"), list) and len(sched["_last_lr"]) == len(group_lr)
            and all(_finite_number(x) for x in sched["_last_lr"])):
        raise _refuse(path, f"'scheduler' must hold last_epoch {step}, _step_count {step + 1} and one finite _last_lr "
                            "per parameter group (the counters of the step the state was written at)")
    rng = tensors.pop("torch_rng", None)
    expected_rng = torch.get_rng_state()
    if rng is None or rng.dtype != expected_rng.dtype or rng.shape != expected_rng.shape:
        got = "none" if rng is None else f"{rng.dtype} of shape {tuple(rng.shape)}"
        raise _refuse(path, f"'torch_rng' must be {expected_rng.dtype} of shape {tuple(expected_rng.shape)}, got {got}")
    model: dict[str, torch.Tensor] = {}
    optimizer: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        kind, _, rest = key.partition(".")
        index, _, name = rest.partition(".")
        if kind == "model" and rest:
            model[rest] = value
        elif kind == "optimizer" and index.isdigit() and name in _ADAM_KEYS:
            optimizer.setdefault(int(index), {})[name] = value
        else:
            raise _refuse(path, f"unexpected tensor {key[:80]!r} (expected model.*, optimizer.<i>.<"
                                f"{'|'.join(sorted(_ADAM_KEYS))}> and torch_rng)")
    return {**head, "model": model, "optimizer": optimizer, "torch_rng": rng}


def check_state(path: Path, state: dict, params: dict[str, torch.nn.Parameter], *, n_groups: int) -> None:
    """Check a resume state's tensors against the parameters being trained (``params``, in the optimizer's order, in
    ``n_groups`` parameter groups).

    The model's tensors must be exactly the trained parameters, each of the parameter's shape and dtype (an int64 or
    float64 tensor is refused, not cast) and finite; AdamW's state, where present, must be of the parameter's index
    with ``exp_avg``/``exp_avg_sq`` of its shape and dtype (``exp_avg_sq`` >= 0), finite, and a ``step`` count that is a
    0-d float32 between 1 and the state's step.

    Raises
    ------
    DataError
        Naming the file and the first tensor that is wrong.
    """
    model, optimizer = state["model"], state["optimizer"]
    if len(state["group_lr"]) != n_groups:
        raise _refuse(path, f"{len(state['group_lr'])} learning rates in 'group_lr', the run's optimizer has "
                            f"{n_groups} parameter groups")
    missing, extra = sorted(params.keys() - model.keys()), sorted(model.keys() - params.keys())
    if missing or extra:
        first = f"missing {missing[0]!r}" if missing else f"unexpected {extra[0]!r}"
        raise _refuse(path, f"its weights are not the ones this run trains ({len(missing)} missing, {len(extra)} "
                            f"unexpected; {first[:120]})")
    for name, p in params.items():
        _check_tensor(path, f"model.{name}", model[name], p)
    index = {k: (name, p) for k, (name, p) in enumerate(params.items())}
    for k, entry in optimizer.items():
        if k not in index:
            raise _refuse(path, f"optimizer state of parameter {k}, but the run trains {len(index)}")
        name, p = index[k]
        if set(entry) != _ADAM_KEYS:
            raise _refuse(path, f"optimizer.{k} must hold {sorted(_ADAM_KEYS)}, got {sorted(entry)}")
        _check_tensor(path, f"optimizer.{k}.exp_avg", entry["exp_avg"], p)
        _check_tensor(path, f"optimizer.{k}.exp_avg_sq", entry["exp_avg_sq"], p)
        if bool((entry["exp_avg_sq"] < 0).any()):
            raise _refuse(path, f"optimizer.{k}.exp_avg_sq holds negative values (a second moment is >= 0)")
        count = entry["step"]
        if count.dtype != torch.float32 or count.shape != () or not 1 <= float(count) <= state["step"]:
            raise _refuse(path, f"optimizer.{k}.step must be a float32 scalar in [1, {state['step']}], got "
                                f"{count.dtype} of shape {tuple(count.shape)}")


def _check_tensor(path: Path, key: str, value: torch.Tensor, like: torch.Tensor) -> None:
    if value.dtype != like.dtype or value.shape != like.shape:
        raise _refuse(path, f"{key[:120]} is {value.dtype} of shape {tuple(value.shape)}, the parameter "
                            f"{like.dtype} of shape {tuple(like.shape)}")
    if not bool(torch.isfinite(value).all()):
        raise _refuse(path, f"{key[:120]} holds NaN or inf")


def _restore_state(state: dict, ce, opt, sched) -> None:
    """Put a checked state (:func:`load_state`, :func:`check_state`) into the model, optimizer, scheduler and RNG.

    The optimizer's and scheduler's hyper-parameters are this run's (its config); only what training changed comes
    from the file: the weights, AdamW's moments and step counts, each group's current learning rate, the scheduler's
    counters and the RNG.
    """
    ce.model.load_state_dict(state["model"], strict=False)
    groups = opt.state_dict()["param_groups"]
    for group, lr in zip(groups, state["group_lr"]):
        group["lr"] = float(lr)
    opt.load_state_dict({"state": {k: dict(v) for k, v in sorted(state["optimizer"].items())},
                         "param_groups": groups})
    counters = sched.state_dict()
    counters.update(last_epoch=state["step"], _step_count=state["step"] + 1,
                    _last_lr=[float(x) for x in state["scheduler"]["_last_lr"]])
    sched.load_state_dict(counters)
    torch.set_rng_state(state["torch_rng"])


def _optimizer_names(ce, opt) -> list[str]:
    """The names of the parameters ``opt`` updates, in its order (the indices of its state)."""
    name_of = {id(p): n for n, p in ce.model.named_parameters()}
    return [name_of[id(p)] for group in opt.param_groups for p in group["params"]]


def _save_state(path: Path, ce, opt, sched, step, losses, wall, cfg) -> None:
    """Write the resume state (module docstring): tensors in a safetensors file, the rest as JSON in its header,
    through a temporary file renamed over ``path``."""
    from safetensors.torch import save_file

    named = dict(ce.model.named_parameters())
    tensors = {f"model.{n}": named[n].detach().cpu().contiguous().clone() for n in _optimizer_names(ce, opt)}
    opt_state = opt.state_dict()
    for k, entry in opt_state["state"].items():
        for key, value in entry.items():
            tensors[f"optimizer.{k}.{key}"] = torch.as_tensor(value).detach().cpu().contiguous().clone()
    tensors["torch_rng"] = torch.get_rng_state()
    counters = sched.state_dict()
    head = {"format": STATE_FORMAT, "step": int(step), "losses": [float(x) for x in losses], "wall_s": float(wall),
            "train_config": _jsonable(asdict(cfg)), "group_lr": [float(g["lr"]) for g in opt_state["param_groups"]],
            "scheduler": {"last_epoch": int(counters["last_epoch"]), "_step_count": int(counters["_step_count"]),
                          "_last_lr": [float(x) for x in counters["_last_lr"]]}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(tensors, tmp, metadata={_META_KEY: json.dumps(head)})
        os.replace(tmp, path)
    except Exception as err:  # noqa: BLE001 - safetensors reports a full disk as its own error
        tmp.unlink(missing_ok=True)
        reason = getattr(err, "strerror", None) or str(err).splitlines()[0][:160]
        raise DataError(path, f"the resume state could not be written ({reason}); the previous one, if any, is "
                              "intact: free space and rerun the same command to resume from it") from None


def _same_config(saved: dict | None, cfg: TrainConfig) -> bool:
    """Whether a saved ``train_config`` is ``cfg``; keys added to :class:`TrainConfig` since (e.g. ``pooling``)
    count as their defaults, so runs saved before a key existed still match. ``checkpoint_every`` is not compared:
    it changes when state is written, never the weights, so a resumed run may save more or less often."""
    if not isinstance(saved, dict):
        return False
    defaults = _jsonable(asdict(TrainConfig()))
    ignore = {"checkpoint_every"}
    a = {k: v for k, v in {**defaults, **saved}.items() if k not in ignore}
    return a == {k: v for k, v in _jsonable(asdict(cfg)).items() if k not in ignore}


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=lambda o: asdict(o) if hasattr(o, "__dataclass_fields__") else str(o)))


def evaluate_rerank(ce: CrossEncoder, domains: list[str], *, n_candidates: int = 64, max_queries: int | None = None,
                    de: DualEncoder | None = None, seed: int = 0, progress: bool = False) -> list[dict]:
    """Accuracy@1 of the DE alone and of the CE re-ranking the DE's top-``n_candidates``, per domain (``progress``: a
    bar of CE pairs scored per domain)."""
    de = de or DualEncoder()
    rows = []
    for name in domains:
        ds = load_wordnet_el(name)
        queries = sample_queries(ds, max_queries, seed)
        gold = gold_rows(ds, queries)
        _, I = de.fit(ds.items).search(queries, n_candidates)
        reranked = rerank(ce, queries, ds.items, I, progress=progress)
        de_acc = accuracy_at_k(I, gold, (1, n_candidates))
        rows.append({"domain": name, "n_queries": len(queries), "de_acc@1": de_acc[1],
                     f"de_recall@{n_candidates}": de_acc[n_candidates],
                     "ce_acc@1": accuracy_at_k(reranked, gold, (1,))[1]})
    return rows
