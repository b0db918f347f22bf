"""Scenario A: write traces into a LightningStore.

Modes:

* ``otel`` (default): an ``OtelTracer`` records three OpenTelemetry spans (``grpc-span-1`` with a nested
  ``grpc-span-2``, then ``grpc-span-3``) and a reward of 1.0 emitted with ``emit_reward``.
* ``operation``: an ``operation`` block with input/output, then a reward of 0.9 that is *linked* to the operation
  (``make_link_attributes``) and *tagged* (``make_tag_attributes``).
* ``agentops``: an ``AgentOpsTracer`` (falls back to OtelTracer + native OpenAI instrumentation when the
  ``agentops`` extra is missing) traces one OpenAI chat call and a reward. The LLM is ``$OPENAI_BASE_URL`` when set,
  otherwise an in-process :class:`rollouthub.testing.MockOpenAIServer`.

By default the store is an in-process ``InMemoryLightningStore``. With ``--use-client`` the example talks to a
``rollouthub store`` server (``rollouthub store --backend memory --port 45993``) through a ``LightningStoreClient``;
spans then travel over the store's native OTLP endpoint.

Run::

    python examples/write_traces.py otel
    rollouthub store --backend memory --port 45993 &
    python examples/write_traces.py operation --use-client --port 45993

Each mode writes its spans to a new rollout, then marks the rollout's attempt ``succeeded`` (as a runner does when an
agent returns), checks what landed in the store and exits with status 0 on success.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any, List, Optional, Sequence

from rollouthub.cli import plain_text
from rollouthub.emitter import emit_reward, find_final_reward, get_rewards_from_span, operation
from rollouthub.store import InMemoryLightningStore, LightningStore
from rollouthub.tracer import AgentOpsTracer, OtelTracer
from rollouthub.types import AttemptedRollout, Span
from rollouthub.utils.otel import (
    extract_links_from_attributes,
    extract_tags_from_attributes,
    make_link_attributes,
    make_tag_attributes,
    query_linked_spans,
)

logger = logging.getLogger("write_traces")

DEFAULT_PORT = 45993
OPERATION_ID = "op-7f3a"
TAGS = ["demo.operation", "reward.positive"]


async def finish_rollout(store: LightningStore, rollout: AttemptedRollout) -> None:
    """Mark the rollout's attempt ``succeeded``: the traces are written, the rollout is done."""
    await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")


async def send_traces_via_otel(store: LightningStore) -> str:
    """Record three nested OTel spans and a reward of 1.0 for a new rollout; returns the rollout id."""
    rollout = await store.start_rollout(input={"origin": "write_traces.py otel"})
    tracer = OtelTracer()
    with tracer.lifespan(store):
        async with tracer.trace_context(
            "trace-manual", rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id
        ) as otel_tracer:
            with otel_tracer.start_as_current_span("grpc-span-1"):
                await asyncio.sleep(0.01)
                with otel_tracer.start_as_current_span("grpc-span-2"):
                    await asyncio.sleep(0.01)
            with otel_tracer.start_as_current_span("grpc-span-3"):
                await asyncio.sleep(0.01)
            emit_reward(1.0)
    await finish_rollout(store, rollout)
    return rollout.rollout_id


async def verify_otel_traces(
    store: LightningStore, rollout_id: str, *, expect_resource_ids: bool = False
) -> List[Span]:
    """Check the ``otel`` mode result (raises ``AssertionError`` on mismatch) and return the spans."""
    spans = sorted(await store.query_spans(rollout_id), key=lambda s: s.sequence_id)
    assert len(spans) == 4, f"expected 4 spans, got {[s.name for s in spans]}"
    last = spans[-1]
    assert last.name == "agentlightning.annotation", last.name
    assert last.attributes.get("agentlightning.reward.0.value") == 1.0, last.attributes
    assert find_final_reward(spans) == 1.0
    by_name = {s.name: s for s in spans}
    assert by_name["grpc-span-2"].parent_id == by_name["grpc-span-1"].span_id
    if expect_resource_ids:
        for span in spans:
            assert span.resource.attributes.get("agentlightning.rollout_id") == rollout_id, span.resource
            assert span.resource.attributes.get("agentlightning.attempt_id"), span.resource
    return spans


async def send_traces_via_operation(store: LightningStore) -> str:
    """Record an operation and a linked, tagged reward of 0.9; returns the rollout id."""
    rollout = await store.start_rollout(input={"origin": "write_traces.py operation"})
    tracer = OtelTracer()
    with tracer.lifespan(store):
        async with tracer.trace_context(
            "trace-operation", rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id
        ):
            with operation(conversation_id="chat-42", operation_id=OPERATION_ID) as op:
                op.set_input(task={"question": "What is 6 x 7?"}, metadata={"difficulty": "easy"})
                op.set_output({"answer": 42, "confidence": 0.97})
            emit_reward(
                0.9,
                attributes={
                    **make_link_attributes({"conversation_id": "chat-42", "operation_id": OPERATION_ID}),
                    **make_tag_attributes(TAGS),
                },
            )
    await finish_rollout(store, rollout)
    return rollout.rollout_id


async def verify_operation_traces(store: LightningStore, rollout_id: str) -> List[Span]:
    """Check the ``operation`` mode result and return the spans."""
    spans = sorted(await store.query_spans(rollout_id), key=lambda s: s.sequence_id)
    operations = [s for s in spans if s.name == "agentlightning.operation"]
    assert operations, f"no operation span in {[s.name for s in spans]}"
    op_span = operations[0]
    assert op_span.attributes.get("conversation_id") == "chat-42"
    assert op_span.attributes.get("operation_id") == OPERATION_ID
    rewards = [s for s in spans if get_rewards_from_span(s)]
    assert len(rewards) == 1, rewards
    reward_span = rewards[0]
    assert get_rewards_from_span(reward_span)[0].value == 0.9
    assert extract_tags_from_attributes(reward_span.attributes) == TAGS
    links = extract_links_from_attributes(reward_span.attributes)
    linked = query_linked_spans(spans, links)
    assert [s.span_id for s in linked] == [op_span.span_id], linked
    return spans


async def send_traces_via_agentops(store: LightningStore, base_url: Optional[str] = None) -> str:
    """Trace one OpenAI chat call and a reward with ``AgentOpsTracer``; returns the rollout id."""
    import openai

    rollout = await store.start_rollout(input={"origin": "write_traces.py agentops"})
    tracer = AgentOpsTracer()
    with tracer.lifespan(store):
        async with tracer.trace_context(
            "trace-agentops", rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id
        ):
            client = openai.AsyncOpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "dummy"))
            response = await client.chat.completions.create(
                model=os.environ.get("OPENAI_MODEL", "gpt-4.1-nano"),
                messages=[{"role": "user", "content": "Say hello in one word."}],
            )
            logger.info("LLM answered: %s", response.choices[0].message.content)
            emit_reward(0.5)
    await finish_rollout(store, rollout)
    return rollout.rollout_id


async def verify_agentops_traces(store: LightningStore, rollout_id: str) -> List[Span]:
    """Check the ``agentops`` mode result: one OpenAI chat span with prompt/completion and the final reward."""
    spans = await store.query_spans(rollout_id)
    llm = [s for s in spans if s.name == "openai.chat.completion"]
    assert llm, f"no OpenAI span in {[s.name for s in spans]}"
    assert llm[0].attributes.get("gen_ai.prompt.0.content") == "Say hello in one word."
    assert "gen_ai.completion.0.content" in llm[0].attributes
    assert find_final_reward(spans) == 0.5
    return spans


async def run(mode: str, *, use_client: bool = False, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> List[Span]:
    """Run one mode against an in-process store or (``use_client``) a ``rollouthub store`` server."""
    client: Any = None
    if use_client:
        from rollouthub.store.client import LightningStoreClient

        client = LightningStoreClient(f"http://{host}:{port}")
        store: LightningStore = client
    else:
        store = InMemoryLightningStore(thread_safe=True)
    try:
        if mode == "otel":
            rollout_id = await send_traces_via_otel(store)
            spans = await verify_otel_traces(store, rollout_id, expect_resource_ids=use_client)
        elif mode == "operation":
            rollout_id = await send_traces_via_operation(store)
            spans = await verify_operation_traces(store, rollout_id)
        elif mode == "agentops":
            base_url = os.environ.get("OPENAI_BASE_URL")
            if base_url:
                rollout_id = await send_traces_via_agentops(store, base_url)
            else:
                from rollouthub.testing import MockOpenAIServer

                async with MockOpenAIServer(reply="Hello") as server:
                    rollout_id = await send_traces_via_agentops(store, server.base_url)
            spans = await verify_agentops_traces(store, rollout_id)
        else:
            raise ValueError(f"Unknown mode {mode!r}")
        finished = await store.get_rollout_by_id(rollout_id)
        assert finished is not None and finished.status == "succeeded", finished
    finally:
        if client is not None:
            await client.close()
    for span in spans:
        logger.info("seq=%s %s span_id=%s parent=%s", span.sequence_id, span.name, span.span_id, span.parent_id)
    return spans


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", nargs="?", default="otel", choices=["otel", "operation", "agentops"])
    parser.add_argument(
        "--use-client",
        action="store_true",
        help="Talk to a running rollouthub store server (rollouthub store --backend memory).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(levelname)s] %(name)s: %(message)s")
    spans = asyncio.run(run(args.mode, use_client=args.use_client, host=args.host, port=args.port))
    print(f"OK: {len(spans)} span(s) verified in mode {args.mode!r}; rollout {spans[0].rollout_id} succeeded.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
