"""Objects that hold a resource until ``close()``: each is its own context manager."""

from __future__ import annotations

from typing import Self


class Closing:
    """``with obj:`` gives ``obj`` and closes it at the end (a subclass defines ``close``)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
