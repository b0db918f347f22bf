"""``lightning_cli``."""

from __future__ import annotations

import sys
from typing import List, Optional

import pytest

from rollouthub.config import lightning_cli


class Alpha:
    def __init__(self, name: str, count: int = 2, ratio: Optional[float] = 0.5, flag: bool = False) -> None:
        self.name, self.count, self.ratio, self.flag = name, count, ratio, flag


class Beta:
    def __init__(self, items: List[int] = [], label: Optional[str] = None) -> None:  # noqa: B006
        self.items, self.label = items, label


def test_lightning_cli_parses_and_instantiates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "prog",
            "--alpha.name",
            "x",
            "--alpha.count",
            "5",
            "--alpha.ratio",
            "None",
            "--alpha.flag",
            "yes",
            "--beta.items",
            "1",
            "2",
            "3",
        ],
    )
    alpha, beta = lightning_cli(Alpha, Beta)
    assert (alpha.name, alpha.count, alpha.ratio, alpha.flag) == ("x", 5, None, True)
    assert beta.items == [1, 2, 3] and beta.label is None


def test_lightning_cli_single_and_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["prog", "--alpha.name", "y"])
    alpha = lightning_cli(Alpha)
    assert isinstance(alpha, Alpha) and alpha.count == 2 and alpha.flag is False
    monkeypatch.setattr(sys, "argv", ["prog"])
    assert lightning_cli() == ()
    with pytest.raises(SystemExit):  # --alpha.name is required
        lightning_cli(Alpha)
