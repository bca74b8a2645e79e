"""Start ``python scripts/<name>.py ...`` (or ``python -c ...``) as its own process, forked from a server
that has imported the heavy packages once.

A script started from the command line spends its first seconds importing torch, torch_geometric,
Hydra and graphmem, and the tests start dozens of scripts. :func:`run` and :class:`ScriptProcess`
take a ``[sys.executable, script, *args]`` command and fork it from a multiprocessing forkserver that
imported :data:`PRELOAD` when it started. Each run is still a process of its own, set up as the
command line would set it up: its argv, environment, working directory and ``sys.path``
(``sys.path[0]`` the script's folder, then ``PYTHONPATH``, then the interpreter's own entries); its
own stdout and stderr; the script's exit status (1 and the traceback for an uncaught exception);
``atexit`` handlers run as it ends; a signal ends it like any process.

What a forked run cannot change is fixed when the server starts: ``PYTHONHASHSEED``,
``sitecustomize``, the OpenMP thread count, and whether the preloaded packages import at all.
Tests whose point is one of these (test_determinism, the runs without the text stack) and those
that read a child's output while it runs start a real interpreter with ``subprocess``.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = [
    "torch",
    "torch_geometric",
    "hydra",
    "omegaconf",
    "graphmem.config.schemas",
    "graphmem.config.cli",
    "graphmem.store.graphset",
]
_server: dict[str, object] = {}


def _forkserver() -> tuple[multiprocessing.context.BaseContext, list[str]]:
    """The forkserver context (started on first use) and a fresh interpreter's ``sys.path`` without ``PYTHONPATH``."""
    if not _server:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        probe = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"]
        _server["base_path"] = json.loads(subprocess.run(probe, env=env, capture_output=True, check=True).stdout)
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _server["context"] = context
    return _server["context"], _server["base_path"]


def _child(cmd: list[str], env: dict[str, str], cwd: str, base_path: list[str], out: str, err: str) -> None:
    """In the forked process: the command line's state, then the script as ``__main__``; exits with its status."""
    os.chdir(cwd)  # first: cmd[1], the script, may be relative to it
    os.environ.clear()
    os.environ.update(env)
    code_arg = cmd[1] == "-c"
    first = "" if code_arg else str(Path(cmd[1]).resolve().parent)
    sys.path[:] = [first, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p], *base_path]
    sys.argv = ["-c", *cmd[3:]] if code_arg else cmd[1:]
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    status = 0
    try:
        if code_arg:
            exec(compile(cmd[2], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            runpy.run_path(cmd[1], run_name="__main__")
    except SystemExit as stop:
        if isinstance(stop.code, int) or stop.code is None:
            status = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except BaseException:  # noqa: BLE001 - as the interpreter does: the traceback, exit status 1
        traceback.print_exc()
        status = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


class ScriptProcess:
    """A started ``python <script> ...`` or ``python -c <code> ...`` (what the tests use of ``subprocess.Popen``).

    Args:
        cmd: ``[sys.executable, script, *args]`` (script relative to ``cwd`` or absolute) or
            ``[sys.executable, "-c", code, *args]``.
        cwd: working directory of the run.
        env: its whole environment (default: this process's).
    """

    def __init__(self, cmd: list[str], cwd: str | Path = ROOT, env: dict[str, str] | None = None) -> None:
        if len(cmd) < 2 or cmd[0] != sys.executable or (cmd[1].startswith("-") and cmd[1] != "-c"):
            raise ValueError(f"not a `python <script>` or `python -c` command: {cmd}")
        self.args = [str(c) for c in cmd]
        self.returncode: int | None = None
        self._files = []
        for name in ("stdout", "stderr"):
            handle, path = tempfile.mkstemp(prefix="script-", suffix=f".{name}")
            os.close(handle)
            self._files.append(path)
        context, base_path = _forkserver()
        env = dict(os.environ) if env is None else dict(env)
        self._proc = context.Process(target=_child, args=(self.args, env, str(cwd), base_path, *self._files))
        self._proc.start()
        self.pid = self._proc.pid

    def poll(self) -> int | None:
        self.returncode = self._proc.exitcode
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end (killing the run after ``timeout`` seconds); its stdout and stderr."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.join()
            raise
        finally:
            texts = [Path(p).read_text(errors="replace") for p in self._files]
            for p in self._files:
                os.unlink(p)
        return texts[0], texts[1]


def run(
    cmd: list[str], cwd: str | Path = ROOT, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """As ``subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)``."""
    proc = ScriptProcess(cmd, cwd, env)
    stdout, stderr = proc.communicate(timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
