"""The marker every error about a run's inputs carries, so the scripts can report it in one line.

Config values, data files, graph sets, checkpoints and run folders that cannot be used raise an
error of their own type (``GraphSetError``, ``CheckpointError``, ``RunFolderError``, ...) that also
derives from :class:`InputError`. :func:`graphmem.config.cli.run_or_exit` prints such an error as one
``error: ...`` line naming the file, record or field, and exits with status 2; any other
exception is a bug and keeps its traceback. A run that worked but measured nothing (every call to
an LLM failed) raises :class:`NothingMeasuredError`: one ``error:`` line and exit status 3; a training whose
loss or weights went non-finite raises :class:`DivergedError`, one of those.
"""


class InputError(Exception):
    """A problem with what the run was given (config, data, graph, checkpoint, folder), not with the code."""


class NothingMeasuredError(RuntimeError):
    """The run could not measure what it is for (e.g. every LLM call failed); scripts exit with status 3."""


class DivergedError(NothingMeasuredError):
    """A training's loss or weights went non-finite (NaN or inf): nothing of it is promoted or tested (exit 3)."""
