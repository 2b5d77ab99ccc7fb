"""What a run is about, said from its parameters: the dataset and the CE it actually used, in one Markdown paragraph.

A notebook's intro describes its question in general; the data and CE of *this* run are named here, generated from
the resolved parameters (:func:`xenbench.harness.check_namespace` shows :func:`run_markdown` under the provenance
line), so a report on a user's BEIR folder and CE says so instead of describing the bundled WordNet-EL.

Every user string (a folder, a hub id, a domain) is a code span, or, in prose, HTML-escaped with Markdown's punctuation
written as character references, so a name such as ``<b>_x_</b>`` reads as itself and changes no markup; the paragraph
is shown through :func:`xenbench._markup.show_markdown` (raw HTML off).
"""
from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dataset_phrase", "ce_phrase", "run_markdown"]

# Markdown's inline punctuation, as character references: a name holding them stays text (after html.escape).
_MARKDOWN = str.maketrans({c: f"&#{ord(c)};" for c in "\\`*_[]{}()#+!|~"})


def _code(text: Any) -> str:
    """``text`` as a Markdown code span, shown literally whatever it holds (a span's text is neither markup nor an entity;
    its fence is one backtick longer than any run inside). Rendered by :mod:`xenbench._markup`, raw HTML off."""
    body = str(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", body)), default=0) + 1)
    pad = " " if body[:1] == "`" or body[-1:] == "`" else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def dataset_phrase(spec: Any) -> str:
    """A dataset spec of :func:`xenbench.data.sources.load_dataset` in words: ``"wordnet-el:noun.food"`` -> "the
    bundled WordNet-EL domain ``noun.food``", ``"beir:/data/mine"`` -> "the BEIR folder ``/data/mine``",
    ``"zeshel:/z:yugioh"`` -> "the ZESHEL world ``yugioh`` of ``/z``"; notebook 06's comma-separated
    bundled domains and ``wordnet-el:all`` too. A list of specs is joined with "and"."""
    if isinstance(spec, (list, tuple)):
        if spec and all(str(s).startswith("wordnet-el:") and str(s) != "wordnet-el:all" for s in spec):
            return dataset_phrase(",".join(str(s).partition(":")[2] for s in spec))  # one list of bundled domains
        return " and ".join(dataset_phrase(s) for s in spec) if spec else "no dataset"
    text = str(spec)
    kind, sep, rest = text.partition(":")
    if not sep:  # 06's corpus: bundled domains, comma-separated
        kind, rest = "wordnet-el", text
    if kind == "wordnet-el":
        domains = [d for d in rest.split(",") if d]
        if domains == ["all"]:
            return "every bundled WordNet-EL domain"
        noun = "domain" if len(domains) == 1 else "domains"
        return f"the bundled WordNet-EL {noun} " + ", ".join(_code(d) for d in domains)
    if kind == "beir":
        return f"the BEIR folder {_code(rest)}"
    if kind == "zeshel":
        root, _, world = rest.rpartition(":")
        return f"the ZESHEL world {_code(world)} of {_code(root)}" if root else f"the ZESHEL data {_code(rest)}"
    return f"the dataset {_code(text)}"


def ce_phrase(params: Mapping[str, Any]) -> str | None:
    """The CE(s) a run's parameters name, in words (None when the notebook uses no CE).

    With a non-empty ``model``: that CE (``ce`` is its name, :func:`xenbench.harness.check_namespace`), scored on
    demand on a seeded sample; else the score store ``scores_dir``/``ce``; else the CE folders or stores ``ces``.
    """
    if params.get("model"):
        sample = " × ".join(f"{params[k]} {w}" if params.get(k) is not None else f"all {w}"
                            for k, w in (("max_queries", "queries"), ("max_items", "items")))
        named = "" if str(params.get("ce")) == str(params["model"]) else f" ({_code(params['model'])})"
        return (f"the CE {_code(params.get('ce') or params['model'])}{named}, scored on demand on a seeded sample "
                f"of {sample} (cached)")
    if params.get("ce") and params.get("scores_dir"):
        return (f"the CE {_code(params['ce'])}: its exact scores, read from the score store {_code(params['ce'])} in "
                f"{_code(params['scores_dir'])}")
    if "ces" in params:
        where = f" in {_code(params['scores_dir'])}" if params.get("scores_dir") else ""
        if not params["ces"]:
            return f"every CE score store{where}"
        return "the CEs " + ", ".join(_code(c) for c in params["ces"]) + where
    return None


def run_markdown(params: Mapping[str, Any]) -> str:
    """One Markdown paragraph naming the data and the CE of a run with the resolved ``params`` (those of
    :func:`xenbench.harness.check_namespace`): "**This run.** Data: ... CE: ... First stages: ...".

    Parameters read where present: ``dataset``, ``datasets``, ``eval_datasets``, ``model``/``ce``/``scores_dir``,
    ``ces``, ``first_stage``/``first_stages``, ``max_queries``/``max_items``. Every user string is escaped.
    """
    parts = []
    data = [params[k] for k in ("dataset", "datasets") if params.get(k)]
    if data:
        parts.append("Data: " + " and ".join(dataset_phrase(d) for d in data) + ".")
    if params.get("eval_datasets"):
        parts.append("Evaluated on: " + dataset_phrase(params["eval_datasets"]) + ".")
    ce = ce_phrase(params)
    if ce is not None:
        parts.append("CE: " + ce + ".")
    stages = params.get("first_stages") or ([params["first_stage"]] if params.get("first_stage") else [])
    if stages:
        parts.append("First stage" + ("s" if len(stages) > 1 else "") + ": " + ", ".join(_code(s) for s in stages)
                     + ".")
    return "**This run.** " + " ".join(parts) if parts else ""
