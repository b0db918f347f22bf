"""The RL demo's task: reply with the last letter of a word. Checkable, in [0, 1], different for every input.

A *word* is ``WORD_LENGTH`` letters drawn from ``ALPHABET`` (10**4 words); the user message is the word and the
correct reply is its last letter, exactly (``reward`` 1.0, else 0.0). The agent asks for ``MAX_TOKENS`` = 1 token:
the model has to put the right letter first, not learn when to stop (see docs/rl.md for why).

The words are split once, by a hash of the word, into a training split (about 90 %) and a held-out evaluation split
(about 10 %): no evaluation word is ever trained on, so the eval reward measures a rule learnt, not answers
memorised. No torch here: agents and runner processes import this module without the ``[train]`` extra.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Mapping

__all__ = [
    "ALPHABET",
    "WORD_LENGTH",
    "MAX_TOKENS",
    "EVAL_SHARE",
    "DemoTask",
    "split_of",
    "train_tasks",
    "eval_tasks",
    "reward",
]

ALPHABET = "abcdefghij"
"""Letters of the words (and of the answers)."""
WORD_LENGTH = 4
MAX_TOKENS = 1
"""Tokens the agent asks for: the answer is one letter."""
EVAL_SHARE = 10
"""One word in ``EVAL_SHARE`` (by hash) is held out for evaluation."""

Split = Literal["train", "eval"]


@dataclass(frozen=True)
class DemoTask:
    """One input of the demo: a word; its answer is its last letter."""

    word: str

    def __post_init__(self) -> None:
        if len(self.word) != WORD_LENGTH or any(letter not in ALPHABET for letter in self.word):
            raise ValueError(f"DemoTask.word must be {WORD_LENGTH} letters from {ALPHABET!r}: got {self.word!r}")

    @property
    def answer(self) -> str:
        """The correct reply: the word's last letter."""
        return self.word[-1]

    def messages(self) -> List[Dict[str, str]]:
        """The chat messages the agent sends (one user message: the word)."""
        return [{"role": "user", "content": self.word}]

    def to_input(self) -> Dict[str, Any]:
        """The rollout input stored for this task (``from_input`` reads it back)."""
        return {"word": self.word}

    @classmethod
    def from_input(cls, value: Mapping[str, Any]) -> DemoTask:
        """Read a rollout input written by :meth:`to_input` (``ValueError`` naming the problem otherwise)."""
        word = value.get("word") if isinstance(value, Mapping) else None
        if not isinstance(word, str):
            raise ValueError(f"a demo task input needs a string 'word': got {value!r}")
        return cls(word)


def split_of(word: str) -> Split:
    """Which split ``word`` belongs to, fixed by a hash of the word (the same on every machine and run)."""
    digest = hashlib.sha256(word.encode()).digest()
    return "eval" if int.from_bytes(digest[:4], "big") % EVAL_SHARE == 0 else "train"


def _words(split: Split) -> List[str]:
    every = ("".join(letters) for letters in itertools.product(ALPHABET, repeat=WORD_LENGTH))
    return [word for word in every if split_of(word) == split]


def train_tasks(count: int, seed: int) -> List[DemoTask]:
    """``count`` training tasks drawn (with replacement) from the training split, repeatable by ``seed``."""
    words = _words("train")
    picker = random.Random(seed)
    return [DemoTask(picker.choice(words)) for _ in range(count)]


def eval_tasks(count: int = 100) -> List[DemoTask]:
    """The first ``count`` words of the held-out split in a fixed shuffled order (the same for every run)."""
    words = _words("eval")
    random.Random(0).shuffle(words)
    if count > len(words):
        raise ValueError(f"eval_tasks: the held-out split has {len(words)} words, asked for {count}")
    return [DemoTask(word) for word in words[:count]]


def reward(task: DemoTask, reply: str) -> float:
    """1.0 when ``reply`` is exactly the task's answer, else 0.0."""
    return 1.0 if reply == task.answer else 0.0
