"""What the ``ray`` strategy needs from the rest of rollouthub, without a cluster: the runner bundle crosses a
process boundary by (cloud)pickle, and a missing Ray says which extra to install."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
from typing import Any, Dict

import pytest

import rollouthub as agl
from rollouthub.algorithm.fast import Baseline
from rollouthub.execution.ray import MISSING_RAY_MESSAGE, RayExecutionStrategy
from rollouthub.tracer import OtelTracer

cloudpickle = pytest.importorskip(
    "ray.cloudpickle", reason="the 'ray' strategy tests need the ray extra (pip install 'rollouthub[ray]')"
)


def test_runner_bundle_of_a_default_trainer_pickles() -> None:
    """The bundle closes over the trainer (runner, tracer, adapter, hooks...): its copy leaves the store behind."""
    trainer = agl.Trainer(
        algorithm=Baseline(span_verbosity="none"),
        strategy=RayExecutionStrategy(n_runners=2),
        initial_resources={"prompt_template": agl.PromptTemplate(template="Q: {q}", engine="f-string")},
    )
    agent = agl.rollout(lambda task, prompt_template: 1.0)
    bundle = functools.partial(trainer._runner_bundle, agent=agent)
    copy = cloudpickle.loads(cloudpickle.dumps(bundle))
    copied = copy.func.__self__
    assert copied.store is None and copied.llm_proxy is None and copied.algorithm is None
    assert type(copied.runner) is type(trainer.runner) and type(copied.tracer) is type(trainer.tracer)
    assert copied.runner.tracer is copied.tracer  # shared references survive the copy
    assert copy.keywords["agent"]({"q": 1}, None) == 1.0


def test_initialised_otel_tracer_copies_as_a_fresh_one() -> None:
    tracer = OtelTracer()
    tracer.init_worker(0)
    try:
        copy = cloudpickle.loads(cloudpickle.dumps(tracer))
    finally:
        tracer.teardown_worker(0)
    assert copy._tracer_provider is None and copy.worker_id is None and copy._provider_lock is not tracer._provider_lock
    copy.init_worker(1)  # usable: initialises its own provider
    copy.teardown_worker(1)


def test_main_module_agent_travels_by_value() -> None:
    """A decorated agent in a script's ``__main__`` reaches a Ray worker (whose ``__main__`` is Ray's script)."""
    script = textwrap.dedent(
        """
        import sys
        from ray import cloudpickle
        import rollouthub as agl

        @agl.rollout
        def agent(task, prompt_template):
            return 2.0

        sys.stdout.buffer.write(cloudpickle.dumps(agent))
        """
    )
    data = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True, timeout=120).stdout
    agent: Dict[str, Any] = {"a": cloudpickle.loads(data)}  # this process's __main__ is pytest's: no `agent` there
    assert agent["a"]({}, None) == 2.0


def test_missing_ray_names_the_extra() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["ray"] = None  # as if the ray extra were not installed
        import rollouthub as agl
        trainer = agl.Trainer(strategy="ray", n_runners=1)
        trainer.fit(agl.rollout(lambda task, prompt_template: 1.0), train_dataset=[{"q": 1}])
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == f"ImportError: {MISSING_RAY_MESSAGE}"


def test_core_import_does_not_import_ray() -> None:
    code = "import sys, rollouthub, rollouthub.execution, rollouthub.trainer; print('ray' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "False"
