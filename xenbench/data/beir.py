"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``, read and written.

:func:`load_beir` reads a folder (every qrels file is a split; gold is the pairs with score > 0); :func:`save_beir`
writes a :class:`~xenbench.data.datasets.Dataset` that :func:`load_beir` reads back equal. Lines are read bounded
and checked (:mod:`~xenbench.data.readers`): a malformed one fails naming its file and line.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from xenbench._io import write_text_atomic
from xenbench._validation import PY_INT, is_int
from xenbench.data.datasets import Dataset, Item, Query
from xenbench.data.readers import (
    SeenIds,
    TextCutter,
    get_id,
    get_str,
    iter_jsonl,
    iter_lines,
    nonempty_text,
    require_dir,
    require_file,
)
from xenbench.errors import DataError, ParameterError
from xenbench.provenance import record_input

__all__ = ["QRELS_HEADER", "load_beir", "save_beir"]

#: Header every ``qrels/<split>.tsv`` must start with (BEIR's own format).
QRELS_HEADER: tuple[str, str, str] = ("query-id", "corpus-id", "score")


def _read_beir_corpus(path: Path) -> list[Item]:
    items: list[Item] = []
    seen = SeenIds(path, "_id")
    cut = TextCutter(path)
    for lineno, obj in iter_jsonl(path):
        item_id = get_id(obj, "_id", path, lineno)
        seen.add(item_id, lineno)
        # "title" may be absent: several BEIR-style corpora only have text.
        title = cut(get_str(obj, "title", path, lineno, default=""), lineno)
        text = cut(get_str(obj, "text", path, lineno), lineno)
        items.append(Item(item_id, title, nonempty_text(title, text, path, lineno)))
    if not items:
        raise DataError(path, "empty corpus: no items")
    cut.report()
    return items



def _read_beir_queries(path: Path) -> list[Query]:
    queries: list[Query] = []
    seen = SeenIds(path, "_id")
    cut = TextCutter(path)
    for lineno, obj in iter_jsonl(path):
        query_id = get_id(obj, "_id", path, lineno)
        seen.add(query_id, lineno)
        text = cut(get_str(obj, "text", path, lineno), lineno)
        if not text.strip():  # as for items: a query of separator tokens only is a meaningless row
            raise DataError(path, "query has an empty text (nothing to score)", lineno)
        queries.append(Query(query_id, text, _get_mention(obj, text, path, lineno)))
    if not queries:
        raise DataError(path, "no queries: the file is empty")
    cut.report()
    return queries


def _get_mention(obj: dict[str, Any], text: str, path: Path, lineno: int) -> tuple[int, int] | None:
    value = obj.get("mention")
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or any(not is_int(v, types=PY_INT) for v in value)
    ):
        raise DataError(path, f"field 'mention' must be [start, end] with two integers, got {value!r}", lineno)
    start, end = value
    if not 0 <= start < end <= len(text):
        raise DataError(
            path,
            f"mention span [{start}, {end}] out of range for text of length {len(text)}"
            f" (need 0 <= start < end <= {len(text)})",
            lineno,
        )
    return (start, end)


def _read_qrels(path: Path, query_ids: Mapping[str, int], item_ids: Mapping[str, int]) -> dict[str, list[str]]:
    """Positive judgements of one qrels file: query id -> item ids, in order of first appearance."""
    positives: dict[str, list[str]] = {}
    n_rows = 0
    lines = iter_lines(path)
    header = next(lines, (1, ""))[1].rstrip("\r\n")
    if tuple(header.split("\t")) != QRELS_HEADER:
        raise DataError(path, f"bad header {header!r}, expected 'query-id<TAB>corpus-id<TAB>score'", 1)
    for lineno, line in lines:
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 3:
            raise DataError(
                path, f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(cols)}", lineno
            )
        qid, cid, raw_score = cols
        n_rows += 1
        try:
            score = float(raw_score)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataError(path, f"score {raw_score!r} is not a number", lineno)
        if qid not in query_ids:
            raise DataError(path, f"unknown query id {qid!r} (not in queries.jsonl)", lineno)
        if cid not in item_ids:
            raise DataError(path, f"unknown corpus id {cid!r} (not in corpus.jsonl)", lineno)
        if score > 0:  # BEIR convention: 0 (or negative) marks a judged non-relevant pair
            golds = positives.setdefault(qid, [])
            if cid not in golds:
                golds.append(cid)
    if n_rows and not positives:
        # A header-only file is an empty split (save_beir writes one); judged rows without a single positive are a
        # mistake (every score 0, or relevance written in the wrong column) that would leave the split without gold.
        raise DataError(path, f"no positive pair: {n_rows} judged row(s), none with score > 0 (BEIR: score > 0 marks a "
                              "relevant pair)")
    return positives


def load_beir(folder: str | os.PathLike[str], *, name: str | None = None) -> Dataset:
    """Load a BEIR-format folder.

    Parameters
    ----------
    folder
        Holds ``corpus.jsonl`` (``_id``, ``text``, optional ``title``), ``queries.jsonl`` (``_id``,
        ``text``, optional ``"mention": [start, end]`` character span, end exclusive) and
        ``qrels/<split>.tsv`` files (header ``query-id<TAB>corpus-id<TAB>score``).
    name
        Dataset name; defaults to the folder's name.

    Returns
    -------
    Dataset
        Items and queries in file order. Each qrels file is a split listing the queries with at
        least one positive (score > 0) pair, in order of first appearance; gold merges the
        positives of all qrels files. Queries in no qrels file are kept, without gold.

    Raises
    ------
    DataError
        On a missing file/folder or any malformed line (file, line and problem in the message).
    """
    root = require_dir(Path(folder))
    record_input("dataset", root)  # its digest goes into the run's provenance
    items = _read_beir_corpus(require_file(root / "corpus.jsonl"))
    queries = _read_beir_queries(require_file(root / "queries.jsonl"))
    qrels_dir = require_dir(root / "qrels")
    qrels_files = sorted(p for p in qrels_dir.glob("*.tsv") if p.is_file())
    if not qrels_files:
        raise DataError(qrels_dir, "no qrels files: expected at least one <split>.tsv")

    dataset = Dataset(name if name is not None else root.name, items, queries, {}, {})
    query_index, item_index = dataset.query_index, dataset.item_index
    for path in qrels_files:
        positives = _read_qrels(path, query_index, item_index)
        dataset.splits[path.stem] = list(positives)
        for qid, golds in positives.items():
            merged = dataset.gold.setdefault(qid, [])
            merged.extend(g for g in golds if g not in merged)
    if not dataset.gold:
        raise DataError(qrels_dir, f"no positive pair in {[p.name for p in qrels_files]}: no query has gold, so nothing"
                                   " can be evaluated (BEIR: score > 0 marks a relevant pair)")
    return dataset


def _check_savable(dataset: Dataset) -> None:
    """Refuse datasets whose content BEIR files cannot hold, instead of losing it silently."""
    owner = "save_beir"
    for attr in ("items", "queries"):
        ids = [row.id for row in getattr(dataset, attr)]
        if len(set(ids)) != len(ids):
            raise ParameterError("dataset", f"a dataset with unique {attr} ids", dataset, owner)
        bad = [i for i in ids if not isinstance(i, str) or not i or any(c in i for c in "\t\r\n")]
        if bad:
            expected = f"{attr} ids that are non-empty strings without tabs/newlines"
            raise ParameterError("dataset", expected, bad[:5], owner)
    if not dataset.items:
        raise ParameterError("dataset", "a dataset with at least one item", dataset, owner)
    item_index, query_index = dataset.item_index, dataset.query_index
    for qid, golds in dataset.gold.items():
        if qid not in query_index or any(g not in item_index for g in golds):
            raise ParameterError("dataset", "gold naming only its own queries and items", {qid: golds}, owner)
    in_splits = set()
    for split, ids in dataset.splits.items():
        if not split or split.startswith(".") or any(c in split for c in "/\\\0"):
            raise ParameterError("dataset", "split names usable as file names", split, owner)
        no_gold = [q for q in ids if not dataset.gold.get(q)]
        if no_gold:
            # qrels only record judged pairs: a member without gold would vanish from the split.
            raise ParameterError("dataset", f"split {split!r} to hold only queries with gold", no_gold[:5], owner)
        in_splits.update(ids)
    orphans = [q for q, golds in dataset.gold.items() if golds and q not in in_splits]
    if orphans:
        # BEIR keeps gold only inside qrels/<split>.tsv: gold outside every split would be lost.
        raise ParameterError(
            "dataset", "every query with gold in some split (see Dataset.split_queries)", orphans[:5], owner
        )


def save_beir(dataset: Dataset, folder: str | os.PathLike[str]) -> Path:
    """Write ``dataset`` as a BEIR folder that :func:`load_beir` reads back equal.

    Parameters
    ----------
    dataset
        Every split member must have gold and every query with gold must be in some split (true
        of anything the loaders and :meth:`Dataset.split_queries` produce): BEIR stores gold only
        as ``qrels/<split>.tsv`` rows. Gold pairs are written with score 1.
    folder
        Created if missing. Files are written via a temporary file and ``os.replace``.

    Returns
    -------
    Path
        ``folder``.

    Raises
    ------
    ParameterError
        If the dataset cannot be stored without loss (see above), or ``folder/qrels`` already holds
        ``.tsv`` files of other splits (they would be read back as extra splits).
    """
    _check_savable(dataset)
    root = Path(folder)
    qrels_dir = root / "qrels"
    stale = sorted(p.name for p in qrels_dir.glob("*.tsv") if p.stem not in dataset.splits)
    if stale:
        raise ParameterError("folder", "a folder without qrels of other splits", f"{qrels_dir}: {stale}", "save_beir")
    qrels_dir.mkdir(parents=True, exist_ok=True)

    def dumps(obj: dict[str, Any]) -> str:
        return json.dumps(obj, ensure_ascii=False) + "\n"

    corpus = (dumps({"_id": it.id, "title": it.title, "text": it.text}) for it in dataset.items)
    write_text_atomic(root / "corpus.jsonl", corpus)

    def query_line(q: Query) -> str:
        obj: dict[str, Any] = {"_id": q.id, "text": q.text}
        if q.mention is not None:
            obj["mention"] = list(q.mention)
        return dumps(obj)

    write_text_atomic(root / "queries.jsonl", (query_line(q) for q in dataset.queries))
    for split, ids in dataset.splits.items():
        rows = (f"{qid}\t{gid}\t1\n" for qid in ids for gid in dataset.gold[qid])
        write_text_atomic(qrels_dir / f"{split}.tsv", ["\t".join(QRELS_HEADER) + "\n", *rows])
    return root
