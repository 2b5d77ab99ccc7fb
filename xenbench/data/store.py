"""An on-disk, chunked, resumable query×item score matrix (zarr v3 on the local file system).

Layout of a store at ``path``::

    path/zarr.json              zarr group; its attributes hold the manifest (see ScoreStore.attrs)
    path/scores/                float32 array (n_queries, n_items), chunks (q_chunk, i_chunk), fill NaN
    path/scores/c/<k>/<j>       zarr chunk files (uncompressed: scores are high-entropy floats)
    path/scores/_done/<k>.json  completion marker of row block k (our bookkeeping, invisible to zarr)

The unit of work is a **row block** ``k`` (rows ``k*q_chunk`` to ``(k+1)*q_chunk``), called a chunk in the
API: :meth:`ScoreStore.write_chunk` writes a whole block, then its marker. A block without a marker is
treated as absent, so a run killed at any point resumes by recomputing exactly the blocks it had not
finished.

Atomicity
---------
zarr 3.1's ``LocalStore`` writes every object through a temporary file (``<key>.<uuid>.partial``) that is
renamed over the key (``zarr/storage/_local.py``: ``_atomic_write``), so a single chunk file is never seen
half-written after a kill -- but it calls no ``fsync`` (a power loss may still lose or tear recent
writes), it leaves the ``.partial`` file behind when the process is killed, and a row block spanning
several item chunks is several independent files. So we do not rely on it: a block counts as done only
when its marker exists; the marker is written after the block's chunk files are fsynced and read back,
itself through a fsynced temporary file and ``os.replace``; it records the SHA-256 of the block, and every
read checks it, so a chunk file torn or altered after the fact raises :class:`~xenbench.errors.DataError`
instead of returning wrong scores. Leftover temporary files are removed when a store is opened for
writing.

Integrity of the manifest: a store whose attributes list ``query_ids``/``item_ids`` also records
``ids_sha256`` (:func:`ids_fingerprint`) at creation; :meth:`ScoreStore.open` and :meth:`ScoreStore.verify`
check that the id lists match the array's shape and that hash, so an edited manifest is refused.

One writer at a time: :func:`writer_lock` holds ``.<name>.lock`` beside the store (pid, host, start time)
for the duration of a write; a second writer is refused with one line naming the holder, and a lock left by
a dead process on this host is taken over. The lock appears with its whole content or not at all (written to a
temporary file, then hard-linked into place), so a write error (a full disk) never leaves an empty lock that
would block the retry.

Creation is atomic too: :meth:`ScoreStore.create` builds the store in a temporary folder beside ``path`` and
renames it into place, so ``path`` never holds half a store. Only a store of this module's format is ever
deleted (``overwrite``): :func:`foreign_content` names anything else a folder holds (another zarr group, a
user's file), and such a folder is refused before anything is touched.

zarr is imported lazily, so ``import xenbench.data.store`` works without it (the GPU machines lack it).
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, Literal

import numpy as np

from xenbench._io import pid_alive, read_json_bounded, write_text_atomic
from xenbench._validation import check_int, is_int
from xenbench.errors import DataError, ParameterError
from xenbench.provenance import record_input

__all__ = ["ScoreStore", "STORE_FORMAT", "MAX_MANIFEST_BYTES", "ids_fingerprint", "writer_lock", "foreign_content",
           "check_store_folder"]

logger = logging.getLogger(__name__)

#: Value of ``attrs["format"]`` in every store this module writes.
STORE_FORMAT = "xenbench-scores/1"
_ARRAY = "scores"
_DONE = "_done"
# An item chunk of at most this many bytes per zarr chunk file when the caller does not choose one: whole
# rows are simplest, but a (q_chunk, 10^6) block would otherwise be one 64 MB object.
_MAX_CHUNK_BYTES = 32 * 2**20
#: Largest ``zarr.json`` read as a store's manifest (it lists every query and item id: 10^6 ids of 20 characters
#: are about 24 MB) and largest block marker.
MAX_MANIFEST_BYTES = 512 * 2**20
_MAX_MARKER_BYTES = 2**20
# What a store's folder holds: its group, its array, and zarr's temporary files of a killed write.
_STORE_ENTRIES = {"zarr.json", _ARRAY}
_ARRAY_ENTRIES = {"zarr.json", "c", _DONE}
_PARTIAL = re.compile(r"zarr\.[0-9a-f]{32}\.partial")


def _read_attrs(path: Path) -> dict[str, Any]:
    """The attributes of the zarr group at ``path`` (its ``zarr.json``, read bounded)."""
    meta = read_json_bounded(path / "zarr.json", MAX_MANIFEST_BYTES, "a score store's zarr.json")
    attrs = meta.get("attributes") if isinstance(meta, dict) else None
    if not isinstance(attrs, dict):
        raise DataError(path / "zarr.json", "not a zarr group's metadata (no 'attributes' object)")
    return attrs


def foreign_content(path: str | os.PathLike[str]) -> str | None:
    """Why the existing folder ``path`` is not (only) a score store this module wrote, or None if it is one.

    A store's folder holds ``zarr.json`` (a group whose ``format`` is :data:`STORE_FORMAT`) and ``scores/``
    (``zarr.json``, ``c/``, ``_done/``), besides zarr's ``*.partial`` files of a killed write. Anything else (another
    zarr group, a user's file beside the store) makes the folder foreign: it is never deleted or written.
    """
    path = Path(path)
    if not (path / "zarr.json").is_file():
        return "holds no zarr.json"
    try:
        attrs = _read_attrs(path)
    except DataError as err:
        return f"its zarr.json cannot be read as a score store's ({err})"
    if attrs.get("format") != STORE_FORMAT:
        fmt = "no 'format' attribute" if "format" not in attrs else f"format {str(attrs['format'])[:40]!r}"
        return f"holds a zarr group that xenbench did not write ({fmt}, not {STORE_FORMAT!r})"
    for folder, allowed in ((path, _STORE_ENTRIES), (path / _ARRAY, _ARRAY_ENTRIES)):
        if not folder.is_dir():
            return f"has no {folder.name}/ folder"
        others = sorted(p.name for p in folder.iterdir() if p.name not in allowed and not _PARTIAL.fullmatch(p.name))
        if others:
            where = "" if folder == path else f"{folder.name}/"
            return (f"holds {len(others)} file(s) or folder(s) that are not part of a score store (first: "
                    f"{where}{others[0][:80]!r})")
    return None


def _zarr():
    try:
        import zarr
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "ScoreStore needs zarr>=3 (pip install 'zarr>=3'); xenbench.models.scoring.score_matrix (in memory) works without it."
        ) from err
    return zarr


def ids_fingerprint(query_ids: Sequence[str], item_ids: Sequence[str]) -> str:
    """SHA-256 of the row and column id lists, in order (recorded as ``attrs["ids_sha256"]``)."""
    return hashlib.sha256(json.dumps([list(query_ids), list(item_ids)]).encode("utf-8")).hexdigest()


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def refuse_if_locked(path: str | os.PathLike[str]) -> None:
    """Refuse now, before any model loads, a store that another live job holds the writer lock of
    (:func:`writer_lock`, which the job then takes: this check only says it early). A stale or unreadable lock is left
    to :func:`writer_lock`.

    Raises
    ------
    DataError
        Naming the store, the process and host that write it.
    """
    path = Path(path)
    lock = _lock_path(path)
    try:
        owner = json.loads(lock.read_text(encoding="utf-8"))
        pid, host = int(owner["pid"]), str(owner["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if host == socket.gethostname() and (pid == os.getpid() or not pid_alive(pid)):
        return
    raise DataError(path, f"is being written by process {pid} on {host} since {owner.get('started')} "
                          f"(lock {lock.name}): wait for that job, or delete the lock if it is gone")


@contextlib.contextmanager
def writer_lock(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the exclusive writer lock of the store at ``path`` (which need not exist yet).

    The lock is the file ``.<name>.lock`` beside ``path``, created with O_EXCL and holding the owner's pid,
    host and start time. A lock of a process that no longer runs on this host is stale and taken over.

    Raises
    ------
    DataError
        Another live process (or another host) holds the lock.
    """
    path = Path(path)
    lock = _lock_path(path)
    with _naming(lock):
        lock.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for _ in range(3):
        if _link_lock(lock, me):
            break
        try:
            owner = json.loads(lock.read_text(encoding="utf-8"))
            pid, host = int(owner["pid"]), str(owner["host"])
        except FileNotFoundError:
            continue  # released meanwhile
        except (OSError, ValueError, KeyError, TypeError):
            raise DataError(lock, "unreadable writer lock (not written by this xenbench, which writes a lock whole "
                                  "or not at all): delete it if no job is writing this store") from None
        if host == me["host"] and not pid_alive(pid):
            logger.warning("taking over the stale lock %s of process %d, which is gone", lock, pid)
            lock.unlink(missing_ok=True)
            continue
        raise DataError(path, f"is being written by process {pid} on {host} since {owner.get('started')} "
                              f"(lock {lock.name}): wait for that job, or delete the lock if it is gone") from None
    else:  # pragma: no cover - three races in a row
        raise DataError(path, f"could not take the writer lock {lock.name}")
    try:
        yield lock
    finally:
        lock.unlink(missing_ok=True)


def _link_lock(lock: Path, owner: Mapping[str, Any]) -> bool:
    """Create ``lock`` holding ``owner`` as JSON, whole or not at all; False if it exists already.

    The content goes to a temporary file first, which is then hard-linked to the lock's name (``link`` fails if the
    name exists: the same exclusivity as ``O_EXCL``), so a write error (a full disk) leaves no lock behind and raises
    an :class:`OSError` naming the lock.
    """
    text = json.dumps(dict(owner))
    tmp = lock.with_name(f"{lock.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with _naming(lock, tmp):
            write_text_atomic(tmp, text, fsync=True)
            try:
                os.link(tmp, lock)
            except FileExistsError:
                return False
            except OSError as err:  # a file system without hard links: exclusive create, removed if the write fails
                if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                return _create_lock(lock, text)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _create_lock(lock: Path, text: str) -> bool:
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        lock.unlink(missing_ok=True)
        raise
    return True


def _block_digest(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype=np.float32).view(np.uint8)).hexdigest()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        _fsync_file(path)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass


@contextlib.contextmanager
def _naming(path: Path, *temporary: Path) -> Iterator[None]:
    """Give a write error without a file name (``write``/``fsync`` on a full disk: "No space left on device"), or one
    naming a ``temporary`` file of ours, the user's ``path``, so the one-line message says where."""
    try:
        yield
    except OSError as err:
        if err.errno is not None and (err.filename is None or str(err.filename) in map(str, temporary)):
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        raise


def _non_finite(values: np.ndarray) -> tuple[int, tuple[int, int]] | None:
    """``(count, (row, column) of the first)`` of the NaN/inf entries of a 2-D block, or None if all are finite."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    first = np.argwhere(bad)[0]
    return int(bad.sum()), (int(first[0]), int(first[1]))


def _write_json_atomic(path: Path, obj: Mapping[str, Any]) -> None:
    """Write ``obj`` so that ``path`` holds either the old content or all of the new one, durably."""
    write_text_atomic(path, json.dumps(obj, sort_keys=True), fsync=True)


def check_store_folder(path: str | os.PathLike[str]) -> None:
    """Refuse, before any work, an output folder that is neither absent, empty, nor a score store this module wrote
    (:func:`foreign_content`): a scoring job may resume or replace only its own kind of store.

    Raises
    ------
    DataError
        Naming ``path`` and what it holds; nothing there is changed.
    """
    path = Path(path)
    try:
        if not path.exists() or (path.is_dir() and not any(path.iterdir())):
            return
    except OSError as err:
        raise DataError(path, f"cannot be used as a store folder ({err.strerror or err})") from None
    problem = "is a file" if not path.is_dir() else foreign_content(path)
    if problem is not None:
        raise DataError(path, f"is not a score store xenbench wrote: it {problem}; nothing there was changed "
                              "(xenbench resumes or replaces only its own stores): choose another path")


def _check_new_store_path(path: Path, overwrite: bool) -> tuple[Path, bool]:
    """Where :meth:`ScoreStore.create` builds the store at ``path`` (a symbolic link's target) and whether it must
    delete a store of ours there first; raises if ``path`` is a file, a folder that is not (only) such a store
    (:func:`foreign_content`), or a store and not ``overwrite``."""
    try:
        if path.is_symlink():
            path = path.resolve(strict=True)  # the store goes where the link points, not in place of the link
        if not path.exists():
            return path, False
        if not path.is_dir():
            raise DataError(path, "is a file: expected a new (or empty) store folder; choose another path")
        if not any(path.iterdir()):
            return path, False
    except OSError as err:  # a symbolic link loop, a link to nothing, a folder that cannot be listed
        raise DataError(path, f"cannot be used as a store folder ({err.strerror or err})") from None
    problem = foreign_content(path)
    if problem is not None:
        raise DataError(path, f"is a folder that is not a score store xenbench wrote: it {problem}; nothing there was "
                              "changed (xenbench deletes only its own stores): choose another path")
    if not overwrite:
        raise DataError(path, "already exists: open it with ScoreStore.open to resume, or pass overwrite=True "
                              "(xenbench score --overwrite) to replace it")
    return path, True


def _remove_stale_builds(path: Path) -> None:
    # A store built by a process killed before its rename: ".<name>.new-<pid>-<hex>" beside `path`.
    for old in path.parent.glob(f".{glob_escape(path.name)}.new-*"):
        pid = old.name.rsplit(".new-", 1)[1].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            logger.info("removing %s, a store left half-built by process %s", old, pid)
            shutil.rmtree(old, ignore_errors=True)


class ScoreStore:
    """A dense float32 score matrix on disk, written in row blocks and resumable.

    Create with :meth:`create`, reopen with :meth:`open`. Reads of unfinished blocks raise (or give NaN
    with ``allow_partial=True``); reads check every block against the SHA-256 in its marker.

    Attributes
    ----------
    path : Path
        The store's folder.
    shape : tuple of int
        ``(n_queries, n_items)``.
    chunks : tuple of int
        ``(q_chunk, i_chunk)``: rows per block and items per zarr chunk file.
    """

    def __init__(self, path: Path, group: Any, array: Any, writable: bool) -> None:
        # Use create() / open(): this constructor trusts its arguments.
        self.path = path
        self._group = group
        self._array = array
        self.writable = writable
        self.shape: tuple[int, int] = tuple(int(n) for n in array.shape)  # type: ignore[assignment]
        self.chunks: tuple[int, int] = tuple(int(c) for c in array.chunks)  # type: ignore[assignment]

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        n_queries: int,
        n_items: int,
        chunks: tuple[int, int | None] = (64, None),
        attrs: Mapping[str, Any] | None = None,
        *,
        overwrite: bool = False,
    ) -> ScoreStore:
        """Create an empty store (every entry NaN, no block done).

        Parameters
        ----------
        path
            Folder to create: new or empty, or (with ``overwrite``) a store this module wrote. A symbolic link
            is followed (the store is built where it points).
        n_queries, n_items
            Matrix shape, both >= 1.
        chunks
            ``(q_chunk, i_chunk)``: rows per block (the unit of resume) and items per zarr chunk file;
            ``i_chunk=None`` means whole rows, or fewer items if a chunk file would exceed 32 MB.
        attrs
            JSON-serializable manifest stored in the group attributes (``format`` and ``dtype`` are
            added).
        overwrite
            Delete an existing store at ``path`` first. Only a store of :data:`STORE_FORMAT` whose folder holds
            nothing else is deleted (:func:`foreign_content`); anything else is refused and left as it was.

        Returns
        -------
        ScoreStore
            Open for writing.

        Raises
        ------
        DataError
            ``path`` is a file, a symbolic link loop, a folder that is not (only) a score store of this module, or a
            store and not ``overwrite``.
        OSError
            A write fails (e.g. a full disk); its file name is ``path``, and nothing is left at ``path``.
        """
        owner = "ScoreStore.create"
        for name, n in (("n_queries", n_queries), ("n_items", n_items)):
            check_int(n, name, 1, None, owner)
        if not isinstance(chunks, (tuple, list)) or len(chunks) != 2:
            raise ParameterError("chunks", "a pair (q_chunk, i_chunk)", chunks, owner)
        q_chunk, i_chunk = chunks
        if not is_int(q_chunk, 1):
            raise ParameterError("chunks", "a pair whose q_chunk is an int >= 1", chunks, owner)
        if i_chunk is None:
            i_chunk = min(int(n_items), max(1, _MAX_CHUNK_BYTES // (4 * int(q_chunk))))
        elif not is_int(i_chunk, 1):
            raise ParameterError("chunks", "a pair whose i_chunk is an int >= 1 or None", chunks, owner)
        path = Path(path)
        meta = {**dict(attrs or {}), "format": STORE_FORMAT, "dtype": "float32"}
        if "query_ids" in meta or "item_ids" in meta:
            q_ids, i_ids = list(meta.get("query_ids") or []), list(meta.get("item_ids") or [])
            if (len(q_ids), len(i_ids)) != (int(n_queries), int(n_items)):
                raise ParameterError("attrs", f"query_ids and item_ids of lengths ({n_queries}, {n_items}) "
                                     "(the matrix shape)", (len(q_ids), len(i_ids)), owner)
            meta["ids_sha256"] = ids_fingerprint(q_ids, i_ids)
        try:
            json.dumps(meta)
        except TypeError as err:
            raise ParameterError("attrs", "a JSON-serializable mapping", type(err).__name__, owner) from err
        path, replace = _check_new_store_path(path, overwrite)
        zarr = _zarr()
        from zarr.storage import LocalStore

        _remove_stale_builds(path)
        # Built beside `path` and renamed into place: `path` never holds half a store (a full disk, a kill).
        tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            with _naming(path, tmp):
                group = zarr.open_group(store=LocalStore(tmp), mode="w", attributes=meta)
                group.create_array(
                    _ARRAY,
                    shape=(int(n_queries), int(n_items)),
                    chunks=(min(int(q_chunk), int(n_queries)), min(int(i_chunk), int(n_items))),
                    dtype="float32",
                    fill_value=float("nan"),
                    compressors=None,
                    chunk_key_encoding={"name": "default", "separator": "/"},
                )
                (tmp / _ARRAY / _DONE).mkdir()
                if replace:
                    shutil.rmtree(path)
                os.replace(tmp, path)  # onto nothing, or an empty folder
                _fsync_dir(path.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls.open(path, mode="r+")

    @classmethod
    def open(cls, path: str | os.PathLike[str], mode: Literal["r", "r+"] = "r") -> ScoreStore:
        """Open an existing store, read-only (``"r"``) or for writing/resuming (``"r+"``).

        Raises
        ------
        DataError
            If ``path`` is not a store written by :meth:`create`.
        """
        if mode not in ("r", "r+"):
            raise ParameterError("mode", "'r' or 'r+'", mode, "ScoreStore.open")
        path = Path(path)
        if not (path / "zarr.json").is_file() or not (path / _ARRAY / "zarr.json").is_file():
            raise DataError(path, "not a score store: expected zarr.json and scores/zarr.json (ScoreStore.create)")
        fmt = _read_attrs(path).get("format")  # bounded, before zarr reads it whole
        if fmt != STORE_FORMAT:
            raise DataError(path, f"attrs['format'] is {str(fmt)[:40]!r}, expected {STORE_FORMAT!r}")
        zarr = _zarr()
        from zarr.storage import LocalStore

        group = zarr.open_group(store=LocalStore(path, read_only=mode == "r"), mode=mode)
        array = group[_ARRAY]
        store = cls(path, group, array, writable=mode == "r+")
        store.check_manifest()
        if store.writable:
            store._remove_leftovers()
        else:
            record_input("score store", path)  # its digest goes into the run's provenance
        return store

    def check_manifest(self) -> None:
        """Check the manifest against the array: dtype, id lists vs shape, and the ids' recorded SHA-256.

        Raises
        ------
        DataError
            Naming the store and the field that disagrees.
        """
        attrs = _read_attrs(self.path)  # from disk, not the open handle's copy: verify() must see a later edit
        if attrs.get("dtype", "float32") != "float32" or str(self._array.dtype) != "float32":
            raise DataError(self.path, f"dtype is {attrs.get('dtype')!r} / {self._array.dtype}, expected float32")
        if "query_ids" not in attrs and "item_ids" not in attrs:
            return
        q_ids, i_ids = attrs.get("query_ids") or [], attrs.get("item_ids") or []
        if (len(q_ids), len(i_ids)) != self.shape:
            raise DataError(self.path, f"the manifest lists {len(q_ids)} query ids and {len(i_ids)} item ids for a "
                                       f"{self.shape[0]} x {self.shape[1]} matrix: the manifest was edited or is torn")
        recorded = attrs.get("ids_sha256")
        if recorded is None:
            raise DataError(self.path, "the manifest has ids but no ids_sha256 (written by an older xenbench?): "
                                       "re-create the store, or record it with ids_fingerprint()")
        if ids_fingerprint(q_ids, i_ids) != recorded:
            raise DataError(self.path, "query_ids/item_ids do not match the ids_sha256 recorded at creation: the "
                                       "manifest was edited (rows or columns would be mislabelled)")

    def _remove_leftovers(self) -> None:
        # A killed writer leaves zarr's "<key>.<uuid>.partial" (of a chunk, or of zarr.json during an attrs
        # update) and our "<k>.json.tmp"; neither is ever read (keys are computed, not listed), but they
        # would accumulate.
        for p in [*self.path.rglob("*.partial"), *(self.path / _ARRAY / _DONE).glob("*.tmp")]:
            logger.info("removing leftover temporary file %s", p)
            p.unlink(missing_ok=True)

    # -- geometry and metadata --------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"ScoreStore({str(self.path)!r}, shape={self.shape}, chunks={self.chunks}, "
            f"done={len(self.done_chunks())}/{self.n_chunks})"
        )

    @property
    def n_chunks(self) -> int:
        """Number of row blocks: ``ceil(n_queries / q_chunk)``."""
        return math.ceil(self.shape[0] / self.chunks[0])

    def chunk_rows(self, k: int) -> tuple[int, int]:
        """Rows ``(start, stop)`` of block ``k``."""
        check_int(k, "k", 0, self.n_chunks - 1, "ScoreStore", expected=f"a block index in [0, {self.n_chunks - 1}]")
        start = int(k) * self.chunks[0]
        return start, min(start + self.chunks[0], self.shape[0])

    @property
    def attrs(self) -> dict[str, Any]:
        """A copy of the manifest (group attributes)."""
        return dict(self._group.attrs)

    def update_attrs(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the manifest (zarr rewrites ``zarr.json`` atomically)."""
        self._check_writable()
        with _naming(self.path / "zarr.json"):
            self._group.attrs.update(dict(values))

    def _check_writable(self) -> None:
        if not self.writable:
            raise DataError(self.path, "store is open read-only: use ScoreStore.open(path, mode='r+')")

    # -- bookkeeping ----------------------------------------------------------------------------

    def _marker(self, k: int) -> Path:
        return self.path / _ARRAY / _DONE / f"{int(k)}.json"

    def done_chunks(self) -> list[int]:
        """Indices of the blocks with a completion marker, ascending."""
        done = []
        for p in (self.path / _ARRAY / _DONE).glob("*.json"):
            if p.stem.isdigit() and int(p.stem) < self.n_chunks:
                done.append(int(p.stem))
        return sorted(done)

    def missing_chunks(self) -> list[int]:
        """Indices of the blocks still to compute, ascending."""
        done = set(self.done_chunks())
        return [k for k in range(self.n_chunks) if k not in done]

    @property
    def is_complete(self) -> bool:
        """Whether every block has its marker."""
        return len(self.done_chunks()) == self.n_chunks

    def chunk_info(self, k: int) -> dict[str, Any] | None:
        """The marker of block ``k`` (rows, sha256, wall_s, ... as written), or None if not done."""
        self.chunk_rows(k)
        if not self._marker(k).exists():
            return None
        try:
            info = read_json_bounded(self._marker(k), _MAX_MARKER_BYTES, "a block's completion marker")
        except DataError as err:  # only possible if someone edited or replaced it: never trust it
            raise DataError(self._marker(k), f"unreadable completion marker ({err}); delete it to recompute") from None
        if not isinstance(info, dict):
            raise DataError(self._marker(k), "unreadable completion marker (not a JSON object); delete it to recompute")
        return info

    @property
    def wall_s(self) -> float:
        """Compute time summed over the done blocks' markers (survives a kill, unlike attrs)."""
        return float(sum((self.chunk_info(k) or {}).get("wall_s", 0.0) for k in self.done_chunks()))

    def invalidate(self, k: int) -> None:
        """Forget block ``k`` (remove its marker) so the next scoring run recomputes it."""
        self._check_writable()
        self.chunk_rows(k)
        self._marker(k).unlink(missing_ok=True)
        _fsync_dir(self._marker(k).parent)

    # -- writing --------------------------------------------------------------------------------

    def write_chunk(self, k: int, values: np.ndarray, info: Mapping[str, Any] | None = None) -> None:
        """Write row block ``k`` and then mark it done.

        Parameters
        ----------
        k
            Block index, ``0 <= k < n_chunks``.
        values : ndarray of shape (stop - start, n_items)
            Scores of rows ``chunk_rows(k)``; cast to float32.
        info
            Extra JSON fields for the marker (e.g. ``wall_s``, ``n_pairs``, ``device``).

        Raises
        ------
        DataError
            ``values`` holds NaN or inf (a diverged model's scores): nothing is written and the block stays
            undone, so the store never counts as complete with them. The message names the store, the block,
            the first bad entry and the model of the manifest.
        OSError
            A write fails (e.g. a full disk); its file name is the store's path.
        """
        self._check_writable()
        start, stop = self.chunk_rows(k)
        values = np.ascontiguousarray(values, dtype=np.float32)
        if values.shape != (stop - start, self.shape[1]):
            raise ParameterError("values", f"an array of shape {(stop - start, self.shape[1])}", values.shape,
                                 "ScoreStore.write_chunk")
        bad = _non_finite(values)
        if bad is not None:
            (n_bad, (r, c)), model = bad, self._group.attrs.get("model")
            by = f" computed by {model}" if model else ""
            raise DataError(self.path, f"block {k} (rows {start}:{stop}) holds {n_bad} NaN/inf of {values.size} scores"
                                       f" (first at query row {start + r}, item column {c}){by}: not written, the "
                                       "store stays incomplete (does the model's checkpoint hold NaN weights, from a"
                                       " diverged training run?)")
        # Drop an old marker first: a kill during the rewrite must not leave it vouching for mixed data.
        with _naming(self.path):
            if self._marker(k).exists():
                self.invalidate(k)
            self._array[start:stop, :] = values
            for f in self._chunk_files(k):
                _fsync_file(f)
            _fsync_dir(self.path / _ARRAY / "c" / str(k))
            digest = _block_digest(values)
            # Read back what is on disk: the marker vouches for the files, not for our buffer.
            if _block_digest(self._array[start:stop, :]) != digest:
                raise DataError(self.path, f"block {k} (rows {start}:{stop}) read back differently than written")
            marker = {**dict(info or {}), "block": int(k), "rows": [start, stop], "sha256": digest,
                      "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            _write_json_atomic(self._marker(k), marker)

    def _chunk_files(self, k: int) -> list[Path]:
        n_item_chunks = math.ceil(self.shape[1] / self.chunks[1])
        base = self.path / _ARRAY / "c" / str(k)
        return [base / str(j) for j in range(n_item_chunks) if (base / str(j)).is_file()]

    # -- reading --------------------------------------------------------------------------------

    def read_chunk(self, k: int, *, verify: bool = True) -> np.ndarray:
        """Scores of block ``k``: ndarray of shape (stop - start, n_items), float32.

        Raises
        ------
        DataError
            If the block is not done, or (``verify``) its data does not match its marker's SHA-256.
        """
        start, stop = self.chunk_rows(k)
        info = self.chunk_info(k)
        if info is None:
            raise DataError(self.path, f"block {k} (rows {start}:{stop}) is not done: resume the scoring run")
        values = np.asarray(self._read(start, stop), dtype=np.float32)
        if verify and _block_digest(values) != info.get("sha256"):
            raise DataError(
                self.path,
                f"block {k} (rows {start}:{stop}) does not match its completion marker: a chunk file was torn or"
                f" changed after it was written; call invalidate({k}) and resume scoring to recompute it",
            )
        bad = _non_finite(values) if verify else None
        if bad is not None:  # only a store written before write_chunk refused NaN/inf can hold them
            (n_bad, (r, c)) = bad
            raise DataError(self.path, f"block {k} (rows {start}:{stop}) holds {n_bad} NaN/inf scores (first at query "
                                       f"row {start + r}, item column {c}): call invalidate({k}) and resume scoring "
                                       "to recompute it")
        return values

    def _read(self, start: int, stop: int) -> np.ndarray:
        try:
            return self._array[start:stop, :]
        except ValueError as err:  # a truncated uncompressed chunk fails to reshape inside zarr
            raise DataError(self.path, f"rows {start}:{stop} cannot be decoded ({err}): a chunk file is torn") from err

    def verify(self) -> list[int]:
        """Check the manifest (:meth:`check_manifest`, raises) and every done block's digest.

        Returns the done blocks whose data does not match their marker (each read once); empty if all is well.
        """
        self.check_manifest()
        bad = []
        for k in self.done_chunks():
            try:
                self.read_chunk(k, verify=True)
            except DataError:
                bad.append(k)
        return bad

    def iter_chunks(self, *, verify: bool = True) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield ``(start, stop, scores)`` block by block: streams a matrix larger than memory."""
        for k in range(self.n_chunks):
            start, stop = self.chunk_rows(k)
            yield start, stop, self.read_chunk(k, verify=verify)

    def to_numpy(self, *, verify: bool = True, allow_partial: bool = False) -> np.ndarray:
        """The whole matrix: ndarray of shape (n_queries, n_items), float32.

        Parameters
        ----------
        verify
            Check every block against its marker's SHA-256.
        allow_partial
            Return NaN rows for blocks not done instead of raising.
        """
        out = np.full(self.shape, np.nan, dtype=np.float32)
        done = set(self.done_chunks())
        if not allow_partial and len(done) < self.n_chunks:
            missing = [k for k in range(self.n_chunks) if k not in done]
            raise DataError(self.path, f"{len(missing)} of {self.n_chunks} row blocks are not done (first: "
                                       f"{missing[:5]}): resume the scoring run, or pass allow_partial=True")
        for k in sorted(done):
            start, stop = self.chunk_rows(k)
            out[start:stop] = self.read_chunk(k, verify=verify)
        return out

    def __getitem__(self, key: Any) -> np.ndarray:
        """NumPy-style reads, e.g. ``store[10:20]`` or ``store[3, :50]``, checked like :meth:`read_chunk`.

        Whole row blocks touched by the row index are read and verified, then indexed in memory.
        """
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
        n, q = self.shape[0], self.chunks[0]
        if isinstance(rows, slice):
            idx = np.arange(*rows.indices(n))
        elif isinstance(rows, (int, np.integer)) and not isinstance(rows, bool):
            if not -n <= rows < n:
                raise IndexError(f"row {rows} is out of range for {n} queries")
            idx = np.int64(int(rows) % n)
        else:  # fancy or boolean row index: read everything it could touch
            return self.to_numpy()[key]
        if idx.size == 0:
            return np.empty((0, self.shape[1]), dtype=np.float32)[(slice(None), *rest)]
        b0, b1 = int(idx.min()) // q, int(idx.max()) // q
        sub = np.concatenate([self.read_chunk(k) for k in range(b0, b1 + 1)])
        return sub[(idx - b0 * q, *rest)]


def open_stores(folder: str | os.PathLike[str]) -> dict[str, ScoreStore]:
    """Every store directly under ``folder`` (read-only), keyed by its folder name, sorted."""
    base = Path(folder)
    if not base.is_dir():
        raise DataError(base, "no such folder: expected a folder of score stores (e.g. data/scores/<domain>)")
    return {p.name: ScoreStore.open(p) for p in sorted(base.iterdir()) if (p / "zarr.json").is_file()}


def compare_with_stores(fresh: Mapping[str, np.ndarray], stores: Mapping[str, ScoreStore], queries, items):
    """Max |difference| between freshly computed matrices and the stores' entries for the same ids.

    ``fresh`` and ``stores`` share keys: the fresh matrix ``fresh[name]`` (rows ``queries``, columns ``items``) is
    compared with ``stores[name]``; a name without a store is skipped, and only the (query, item) pairs present
    in the store count. Returns a DataFrame (fresh, store, n_pairs, max_abs_diff).
    """
    import pandas as pd

    rows = []
    for name, M in fresh.items():
        folder, store = name, stores.get(name)
        if store is None:
            continue
        q_index = {q: r for r, q in enumerate(store.attrs["query_ids"])}
        i_index = {i: c for c, i in enumerate(store.attrs["item_ids"])}
        q_rows = [(a, q_index[q.id]) for a, q in enumerate(queries) if q.id in q_index]
        i_cols = [(b, i_index[i.id]) for b, i in enumerate(items) if i.id in i_index]
        if not q_rows or not i_cols:
            continue
        (qa, qs), (ib, ic) = zip(*q_rows), zip(*i_cols)
        stored = store.to_numpy()[np.ix_(qs, ic)]
        diff = np.abs(np.asarray(M)[np.ix_(qa, ib)] - stored)
        rows.append({"fresh": name, "store": folder, "n_pairs": int(diff.size), "max_abs_diff": float(diff.max())})
    return pd.DataFrame(rows, columns=["fresh", "store", "n_pairs", "max_abs_diff"])


def describe_stores(stores: Mapping[str, ScoreStore]):
    """One row per store: shape, model, device, precision, wall time and (for CE stores) pairs/s."""
    import pandas as pd

    rows = []
    for name, s in stores.items():
        a = s.attrs
        wall = a.get("wall_s")
        is_ce = "model_sha256" in a  # a DE store's wall time is mostly cached embeddings: no pairs/s
        kind = f"{a['model_config']['kind']}-ce" if is_ce and "model_config" in a else a.get("kind")
        rows.append({"store": name, "shape": s.shape, "model": a.get("model"), "kind": kind,
                     "device": a.get("device"), "precision": a.get("precision"), "wall_s": wall,
                     "pairs_per_s": round(s.shape[0] * s.shape[1] / wall) if is_ce and wall else None})
    return pd.DataFrame(rows)
