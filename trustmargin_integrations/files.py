"""The one crash-safe writer for every file the project writes (standard library only).

:func:`atomic_output` (and :func:`write_text_atomic`, :func:`write_bytes_atomic`) write a
whole file through a fsynced temporary file renamed over the destination, so a reader sees the
old file or the new one, never a mix; :func:`open_append` opens append-only files (the result
store) with ``O_APPEND | O_NOFOLLOW``. Both refuse links and anything not a regular file;
:func:`check_output` is the guard every command runs on each output before any work.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import socket
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from trustmargin_integrations.errors import InvalidInputError

TEMP_MARK = ".writing-"
TEMP_SUFFIX = ".tmp"
# A file mode like any other file the user's programs create (0o666 less the umask): the
# kernel applies the umask to os.open's mode, so outputs and caches share one mode (mkstemp's
# 0o600 made `score` outputs private while their caches were not).
FILE_MODE = 0o666
# Leave room in the 255-byte name limit for the temp suffix (host, pid, token).
_NAME_ROOM = 120


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:40] or "host"


def _temp_prefix(dest: Path) -> str:
    return dest.name[:_NAME_ROOM] + TEMP_MARK


def temp_path(dest: Path) -> Path:
    """A fresh temporary name beside ``dest``: ``NAME.writing-HOST-PID-TOKEN.tmp``.

    The host and pid say who owns it (see :func:`remove_stale_temps`); the random token keeps
    two writers of one process (threads) apart.
    """
    token = secrets.token_hex(6)
    return dest.with_name(f"{_temp_prefix(dest)}{_host()}-{os.getpid()}-{token}{TEMP_SUFFIX}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def remove_stale_temps(dest: Path) -> list[Path]:
    """Remove the temporary files of ``dest`` that writers killed on this host left behind.

    Only temps whose owner process is gone are removed. Deleting every ``NAME.writing-*``
    (what ``score`` once did) removed a concurrent run's in-flight temp and crashed it; a
    temp of another host (a shared folder) or of a live process is never touched. A reused
    pid only keeps a stale temp a little longer, it never deletes a live one.

    Returns:
        The paths removed.
    """
    removed: list[Path] = []
    if not dest.parent.is_dir():
        return removed
    host = _host()
    for temp in dest.parent.glob(f"{_temp_prefix(dest)}*{TEMP_SUFFIX}"):
        owner = temp.name[len(_temp_prefix(dest)):-len(TEMP_SUFFIX)].rsplit("-", 2)
        if len(owner) != 3 or owner[0] != host or not owner[1].isdigit():
            continue
        pid = int(owner[1])
        if pid > 0 and not _alive(pid):
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
            removed.append(temp)
    return removed


# What a path that is not a regular file is, in words (stat's test, name).
_SPECIAL_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_destination(path: Path) -> Path:
    """Refuse a destination that is a symbolic link, a directory or not a regular file (a
    FIFO, a device, a socket); return ``path``. A missing path is fine.

    Raises:
        InvalidInputError: naming the path and the fix.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(info.st_mode):
        raise InvalidInputError(str(path), "is a symbolic link (it is never followed or "
                                "replaced, so nothing is written where it points)",
                                "remove the link or pass the real file path")
    if stat.S_ISDIR(info.st_mode):
        raise InvalidInputError(str(path), "is a directory", "pass a file path")
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _SPECIAL_KINDS if test(info.st_mode)),
                    "not a regular file")
        raise InvalidInputError(str(path), f"is {kind}, not a regular file (it is never "
                                "replaced by a file)", "pass the path of a regular file")
    return path


def same_file(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` name one file: the same path once resolved (``..``, links),
    or two names of one inode (a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either is missing (or unreadable): they cannot be one existing file
        return False


def check_output(path: Path, option: str, *, inputs: Mapping[str, Path] | None = None,
                 protected: Mapping[Path, str] | None = None) -> Path:
    """The one guard of a file a command will write, called before any work; return ``path``.

    Refused, each with an error naming ``option``: a symbolic link, a directory or another
    file that is not a regular one (:func:`check_destination`); a file the command reads
    (``inputs``: the option or argument that gave it -> its path), also through ``..``, a
    link or a hard link; a file the command does not own (``protected``: path -> what it
    is, e.g. a run directory's result cache).

    Raises:
        InvalidInputError: naming ``option``, the path and the fix.
    """
    try:
        check_destination(path)
    except InvalidInputError as exc:
        raise InvalidInputError(option, f"{path} {exc.problem}", exc.fix) from None
    for given, source in (inputs or {}).items():
        if same_file(path, source):
            raise InvalidInputError(option, f"{path} is the input file of {given}, which this "
                                    "command reads: writing there would replace it",
                                    f"write to another file than {given}")
    for owned, what in (protected or {}).items():
        if same_file(path, owned):
            raise InvalidInputError(option, f"{path} is {what}, which this command does not "
                                    "write: writing there would destroy it",
                                    "write to another file")
    return path


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (some filesystems cannot; then it is skipped)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def _atomic(path: str | Path, mode: str, encoding: str | None) -> Iterator[IO[Any]]:
    dest = check_destination(Path(path))
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(dest)
    temp = temp_path(dest)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, FILE_MODE)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        check_destination(dest)  # a link planted while we wrote is refused too
        os.replace(temp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    _fsync_directory(dest.parent)


@contextlib.contextmanager
def atomic_output(path: str | Path, *, encoding: str = "utf-8") -> Iterator[IO[str]]:
    """Stream a text file into a handle; on a clean exit it replaces ``path`` whole.

    The parent folder is created when missing. An exception inside the block (or while
    flushing: ENOSPC, EIO) removes the temporary file and leaves ``path`` untouched.

    Raises:
        InvalidInputError: ``path`` is a symbolic link or a directory.
    """
    with _atomic(path, "w", encoding) as handle:
        yield handle


@contextlib.contextmanager
def atomic_binary_output(path: str | Path) -> Iterator[IO[bytes]]:
    """:func:`atomic_output` for bytes (e.g. a model file assembled from parts)."""
    with _atomic(path, "wb", None) as handle:
        yield handle


def write_text_atomic(path: str | Path, text: str, *, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``text`` atomically (see :func:`atomic_output`); return it."""
    with atomic_output(path, encoding=encoding) as handle:
        handle.write(text)
    return Path(path)


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically (see :func:`atomic_output`); return it."""
    with atomic_binary_output(path) as handle:
        handle.write(data)
    return Path(path)


def open_append(path: str | Path) -> int:
    """Open an append-only file (created when missing); return the read-write descriptor.

    Each ``os.write`` on it lands whole at the current end (``O_APPEND``), so several
    processes appending one record per write never interleave inside a record.

    Raises:
        InvalidInputError: the path is a symbolic link, not a regular file, or hard-linked
            elsewhere (appending would change that other file too).
    """
    file = Path(path)
    check_destination(file)
    # Read-write, not write-only: the store reads its last byte to detect a torn line.
    flags = (os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
             | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(file, flags, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link planted between the check and the open
            check_destination(file)
        raise
    try:
        check_regular_file(file, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular_file(path: Path, info: os.stat_result) -> None:
    """Refuse a non-regular or hard-linked file that the project would append to or read as
    its own store.

    Raises:
        InvalidInputError: naming ``path`` and the fix.
    """
    if not stat.S_ISREG(info.st_mode):
        raise InvalidInputError(str(path), "is not a regular file", "pass a file path")
    if info.st_nlink > 1:
        raise InvalidInputError(str(path), f"has {info.st_nlink} hard links (appending would "
                                "change the other names too, e.g. an input file)",
                                "remove the extra link or pass another file path")
