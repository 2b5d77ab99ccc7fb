"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``, read and written.

:func:`load_beir` reads a folder (every qrels file is a split, its scores the graded relevance of
:attr:`Dataset.qrels <xenbench.data.datasets.Dataset>`; gold is the pairs with score > 0); :func:`save_beir` writes a
:class:`~xenbench.data.datasets.Dataset` that :func:`load_beir` reads back equal. A qrels file may hold BEIR's
format or TREC's (``query-id 0 doc-id grade``, told apart by the file's shape or named ``<split>.qrels``). Lines are read bounded
and checked (:mod:`~xenbench.data.readers`): a malformed one fails naming its file and line.
"""
from __future__ import annotations

import itertools
import json
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
from xenbench.data.trec import QRELS_FORMAT, parse_grade
from xenbench.errors import DataError, ParameterError
from xenbench.provenance import record_input

__all__ = ["QRELS_HEADER", "TREC_SUFFIXES", "load_beir", "save_beir"]

#: Header of a BEIR ``qrels/<split>.tsv`` (BEIR's own format; a file of TREC qrels lines is read by its shape).
QRELS_HEADER: tuple[str, str, str] = ("query-id", "corpus-id", "score")
#: Suffixes of qrels files read as TREC qrels by name (``qrels/<split>.qrels``, ``qrels/<split>.txt``).
TREC_SUFFIXES: tuple[str, ...] = (".qrels", ".txt")


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


def _is_trec_qrels(first: str) -> bool:
    """Whether the first line of a qrels file has the shape of a TREC qrels line (4 columns, an integer grade)."""
    cols = first.split()
    if len(cols) != 4 or first.rstrip("\r\n").split("\t") == list(QRELS_HEADER):
        return False
    try:
        return float(cols[3]).is_integer()
    except ValueError:
        return False


def _read_qrels(path: Path, query_ids: Mapping[str, int], item_ids: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Every judgement of one qrels file: query id -> {item id: grade}, in order of first appearance.

    The format is read from the file's shape: BEIR's (header ``query-id<TAB>corpus-id<TAB>score``) or TREC's
    (lines ``query-id 0 doc-id grade``, no header); a ``.qrels`` or ``.txt`` file is TREC's by name.
    """
    judged: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    lines = iter_lines(path)
    header = next(lines, (1, ""))[1].rstrip("\r\n")
    trec = path.suffix in TREC_SUFFIXES or _is_trec_qrels(header)
    if trec:
        rows = ((n, _trec_fields(line, path, n)) for n, line in itertools.chain([(1, header)], lines))
    elif tuple(header.split("\t")) != QRELS_HEADER:
        raise DataError(path, f"bad header {header!r}, expected 'query-id<TAB>corpus-id<TAB>score' (BEIR) or TREC "
                              f"qrels lines '{QRELS_FORMAT}'", 1)
    else:
        rows = ((n, _beir_fields(line, path, n)) for n, line in lines)
    for lineno, cols in rows:
        if cols is None:
            continue
        qid, cid, raw_score = cols
        grade = parse_grade(raw_score, path, lineno)
        if qid not in query_ids:
            raise DataError(path, f"unknown query id {qid!r} (not in queries.jsonl)", lineno)
        if cid not in item_ids:
            raise DataError(path, f"unknown corpus id {cid!r} (not in corpus.jsonl)", lineno)
        pair = judged.setdefault(qid, {})
        if cid in pair and pair[cid] != grade:
            raise DataError(path, f"({qid!r}, {cid!r}) judged {pair[cid]} on line {first_line[qid, cid]} and {grade} "
                                  "here: one grade per pair", lineno)
        pair.setdefault(cid, grade)
        first_line.setdefault((qid, cid), lineno)
    n_rows = len(first_line)
    if n_rows and not any(g > 0 for pairs in judged.values() for g in pairs.values()):
        # A header-only file is an empty split (save_beir writes one); judged rows without a single positive are a
        # mistake (every score 0, or relevance written in the wrong column) that would leave the split without gold.
        raise DataError(path, f"no positive pair: {n_rows} judged row(s), none with score > 0 (BEIR: score > 0 marks a "
                              "relevant pair)")
    return judged


def _beir_fields(line: str, path: Path, lineno: int) -> list[str] | None:
    line = line.rstrip("\r\n")
    if not line.strip():
        return None
    cols = line.split("\t")
    if len(cols) != 3:
        raise DataError(path, f"expected 3 tab-separated columns (query-id, corpus-id, score), got {len(cols)}", lineno)
    return cols


def _trec_fields(line: str, path: Path, lineno: int) -> list[str] | None:
    cols = line.split()
    if not cols:
        return None
    if len(cols) != 4:
        raise DataError(path, f"expected 4 whitespace-separated columns ({QRELS_FORMAT}), got {len(cols)}", lineno)
    return [cols[0], cols[2], cols[3]]


def load_beir(folder: str | os.PathLike[str], *, name: str | None = None) -> Dataset:
    """Load a BEIR-format folder.

    Parameters
    ----------
    folder
        Holds ``corpus.jsonl`` (``_id``, ``text``, optional ``title``), ``queries.jsonl`` (``_id``,
        ``text``, optional ``"mention": [start, end]`` character span, end exclusive) and
        ``qrels/<split>.tsv`` files: BEIR's (header ``query-id<TAB>corpus-id<TAB>score``) or TREC qrels lines
        (``query-id 0 doc-id grade``, no header), told apart by the first line; ``qrels/<split>.qrels`` and
        ``qrels/<split>.txt`` are read as TREC qrels. Scores are integer relevance grades (``1.0`` reads as 1).
    name
        Dataset name; defaults to the folder's name.

    Returns
    -------
    Dataset
        Items and queries in file order. Each qrels file is a split listing the queries with at
        least one positive (score > 0) pair, in order of first appearance; ``qrels`` merges the
        judgements of all qrels files (query -> {item: grade}; a query without a positive pair is left
        out: nothing evaluates it), and gold lists each query's positives. Queries in no qrels file are
        kept, without gold.

    Raises
    ------
    DataError
        On a missing file/folder or any malformed line (file, line and problem in the message), a grade that is
        not an integer, or a pair judged with two grades.
    """
    root = require_dir(Path(folder))
    record_input("dataset", root)  # its digest goes into the run's provenance
    items = _read_beir_corpus(require_file(root / "corpus.jsonl"))
    queries = _read_beir_queries(require_file(root / "queries.jsonl"))
    qrels_dir = require_dir(root / "qrels")
    qrels_files = sorted(p for p in qrels_dir.iterdir() if p.is_file() and p.suffix in (".tsv", *TREC_SUFFIXES))
    stems = [p.stem for p in qrels_files]
    if not qrels_files:
        raise DataError(qrels_dir, "no qrels files: expected at least one <split>.tsv")
    if len(set(stems)) != len(stems):
        twice = sorted({s for s in stems if stems.count(s) > 1})
        raise DataError(qrels_dir, f"split {twice[0]!r} has two qrels files: keep one of "
                                   f"{[p.name for p in qrels_files if p.stem == twice[0]]}")

    dataset = Dataset(name if name is not None else root.name, items, queries, {}, {})
    query_index, item_index = dataset.query_index, dataset.item_index
    where: dict[tuple[str, str], Path] = {}
    for path in qrels_files:
        judged = _read_qrels(path, query_index, item_index)
        dataset.splits[path.stem] = [qid for qid, pairs in judged.items() if any(g > 0 for g in pairs.values())]
        for qid, pairs in judged.items():
            merged = dataset.qrels.setdefault(qid, {})
            for cid, grade in pairs.items():
                if merged.get(cid, grade) != grade:
                    raise DataError(path, f"({qid!r}, {cid!r}) is judged {grade} here and {merged[cid]} in "
                                          f"{where[qid, cid].name}: one grade per pair across the qrels files")
                merged.setdefault(cid, grade)
                where.setdefault((qid, cid), path)
    # A query without a relevant item cannot be evaluated (and no split lists it): its judgements are not kept.
    dataset.qrels = {qid: pairs for qid, pairs in dataset.qrels.items() if any(g > 0 for g in pairs.values())}
    dataset.gold = {qid: [cid for cid, g in pairs.items() if g > 0] for qid, pairs in dataset.qrels.items()}
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
    for qid, judged in dataset.qrels.items():
        if qid not in query_index or any(i not in item_index for i in judged):
            raise ParameterError("dataset", "qrels naming only its own queries and items", {qid: judged}, owner)
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
        as ``qrels/<split>.tsv`` rows. Every judgement of a split's queries is written with its grade
        (``Dataset.qrels``).
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
        rows = (f"{qid}\t{item_id}\t{grade}\n" for qid in ids for item_id, grade in dataset.qrels[qid].items())
        write_text_atomic(qrels_dir / f"{split}.tsv", ["\t".join(QRELS_HEADER) + "\n", *rows])
    return root
