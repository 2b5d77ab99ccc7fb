"""Bounded, validated reading of the JSON Lines and TSV files every dataset loader reads.

Every malformed input raises one :class:`~xenbench.errors.DataError` naming the file, the 1-based line and the
problem; files are read line by line so big corpora never sit in memory twice.

Bounded reads: a line of a JSONL or TSV file may hold at most :data:`MAX_LINE_BYTES` (4 MiB); a longer one is
refused naming its file and line, so a corrupt or hostile file cannot drive memory up before any check. A title or
text longer than :data:`MAX_TEXT_CHARS` (100,000 characters; every model here reads at most a few hundred tokens)
is cut to it at read by :class:`TextCutter`, with one warning per file saying how many were cut. Only regular files
are read (a FIFO or a device such as ``/dev/zero`` is refused). A UTF-8 byte order mark at the start of a file is
accepted (``utf-8-sig``).

Identifiers are always strings. JSON integer ids (``"_id": 7``) are accepted and converted with ``str`` (``"7"``)
because several public BEIR-style dumps write numeric ids; any other JSON type (float, bool, null, ...) is rejected
(:func:`get_id`), and so is an empty id or one holding whitespace (TREC files cannot hold it).
"""
from __future__ import annotations

import codecs
import gzip
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xenbench._validation import PY_INT, is_int
from xenbench.errors import DataError

#: Longest line, in bytes, of any JSONL/TSV file read here: a longer one is refused with its file and line.
MAX_LINE_BYTES: int = 4 * 2**20
#: Longest title, item text or query text, in characters: longer ones are cut at read (one warning per file).
MAX_TEXT_CHARS: int = 100_000


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise DataError(path, "no such file" if not path.exists() else
                        "not a regular file (a folder, FIFO or device): expected a text file")
    return path


def require_dir(path: Path) -> Path:
    if not path.is_dir():
        raise DataError(path, "no such folder" if not path.exists() else "not a folder")
    return path


def iter_lines(path: Path, *, max_lines: int | None = None, max_bytes: int | None = None,
               what: str = "file") -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` of a UTF-8 text file (a leading byte order mark is dropped); a file whose name
    ends in ``.gz`` is read through gzip (run files are often shipped so).

    A line that is not UTF-8, or longer than :data:`MAX_LINE_BYTES`, fails naming file and line; a line is never
    read whole before its length is known to be within the bound. With ``max_lines`` / ``max_bytes``, a file holding
    more lines (blank ones included) or more bytes (after decompression: counted as the stream is read, so a small
    gzip that expands to gigabytes is refused once the bound is passed) fails naming file and line; ``what`` names
    the kind of file in that message.
    """
    require_file(path)  # a FIFO would block, /dev/zero would never end
    gz = path.name.endswith(".gz")
    if max_bytes is not None and not gz and path.stat().st_size > max_bytes:
        raise DataError(path, f"{path.stat().st_size:,} bytes: more than the {max_bytes:,} xenbench reads from a "
                              f"{what}")
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as handle:
        try:
            yield from _numbered(path, handle, max_lines, max_bytes, what)
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; a cut-off archive ends in EOFError
            if not gz:
                raise
            raise DataError(path, f"not a readable gzip file ({exc}): re-compress it or pass the plain text file") \
                from None


def _numbered(path: Path, handle: Any, max_lines: int | None = None, max_bytes: int | None = None,
              what: str = "file") -> Iterator[tuple[int, str]]:
    """The numbered, decoded lines of an open binary ``handle`` of ``path`` (see :func:`iter_lines`)."""
    lineno = n_bytes = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        lineno += 1
        n_bytes += len(raw)
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise DataError(path, f"line longer than {MAX_LINE_BYTES:,} bytes (the most xenbench reads per line): "
                                  "shorten or split this record", lineno)
        if max_lines is not None and lineno > max_lines:
            raise DataError(path, f"more than {max_lines:,} lines (the most xenbench reads from a {what}; blank lines "
                                  "count): cut it, e.g. to fewer documents per query", lineno)
        if max_bytes is not None and n_bytes > max_bytes:
            raise DataError(path, f"more than {max_bytes:,} bytes once decompressed (the most xenbench reads from a "
                                  f"{what})", lineno)
        if lineno == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(path, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                  "save the file as UTF-8", lineno) from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSON Lines file, streaming."""
    for lineno, line in iter_lines(path):
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


def get_id(obj: dict[str, Any], key: str, path: Path, lineno: int) -> str:
    if key not in obj:
        raise DataError(path, f"missing field {key!r}", lineno)
    value = obj[key]
    # int ids are accepted (see module docstring); bool is an int subclass but never an id.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, f"field {key!r} must be a string or an integer, got {_json_type(value)}", lineno)
    value = _encodable(str(value), key, path, lineno)
    if not value or len(value.split()) != 1 or value != value.strip():
        # Empty ids or ids holding whitespace cannot be written into TREC run and qrels files (whitespace-separated
        # columns): refused here, before any work, rather than when a notebook exports its ranked lists at the end.
        raise DataError(path, f"field {key!r} must be a non-empty id without whitespace (TREC run and qrels files, "
                              f"which xenbench writes, separate columns by whitespace), got {value!r}", lineno)
    return value


def get_str(obj: dict[str, Any], key: str, path: Path, lineno: int, default: str | None = None) -> str:
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


class TextCutter:
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


def get_int(obj: dict[str, Any], key: str, path: Path, lineno: int) -> int:
    if key not in obj:
        raise DataError(path, f"missing field {key!r}", lineno)
    value = obj[key]
    if not is_int(value, types=PY_INT):
        raise DataError(path, f"field {key!r} must be an integer, got {_json_type(value)}", lineno)
    return value


class SeenIds:
    """Remembers the line of each id so a duplicate can point at its first occurrence."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what, self.first_line = path, what, {}

    def add(self, value: str, lineno: int) -> None:
        first = self.first_line.setdefault(value, lineno)
        if first != lineno:
            raise DataError(self.path, f"duplicate {self.what} {value!r} (first seen on line {first})", lineno)


def nonempty_text(title: str, text: str, path: Path, lineno: int) -> str:
    """``text``, if the item has a title or a text that is not blank."""
    # An item with neither is scored on its separator tokens alone: a silent, meaningless row of the matrix.
    if not title.strip() and not text.strip():
        raise DataError(path, "item has an empty title and an empty text (nothing to score)", lineno)
    return text
