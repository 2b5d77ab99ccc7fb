"""Files: the repository root (bundled data, notebooks, reports), atomic text writes (a reader, or a killed
run, never sees half a file) and generated blocks of a text file (the README's findings, models)."""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path

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


def write_text_atomic(path: str | os.PathLike[str], text: str | Iterable[str], *, fsync: bool = False) -> Path:
    """Write ``text`` (a string or an iterable of strings, written as given) to a temp file beside
    ``path``, then rename it over ``path``. ``fsync`` also makes it durable (file and folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not tempfile.mkstemp: its files are mode 0600; open(..., "x") honours the umask like any file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8", newline="\n") as handle:
            handle.writelines([text] if isinstance(text, str) else text)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
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


def pid_alive(pid: int) -> bool:
    """Whether a process of this id runs on this machine (for stale lock and staging files)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def replace_block(path: str | os.PathLike[str], begin: str, end: str, body: str, *, write: bool = True) -> bool:
    """Replace the text between the lines ``begin`` and ``end`` of the file ``path`` by ``body`` (atomically).

    Returns whether the block changed (with ``write=False``: whether it is stale, nothing written).
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise DataError(path, f"no generated block (lines {begin!r} ... {end!r})")
    new = text[: start + len(begin)] + "\n" + body + "\n" + text[stop:]
    if new != text and write:
        write_text_atomic(path, new)
    return new != text
