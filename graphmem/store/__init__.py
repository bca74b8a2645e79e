"""Everything that reads or writes files: sealed files and JSON (:mod:`~graphmem.store.io`), graph sets
(format, manifest store, :class:`~graphmem.store.graphset.GraphSet`), lock files, run folders and checkpoints."""
