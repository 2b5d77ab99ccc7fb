"""Layer 2, models: what turns (query, item) text into scores.

``crossencoder`` ([CLS]-CE and [EMB]-CE, ANNCUR §2.6), ``retrievers`` (dual encoder and TF-IDF), ``scoring`` (the
batched query × item scorer), ``packed`` (its padding-free forward), ``probe`` (a CE's rate and score spread on a few
pairs), ``fingerprint`` (the score-cache key; a CE fingerprinted once, loaded once per process), ``linking``
(entity-linking accuracy of a CE re-ranking), ``train`` (CE training, ANNCUR §4 / the ZESHEL recipe).
"""
from __future__ import annotations

from xenbench._lazy import submodules

__getattr__, __dir__ = submodules(__name__, {m: m for m in ("crossencoder", "fingerprint", "linking", "packed", "probe",
                                                            "retrievers", "scoring", "train")})
