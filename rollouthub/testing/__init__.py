"""Public test utilities: a deterministic OpenAI-compatible mock server and a real
``rollouthub store`` subprocess for integration tests."""

from __future__ import annotations

from .mock_openai import (
    MockOpenAIServer,
    MockReply,
    ReplySpec,
    Tokenization,
    last_user_message,
    mock_logprob,
    prompt_text,
    render_answer,
    render_chat_template,
    text_token_ids,
)
from .store_process import store_is_healthy, store_process

__all__ = [
    "MockOpenAIServer",
    "MockReply",
    "ReplySpec",
    "last_user_message",
    "prompt_text",
    "text_token_ids",
    "Tokenization",
    "render_chat_template",
    "render_answer",
    "mock_logprob",
    "store_process",
    "store_is_healthy",
]
