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
written every ``checkpoint_every`` steps and picked up on restart with the same config. The state file is
read with ``torch.load(weights_only=True)``: it holds only tensors, numbers, strings, lists and dicts, so a
planted ``train_state.pt`` can never run code (a pickle that asks for anything else is refused).
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from xenbench._device import resolve_device
from xenbench._io import write_text_atomic
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
STATE_NAME = "train_state.pt"
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

        n_layers = AutoConfig.from_pretrained(bundled_backbone()).num_hidden_layers
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
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
        if saved.get("key") == key:
            return TrainingData([load_wordnet_el(name) for name in cfg.domains],
                                [(d, q, np.asarray(rows, dtype=np.int64)) for d, q, rows in saved["examples"]])
    data = mine_training_data(cfg.domains, cfg.n_negatives)
    write_text_atomic(path, json.dumps({"key": key, "examples": [[d, q, rows.tolist()] for d, q, rows in data.examples]}))
    return data


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
    if done.is_file() and _same_config(json.loads(done.read_text()).get("notes", {}).get("train_config"), cfg):
        log.info("%s already holds a finished run of this config", out)
        return load_cross_encoder(out, device=device)
    # Read (and vet) the resume state before any model is built or negative mined: a bad file costs nothing.
    state_path = out / STATE_NAME
    state = load_state(state_path) if state_path.exists() else None
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
        ce.model.load_state_dict(state["model"], strict=False)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        step, losses, wall = state["step"], state["losses"], state["wall_s"]
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


def load_state(path: Path) -> dict:
    """The resume state written by :func:`_save_state`, read without unpickling code.

    ``weights_only=True`` lets the unpickler build tensors, numbers, strings, lists, tuples and dicts only; a
    file that asks for any other object (a planted ``__reduce__``, a class) is refused before it runs.

    Raises
    ------
    DataError
        Naming the file: not a state this module wrote (unreadable, or asking for other objects).
    """
    import pickle

    if not path.is_file():  # a FIFO would block the load
        raise DataError(path, "not a regular file (a folder, FIFO or device): delete it to start the run over")
    try:
        with warnings.catch_warnings():  # "Detected pickle protocol 4": noise about a file refused anyway
            warnings.simplefilter("ignore", UserWarning)
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's text suggests weights_only=False, the one thing not to do with a file of unknown origin:
        # keep only the line that says what the file asked for.
        found = re.search(r"GLOBAL [\w.]+|Unsupported operand \d+", str(err))
        asked = f"it asks for {found.group(0)}" if found else ""
        raise DataError(path, "refused: the unpickler may build only tensors, numbers, strings, lists and dicts"
                              f"{f' and {asked}' if asked else ''}; it was not written by xenbench train-ce and was "
                              "not run: delete it to start the run over") from None
    except Exception as err:  # torch raises RuntimeError, EOFError, ... for a truncated or foreign file
        raise DataError(path, f"not a resume state written by xenbench train-ce ({type(err).__name__}: the file is "
                              "truncated or of another format); delete it to start the run over") from None
    keys = {"model", "optimizer", "scheduler", "torch_rng", "step", "losses", "wall_s", "train_config"}
    if not isinstance(state, dict) or not keys <= state.keys():
        raise DataError(path, f"not a resume state written by xenbench train-ce (expected the keys {sorted(keys)}); "
                              "delete it to start the run over")
    return state


def _save_state(path: Path, ce, opt, sched, step, losses, wall, cfg) -> None:
    trained = {n: p.detach().cpu() for n, p in ce.model.named_parameters() if p.requires_grad}
    state = {"model": trained, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
             "torch_rng": torch.get_rng_state(), "step": step, "losses": losses, "wall_s": wall,
             "train_config": asdict(cfg)}
    tmp = path.with_suffix(".tmp")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:  # torch's writer reports a full disk as a RuntimeError
        tmp.unlink(missing_ok=True)
        reason = getattr(err, "strerror", None) or str(err).splitlines()[0][:160]
        raise DataError(path, f"the resume state could not be written ({reason}); the previous one, if any, is "
                              "intact: free space and rerun the same command to resume from it") from None


def _same_config(saved: dict | None, cfg: TrainConfig) -> bool:
    """Whether a saved ``train_config`` is ``cfg``; keys added to :class:`TrainConfig` since (e.g. ``pooling``)
    count as their defaults, so runs saved before a key existed still match. ``checkpoint_every`` is not compared:
    it changes when state is written, never the weights, so a resumed run may save more or less often."""
    if saved is None:
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
