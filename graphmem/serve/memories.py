"""The memories one server holds: one :class:`graphmem.Memory` per name, each in its own folder under the root.

A memory is opened on first use, as the writer (the server process is its one writer: a script that opens it
for writing meanwhile is refused, readers are not), and kept open until the server shuts down. Its folder is
``<memory_root>/<name>`` for a name :func:`graphmem.store.paths.check_name` accepts, joined by
:func:`graphmem.store.paths.run_path`, so that one namespace never reaches another's files. Only a write
creates a memory: reading one that does not exist is :class:`UnknownMemoryError`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from graphmem.core.errors import InputError
from graphmem.memory import Memory
from graphmem.store.memory_store import DB_NAME
from graphmem.store.paths import check_name, run_path


class UnknownMemoryError(InputError):
    """A read of a memory that does not exist (nothing was ever added to it)."""


class TooManyMemoriesError(InputError):
    """A new memory beyond the server's ``max_memories``."""


class OpenMemories:
    """Every memory of one server (module docstring); thread-safe.

    Args:
        root: the folder holding one folder per memory.
        opener: opens (or creates) the memory in a folder, with the server's encoder, policy and settings.
        max_memories: the most memories held open at once.
    """

    def __init__(self, root: str | Path, opener: Callable[[Path], Memory], max_memories: int) -> None:
        self.root, self.opener, self.max_memories = Path(root), opener, max_memories
        self._open: dict[str, Memory] = {}
        self._lock = threading.Lock()

    def get(self, name: str, create: bool = False) -> Memory:
        """The open memory ``name``, opened first when it is not; ``create``: a new memory when none exists."""
        memory = self._open.get(name)
        if memory is not None:
            return memory
        with self._lock:
            if name in self._open:
                return self._open[name]
            folder = run_path(self.root, check_name("name", name), key="memory_root")
            if not create and not (folder / DB_NAME).is_file():
                raise UnknownMemoryError(f"memory {name!r} does not exist: add a record to create it")
            if len(self._open) >= self.max_memories:
                raise TooManyMemoriesError(
                    f"the server holds {len(self._open)} memories open, its max_memories; memory {name!r} cannot "
                    "be opened until it restarts with a larger max_memories"
                )
            self._open[name] = self.opener(folder)
            return self._open[name]

    def __len__(self) -> int:
        return len(self._open)

    def close(self) -> None:
        """Close every memory (each commits nothing more: every write was committed when it was acknowledged)."""
        with self._lock:
            while self._open:
                self._open.popitem()[1].close()
