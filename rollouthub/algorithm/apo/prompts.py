"""APO's optimiser prompts, rendered to OpenAI chat messages without POML or Jinja.

Each template is a function of plain data returning ``[{"role": ..., "content": ...}, ...]``. Experiments are the
rollout results produced by :meth:`APO.evaluate_prompt_on_batch`: dicts with ``status``, ``final_reward``,
``spans`` (span dumps) and ``messages`` (adapted chat conversations).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Sequence

__all__ = [
    "ChatMessages",
    "CRITIQUE_TEMPLATES",
    "EDIT_TEMPLATES",
    "render_critique_v1",
    "render_critique_v2",
    "render_critique_v3",
    "render_edit_v1",
    "render_edit_v2",
]

ChatMessages = List[Dict[str, str]]
"""A list of OpenAI chat messages (``role`` / ``content``)."""

_MAX_FIELD_CHARS = 4000


def _clip(text: str, limit: int = _MAX_FIELD_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 20] + " ...[truncated]"


def _json(value: Any) -> str:
    try:
        return _clip(json.dumps(value, ensure_ascii=False, default=str, indent=None))
    except (TypeError, ValueError):
        return _clip(str(value))


def _format_messages(messages: Any) -> str:
    """Render adapted conversations (a list of ``{"messages": [...]}`` dicts or plain message lists) as text."""
    lines: List[str] = []
    conversations = messages if isinstance(messages, list) else [messages]
    for index, conversation in enumerate(conversations):
        items = conversation.get("messages", conversation) if isinstance(conversation, dict) else conversation
        lines.append(f"  Conversation {index + 1}:")
        if isinstance(items, list):
            for message in items:
                if isinstance(message, dict):
                    role = message.get("role", "?")
                    content = message.get("content")
                    text = content if isinstance(content, str) else _json(content)
                    lines.append(f"    [{role}] {_clip(text, 1500)}")
                else:
                    lines.append(f"    {_clip(str(message), 1500)}")
        else:
            lines.append(f"    {_json(items)}")
    return "\n".join(lines) if lines else "  (no messages)"


def _experiments_with_messages(experiments: Sequence[Dict[str, Any]], *, score_label: str) -> str:
    blocks: List[str] = []
    for index, exp in enumerate(experiments):
        blocks.append(
            f"Experiment {index + 1}:\n"
            f"  Status: {exp.get('status')}\n"
            f"  {score_label}: {exp.get('final_reward')}\n"
            f"  Messages:\n{_format_messages(exp.get('messages'))}"
        )
    return "\n\n".join(blocks) if blocks else "(no experiments)"


def render_critique_v1(prompt_template: str, experiments: Sequence[Dict[str, Any]]) -> ChatMessages:
    """Critique variant 1: concrete, testable changes derived from statuses, rewards and conversations."""
    system = (
        "You are optimising a prompt template used by an AI agent. You will see the template and a set of "
        "experiments that ran the agent with it: the final status, the final reward (higher is better) and the "
        "chat messages of each run."
    )
    user = (
        f"Prompt template:\n<template>\n{prompt_template}\n</template>\n\n"
        f"Experiments:\n{_experiments_with_messages(experiments, score_label='Final reward')}\n\n"
        "Write a short bullet list of concrete, testable changes to the template (output format, constraints, "
        "ordering of instructions, definitions of terms) that would fix the observed errors or raise the reward. "
        "Only output the bullet list."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render_critique_v2(prompt_template: str, experiments: Sequence[Dict[str, Any]]) -> ChatMessages:
    """Critique variant 2: a prompt engineer reading the raw span dumps of each run."""
    runs: List[str] = []
    for index, exp in enumerate(experiments):
        spans = exp.get("spans") or []
        rendered = "\n".join(f"    - {_json(span)}" for span in spans[:40]) or "    (no spans)"
        runs.append(
            f"Sample run {index + 1} (status {exp.get('status')}, reward {exp.get('final_reward')}):\n{rendered}"
        )
    user = (
        "You are a prompt engineer. Here is the current prompt template:\n"
        f"<template>\n{prompt_template}\n</template>\n\n"
        "Here are the traces (span dumps) of some sample runs:\n\n" + "\n\n".join(runs) + "\n\n"
        'Reply with 3-5 short bullets under the title "Critique:" about missing constraints, the ordering of '
        "instructions or the output formatting of the template."
    )
    return [{"role": "user", "content": user}]


def render_critique_v3(prompt_template: str, experiments: Sequence[Dict[str, Any]]) -> ChatMessages:
    """Critique variant 3: an expert prompt engineer's structured checklist, then the runs."""
    system = (
        "You are an expert prompt engineer. Review prompt templates against this checklist:\n"
        "1. Structural issues: is the task stated first, are sections clearly separated?\n"
        "2. Instruction quality: are instructions specific, unambiguous and non-contradictory?\n"
        "3. Control and behaviour: does the prompt say what to do when information is missing or uncertain?\n"
        "4. Input/output specification: are placeholders explained and is the output format explicit?\n"
        "5. Scope and safety: does it keep the model on task?\n"
        "6. Efficiency and maintainability: is anything redundant or overly long?\n"
        "7. Testing method: how would you verify that a revision is better?"
    )
    user = (
        f"Prompt template:\n<template>\n{prompt_template}\n</template>\n\n"
        f"Runs:\n{_experiments_with_messages(experiments, score_label='Score')}\n\n"
        "Give a concise critique of the template (under 350 words) following the checklist, focused on changes "
        "that would raise the score."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render_edit_v1(prompt_template: str, critique: str) -> ChatMessages:
    """Edit variant 1: revise the template using the critique as constraints."""
    system = "You rewrite prompt templates. Output only the new template, with no commentary or code fences."
    user = (
        f"Current template:\n<template>\n{prompt_template}\n</template>\n\n"
        f"Critique:\n{critique}\n\n"
        "Revise the template using the critique as constraints: restructure it if the critique implies so, add "
        "any requested output format or limits, describe what to do before how to do it, and keep every "
        "{placeholder} exactly as it is. Output only the new template."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render_edit_v2(prompt_template: str, critique: str) -> ChatMessages:
    """Edit variant 2 (conservative): fix only the single most important point of the critique."""
    user = (
        "Make a conservative revision of this prompt.\n"
        f"<prompt>\n{prompt_template}\n</prompt>\n\n"
        f"Critique:\n{critique}\n\n"
        "Fix only the single most important point of the critique. Keep the tone, length, structure and every "
        "{placeholder} unchanged. Output only the revised prompt."
    )
    return [{"role": "user", "content": user}]


CRITIQUE_TEMPLATES: List[Callable[[str, Sequence[Dict[str, Any]]], ChatMessages]] = [
    render_critique_v1,
    render_critique_v2,
    render_critique_v3,
]
"""The three critique (textual gradient) renderers; APO picks one at random per call."""

EDIT_TEMPLATES: List[Callable[[str, str], ChatMessages]] = [render_edit_v1, render_edit_v2]
"""The two edit renderers; APO picks one at random per call."""
