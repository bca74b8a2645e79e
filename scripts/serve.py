"""Serve live memories over HTTP: ``python scripts/serve.py memory_root=<dir> port=<p> graph.encoder=hashing``.

One :class:`graphmem.Memory` per name under ``memory_root``, each opened on first use and held (the server is its
one writer) until the server stops (Ctrl-C or SIGTERM: the requests in flight finish, then every memory closes).
Every request carries the bearer token of ``$GRAPHMEM_TOKEN``; the server refuses to start without one unless
it is bound to 127.0.0.1 with ``auth=none``. The routes, limits and errors: :mod:`graphmem.serve.app` and
``docs/serving_memory.md``.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.config.cli import ConfigError, check_out_dir, policy_config, set_threads
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget


def check(cfg: DictConfig) -> Path:
    """Refuse, before anything is opened: no token where one is required, a ``memory_root`` that is a file."""
    from graphmem.serve.app import serve_token  # lazily: FastAPI is part of the full install

    root = check_out_dir(to_absolute_path(cfg.memory_root), "memory_root")
    serve_token(cfg.auth, cfg.host)
    return root


def serve(cfg: DictConfig) -> None:
    """Bind the port, then run uvicorn over :func:`graphmem.serve.make_app` until stopped."""
    import uvicorn

    from graphmem.serve.app import ServeLimits, make_app, serve_token  # lazily, as in check

    root = check(cfg)
    set_threads(cfg)
    app = make_app(
        root,
        token=serve_token(cfg.auth, cfg.host),
        graph=plain(cfg.graph),
        policy=policy_config(cfg.policy.name, cfg.policy),
        budget=typed(cfg.budget, Budget),
        limits=ServeLimits(cfg.max_body_bytes, cfg.max_records, cfg.max_memories),
    )
    sock = bind(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    auth = "bearer token from $GRAPHMEM_TOKEN" if cfg.auth == "token" else "no token"
    print(f"serving the memories under {root} on http://{host}:{port} ({auth}, policy {cfg.policy.name})", flush=True)
    for sig in (signal.SIGINT, signal.SIGTERM):  # uvicorn shuts down gracefully, then raises the signal again: exit 0
        signal.signal(sig, stopped)
    uvicorn.Server(uvicorn.Config(app, log_level=cfg.log_level, timeout_graceful_shutdown=30)).run(sockets=[sock])


def stopped(signum: int, frame) -> None:
    raise SystemExit(0)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket at ``host:port`` (port 0: a free one); :class:`ConfigError` when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ConfigError(f"host={host} port={port}: cannot listen there ({err.strerror or err})") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    main("serve", serve, check)
