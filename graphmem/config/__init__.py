"""Configuration and entry points: the typed schemas of the Hydra groups, the bounds of every size-like key,
the command-line checks and the one entry helper every script uses."""
