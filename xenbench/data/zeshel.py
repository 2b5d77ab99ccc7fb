"""ZESHEL (Logeswaran et al., 2019): one world's documents and mentions as a dataset of mention queries.

``documents/<world>.json`` and ``mentions/<split>.json`` (JSON Lines despite the suffix); each mention becomes a
query made of its context window, with the mention's character span (:func:`load_zeshel`).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from xenbench._validation import PY_INT, check_int
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.readers import (
    SeenIds,
    get_id,
    get_int,
    get_str,
    iter_jsonl,
    nonempty_text,
    require_dir,
    require_file,
)
from xenbench.errors import DataError, ParameterError
from xenbench.provenance import record_input

__all__ = ["load_zeshel"]


def _read_zeshel_documents(path: Path) -> dict[str, Item]:
    documents: dict[str, Item] = {}
    seen = SeenIds(path, "document_id")
    for lineno, obj in iter_jsonl(path):
        doc_id = get_id(obj, "document_id", path, lineno)
        seen.add(doc_id, lineno)
        title = get_str(obj, "title", path, lineno)
        documents[doc_id] = Item(doc_id, title, nonempty_text(title, get_str(obj, "text", path, lineno), path, lineno))
    if not documents:
        raise DataError(path, "empty corpus: no documents")
    return documents


def _mention_window(tokens: list[str], start: int, end: int, context: int) -> tuple[str, tuple[int, int]]:
    """Text of tokens ``start - context .. end + context`` (``end`` inclusive) and the mention's char span."""
    lo, hi = max(0, start - context), min(len(tokens), end + 1 + context)
    left = " ".join(tokens[lo:start])
    mention = " ".join(tokens[start : end + 1])
    char_start = len(left) + (1 if left else 0)  # +1: the space joining the left context
    text = " ".join(tokens[lo:hi])
    return text, (char_start, char_start + len(mention))


def load_zeshel(
    root: str | os.PathLike[str],
    world: str,
    *,
    splits: Iterable[str] | None = None,
    context_tokens: int = 32,
) -> Dataset:
    """Load one world of ZESHEL (Logeswaran et al., 2019) as a dataset of mention queries.

    Parameters
    ----------
    root
        Holds ``documents/<world>.json`` (lines ``{"title", "text", "document_id"}``) and
        ``mentions/<split>.json`` (lines with ``mention_id``, ``context_document_id``, ``corpus``,
        ``start_index``, ``end_index``, ``label_document_id``, ...). Both are JSON Lines.
    world
        The world (``corpus`` value) to load, e.g. ``"yugioh"``; other worlds' mentions are skipped.
    splits
        Mention files to read (``mentions/<split>.json``); each becomes a split of the same name. ``None``:
        every ``mentions/*.json`` that exists (train, val, test first), so a folder with only
        ``mentions/test.json`` loads.
    context_tokens
        Whitespace tokens kept on each side of the mention.

    Returns
    -------
    Dataset
        Items = the world's documents; one query per mention (id ``mention_id``) whose text is the
        context window joined by single spaces and whose ``mention`` is the character span of the
        mention tokens in it; ``gold[mention_id] = [label_document_id]``. Splits without any mention
        of this world are left out (each ZESHEL world belongs to one split only).

    Raises
    ------
    DataError
        Missing file, malformed line, span outside the context document's tokens (``start_index``
        and ``end_index`` are inclusive token positions in ``text.split()``), context or label
        document not in the world, duplicate mention id, or no mention of the world at all.
    """
    owner = "load_zeshel"
    if not isinstance(world, str) or not world or any(c in world for c in "/\\"):
        raise ParameterError("world", "a world name such as 'yugioh'", world, owner)
    check_int(context_tokens, "context_tokens", 0, None, owner, types=PY_INT, expected="an integer >= 0")
    if isinstance(splits, str):  # "test" would otherwise read splits "t", "e", "s", "t"
        raise ParameterError("splits", "an iterable of split names", splits, owner)

    base = require_dir(Path(root))
    if splits is None:
        found = sorted(p.stem for p in (base / "mentions").glob("*.json") if p.is_file())
        order = {"train": 0, "val": 1, "test": 2}
        splits = sorted(found, key=lambda x: (order.get(x, 3), x))
        if not splits:
            raise DataError(base / "mentions", "no mention files: expected mentions/<split>.json (e.g. test.json)")
    splits = list(splits)
    if not splits or not all(isinstance(x, str) and x and "/" not in x for x in splits):
        raise ParameterError("splits", "split names such as ['test'] (files mentions/<split>.json)", splits, owner)
    doc_path = base / "documents" / f"{world}.json"
    if not doc_path.exists():
        worlds = sorted(p.stem for p in (base / "documents").glob("*.json"))
        raise DataError(doc_path, f"no such file (unknown world {world!r}; worlds found: {worlds})")
    documents = _read_zeshel_documents(doc_path)
    mention_paths = [require_file(base / "mentions" / f"{split}.json") for split in splits]
    for path in [doc_path, *mention_paths]:  # the files read (not the whole root): their digests go into provenance
        record_input("dataset", path)

    queries: list[Query] = []
    gold: dict[str, list[str]] = {}
    split_ids: dict[str, list[str]] = {}
    first_seen: dict[str, tuple[Path, int]] = {}  # mention ids must be unique across split files
    for split, path in zip(splits, mention_paths):
        for lineno, obj in iter_jsonl(path):
            if get_str(obj, "corpus", path, lineno) != world:
                continue
            mention_id = get_id(obj, "mention_id", path, lineno)
            if mention_id in first_seen:
                where, line = first_seen[mention_id]
                at = f"line {line}" if where == path else f"{where}:{line}"
                raise DataError(path, f"duplicate mention_id {mention_id!r} (first seen on {at})", lineno)
            first_seen[mention_id] = (path, lineno)
            context_id = get_id(obj, "context_document_id", path, lineno)
            label_id = get_id(obj, "label_document_id", path, lineno)
            for key, doc_id in (("context_document_id", context_id), ("label_document_id", label_id)):
                if doc_id not in documents:
                    raise DataError(path, f"{key} {doc_id!r} is not a document of world {world!r}", lineno)
            start = get_int(obj, "start_index", path, lineno)
            end = get_int(obj, "end_index", path, lineno)
            # Split on demand rather than caching every document's tokens: memory stays one corpus.
            tokens = documents[context_id].text.split()
            if not 0 <= start <= end < len(tokens):
                raise DataError(
                    path,
                    f"mention token span [{start}, {end}] out of range for context document {context_id!r}"
                    f" with {len(tokens)} tokens (need 0 <= start_index <= end_index < {len(tokens)})",
                    lineno,
                )
            surface = obj.get("text")
            if surface is not None and " ".join(str(surface).split()).lower() != " ".join(tokens[start : end + 1]).lower():
                raise DataError(path, f"mention text {surface!r} disagrees with its span [{start}, {end}] in context "
                                      f"document {context_id!r}, which reads {' '.join(tokens[start : end + 1])!r}",
                                lineno)
            text, span = _mention_window(tokens, start, end, context_tokens)
            queries.append(Query(mention_id, text, span))
            gold[mention_id] = [label_id]
            split_ids.setdefault(split, []).append(mention_id)
    if not queries:
        raise DataError(base / "mentions", f"no mention of world {world!r} in {[p.name for p in mention_paths]}")
    return Dataset(f"zeshel:{world}", list(documents.values()), queries, gold, split_ids)
