"""Scenario C: the built-in APO end to end with a stubbed optimiser LLM (no network at all).

The agent scores 1.0 when its rendered prompt contains ``STRICT`` and 0.2 otherwise. The optimiser stub returns a
critique for the gradient model and, for the edit model, the incoming template with ``"STRICT "`` prepended, so
APO must discover the keyword through its beam search.

    python examples/apo_builtin.py                 # client-server strategy, 2 runner processes
    python examples/apo_builtin.py --strategy shm  # shared memory, 1 runner thread
    python examples/apo_builtin.py --strategy ray  # 2 runner actors on a local Ray cluster (the ray extra)
"""

from __future__ import annotations

import argparse
import logging
import socket
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

from rollouthub.adapter import TraceToMessages
from rollouthub.algorithm.apo import APO
from rollouthub.cli import plain_text
from rollouthub.litagent import rollout
from rollouthub.trainer import Trainer
from rollouthub.types import PromptTemplate

logger = logging.getLogger("apo_builtin")

KEYWORD = "STRICT"
GRADIENT_MODEL = "stub-gradient"
EDIT_MODEL = "stub-edit"
TRAIN_TASKS: List[Dict[str, str]] = [{"q": f"What is {i} + {i}?"} for i in range(6)]
VAL_TASKS: List[Dict[str, str]] = [{"q": f"What is {i} * 3?"} for i in range(4)]
SEED = PromptTemplate(template="Answer {q}", engine="f-string")


@rollout
def keyword_agent(task: Dict[str, str], prompt_template: PromptTemplate) -> float:
    """1.0 if the rendered prompt contains the keyword, else 0.2 (no LLM call)."""
    return 1.0 if KEYWORD in prompt_template.format(**task) else 0.2


class StubOptimizerClient:
    """An ``openai.AsyncOpenAI`` look-alike: ``await client.chat.completions.create(model, messages, temperature)``."""

    def __init__(self) -> None:
        self.calls: List[Dict[str, Any]] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    @staticmethod
    def _template_in(messages: List[Dict[str, str]]) -> str:
        text = "\n".join(m["content"] for m in messages)
        for start_tag, end_tag in (("<template>\n", "\n</template>"), ("<prompt>\n", "\n</prompt>")):
            start = text.find(start_tag)
            if start >= 0:
                start += len(start_tag)
                return text[start : text.find(end_tag, start)]
        raise ValueError("no template found in the edit request")

    async def _create(self, *, model: str, messages: List[Dict[str, str]], temperature: float = 1.0) -> Any:
        self.calls.append({"model": model, "messages": messages, "temperature": temperature})
        if model == GRADIENT_MODEL:
            content = f"- Start the prompt with the word {KEYWORD} so the answer is precise."
        else:
            template = self._template_in(messages)
            content = template if template.startswith(KEYWORD) else f"{KEYWORD} {template}"
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=content))])

    def count(self, model: str) -> int:
        """Number of calls made with ``model``."""
        return sum(1 for call in self.calls if call["model"] == model)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build(strategy: str = "cs", port: Optional[int] = None) -> tuple[Trainer, APO[Any], StubOptimizerClient]:
    """The Trainer, the APO instance and the stub of scenario C."""
    stub = StubOptimizerClient()
    apo: APO[Any] = APO(
        stub,
        gradient_model=GRADIENT_MODEL,
        apply_edit_model=EDIT_MODEL,
        gradient_batch_size=2,
        val_batch_size=3,
        beam_width=2,
        branch_factor=2,
        beam_rounds=2,
    )
    apo._poll_interval = 0.1  # finish faster than the reference's 2-second polling
    common: Dict[str, Any] = dict(
        algorithm=apo,
        initial_resources={"prompt_template": SEED},
        adapter=TraceToMessages(),
        runner={"type": "rollouthub.runner.LitAgentRunner", "poll_interval": 0.1},
    )
    if strategy == "cs":
        trainer = Trainer(n_runners=2, port=port or _free_port(), **common)
    elif strategy == "shm":
        from rollouthub.tracer import OtelTracer

        trainer = Trainer(
            tracer=OtelTracer(), strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 1}, **common
        )
    elif strategy == "ray":
        from apo_custom_algorithm_trainer import ray_strategy  # the examples' Ray set-up (this directory's modules)

        trainer = Trainer(strategy=ray_strategy(n_runners=2), **common)
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    return trainer, apo, stub


def run(strategy: str = "cs", port: Optional[int] = None) -> tuple[Trainer, APO[Any], StubOptimizerClient]:
    """Run scenario C and return the trainer, APO and the stub for inspection."""
    trainer, apo, stub = build(strategy, port)
    trainer.fit(keyword_agent, train_dataset=TRAIN_TASKS, val_dataset=VAL_TASKS)
    best = apo.get_best_prompt()
    logger.info("Best prompt: %r", best.template)
    return trainer, apo, stub


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strategy", choices=["cs", "shm", "ray"], default="cs")
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(levelname)s] %(name)s: %(message)s")
    _, apo, stub = run(args.strategy, args.port)
    print(f"Best prompt: {apo.get_best_prompt().template!r}")
    print(f"Optimiser calls: {stub.count(GRADIENT_MODEL)} critiques, {stub.count(EDIT_MODEL)} edits")


if __name__ == "__main__":
    main()
