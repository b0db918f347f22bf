"""Without the ``[train]`` extra, the local policy backend says in one line what to install (the main leg)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollouthub.llm_proxy.local_backend import LocalPolicyBackend
from rollouthub.utils.extras import MissingExtraError
from tests.train_stack import TRAIN_INSTALLED


@pytest.mark.skipif(TRAIN_INSTALLED, reason="checks the message shown when the [train] extra is absent")
def test_constructing_the_backend_without_the_extra_names_it() -> None:
    with pytest.raises(MissingExtraError) as info:
        LocalPolicyBackend(model=None, tokenizer=None)
    message = str(info.value)
    assert "LocalPolicyBackend" in message and "pip install 'rollouthub[train]'" in message and "\n" not in message


@pytest.mark.skipif(TRAIN_INSTALLED, reason="checks the message shown when the [train] extra is absent")
def test_loading_a_checkpoint_without_the_extra_names_it(tmp_path: Path) -> None:
    with pytest.raises(MissingExtraError, match=r"rollouthub\[train\]"):
        LocalPolicyBackend.from_pretrained(str(tmp_path))
