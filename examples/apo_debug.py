"""Debugging recipes for the scenario-B agent, offline against the mock LLM.

* ``runner``  -- run one task with :meth:`LitAgentRunner.step` and an :class:`OtelTracer`, outside any Trainer, and
  print the rollout's spans: the agent's two OpenAI calls (traced by the native OpenAI instrumentation the tracer
  applies) and the reward;
* ``hook``    -- the same with a :class:`Hook` that prints a line at every hook call, with the trace seen in
  ``on_trace_end``;
* ``trainer`` -- ``Trainer(n_runners=1, initial_resources=...).dev(agent, dataset)``: the ``Baseline`` algorithm
  enqueues two tasks and logs what comes back (status, how long each ran, spans, adapted data).

    python examples/apo_debug.py --mode runner
    python examples/apo_debug.py --mode hook
    python examples/apo_debug.py --mode trainer
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from contextlib import ExitStack
from typing import Any, List, Optional

from rollouthub.cli import plain_text
from rollouthub.runner import LitAgentRunner
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.tracer import OtelTracer
from rollouthub.trainer import Trainer
from rollouthub.types import Hook, PromptTemplate, Rollout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apo_custom_algorithm_trainer import apo_rollout, mock_reply  # noqa: E402

logger = logging.getLogger("apo_debug")

PROMPT = PromptTemplate(template="You are a helpful assistant. {any_question}", engine="f-string")
TASKS = ["Why is the sky blue?", "Why is grass green?"]


class DebugHook(Hook):
    """Prints a line for every hook call: the rollout, and the spans the tracer holds at the end of the trace (the
    LLM calls; the reward span of a returned float is written afterwards)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: List[Any] = []

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Rollout) -> None:
        """Print the rollout about to run."""
        print(f"[hook] on_rollout_start: rollout {rollout.rollout_id} (mode {rollout.mode}), input {rollout.input!r}")

    async def on_trace_start(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        """Print the tracer that records the rollout."""
        print(f"[hook] on_trace_start: {type(tracer).__name__} records rollout {rollout.rollout_id}")

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        """Record and print the last trace."""
        spans = tracer.get_last_trace()
        self.seen.extend(spans)
        print(f"[hook] on_trace_end: {len(spans)} span(s) in the trace of rollout {rollout.rollout_id}")
        for span in spans:
            print(f"[hook]   span {getattr(span, 'name', span)}")

    async def on_rollout_end(self, *, agent: Any, runner: Any, rollout: Rollout, spans: Any) -> None:
        """Print how many spans the rollout ended with."""
        print(f"[hook] on_rollout_end: rollout {rollout.rollout_id} done, {len(spans)} span(s) given to the hook")


async def debug_with_runner(hooks: Optional[List[Hook]] = None) -> tuple[Rollout, InMemoryLightningStore]:
    """Run one task with ``LitAgentRunner.step``; return the finished rollout and the store."""
    store = InMemoryLightningStore()
    runner: LitAgentRunner[Any] = LitAgentRunner(OtelTracer())
    with runner.run_context(agent=apo_rollout, store=store, hooks=hooks):
        result = await runner.step(TASKS[0], resources={"main_prompt": PROMPT})
    spans = await store.query_spans(result.rollout_id)
    print(f"[runner] rollout {result.rollout_id} {result.status}; spans: {[s.name for s in spans]}")
    return result, store


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def debug_with_trainer(port: Optional[int] = None) -> Trainer:
    """``Trainer.dev`` with the default ``Baseline`` on two tasks; returns the trainer."""
    trainer = Trainer(
        n_runners=1,
        initial_resources={"main_prompt": PROMPT},
        runner={"type": "rollouthub.runner.LitAgentRunner", "poll_interval": 0.2},
        port=port or _free_port(),
    )
    trainer.dev(apo_rollout, TASKS)
    return trainer


def main(argv: Optional[List[str]] = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["runner", "hook", "trainer"], default="runner")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(levelname)s] %(name)s: %(message)s")
    with ExitStack() as stack:
        if not os.environ.get("OPENAI_BASE_URL"):
            from rollouthub.testing import MockOpenAIServer

            server = stack.enter_context(MockOpenAIServer(reply=mock_reply))
            os.environ["OPENAI_BASE_URL"] = server.base_url
            os.environ.setdefault("OPENAI_API_KEY", "dummy")
        if args.mode == "runner":
            asyncio.run(debug_with_runner())
        elif args.mode == "hook":
            asyncio.run(debug_with_runner([DebugHook()]))
        else:
            debug_with_trainer()


if __name__ == "__main__":
    main()
