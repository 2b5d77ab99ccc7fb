"""Layer 1, data: datasets and what is stored on disk.

``datasets`` (BEIR, ZESHEL and WordNet-EL loaders; :class:`Dataset`, whose public names are re-exported here, so
``xb.data.load_dataset`` works), ``wordnet`` (building the bundled WordNet-EL data), ``store`` (on-disk score
matrices, :class:`~xenbench.data.store.ScoreStore`).
"""
from __future__ import annotations

from xenbench._lazy import submodules
from xenbench.data.datasets import *  # noqa: F403
from xenbench.data.datasets import __all__ as _datasets_all

__all__ = list(_datasets_all)
__getattr__, __dir__ = submodules(__name__, {"store": "store", "wordnet": "wordnet"})
