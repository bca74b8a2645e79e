"""Infrastructure the trainers share: checkpoints, seeding, run folders, splits, logging and distributed ranks."""
