"""Component building."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from rollouthub.execution import ClientServerExecutionStrategy, ExecutionStrategy, SharedMemoryExecutionStrategy
from rollouthub.trainer import ExecutionStrategyRegistry, build_component, instantiate_component, load_class
from rollouthub.trainer.init_utils import instantiate_from_spec


class Base:
    pass


class Child(Base):
    def __init__(self, a: int = 1, tracer: Optional[str] = None) -> None:
        self.a = a
        self.tracer = tracer


class KwChild(Base):
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_load_class_and_instantiate() -> None:
    assert load_class("tests.trainer.test_init_utils.Child") is Child
    with pytest.raises(ValueError):
        load_class("NoDots")
    with pytest.raises(ImportError):
        load_class("tests.trainer.test_init_utils.Missing")
    obj = instantiate_component(Child, {"a": 5}, {"tracer": lambda: "made", "unknown": 1, "a": 9})
    assert (obj.a, obj.tracer) == (5, "made")
    kw = instantiate_component(KwChild, None, {"tracer": "t"})
    assert kw.kwargs == {}  # only named parameters receive optional defaults
    via_registry = instantiate_from_spec("child", registry={"child": "tests.trainer.test_init_utils.Child"})
    assert isinstance(via_registry, Child)


def test_build_component_resolution_table() -> None:
    instance = Child()
    assert build_component(instance, expected_type=Base, spec_name="x") is instance
    assert build_component(None, expected_type=Base, spec_name="x", allow_none=True) is None
    assert isinstance(build_component(None, expected_type=Base, spec_name="x", default_factory=Child), Child)
    with pytest.raises(ValueError):
        build_component(None, expected_type=Base, spec_name="x")
    with pytest.raises(TypeError):
        build_component(None, expected_type=Base, spec_name="x", default_factory=lambda: 3)
    built = build_component(Child, expected_type=Base, spec_name="x", optional_defaults={"tracer": "T"})
    assert isinstance(built, Child) and built.tracer == "T"
    with pytest.raises(TypeError):
        build_component(int, expected_type=Base, spec_name="x")
    assert isinstance(build_component(lambda: Child(a=2), expected_type=Base, spec_name="x"), Child)
    with pytest.raises(TypeError, match="custom int Base"):
        build_component(
            lambda: 1, expected_type=Base, spec_name="x", type_error_fmt="custom {type_name} {expected_type}"
        )
    built = build_component("tests.trainer.test_init_utils.Child", expected_type=Base, spec_name="x")
    assert isinstance(built, Child)
    built = build_component({"type": "tests.trainer.test_init_utils.Child", "a": 7}, expected_type=Base, spec_name="x")
    assert built.a == 7
    with pytest.raises(ValueError):
        build_component({"a": 7}, expected_type=Base, spec_name="x")
    built = build_component(
        {"a": 8}, expected_type=Base, spec_name="x", dict_requires_type=False, dict_default_cls=Child
    )
    assert built.a == 8
    with pytest.raises(ValueError):
        build_component({"a": 8}, expected_type=Base, spec_name="x", dict_requires_type=False)
    with pytest.raises(ValueError, match="bad 5"):
        build_component(
            5, expected_type=Base, spec_name="x", invalid_spec_error_fmt="bad {type_name}".replace("{type_name}", "5")
        )
    with pytest.raises(ValueError):
        build_component(5, expected_type=Base, spec_name="x")


def test_strategy_registry_aliases() -> None:
    assert set(ExecutionStrategyRegistry) == {"shm", "cs", "ray"}
    shm = build_component(
        "shm",
        expected_type=ExecutionStrategy,
        spec_name="strategy",
        registry=ExecutionStrategyRegistry,
        optional_defaults={"n_runners": 1, "server_port": 1234},
    )
    assert isinstance(shm, SharedMemoryExecutionStrategy)
    cs = build_component(
        {"type": "cs", "n_runners": 3},
        expected_type=ExecutionStrategy,
        spec_name="strategy",
        registry=ExecutionStrategyRegistry,
        optional_defaults={"n_runners": 1, "server_port": 1234},
    )
    assert isinstance(cs, ClientServerExecutionStrategy) and cs.n_runners == 3 and cs.server_port == 1234
    by_name = build_component(
        {"name": "shm", "main_thread": "algorithm", "n_runners": 2},
        expected_type=ExecutionStrategy,
        spec_name="strategy",
        registry=ExecutionStrategyRegistry,
    )
    assert isinstance(by_name, SharedMemoryExecutionStrategy) and by_name.main_thread == "algorithm"
