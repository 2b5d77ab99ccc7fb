"""One ``Dataset`` type for every source (BEIR folders, ZESHEL files, bundled WordNet-EL).

Loaders
-------
``load_beir(folder)``
    ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``; every qrels file is a split.
``load_zeshel(root, world)``
    ``documents/<world>.json`` and ``mentions/<split>.json`` (JSON Lines despite the suffix);
    each mention becomes a query made of its context window.
``load_wordnet_el(domain)``
    The bundled benchmark, BEIR folders under ``data/wordnet-el/<domain>/``.
``load_dataset(spec)``
    One entry point: ``"wordnet-el:<domain>"``, ``"beir:<folder>"``, ``"zeshel:<root>:<world>"``.

Every malformed input raises one :class:`~xenbench.errors.DataError` naming the file, the 1-based
line and the problem; files are read line by line so big corpora never sit in memory twice.

Bounded reads: a line of a JSONL or TSV file may hold at most :data:`MAX_LINE_BYTES` (4 MiB); a longer one is
refused naming its file and line, so a corrupt or hostile file cannot drive memory up before any check. A BEIR
title or text longer than :data:`MAX_TEXT_CHARS` (100,000 characters; every model here reads at most a few hundred
tokens) is cut to it at read, with one warning per file saying how many were cut. Only regular files are read
(a FIFO or a device such as ``/dev/zero`` is refused). A UTF-8 byte order mark at the start of a file is accepted
(``utf-8-sig``).

Identifiers are always strings. JSON integer ids (``"_id": 7``) are accepted and converted with
``str`` (``"7"``) because several public BEIR-style dumps write numeric ids; any other JSON type
(float, bool, null, ...) is rejected.
"""
from __future__ import annotations

import codecs
import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from xenbench._io import REPO_ROOT, write_text_atomic
from xenbench._validation import PY_INT, check_int, is_float, is_int
from xenbench.errors import DataError, ParameterError
from xenbench.provenance import record_input
from xenbench.sampling import sample_rows

__all__ = [
    "Item",
    "Query",
    "Dataset",
    "DEFAULT_FRACTIONS",
    "load_beir",
    "save_beir",
    "load_zeshel",
    "load_wordnet_el",
    "wordnet_el_domains",
    "load_dataset",
    "sample_queries",
]

#: Default ``fractions`` of :meth:`Dataset.split_queries`.
# Read-only so no caller can change every later default split by mutating it.
DEFAULT_FRACTIONS: Mapping[str, float] = MappingProxyType({"train": 0.6, "dev": 0.2, "test": 0.2})

#: Longest line, in bytes, of any JSONL/TSV file read here: a longer one is refused with its file and line.
MAX_LINE_BYTES: int = 4 * 2**20
#: Longest BEIR title, item text or query text, in characters: longer ones are cut at read (one warning per file).
MAX_TEXT_CHARS: int = 100_000

#: Header every ``qrels/<split>.tsv`` must start with (BEIR's own format).
QRELS_HEADER: tuple[str, str, str] = ("query-id", "corpus-id", "score")

#: Where the bundled WordNet-EL domains live: ``<repo root>/data/wordnet-el``.
WORDNET_EL_ROOT: Path = REPO_ROOT / "data" / "wordnet-el"


@dataclass(frozen=True)
class Item:
    """A retrievable entity/document. ``id`` is always a string."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Query:
    """A query; ``mention`` is an optional character span ``(start, end)`` (end exclusive) into ``text``."""

    id: str
    text: str
    mention: tuple[int, int] | None = None


@dataclass
class Dataset:
    """Items, queries, gold item ids per query, and named query splits.

    ``gold[qid]`` lists the relevant item ids of query ``qid``; ``splits[name]`` lists query ids.

    Treat a ``Dataset`` as immutable: the helpers (:meth:`split_queries`, :meth:`subset`) return
    new datasets, and the id indexes are cached (rebuilt only if ``items``/``queries`` is replaced
    or changes length).
    """

    name: str
    items: list[Item]
    queries: list[Query]
    gold: dict[str, list[str]]
    splits: dict[str, list[str]] = field(default_factory=dict)

    def __repr__(self) -> str:
        # The generated repr would print the whole corpus in a notebook cell; sizes say enough.
        splits = {name: len(ids) for name, ids in self.splits.items()}
        return (
            f"Dataset(name={self.name!r}, items={len(self.items)}, queries={len(self.queries)}, "
            f"gold={len(self.gold)}, splits={splits})"
        )

    # -- ids and lookups ------------------------------------------------------------------------

    @property
    def item_ids(self) -> list[str]:
        """Item ids in row order."""
        return [item.id for item in self.items]

    @property
    def query_ids(self) -> list[str]:
        """Query ids in row order."""
        return [query.id for query in self.queries]

    @property
    def item_index(self) -> dict[str, int]:
        """Map item id -> row in ``items`` (the column of a score matrix)."""
        return self._index("items")

    @property
    def query_index(self) -> dict[str, int]:
        """Map query id -> row in ``queries`` (the row of a score matrix)."""
        return self._index("queries")

    def _index(self, attr: str) -> dict[str, int]:
        # Cached because callers look ids up in loops. The cache holds the list itself (compared with
        # ``is``, so a freed list's id can never be mistaken for a new one) and its length.
        rows = getattr(self, attr)
        cache = self.__dict__.setdefault("_index_cache", {})
        hit = cache.get(attr)
        if hit is None or hit[0] is not rows or hit[1] != len(rows):
            hit = (rows, len(rows), {row.id: i for i, row in enumerate(rows)})
            cache[attr] = hit
        return hit[2]

    def query(self, query_id: str) -> Query:
        """The query with id ``query_id``.

        Raises
        ------
        ParameterError
            If no query has that id.
        """
        row = self.query_index.get(query_id)
        if row is None:
            raise ParameterError("query_id", f"a query id of dataset {self.name!r}", query_id, "Dataset.query")
        return self.queries[row]

    def item(self, item_id: str) -> Item:
        """The item with id ``item_id``.

        Raises
        ------
        ParameterError
            If no item has that id.
        """
        row = self.item_index.get(item_id)
        if row is None:
            raise ParameterError("item_id", f"an item id of dataset {self.name!r}", item_id, "Dataset.item")
        return self.items[row]

    # -- derived datasets -----------------------------------------------------------------------

    def split_queries(
        self,
        seed: int,
        fractions: Mapping[str, float] | None = None,
        *,
        with_gold_only: bool = True,
    ) -> Dataset:
        """A copy whose ``splits`` is a fresh seeded random partition of the queries.

        Parameters
        ----------
        seed
            Seed of ``numpy.random.default_rng``; the same seed gives the same split.
        fractions
            Split name -> fraction of the queries, summing to 1 (default :data:`DEFAULT_FRACTIONS`,
            60/20/20 train/dev/test). Sizes are rounded on the cumulative fractions, so they always
            add up to the number of queries split.
        with_gold_only
            Split only queries that have gold (default): a query without gold cannot be evaluated,
            and BEIR qrels cannot record it, so it stays out of every split as in :func:`load_beir`.

        Returns
        -------
        Dataset
            Same items, queries and gold; ``splits`` replaced. Each split lists its ids in
            permutation order, so taking its first ``k`` ids is still a random sample.

        Notes
        -----
        Ids are sorted before the permutation, so the split does not depend on the input order.
        """
        owner = "Dataset.split_queries"
        check_int(seed, "seed", None, None, owner, expected="an integer")
        fractions = dict(DEFAULT_FRACTIONS if fractions is None else fractions)
        if not fractions:
            raise ParameterError("fractions", "a non-empty mapping of split name to fraction", fractions, owner)
        for name, frac in fractions.items():
            if not isinstance(name, str) or not name:
                raise ParameterError("fractions", "keyed by non-empty split names", fractions, owner)
            if not is_float(frac, 0, 1):
                raise ParameterError("fractions", "fractions between 0 and 1", fractions, owner)
        if not math.isclose(sum(fractions.values()), 1.0, rel_tol=0.0, abs_tol=1e-9):
            raise ParameterError("fractions", "fractions summing to 1", fractions, owner)

        ids = sorted(q.id for q in self.queries if not with_gold_only or self.gold.get(q.id))
        order = np.random.default_rng(int(seed)).permutation(len(ids))
        shuffled = [ids[i] for i in order]
        # Cut at rounded cumulative fractions: sizes sum to len(ids) without a remainder fix-up.
        cuts = np.rint(np.cumsum(list(fractions.values())) * len(ids)).astype(int)
        cuts[-1] = len(ids)
        splits, start = {}, 0
        for name, stop in zip(fractions, cuts):
            splits[name] = shuffled[start:stop]
            start = stop
        return Dataset(self.name, list(self.items), list(self.queries), dict(self.gold), splits)

    def subset(self, query_ids: Iterable[str] | None = None, item_ids: Iterable[str] | None = None) -> Dataset:
        """A copy restricted to some queries and/or items, with gold and splits kept consistent.

        Parameters
        ----------
        query_ids
            Queries to keep (``None``: all). Row order of the dataset is kept, not this order.
        item_ids
            Items to keep (``None``: all).

        Returns
        -------
        Dataset
            Gold lists only kept items (a query left with none loses its gold entry and leaves every
            split); splits list only kept queries. The result can always be written by :func:`save_beir`.

        Raises
        ------
        ParameterError
            If an id is not in the dataset (a typo would otherwise silently shrink the result).
        """
        keep_q = self._checked_ids(query_ids, self.query_index, "query_ids")
        keep_i = self._checked_ids(item_ids, self.item_index, "item_ids")
        queries = [q for q in self.queries if keep_q is None or q.id in keep_q]
        items = [it for it in self.items if keep_i is None or it.id in keep_i]
        gold: dict[str, list[str]] = {}
        for qid, golds in self.gold.items():
            if keep_q is not None and qid not in keep_q:
                continue
            kept = [g for g in golds if keep_i is None or g in keep_i]
            if kept:
                gold[qid] = kept
        # A query whose gold items were all dropped stays a query but leaves its splits: a split (a qrels file)
        # lists judged queries only, so save_beir can write the subset.
        lost = {qid for qid in self.gold if qid not in gold}
        splits = {name: [q for q in ids if (keep_q is None or q in keep_q) and q not in lost]
                  for name, ids in self.splits.items()}
        return Dataset(self.name, items, queries, gold, splits)

    @staticmethod
    def _checked_ids(ids: Iterable[str] | None, index: Mapping[str, int], name: str) -> set[str] | None:
        if ids is None:
            return None
        if isinstance(ids, str):  # a bare string would be iterated character by character
            raise ParameterError(name, "an iterable of ids (not a single string)", ids, "Dataset.subset")
        wanted = set(ids)
        unknown = sorted(wanted.difference(index))
        if unknown:
            raise ParameterError(name, "ids present in the dataset", unknown[:5], "Dataset.subset")
        return wanted


# ------------------------------------------------------------------------------------------------
# JSON Lines reading and field validation
# ------------------------------------------------------------------------------------------------


def _require_file(path: Path) -> Path:
    if not path.is_file():
        raise DataError(path, "no such file" if not path.exists() else
                        "not a regular file (a folder, FIFO or device): expected a text file")
    return path


def _require_dir(path: Path) -> Path:
    if not path.is_dir():
        raise DataError(path, "no such folder" if not path.exists() else "not a folder")
    return path


def _iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` of a UTF-8 text file (a leading byte order mark is dropped).

    A line that is not UTF-8, or longer than :data:`MAX_LINE_BYTES`, fails naming file and line; a line is never
    read whole before its length is known to be within the bound.
    """
    _require_file(path)  # a FIFO would block, /dev/zero would never end
    with open(path, "rb") as handle:
        lineno = 0
        while raw := handle.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise DataError(path, f"line longer than {MAX_LINE_BYTES:,} bytes (the most xenbench reads per line): "
                                      "shorten or split this record", lineno)
            if lineno == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                      "save the file as UTF-8", lineno) from None


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSON Lines file, streaming."""
    for lineno, line in _iter_lines(path):
        if not line.strip():  # tolerate blank lines, e.g. a trailing empty one
            continue
        try:
            # Strip the newline so an error at the end of the line reports this line's column.
            obj = json.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as exc:
            raise DataError(path, f"not valid JSON ({exc.msg} at column {exc.colno})", lineno) from None
        if not isinstance(obj, dict):
            raise DataError(path, f"expected a JSON object, got {_json_type(obj)}", lineno)
        yield lineno, obj


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _get_id(obj: dict[str, Any], key: str, path: Path, lineno: int) -> str:
    if key not in obj:
        raise DataError(path, f"missing field {key!r}", lineno)
    value = obj[key]
    # int ids are accepted (see module docstring); bool is an int subclass but never an id.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, f"field {key!r} must be a string or an integer, got {_json_type(value)}", lineno)
    value = _encodable(str(value), key, path, lineno)
    if not value or any(c in value for c in "\t\r\n"):
        # Empty ids or ids with tabs/newlines cannot be written back into qrels TSV files.
        raise DataError(path, f"field {key!r} must be a non-empty id without tabs or newlines, got {value!r}", lineno)
    return value


def _get_str(obj: dict[str, Any], key: str, path: Path, lineno: int, default: str | None = None) -> str:
    if key not in obj:
        if default is not None:
            return default
        raise DataError(path, f"missing field {key!r}", lineno)
    value = obj[key]
    if not isinstance(value, str):
        raise DataError(path, f"field {key!r} must be a string, got {_json_type(value)}", lineno)
    return _encodable(value, key, path, lineno)


def _encodable(value: str, key: str, path: Path, lineno: int) -> str:
    """``value`` if it is text; a lone surrogate (JSON's ``"\\ud800"`` unpaired) fails here, naming file and line,
    instead of inside a tokenizer or a hash much later."""
    if value.isascii():  # the common case, checked without a copy
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(path, f"field {key!r} holds a lone surrogate {value[exc.start]!r} at character {exc.start + 1} "
                              "(an unpaired \\ud800-\\udfff escape): not text; fix or drop that escape", lineno) from None
    return value


class _Cutter:
    """Cuts texts longer than :data:`MAX_TEXT_CHARS` and warns once per file, with the count and the first line."""

    def __init__(self, path: Path) -> None:
        self.path, self.n, self.first = path, 0, 0

    def __call__(self, text: str, lineno: int) -> str:
        if len(text) <= MAX_TEXT_CHARS:
            return text
        self.n += 1
        self.first = self.first or lineno
        return text[:MAX_TEXT_CHARS]

    def report(self) -> None:
        if self.n:
            warnings.warn(f"{self.path}: {self.n} text(s) longer than {MAX_TEXT_CHARS:,} characters were cut to "
                          f"{MAX_TEXT_CHARS:,} (first on line {self.first}); the models read at most a few hundred "
                          "tokens of each", UserWarning, stacklevel=4)


def _get_int(obj: dict[str, Any], key: str, path: Path, lineno: int) -> int:
    if key not in obj:
        raise DataError(path, f"missing field {key!r}", lineno)
    value = obj[key]
    if not is_int(value, types=PY_INT):
        raise DataError(path, f"field {key!r} must be an integer, got {_json_type(value)}", lineno)
    return value


class _SeenIds:
    """Remembers the line of each id so a duplicate can point at its first occurrence."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what, self.first_line = path, what, {}

    def add(self, value: str, lineno: int) -> None:
        first = self.first_line.setdefault(value, lineno)
        if first != lineno:
            raise DataError(self.path, f"duplicate {self.what} {value!r} (first seen on line {first})", lineno)


# ------------------------------------------------------------------------------------------------
# BEIR
# ------------------------------------------------------------------------------------------------


def _read_beir_corpus(path: Path) -> list[Item]:
    items: list[Item] = []
    seen = _SeenIds(path, "_id")
    cut = _Cutter(path)
    for lineno, obj in _iter_jsonl(path):
        item_id = _get_id(obj, "_id", path, lineno)
        seen.add(item_id, lineno)
        # "title" may be absent: several BEIR-style corpora only have text.
        title = cut(_get_str(obj, "title", path, lineno, default=""), lineno)
        text = cut(_get_str(obj, "text", path, lineno), lineno)
        items.append(Item(item_id, title, _nonempty_text(title, text, path, lineno)))
    if not items:
        raise DataError(path, "empty corpus: no items")
    cut.report()
    return items


def _nonempty_text(title: str, text: str, path: Path, lineno: int) -> str:
    # An item with neither is scored on its separator tokens alone: a silent, meaningless row of the matrix.
    if not title.strip() and not text.strip():
        raise DataError(path, "item has an empty title and an empty text (nothing to score)", lineno)
    return text


def _read_beir_queries(path: Path) -> list[Query]:
    queries: list[Query] = []
    seen = _SeenIds(path, "_id")
    cut = _Cutter(path)
    for lineno, obj in _iter_jsonl(path):
        query_id = _get_id(obj, "_id", path, lineno)
        seen.add(query_id, lineno)
        text = cut(_get_str(obj, "text", path, lineno), lineno)
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
    lines = _iter_lines(path)
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
    root = _require_dir(Path(folder))
    record_input("dataset", root)  # its digest goes into the run's provenance
    items = _read_beir_corpus(_require_file(root / "corpus.jsonl"))
    queries = _read_beir_queries(_require_file(root / "queries.jsonl"))
    qrels_dir = _require_dir(root / "qrels")
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


# ------------------------------------------------------------------------------------------------
# ZESHEL
# ------------------------------------------------------------------------------------------------


def _read_zeshel_documents(path: Path) -> dict[str, Item]:
    documents: dict[str, Item] = {}
    seen = _SeenIds(path, "document_id")
    for lineno, obj in _iter_jsonl(path):
        doc_id = _get_id(obj, "document_id", path, lineno)
        seen.add(doc_id, lineno)
        title = _get_str(obj, "title", path, lineno)
        documents[doc_id] = Item(doc_id, title, _nonempty_text(title, _get_str(obj, "text", path, lineno), path, lineno))
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

    base = _require_dir(Path(root))
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
    mention_paths = [_require_file(base / "mentions" / f"{split}.json") for split in splits]
    for path in [doc_path, *mention_paths]:  # the files read (not the whole root): their digests go into provenance
        record_input("dataset", path)

    queries: list[Query] = []
    gold: dict[str, list[str]] = {}
    split_ids: dict[str, list[str]] = {}
    first_seen: dict[str, tuple[Path, int]] = {}  # mention ids must be unique across split files
    for split, path in zip(splits, mention_paths):
        for lineno, obj in _iter_jsonl(path):
            if _get_str(obj, "corpus", path, lineno) != world:
                continue
            mention_id = _get_id(obj, "mention_id", path, lineno)
            if mention_id in first_seen:
                where, line = first_seen[mention_id]
                at = f"line {line}" if where == path else f"{where}:{line}"
                raise DataError(path, f"duplicate mention_id {mention_id!r} (first seen on {at})", lineno)
            first_seen[mention_id] = (path, lineno)
            context_id = _get_id(obj, "context_document_id", path, lineno)
            label_id = _get_id(obj, "label_document_id", path, lineno)
            for key, doc_id in (("context_document_id", context_id), ("label_document_id", label_id)):
                if doc_id not in documents:
                    raise DataError(path, f"{key} {doc_id!r} is not a document of world {world!r}", lineno)
            start = _get_int(obj, "start_index", path, lineno)
            end = _get_int(obj, "end_index", path, lineno)
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


# ------------------------------------------------------------------------------------------------
# Bundled WordNet-EL and the spec entry point
# ------------------------------------------------------------------------------------------------


def wordnet_el_domains(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of the WordNet-EL domains under ``root`` (default :data:`WORDNET_EL_ROOT`), sorted."""
    base = Path(root) if root is not None else WORDNET_EL_ROOT
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / "corpus.jsonl").is_file())


def load_wordnet_el(domain: str, root: str | os.PathLike[str] | None = None) -> Dataset:
    """Load one bundled WordNet-EL domain, e.g. ``"noun.cognition"``.

    Parameters
    ----------
    domain
        A folder name under ``root``.
    root
        Folder of domain folders; default :data:`WORDNET_EL_ROOT` (``<repo>/data/wordnet-el``).

    Returns
    -------
    Dataset
        :func:`load_beir` of ``root/domain``, named ``"wordnet-el:<domain>"``.

    Raises
    ------
    DataError
        If ``root`` does not exist or the domain's files are malformed.
    ParameterError
        If ``domain`` is not one of the available domains (they are listed).
    """
    base = _require_dir(Path(root) if root is not None else WORDNET_EL_ROOT)
    available = wordnet_el_domains(base)
    if domain not in available:
        raise ParameterError("domain", f"one of {available}", domain, "load_wordnet_el")
    return load_beir(base / domain, name=f"wordnet-el:{domain}")


_SPEC_FORMS = "'wordnet-el:<domain>', 'beir:<folder>' or 'zeshel:<root>:<world>[@<split>,...]'"


def load_dataset(spec: str) -> Dataset:
    """Load a dataset from a one-string spec (what notebooks and the CLI pass around).

    Parameters
    ----------
    spec
        ``"wordnet-el:<domain>"`` (bundled, e.g. ``"wordnet-el:noun.cognition"``),
        ``"beir:<folder>"`` or ``"zeshel:<root>:<world>"`` (the world follows the last colon; every
        mention file found is read) or ``"zeshel:<root>:<world>@test,val"`` (only those splits).

    Returns
    -------
    Dataset

    Raises
    ------
    ParameterError
        If the spec has none of these forms.
    DataError
        From the loader.
    """
    kind, sep, rest = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if sep and rest:
        if kind == "wordnet-el":
            return load_wordnet_el(rest)
        if kind == "beir":
            return load_beir(rest)
        if kind == "zeshel":
            root, sep, world = rest.rpartition(":")
            world, at, names = world.partition("@")
            if sep and root and world and (names or not at):
                return load_zeshel(root, world, splits=names.split(",") if at else None)
    raise ParameterError("spec", _SPEC_FORMS, spec, "load_dataset")


def sample_queries(dataset: Dataset, max_queries: int | None = None, seed: int = 0) -> list[Query]:
    """The queries with gold, or a seeded random sample of ``max_queries`` of them, in dataset order.

    Raises
    ------
    ParameterError
        If ``max_queries`` is not ``None`` or an int >= 1.
    """
    check_int(max_queries, "max_queries", 1, None, "sample_queries", allow_none=True, types=PY_INT)
    with_gold = [q for q in dataset.queries if dataset.gold.get(q.id)]
    if max_queries is None or max_queries >= len(with_gold):
        return with_gold
    return [with_gold[i] for i in sample_rows(len(with_gold), max_queries, seed, kind="queries")]
