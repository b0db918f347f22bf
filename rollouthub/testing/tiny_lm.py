"""A tiny causal language model and its tokenizer, built locally from a config: no download, no weights on disk.

For tests, the reinforcement-learning demo and benchmarks (needs the ``[train]`` extra: torch, transformers)::

    from rollouthub.testing.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=0)

The tokenizer is character-level over printable ASCII and newline, plus the special tokens of
:data:`SPECIAL_TOKENS`. Its chat template renders each message as ``<|role|>content<|end|>`` and the generation
prompt as ``<|assistant|>``; ``<|end|>`` is the end-of-sequence token. Because every character is one token, a
conversation re-rendered after a turn begins with exactly the previous prompt's token ids followed by the answer's
(its text and ``<|end|>``): the prefix property that multi-turn trajectories rely on holds by construction.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Tuple

from rollouthub.utils.extras import import_extra

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = ["SPECIAL_TOKENS", "CHAT_TEMPLATE", "build_tokenizer", "build_model", "build_tiny_lm", "save_tiny_lm"]

PAD, UNK, END = "<|pad|>", "<|unk|>", "<|end|>"
ROLES = ("system", "user", "assistant", "tool")
SPECIAL_TOKENS = (PAD, UNK, END, *(f"<|{role}|>" for role in ROLES))
"""Special tokens, ids 0.. in this order: padding, unknown character, end of message (EOS), one tag per role."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "<|{{ message['role'] }}|>{{ message['content'] if message['content'] is string else '' }}<|end|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""Jinja chat template of :func:`build_tokenizer` (``<|role|>content<|end|>`` per message)."""

_CHARACTERS = [chr(code) for code in range(32, 127)] + ["\n"]


def _train_extra(module: str) -> Any:
    return import_extra(module, extra="train", feature="The tiny test model")


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The character-level tokenizer with :data:`CHAT_TEMPLATE` (``<|end|>`` is EOS, ``<|pad|>`` padding)."""
    tokenizers = _train_extra("tokenizers")
    transformers = _train_extra("transformers")
    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *_CHARACTERS])}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."), behavior="isolated")
    core.decoder = tokenizers.decoders.Fuse()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, unk_token=UNK, eos_token=END, padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer  # type: ignore[no-any-return]


def build_model(
    tokenizer: PreTrainedTokenizerFast,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 512,
    seed: int = 0,
) -> PreTrainedModel:
    """A randomly initialised Llama-architecture causal LM (float32, eval mode) sized for ``tokenizer``.

    The same ``seed`` and sizes give the same weights on every machine.
    """
    torch = _train_extra("torch")
    transformers = _train_extra("transformers")
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be a multiple of num_heads ({num_heads})")
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = transformers.LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()  # type: ignore[no-any-return]


def build_tiny_lm(seed: int = 0, **sizes: int) -> Tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """``(model, tokenizer)``: :func:`build_model` over :func:`build_tokenizer`; ``sizes`` go to :func:`build_model`."""
    tokenizer = build_tokenizer()
    return build_model(tokenizer, seed=seed, **sizes), tokenizer


def save_tiny_lm(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, directory: str) -> str:
    """Save both with ``save_pretrained`` so that ``from_pretrained(directory)`` loads them (a local HF checkpoint)."""
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
