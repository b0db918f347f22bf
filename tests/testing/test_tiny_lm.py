"""The tiny locally built model and tokenizer: char-level ids, the multi-turn prefix property, seeded weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.train_stack import TRAIN_ONLY

pytestmark = TRAIN_ONLY


def test_every_character_is_one_token_and_decodes_back() -> None:
    from rollouthub.testing.tiny_lm import build_tokenizer

    tokenizer = build_tokenizer()
    text = "Hi there!\n  {x: 1}"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(tokenizer("<|end|>", add_special_tokens=False)["input_ids"]) == "<|end|>"
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token_id == 0


def test_a_conversation_re_rendered_after_a_turn_extends_the_previous_prompt_and_answer() -> None:
    from rollouthub.testing.tiny_lm import build_tokenizer

    tokenizer = build_tokenizer()
    first = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    prompt = tokenizer.apply_chat_template(first, add_generation_prompt=True, tokenize=True)["input_ids"]
    answer = tokenizer("CALL add(2,3)", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    second = [*first, {"role": "assistant", "content": "CALL add(2,3)"}, {"role": "tool", "content": "5"}]
    next_prompt = tokenizer.apply_chat_template(second, add_generation_prompt=True, tokenize=True)["input_ids"]
    assert next_prompt[: len(prompt) + len(answer)] == prompt + answer
    assert tokenizer.decode(next_prompt[len(prompt) + len(answer) :]) == "<|tool|>5<|end|><|assistant|>"
    with pytest.raises(Exception, match="unknown role: robot"):
        tokenizer.apply_chat_template([{"role": "robot", "content": "x"}], tokenize=False)


def test_the_seed_fixes_the_weights_and_a_saved_copy_loads_with_from_pretrained(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rollouthub.testing.tiny_lm import build_tiny_lm, save_tiny_lm

    model, tokenizer = build_tiny_lm(seed=3)
    again, _ = build_tiny_lm(seed=3)
    other, _ = build_tiny_lm(seed=4)
    weights = model.state_dict()
    assert all(torch.equal(weights[name], value) for name, value in again.state_dict().items())
    assert not all(torch.equal(weights[name], value) for name, value in other.state_dict().items())

    save_tiny_lm(model, tokenizer, str(tmp_path / "ckpt"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "ckpt")
    ids = torch.tensor([tokenizer("abc", add_special_tokens=False)["input_ids"]])
    assert torch.allclose(model(ids).logits, loaded(ids).logits)
    assert loaded_tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == (
        "<|user|>x<|end|>"
    )
