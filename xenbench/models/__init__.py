"""Layer 2, models: what turns (query, item) text into scores.

The cross-encoder: ``crossencoder`` (the module: [CLS]-CE, [EMB]-CE of ANNCUR §2.6, LLM rerankers, and its config),
``pairs`` (how a pair becomes token ids, once per query and item; ``templates``: a chat template rendered under
bounds), ``references`` (a model named by folder, ``.ckpt`` + base or hub id, resolved one way), ``loading`` (where a
CE comes from: xenbench, sentence-transformers and Hugging Face folders, ``.ckpt`` files, a fresh head; bad folders
refused). ``scorers``: the scorer protocol the engine accepts besides its own CEs (sentence-transformers objects,
plain callables). Scoring with it: ``scoring`` (the engine: batched, length-sorted, in memory), ``packed`` (its padding-free forward), ``jobs``
(resumable scoring into a score store, ``xenbench score``), ``distributed`` (their Ray backend), ``cache`` (the
on-demand score cache of notebooks 03/04/07), ``fingerprint`` (the score-cache key; a CE fingerprinted once, loaded
once per process), ``probe`` (a CE's rate and score spread on a few pairs). Beside it: ``retrievers`` (dual encoder
and TF-IDF), ``linking`` (entity-linking accuracy of a CE re-ranking), ``train`` (CE training, ANNCUR §4 / the
ZESHEL recipe).
"""
from __future__ import annotations

from xenbench._lazy import submodules

__getattr__, __dir__ = submodules(
    __name__, {m: m for m in ("cache", "crossencoder", "distributed", "fingerprint", "jobs", "linking", "loading",
                              "packed", "pairs", "probe", "references", "retrievers", "scorers", "scoring",
                              "templates", "train")})
