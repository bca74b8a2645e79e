"""Shared test setup: offline everything, small real data from ../shared/data."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Policies defined in the tests register here, before any test module is collected, so that the
# registry-driven tests (names taken from graphmem.policies.POLICIES) cover them too.
import example_policy  # noqa: E402,F401
