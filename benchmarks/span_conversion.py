"""Cost of the tracer's local copy of an ended span: ``Span.from_opentelemetry`` on a real SDK span.

The runner's ``LightningSpanProcessor`` turns every ended OpenTelemetry span into a ``Span`` model (the copy that
``get_last_trace()`` returns). This script ends one SDK span shaped like the ``full_stack.py`` agent's (a parent,
``--attributes`` flat attributes, ``--events`` events, a resource naming the rollout and attempt) and reports the
best of ``--repeat`` timings of ``--number`` conversions, in microseconds per span. Run it with each checkout's code
on PYTHONPATH for an A/B (copy the script into the other checkout first).
"""

from __future__ import annotations

import argparse
import json
import timeit
from typing import Any, List, Optional

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollouthub.types import Span


def _ended_span(n_attributes: int, n_events: int) -> Any:
    """End a child span with the requested shape and return the SDK ``ReadableSpan``."""
    exporter = InMemorySpanExporter()
    resource = Resource.create({"agentlightning.rollout_id": "ro-1", "agentlightning.attempt_id": "at-1"})
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("span-conversion")
    with tracer.start_as_current_span("agent0"):
        with tracer.start_as_current_span("round0_1") as span:
            for i in range(n_attributes):
                span.set_attribute(f"attr.{i}", f"value-{i}" if i % 3 == 0 else (i if i % 3 == 1 else i / 7))
            for i in range(n_events):
                span.add_event(f"event{i}", {"index": i})
    finished = [s for s in exporter.get_finished_spans() if s.name == "round0_1"]
    provider.shutdown()
    return finished[0]


def main(argv: Optional[List[str]] = None) -> None:
    """Parse the flags, time the conversion and print one JSON line."""
    parser = argparse.ArgumentParser(
        description="Microseconds per Span.from_opentelemetry call on one ended SDK span (best of --repeat)."
    )
    parser.add_argument("--attributes", type=int, default=12, help="flat attributes on the span (default 12)")
    parser.add_argument("--events", type=int, default=0, help="events on the span (default 0)")
    parser.add_argument("--number", type=int, default=5000, help="conversions per timing (default 5000)")
    parser.add_argument("--repeat", type=int, default=7, help="timings; the best is reported (default 7)")
    args = parser.parse_args(argv)
    span = _ended_span(args.attributes, args.events)
    timings = timeit.repeat(
        lambda: Span.from_opentelemetry(span, "ro-1", "at-1", 1), number=args.number, repeat=args.repeat
    )
    best_us = min(timings) / args.number * 1e6
    print(json.dumps({"attributes": args.attributes, "events": args.events, "us_per_span": round(best_us, 2)}))


if __name__ == "__main__":
    main()
