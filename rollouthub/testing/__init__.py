"""Public test utilities: a deterministic OpenAI-compatible mock server (runtime spec 18.2)."""

from __future__ import annotations

from .mock_openai import MockOpenAIServer, MockReply, ReplySpec, last_user_message, prompt_text, text_token_ids

__all__ = ["MockOpenAIServer", "MockReply", "ReplySpec", "last_user_message", "prompt_text", "text_token_ids"]
