"""The quickstart's sentiment task: the reviews, the mock LLM (agent, critic and editor), scoring, and the agent.

The mock LLM behaves like a model that only answers well when the prompt asks for it: a one-word answer format,
attention to sarcasm, and a rule for mixed reviews. Its "optimiser" answers critique requests with a missing
instruction (one of those the template still lacks) and edit requests by adding it, so APO climbs from about 0.25 to
1.0 in three rounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import zlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "AGENT_MODEL_ENV",
    "HINTS",
    "Hint",
    "MOCK_AGENT_MODEL",
    "MOCK_CRITIC_MODEL",
    "MOCK_EDITOR_MODEL",
    "REVIEWS",
    "SEED_TEMPLATE",
    "TRAIN_TASKS",
    "VAL_TASKS",
    "make_agent",
    "mock_llm_reply",
    "score_answer",
]

SEED_TEMPLATE = "Classify the sentiment of this review: {review}"
AGENT_MODEL_ENV = "ROLLOUTHUB_QUICKSTART_MODEL"
MOCK_AGENT_MODEL = "mock-sentiment"
MOCK_CRITIC_MODEL = "mock-critic"
MOCK_EDITOR_MODEL = "mock-editor"


@dataclass(frozen=True)
class Hint:
    """An instruction the mock model needs to see in the prompt to handle one kind of review."""

    key: str
    sentence: str


HINTS = (
    Hint("one lowercase word", "Answer with one lowercase word: positive, negative or neutral."),
    Hint("sarcasm", "Watch for sarcasm: praise followed by a complaint is negative."),
    Hint("both praise and criticism", "Reviews with both praise and criticism are neutral."),
)

# (review, label, kind): kind "plain", "sarcastic" or "mixed".
REVIEWS: List[Tuple[str, str, str]] = [
    ("The battery lasts all week and the screen is gorgeous.", "positive", "plain"),
    ("Broke after two days and support never answered.", "negative", "plain"),
    ("Oh great, another update that deletes my settings. Just wonderful.", "negative", "sarcastic"),
    ("The food was tasty but the service was painfully slow.", "neutral", "mixed"),
    ("Absolutely love it, best purchase this year.", "positive", "plain"),
    ("Terrible fit and the fabric feels cheap.", "negative", "plain"),
    ("Wow, a charger that stops working in a month. Truly impressive engineering.", "negative", "sarcastic"),
    ("Great camera, although the app crashes every other day.", "neutral", "mixed"),
    ("Setup took five minutes and everything just works.", "positive", "plain"),
    ("Loud, slow and overpriced.", "negative", "plain"),
    ("Fantastic, the delivery only took three months.", "negative", "sarcastic"),
    ("Comfortable seats, but the legroom is tiny.", "neutral", "mixed"),
    ("My kids play with it every single day.", "positive", "plain"),
    ("The manual is useless and half the parts were missing.", "negative", "plain"),
    ("Brilliant, it crashed right before I saved my work.", "negative", "sarcastic"),
    ("Nice design, yet the sound quality is only average.", "neutral", "mixed"),
    ("Five stars, would buy again.", "positive", "plain"),
    ("It smells like burnt plastic when it runs.", "negative", "plain"),
]
TRAIN_TASKS = [{"review": r, "label": label} for r, label, _ in REVIEWS[:10]]
VAL_TASKS = [{"review": r, "label": label} for r, label, _ in REVIEWS[10:]]
_KIND = {r: (label, kind) for r, label, kind in REVIEWS}


# ---------------------------------------------------------------------------------------------------------------------
# The mock LLM: an agent model, a critic and an editor
# ---------------------------------------------------------------------------------------------------------------------


def _text_of(request: Dict[str, Any]) -> str:
    parts = []
    for message in request.get("messages") or []:
        content = message.get("content")
        parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


def _template_in(text: str) -> Optional[str]:
    for start_tag, end_tag in (("<template>\n", "\n</template>"), ("<prompt>\n", "\n</prompt>")):
        start = text.find(start_tag)
        if start >= 0:
            start += len(start_tag)
            end = text.find(end_tag, start)
            return text[start:end] if end >= 0 else None
    return None


def _mock_agent(prompt: str) -> str:
    review = next((r for r in _KIND if r in prompt), None)
    if review is None:
        return "I am not sure what to classify."
    label, kind = _KIND[review]
    lowered = prompt.lower()
    if kind == "sarcastic" and "sarcasm" not in lowered:
        label = "positive"
    elif kind == "mixed" and "both praise and criticism" not in lowered:
        label = "positive"
    if "one lowercase word" in lowered:
        return label
    return f"The sentiment of this review is {label}."


def _mock_critic(text: str) -> str:
    template = _template_in(text) or ""
    missing = [h for h in HINTS if h.key not in template.lower()]
    if not missing:
        return "- The template already covers the answer format, sarcasm and mixed reviews; keep it as it is."
    hint = missing[zlib.crc32(text.encode()) % len(missing)]
    return f'- Several runs lost reward. Add this instruction to the template: "{hint.sentence}"'


def _mock_editor(text: str) -> str:
    template = _template_in(text)
    if template is None:
        return ""
    match = re.search(r'"([^"{}]+)"', text[text.find("</template>") + 1 :] if "</template>" in text else text)
    if match is None or match.group(1) in template:
        return template
    return f"{template.rstrip()} {match.group(1)}"


def mock_llm_reply(request: Dict[str, Any]) -> str:
    """Deterministic replies of the quickstart's mock LLM, dispatched on the model name."""
    text = _text_of(request)
    model = request.get("model")
    if model == MOCK_CRITIC_MODEL:
        return _mock_critic(text)
    if model == MOCK_EDITOR_MODEL:
        return _mock_editor(text)
    return _mock_agent(text)


# ---------------------------------------------------------------------------------------------------------------------
# The agent
# ---------------------------------------------------------------------------------------------------------------------


def score_answer(answer: str, label: str) -> float:
    """1.0 for exactly the label, 0.5 when the label appears in a longer answer, else 0.0."""
    normalized = answer.strip().lower().rstrip(".!")
    if normalized == label:
        return 1.0
    return 0.5 if label in re.findall(r"[a-z]+", normalized) else 0.0


def make_agent() -> Any:
    """Build the ``@rollout`` sentiment agent (imports the OpenAI client lazily)."""
    from openai import AsyncOpenAI

    from rollouthub.litagent import rollout
    from rollouthub.types import PromptTemplate

    clients: Dict[Tuple[int, int], AsyncOpenAI] = {}

    def client_for_this_loop() -> AsyncOpenAI:
        # Creating a client costs ~0.1 s (TLS context); reuse one per process and event loop.
        key = (os.getpid(), id(asyncio.get_running_loop()))
        if key not in clients:
            clients[key] = AsyncOpenAI()
        return clients[key]

    @rollout
    async def sentiment_agent(task: Dict[str, str], prompt_template: PromptTemplate) -> float:
        """Ask the LLM for the sentiment of ``task["review"]``; reward the answer against ``task["label"]``."""
        client = client_for_this_loop()
        model = os.environ.get(AGENT_MODEL_ENV, MOCK_AGENT_MODEL)
        response = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt_template.format(review=task["review"])}],
            temperature=0.0,
            # The mock, like vLLM, returns the token ids when asked: the spans keep them for `rollouthub export
            # trajectories`. Real endpoints such as api.openai.com reject the parameter.
            extra_body={"return_token_ids": True} if model == MOCK_AGENT_MODEL else None,
        )
        return score_answer(response.choices[0].message.content or "", task["label"])

    return sentiment_agent
