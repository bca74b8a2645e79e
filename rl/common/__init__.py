"""Infrastructure the trainers share: checkpoints, seeding, splits, logging and distributed ranks.

Importing it types the ``split`` config group (:class:`rl.common.splits.FoldSplit`), as importing
:mod:`rl.walk` types the ``trainer`` group: every trainer and script that splits imports it.
"""

import rl.common.splits  # noqa: F401
