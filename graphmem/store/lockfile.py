"""Exclusive lock files: held by a live process through ``flock``, stale once their holder has died.

A lock is a file locked with ``fcntl.flock(LOCK_EX)`` for as long as its holder runs. The kernel
drops the lock when the holder exits for any reason (``kill -9`` included), so a lock can never
outlive its process: a file left behind is *stale* and the next caller takes it over. The file
holds who took it (pid, host, start time, plus what the caller adds) for the messages. A clean
release unlinks the file before unlocking it; a waiter that locked the unlinked file notices that
the path no longer names it and tries again.

Locks are reentrant within a process (a nested :meth:`FileLock.acquire` of a path this process
holds only counts), so a function holding a set's lock may call one that takes it again.
Needs ``fcntl`` (Linux, macOS); on a shared filesystem, ``flock`` must be supported by the mount.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from graphmem.core.errors import InputError

_HELD: dict[tuple[int, str], list] = {}  # (pid, real path) -> [fd, depth]: a forked child holds none of these


class LockBusyError(RuntimeError, InputError):
    """The lock is held by a live process; the message names the path and the holder."""

    def __init__(self, path: Path, holder: dict[str, Any]):
        self.path, self.holder = path, holder
        super().__init__(f"{path} is held by {describe(holder)}")


def describe(holder: dict[str, Any]) -> str:
    """``run <id> (pid N on host, since <time>)`` from a lock file's contents."""
    if not holder:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("since", 0)))
    who = f"run {holder['run_id']} " if holder.get("run_id") else ""
    return f"{who}(pid {holder.get('pid')} on {holder.get('host')}, since {since})"


def _read(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 1 << 16):
        raw += chunk
    try:
        value = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        value = {"unreadable": raw[:80].decode("utf-8", "replace")}
    return value if isinstance(value, dict) else {}


class FileLock:
    """An exclusive lock on ``path`` (a file beside what it protects).

    Args:
        path: the lock file; its folder is created.
        info: extra fields written into the lock file (e.g. ``run_id``) (default: none).
    """

    def __init__(self, path: str | Path, info: dict[str, Any] | None = None):
        self.path = Path(path)
        self.info = dict(info or {})
        self.stale: dict[str, Any] | None = None
        """what a dead holder had written, when this acquisition took over a stale lock."""

    def acquire(self, blocking: bool = False, on_wait: Callable[[dict[str, Any]], None] | None = None) -> FileLock:
        """Take the lock; raises :class:`LockBusyError` when a live process holds it and not ``blocking``.

        With ``blocking``, ``on_wait(holder)`` is called once before waiting.
        """
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        key = (os.getpid(), os.path.realpath(self.path))
        if key in _HELD:
            _HELD[key][1] += 1
            return self
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                if not blocking:
                    os.close(fd)
                    raise LockBusyError(self.path, holder) from None
                if on_wait is not None:
                    on_wait(holder)
                    on_wait = None
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if not same:  # released (unlinked) while we waited: lock the file that is there now
                os.close(fd)
                continue
            previous = _read(fd)  # a clean release unlinks the file: content left here means its holder died
            self.stale = previous or None
            record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), **self.info}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(record).encode())
            os.fsync(fd)
            _HELD[key] = [fd, 1]
            return self

    def note(self, **fields: Any) -> None:
        """Rewrite the held lock file's record with ``fields`` added (e.g. the run id once it is known)."""
        held = _HELD.get((os.getpid(), os.path.realpath(self.path)))
        if held is None:
            return
        self.info.update(fields)
        record = {**_read(held[0]), **fields}
        os.ftruncate(held[0], 0)
        os.lseek(held[0], 0, os.SEEK_SET)
        os.write(held[0], json.dumps(record).encode())

    def release(self) -> None:
        """Give the lock back (unlink, then unlock); a no-op when this process does not hold it."""
        key = (os.getpid(), os.path.realpath(self.path))
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _HELD[key]
        try:
            os.unlink(self.path)
        finally:
            os.close(held[0])  # closing the descriptor drops the flock

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
