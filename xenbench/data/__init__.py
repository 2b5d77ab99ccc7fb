"""Layer 1, data: datasets and what is stored on disk.

``datasets`` (the one :class:`Dataset` type), ``readers`` (bounded, validated JSONL/TSV reading), ``beir`` (BEIR
folders, read and written), ``trec`` (TREC run and qrels files, read and written), ``zeshel`` (ZESHEL worlds), ``sources`` (``load_dataset``'s one-string specs and the
bundled WordNet-EL domains), ``wordnet`` (building the bundled WordNet-EL data), ``store`` (on-disk score matrices,
:class:`~xenbench.data.store.ScoreStore`). The public names of ``datasets``, ``beir``, ``zeshel`` and ``sources`` are
re-exported here, so ``xb.data.load_dataset`` works; ``xb.trec`` is the TREC module.
"""
from __future__ import annotations

from xenbench._lazy import submodules
from xenbench.data.beir import *  # noqa: F403
from xenbench.data.beir import __all__ as _beir_all
from xenbench.data.datasets import *  # noqa: F403
from xenbench.data.datasets import __all__ as _datasets_all
from xenbench.data.sources import *  # noqa: F403
from xenbench.data.sources import __all__ as _sources_all
from xenbench.data.zeshel import *  # noqa: F403
from xenbench.data.zeshel import __all__ as _zeshel_all

__all__ = [*_datasets_all, *_beir_all, *_zeshel_all, *_sources_all]
__getattr__, __dir__ = submodules(__name__, {"store": "store", "wordnet": "wordnet", "trec": "trec"})
