"""Shared plumbing of the Hydra entry points in ``scripts/``."""

from __future__ import annotations

import sys
from typing import Any, Callable


def run_or_exit(
    run: Callable[[Any], Any], cfg: Any, errors: tuple[type[BaseException], ...] = (ValueError, KeyError)
) -> Any:
    """``run(cfg)``; a configuration error prints one ``error: ...`` line and exits with status 2.

    Scripts validate their whole config before any work, so these errors arrive early and a
    traceback would only hide the message.
    """
    try:
        return run(cfg)
    except errors as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
