"""The demo task: a checkable reward, an answer that depends on the input, disjoint train and eval splits."""

from __future__ import annotations

import pytest

from rollouthub.rl_demo.task import ALPHABET, WORD_LENGTH, DemoTask, eval_tasks, reward, split_of, train_tasks


def test_the_reward_is_one_exactly_for_the_last_letter() -> None:
    task = DemoTask("abcd")
    assert task.answer == "d" and task.messages() == [{"role": "user", "content": "abcd"}]
    assert reward(task, "d") == 1.0
    assert [reward(task, reply) for reply in ("a", "D", "d ", "", "dd")] == [0.0] * 5


def test_answers_depend_on_the_input() -> None:
    answers = {task.answer for task in eval_tasks(100)}
    assert answers == set(ALPHABET)  # every letter is the right answer for some held-out word
    assert max(sum(t.answer == letter for t in eval_tasks(100)) for letter in ALPHABET) <= 20  # no constant wins


def test_train_and_eval_words_are_disjoint_and_fixed() -> None:
    held_out = {task.word for task in eval_tasks(100)}
    assert len(held_out) == 100 and all(split_of(word) == "eval" for word in held_out)
    drawn = {task.word for seed in range(5) for task in train_tasks(2000, seed=seed)}
    assert not drawn & held_out and len(drawn) > 5000
    assert train_tasks(10, seed=3) == train_tasks(10, seed=3) != train_tasks(10, seed=4)
    assert eval_tasks(5) == eval_tasks(100)[:5]
    with pytest.raises(ValueError, match="the held-out split has"):
        eval_tasks(10**5)


def test_inputs_round_trip_and_bad_ones_are_named() -> None:
    task = DemoTask("jjia")
    assert DemoTask.from_input(task.to_input()) == task
    with pytest.raises(ValueError, match=f"DemoTask.word must be {WORD_LENGTH} letters"):
        DemoTask("abz!")
    with pytest.raises(ValueError, match="needs a string 'word'"):
        DemoTask.from_input({"text": "abcd"})
