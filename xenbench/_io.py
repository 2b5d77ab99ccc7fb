"""Files: the repository root (bundled data, notebooks, reports), bounded reads of a user's file (a regular file of
at most a stated size: a FIFO would block, a device never end), atomic text writes (a reader, or a killed run, never
sees half a file) and generated blocks of text files (the README's claims table, docs/FINDINGS.md, docs/MODELS.md)."""
from __future__ import annotations

import errno
import json
import os
import stat
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from xenbench.errors import DataError

# The checkout this package runs from: bundled data/, models/, notebooks/ and reports/ live beside xenbench/.
REPO_ROOT: Path = Path(__file__).resolve().parent.parent


def repo_relative(path: str | os.PathLike[str]) -> str:
    """``path`` resolved, as a POSIX path relative to :data:`REPO_ROOT` when it lies inside the checkout (so a record
    of a bundled file holds in any clone), else absolute."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(resolved)


def open_regular(path: str | os.PathLike[str], max_bytes: int, what: str) -> BinaryIO:
    """``path`` opened for binary reading, if it is a regular file of at most ``max_bytes``.

    The file is opened without blocking and checked on the open descriptor, so a FIFO (which would block a read), a
    device such as ``/dev/zero`` (which never ends; a symbolic link to one counts as one), a folder or a file larger
    than ``max_bytes`` is refused before anything is read.

    Raises
    ------
    DataError
        Naming ``path``, what was expected (``what``, e.g. "a results JSON") and what it is.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise DataError(path, f"no such file: expected {what}") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise DataError(path, f"a symbolic link loop: expected {what}") from None
        raise DataError(path, f"cannot be opened ({err.strerror}): expected {what}") from None
    handle = os.fdopen(fd, "rb")
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO, socket or device"
        problem = f"not a regular file ({kind}): expected {what}"
    elif info.st_size > max_bytes:
        problem = f"{info.st_size:,} bytes, more than the {max_bytes:,} read for {what}"
    if problem is not None:
        handle.close()
        raise DataError(path, problem)
    return handle


def read_bytes_bounded(path: str | os.PathLike[str], max_bytes: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``max_bytes`` (:func:`open_regular`); a file that grows while
    it is read is read no further than ``max_bytes`` and refused."""
    with open_regular(path, max_bytes, what) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise DataError(path, f"more than the {max_bytes:,} bytes read for {what} (it grew while being read)")
    return data


def read_json_bounded(path: str | os.PathLike[str], max_bytes: int, what: str) -> object:
    """:func:`read_bytes_bounded`, parsed as UTF-8 JSON; every way it can fail (not UTF-8, not JSON, nested deeper
    than the parser's recursion limit) is one :class:`DataError` naming ``path``."""
    data = read_bytes_bounded(path, max_bytes, what)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise DataError(path, f"not valid UTF-8 ({err.reason} at byte {err.start}): expected {what}") from None
    except json.JSONDecodeError as err:
        raise DataError(path, f"not valid JSON ({err.msg}, line {err.lineno} column {err.colno}): expected {what}",
                        ) from None
    except RecursionError:
        raise DataError(path, f"nested too deeply to parse: expected {what}") from None


def _temp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")


def _write_temp(tmp: Path, text: str | Iterable[str], fsync: bool) -> None:
    # Not tempfile.mkstemp: its files are mode 0600; open(..., "x") honours the umask like any file.
    with open(tmp, "x", encoding="utf-8", newline="\n") as handle:
        handle.writelines([text] if isinstance(text, str) else text)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())


def write_text_atomic(path: str | os.PathLike[str], text: str | Iterable[str], *, fsync: bool = False) -> Path:
    """Write ``text`` (a string or an iterable of strings, written as given) to a temp file beside
    ``path``, then rename it over ``path``. ``fsync`` also makes it durable (file and folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        _write_temp(tmp, text, fsync)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if fsync:
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to a temp file beside ``path``, then rename it over ``path`` (a gzipped run file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(path)
    try:
        with open(tmp, "xb") as handle:  # "x": the umask applies, as for text files
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_texts_atomic(texts: Mapping[Path, str]) -> None:
    """Write several files together: every text goes to a temp file beside its path first, and only when all of
    them are written is each renamed over its path, so a failure while writing (a full disk, a kill) changes none."""
    temps: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            temps[path] = _temp_beside(path)
            _write_temp(temps[path], text, fsync=False)
        for path, tmp in temps.items():
            os.replace(tmp, path)
    except BaseException:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
        raise


def pid_alive(pid: int) -> bool:
    """Whether a process of this id runs on this machine (for stale lock and staging files)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


@dataclass(frozen=True)
class Block:
    """A generated block of a text file: ``body`` belongs between the lines ``begin`` and ``end`` of ``path``.

    ``what`` names it and ``source`` says what it is generated from, for messages ("docs/MODELS.md: the models
    table disagrees with models/").
    """

    path: Path
    begin: str
    end: str
    body: str
    what: str = "generated block"
    source: str = ""


#: What a generated block's body may not hold: the opening or closing of an HTML comment, which every block marker is,
#: so that text from an input (a dataset's name in a results file) can never add, end or hide a block.
COMMENT_MARKS = ("<!--", "-->")


def _with_block(path: Path, text: str, block: Block) -> str:
    start, stop = text.find(block.begin), text.find(block.end)
    if start < 0 or stop < start:
        raise DataError(path, f"no generated block (lines {block.begin!r} ... {block.end!r})")
    for marker in (block.begin, block.end):
        if text.count(marker) != 1:
            raise DataError(path, f"holds the line {marker!r} {text.count(marker)} times, expected once (a generated "
                                  f"block: {block.begin!r} ... {block.end!r}); restore the file from git")
    mark = next((m for m in COMMENT_MARKS if m in block.body), None)
    if mark is not None:
        raise DataError(path, f"the {block.what} generated from {block.source or 'its inputs'} holds {mark!r}, which "
                              "would change the file's generated blocks: refused, nothing written (an input's text "
                              "holds an HTML comment marker)")
    return text[: start + len(block.begin)] + "\n" + block.body + "\n" + text[stop:]


def replace_blocks(blocks: Sequence[Block], *, write: bool = True) -> list[Block]:
    """Put each block's ``body`` between its markers; the blocks that changed (with ``write=False``: the stale ones,
    nothing written).

    Every file is read and every block placed before anything is written, and the files are then written together
    (:func:`write_texts_atomic`): a missing marker in one file leaves all of them as they were.

    Raises
    ------
    DataError
        Naming the file whose markers are missing.
    """
    texts: dict[Path, str] = {}
    changed = []
    for block in blocks:
        path = Path(block.path)
        if path not in texts:
            try:
                texts[path] = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise DataError(path, f"no such file (it holds the {block.what})") from None
        new = _with_block(path, texts[path], block)
        if new != texts[path]:
            changed.append(block)
            texts[path] = new
    if write and changed:
        write_texts_atomic({Path(b.path): texts[Path(b.path)] for b in changed})
    return changed
