"""Layer 4, studies: what the notebooks run and conclude, built from the methods; one driver per notebook.

Drivers (a notebook calls its own as ``xb.studies.<name>``): ``stats`` (00, 01: dataset and score statistics),
``rank`` (02: [CLS]-CE vs [EMB]-CE rank), ``adacur`` (03: ANNCUR and ADACUR at equal budget), ``axn`` (04: AXN's
λ), ``pefa`` (05: PEFA's λ and its gain over the DE), ``ccsa`` (06: CCSA's balance and retrieval), ``compare`` (07:
every method side by side); ``methods``: the one registry of methods they compare (03, 04, 07), open to yours;
``protocol``: the one split type, settings chosen on dev, paired tests and the one verdict rule (03–07);
``notebooks``: the one table of notebooks (each one's driver, findings topic and registered functions). Their
inputs: ``setup`` (03, 04, 07: the exact score matrix of one CE), ``splits``
(05: pooled labelled queries and their split regimes), ``corpus`` (06: a DE-embedded corpus); ``labels`` (03, 04,
05, 07: ranked lists scored against the relevance labels and written out as TREC run files). ``findings`` (each
notebook's conclusions, generated from its results JSON), ``witnesses`` (cells of each committed result, re-derived
with today's code) and ``records`` (the raw per-run and per-query records of a results file, and every summary
re-derived from them).
"""
from __future__ import annotations

from xenbench._lazy import submodules

__getattr__, __dir__ = submodules(
    __name__, {m: m for m in ("adacur", "axn", "ccsa", "compare", "corpus", "findings", "labels", "methods", "notebooks",
                              "pefa", "protocol", "rank", "records", "setup", "splits", "stats", "witnesses")})
