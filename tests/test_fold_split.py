"""The fold split: one typed block (rl.common.splits.FoldSplit, configs/split/default.yaml) in each config that
splits."""

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from graphmem.config.schemas import to_object
from rl.common.splits import FoldSplit
from tests.script_loader import compose

SPLITTING = [
    ("train", "cv"),
    ("head_to_head", "cv"),
    ("gnn", "split"),
    ("writer", "split"),
    ("relation_family", "split"),
]


@pytest.mark.parametrize("config, key", SPLITTING)
def test_every_config_that_splits_composes_its_split_to_the_one_dataclass(config, key):
    split = to_object(compose(config)[key])
    assert type(split) is FoldSplit
    assert (split.k, split.seed, split.val_fraction, split.fold) == (5, 0, 0.2, 0)
    assert split.folds == ([0] if config == "train" else None)
    with pytest.raises((ConfigCompositionException, ValidationError)) as info:
        compose(config, [f"{key}.k=three"])
    assert "could not be converted to Integer" in f"{info.value} {info.value.__cause__}"


def test_the_cli_keys_keep_their_spelling():
    assert compose("train", ["cv.k=3", "cv.folds=[0,2]"]).cv.folds == [0, 2]
    assert compose("gnn", ["split.fold=4"]).split.fold == 4
    assert compose("head_to_head", ["cv.fold=1"]).cv.fold == 1
    assert compose("train", ["+experiment=ablation"]).cv.folds is None
