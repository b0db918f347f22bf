"""``Tracer.preload``: the instrumentation's heavy imports happen once in the Trainer's process, patching nothing."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, List

from rollouthub.execution import ExecutionStrategy
from rollouthub.litagent import rollout
from rollouthub.tracer import DummyTracer
from rollouthub.trainer import Trainer


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def test_otel_preload_imports_openai_without_patching() -> None:
    out = _run(
        "import sys\n"
        "from rollouthub.tracer import OtelTracer\n"
        "from rollouthub.instrumentation import is_openai_instrumented\n"
        "before = 'openai' in sys.modules\n"
        "OtelTracer().preload()\n"
        "print(before, 'openai' in sys.modules, 'openai.resources.chat.completions' in sys.modules,"
        " is_openai_instrumented())\n"
    )
    assert out == "False True True False"


def test_preload_skips_openai_when_not_instrumenting() -> None:
    out = _run(
        "import sys\n"
        "from rollouthub.tracer import OtelTracer\n"
        "OtelTracer(instrument_openai=False).preload()\n"
        "print('openai' in sys.modules)\n"
    )
    assert out == "False"


def test_after_preload_building_the_store_exporter_imports_nothing() -> None:
    out = _run(
        "import sys\n"
        "from rollouthub.tracer import OtelTracer\n"
        "OtelTracer(instrument_openai=False).preload()\n"
        "before = set(sys.modules)\n"
        "from rollouthub.utils.otlp import LightningStoreOTLPExporter\n"
        "LightningStoreOTLPExporter().shutdown()\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    assert out == "[]"  # what a runner's init_worker builds was imported once, before the runners were forked


class RecordingTracer(DummyTracer):
    def __init__(self) -> None:
        super().__init__()
        self.events: List[str] = []

    def preload(self) -> None:
        self.events.append("preload")


class RecordingStrategy(ExecutionStrategy):
    def __init__(self, tracer: RecordingTracer, role: str) -> None:
        self.tracer = tracer
        self.role = role

    def execute(self, algorithm: Any, runner: Any, store: Any) -> None:
        self.tracer.events.append("execute")


@rollout
def noop_agent(task: str, llm: Any) -> None:
    return None


def test_trainer_preloads_before_the_strategy_starts_runners() -> None:
    for role, expected in (("both", ["preload", "execute"]), ("runner", ["preload", "execute"])):
        tracer = RecordingTracer()
        Trainer(tracer=tracer, strategy=RecordingStrategy(tracer, role)).fit(noop_agent, ["x"])
        assert tracer.events == expected, role
    tracer = RecordingTracer()  # runners run elsewhere: nothing to preload here
    Trainer(tracer=tracer, strategy=RecordingStrategy(tracer, "algorithm")).fit(noop_agent, ["x"])
    assert tracer.events == ["execute"]
