"""TREC files, the formats every IR tool reads: run files (ranked lists) and qrels files (graded judgements).

A **run** line is ``query-id Q0 doc-id rank score tag`` (whitespace-separated); a **qrels** line is
``query-id iteration doc-id grade`` (``iteration`` is ignored, usually ``0``). Both may be gzipped (``.gz``).

* :func:`read_trec_run` gives a :class:`Run`: each query's doc ids best first, in the order trec_eval and
  ir-measures read them (score descending; equal scores by the rank column). A duplicate doc id or a duplicate rank
  within a query, a malformed line or an empty file fails naming the file and the line.
* :func:`write_trec_run` writes ranked lists xenbench produced. Its score column is ``n − rank + 1`` (n = the
  list's length): strictly decreasing, so every tool reads the list in xenbench's order. trec_eval ignores the rank
  column and sorts by score descending, equal scores by doc id descending (``strcmp``); ranx and ir-measures sort by
  score too. A list's own scores may tie (xenbench puts equal scores in item-index order,
  :func:`xenbench.metrics.topk_indices`), so they are not written: the written score is the list's order itself.
* :func:`read_trec_qrels` / :func:`write_trec_qrels`: query id → {doc id: grade}.
* :func:`check_run`: a run used as a first stage names only queries and items of the dataset, and ranks every query
  the notebook evaluates (one line each, before any work).
"""
from __future__ import annotations

import gzip
import math
import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xenbench._io import write_bytes_atomic, write_text_atomic
from xenbench.data.readers import iter_lines
from xenbench.errors import DataError, ParameterError
from xenbench.metrics import MAX_GRADE
from xenbench.provenance import record_input

__all__ = ["MAX_RUN_BYTES", "MAX_RUN_LINES", "RUN_FORMAT", "QRELS_FORMAT", "Run", "check_run", "read_trec_qrels",
           "read_trec_run", "write_trec_qrels", "write_trec_run"]

#: The columns of a run line and of a qrels line, as messages name them.
RUN_FORMAT = "query-id Q0 doc-id rank score tag"
QRELS_FORMAT = "query-id 0 doc-id grade"
#: The most lines (blank ones included) a run or qrels file may hold: 2,000 queries x 1,000 documents. A first stage
#: here hands each query at most a few hundred items; a 10^7-line run used to peak at 4.75 GB before any check.
MAX_RUN_LINES = 2_000_000
#: The most bytes a run or qrels file may hold, counted after decompression as a ``.gz`` is streamed (a 2 MB gzip
#: can expand to gigabytes).
MAX_RUN_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Run:
    """A run file read by :func:`read_trec_run`.

    Attributes
    ----------
    path : Path
        The file.
    lists : dict of str to list of str
        Query id → doc ids, best first (score descending, equal scores by rank ascending).
    first_line : dict of str to int
        Query id → the line of its first row (messages point there).
    tag : str
        The tag column of the first line (the run's name in trec_eval's output).
    """

    path: Path
    lists: dict[str, list[str]]
    first_line: dict[str, int] = field(repr=False)
    tag: str

    @property
    def depth(self) -> int:
        """The length of the shortest list (what a first stage can hand every query)."""
        return min(len(v) for v in self.lists.values())


def _fields(line: str, n: int, what: str, path: Path, lineno: int) -> list[str] | None:
    cols = line.split()
    if not cols:
        return None
    if len(cols) != n:
        raise DataError(path, f"expected {n} whitespace-separated columns ({what}), got {len(cols)}", lineno)
    return cols


def read_trec_run(path: str | os.PathLike[str]) -> Run:
    """Read a TREC run file (``query-id Q0 doc-id rank score tag`` per line; ``.gz`` read through gzip).

    Parameters
    ----------
    path
        The run file.

    Returns
    -------
    Run
        Each query's doc ids in the order trec_eval reads them: score descending; equal scores by the rank column
        (trec_eval breaks such ties by doc id; a first stage here follows the rank the file states).

    Raises
    ------
    DataError
        Naming the file and line: a line without 6 columns, a rank that is not an integer, a score that is not a
        finite number, a doc id listed twice for a query, two rows of a query with the same rank, or no rows at all.
    """
    path = Path(path)
    # Per query: doc -> line and rank -> line (nested dicts, not (query, doc) tuple keys: a 2,000,000-line run
    # peaks at about half the memory).
    rows: dict[str, list[tuple[float, int, str]]] = {}
    first_line: dict[str, int] = {}
    seen_doc: dict[str, dict[str, int]] = {}
    seen_rank: dict[str, dict[int, int]] = {}
    tag = ""
    for lineno, line in iter_lines(path, max_lines=MAX_RUN_LINES, max_bytes=MAX_RUN_BYTES, what="run file"):
        cols = _fields(line, 6, RUN_FORMAT, path, lineno)
        if cols is None:
            continue
        qid, _, doc, raw_rank, raw_score, line_tag = cols
        try:
            rank = int(raw_rank)
        except ValueError:
            raise DataError(path, f"rank {raw_rank!r} is not an integer", lineno) from None
        score = _finite_number(raw_score, path, lineno, f"score {raw_score!r} is not a finite number")
        docs, ranks = seen_doc.setdefault(qid, {}), seen_rank.setdefault(qid, {})
        if doc in docs:
            raise DataError(path, f"duplicate doc-id {doc!r} for query {qid!r} (first on line {docs[doc]})", lineno)
        if rank in ranks:
            raise DataError(path, f"duplicate rank {rank} for query {qid!r} (first on line {ranks[rank]}): "
                                  "each row of a query needs its own rank", lineno)
        docs[doc] = ranks[rank] = lineno
        first_line.setdefault(qid, lineno)
        tag = tag or line_tag
        rows.setdefault(qid, []).append((-score, rank, doc))
    if not rows:
        raise DataError(path, f"no run lines: expected lines '{RUN_FORMAT}'")
    record_input("run", path)  # its digest goes into the run's provenance
    return Run(path, {qid: [doc for _, _, doc in sorted(r)] for qid, r in rows.items()}, first_line, tag)


def _check_ids(ids: Sequence[str], what: str, owner: str) -> None:
    bad = [i for i in ids if not isinstance(i, str) or not i or len(i.split()) != 1 or i != i.strip()]
    if bad:
        raise ParameterError(what, "ids without whitespace (TREC files are whitespace-separated)", bad[:3], owner)


def _write(path: Path, lines: list[str], compress: bool | None) -> Path:
    if compress is None:
        compress = path.name.endswith(".gz")
    if compress:
        # mtime=0: the same lists give the same bytes (a digest of the file identifies its content)
        return write_bytes_atomic(path, gzip.compress("".join(lines).encode("utf-8"), mtime=0))
    return write_text_atomic(path, lines)


def write_trec_run(path: str | os.PathLike[str], lists: Mapping[str, Sequence[str]], *, tag: str,
                   compress: bool | None = None) -> Path:
    """Write ranked lists as a TREC run file (atomically).

    Parameters
    ----------
    path
        The file; gzipped when ``compress`` is True, or when it is None and the name ends in ``.gz``.
    lists : mapping of str to sequence of str
        Query id → doc ids, best first (distinct within a list). An empty list writes no line (trec_eval then
        leaves the query out, as a run file cannot list a query without a doc).
    tag : str
        The run's name (the last column).
    compress : bool, optional
        See ``path``.

    Returns
    -------
    Path
        ``path``. Ranks count from 1; the score of rank r in a list of n is ``n − r + 1``: distinct integers
        decreasing with rank, so trec_eval (which ignores the rank column and breaks equal scores by doc id), ranx
        and ir-measures read each list in the order given, and the order is read back from the scores alone.
    """
    owner = "write_trec_run"
    path = Path(path)
    _check_ids([tag], "tag", owner)
    _check_ids(list(lists), "lists", owner)
    out = []
    for qid, docs in lists.items():
        docs = list(docs)
        _check_ids(docs, "lists", owner)
        if len(set(docs)) != len(docs):
            raise ParameterError("lists", "lists of distinct doc ids", f"a repeated doc id in query {qid!r}", owner)
        n = len(docs)
        out += [f"{qid} Q0 {doc} {r} {n - r + 1} {tag}\n" for r, doc in enumerate(docs, start=1)]
    return _write(path, out, compress)


def read_trec_qrels(path: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Read a TREC qrels file (``query-id iteration doc-id grade`` per line).

    Returns
    -------
    dict
        Query id → {doc id: grade}, in file order (grade 0 or below: judged not relevant).

    Raises
    ------
    DataError
        Naming the file and line: not 4 columns, a grade that is not an integer, a (query, doc) pair judged twice,
        or no lines at all.
    """
    path = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[tuple[str, str], int] = {}
    for lineno, line in iter_lines(path, max_lines=MAX_RUN_LINES, max_bytes=MAX_RUN_BYTES, what="qrels file"):
        cols = _fields(line, 4, QRELS_FORMAT, path, lineno)
        if cols is None:
            continue
        qid, _, doc, raw = cols
        grade = parse_grade(raw, path, lineno)
        if (qid, doc) in seen:
            raise DataError(path, f"({qid!r}, {doc!r}) judged twice (first on line {seen[qid, doc]})", lineno)
        seen[qid, doc] = lineno
        qrels.setdefault(qid, {})[doc] = grade
    if not qrels:
        raise DataError(path, f"no qrels lines: expected lines '{QRELS_FORMAT}'")
    return qrels


def _finite_number(raw: str, path: Path, lineno: int, message: str) -> float:
    """``raw`` as a float; a DataError with ``message`` naming the file and line if it is not a finite number.

    "nan", "inf" and text that is no number all fail: no ranking or grade can be read from them.
    """
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DataError(path, message, lineno)
    return value


#: A grade as trec_eval's ``atol`` reads it whole: ASCII digits with an optional sign (``"1.0"`` style zeros after a
#: point are accepted, as BEIR dumps write them). Anything else (``"1_0"``, ``"٣"``, ``"1e1"``) would be read one way
#: by Python and another by trec_eval (``1_0`` is 10 to ``int`` and 1 to trec_eval), so it is refused.
_GRADE = re.compile(r"[+-]?[0-9]+(?:\.0*)?", re.ASCII)


def parse_grade(raw: str, path: Path, lineno: int) -> int:
    """A relevance grade: an integer of ASCII digits (``"2"``, ``"-1"``; ``"1.0"`` is read as 1) within
    ±:data:`~xenbench.metrics.MAX_GRADE`, as trec_eval reads grades; anything else fails naming file and line."""
    if not _GRADE.fullmatch(raw):
        raise DataError(path, f"grade {raw[:40]!r} is not an integer of ASCII digits (relevance grades are integers, "
                              "as trec_eval and ir-measures read them: e.g. 0, 1, 2)", lineno)
    grade = int(raw.split(".")[0])
    if abs(grade) > MAX_GRADE:
        raise DataError(path, f"grade {grade} is outside [-{MAX_GRADE}, {MAX_GRADE}] (trec_eval sizes its arrays by "
                              "the largest grade: a huge one costs gigabytes or gives wrong nDCG)", lineno)
    return grade


def write_trec_qrels(path: str | os.PathLike[str], qrels: Mapping[str, Mapping[str, int]], *,
                     compress: bool | None = None) -> Path:
    """Write query id → {doc id: grade} as a TREC qrels file (``query-id 0 doc-id grade``), atomically."""
    owner = "write_trec_qrels"
    path = Path(path)
    _check_ids(list(qrels), "qrels", owner)
    out = []
    for qid, judged in qrels.items():
        _check_ids(list(judged), "qrels", owner)
        out += [f"{qid} 0 {doc} {int(grade)}\n" for doc, grade in judged.items()]
    return _write(path, out, compress)


def check_run(run: Run, *, query_ids: Collection[str], evaluated: Sequence[str], item_ids: Collection[str],
              dataset: str, param: str = "first_stage") -> None:
    """Refuse a run that cannot be a first stage of this dataset, in one line naming the file.

    Parameters
    ----------
    run : Run
        From :func:`read_trec_run`.
    query_ids, item_ids : collection of str
        The dataset's query and item ids.
    evaluated : sequence of str
        The queries the notebook ranks with the first stage: each needs a list.
    dataset : str
        The dataset's name (for the message).
    param : str
        The parameter that named the run (for the message).

    Raises
    ------
    DataError
        A query id the dataset lacks, a doc id the dataset lacks, or evaluated queries the run misses (the first one
        named, with the count).
    """
    queries = set(query_ids)
    items = set(item_ids)
    for qid, docs in run.lists.items():
        if qid not in queries:
            raise DataError(run.path, f"query id {qid!r} is not a query of {dataset} (the {param!r} run must rank that "
                                      "dataset's queries)", run.first_line[qid])
        unknown = [d for d in docs if d not in items]
        if unknown:
            raise DataError(run.path, f"doc id {unknown[0]!r} is not an item of {dataset} ({len(unknown)} such id(s) in "
                                      f"query {qid!r}'s list; the {param!r} run must rank that dataset's items)",
                            run.first_line[qid])
    missing = [q for q in evaluated if q not in run.lists]
    if missing:
        raise DataError(run.path, f"misses {len(missing)} of the {len(evaluated)} queries the notebook ranks with the "
                                  f"{param!r} run (first: {missing[0]!r}): a first stage must rank every one")
