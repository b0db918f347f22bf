"""Without the ``[train]`` extra, the tiny model says in one line what to install (the main leg has no torch)."""

from __future__ import annotations

import pytest

from rollouthub.utils.extras import MissingExtraError
from tests.train_stack import TRAIN_INSTALLED


@pytest.mark.skipif(TRAIN_INSTALLED, reason="checks the message shown when the [train] extra is absent")
def test_building_the_tiny_model_without_the_extra_names_it() -> None:
    from rollouthub.testing.tiny_lm import build_tiny_lm

    with pytest.raises(MissingExtraError) as info:
        build_tiny_lm()
    assert "pip install 'rollouthub[train]'" in str(info.value)
    assert "\n" not in str(info.value)
