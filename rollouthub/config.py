"""``lightning_cli``: build an argparse CLI from class constructors."""

from __future__ import annotations

import argparse
import inspect
import logging
import sys
import types
import typing
from typing import Any, Callable, Dict, List, Tuple, Type, Union

__all__ = ["lightning_cli"]

logger = logging.getLogger(__name__)

_NONE_STRINGS = {"none", "null", "~", "nil"}
_TRUE = {"yes", "true", "t", "y", "1"}
_FALSE = {"no", "false", "f", "n", "0"}


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"Invalid boolean value {value!r} (use yes/no, true/false, 1/0).")


def _optional(parser: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(value: str) -> Any:
        return None if value.strip().lower() in _NONE_STRINGS else parser(value)

    parse.__name__ = getattr(parser, "__name__", "value")
    return parse


def _unwrap_optional(annotation: Any) -> Tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
    return annotation, False


def _scalar_parser(annotation: Any) -> Tuple[Callable[[str], Any], str]:
    if annotation is bool:
        return _parse_bool, "bool"
    if annotation in (int, float, str):
        return annotation, annotation.__name__
    return str, "str"


def _argument_spec(annotation: Any) -> Tuple[Dict[str, Any], str, bool]:
    """argparse kwargs, a type label for the help text, and whether the type is Optional."""
    inner, is_optional = _unwrap_optional(annotation)
    origin = typing.get_origin(inner)
    if origin in (list, List):
        args = typing.get_args(inner)
        parser, label = _scalar_parser(args[0] if args else str)
        if is_optional:
            parser = _optional(parser)
        return {"type": parser, "nargs": "*"}, f"List[{label}]", is_optional
    parser, label = _scalar_parser(inner)
    if is_optional and inner in (str, int, float):
        parser = _optional(parser)
        label = f"Optional[{label}]"
    return {"type": parser}, label, is_optional


def lightning_cli(*classes: Type[Any]) -> Any:
    """Expose every ``__init__`` parameter of ``classes`` as ``--<class>.<param>``, parse ``sys.argv``, instantiate.

    Returns the single instance for one class, otherwise a tuple in the given order (``()`` for no classes).
    """
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    plan: List[Tuple[Type[Any], List[Tuple[str, str]]]] = []
    for cls in classes:
        prefix = cls.__name__.lower()
        group = parser.add_argument_group(cls.__name__)
        try:
            hints = typing.get_type_hints(cls.__init__)
        except Exception:
            hints = {}
        params: List[Tuple[str, str]] = []
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if name == "self" or param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            annotation = hints.get(name, param.annotation if param.annotation is not inspect.Parameter.empty else str)
            kwargs, label, is_optional = _argument_spec(annotation)
            dest = f"{prefix}.{name}"
            flag = f"--{prefix}.{name.replace('_', '-')}"
            if param.default is inspect.Parameter.empty:
                if is_optional:
                    kwargs["default"] = None
                else:
                    kwargs["required"] = True
            else:
                kwargs["default"] = param.default
            group.add_argument(flag, dest=dest, help=f"{cls.__name__}.{name} ({label})", **kwargs)
            params.append((name, dest))
        plan.append((cls, params))
    namespace = vars(parser.parse_args(sys.argv[1:]))
    instances: List[Any] = []
    for cls, params in plan:
        kwargs = {name: namespace[dest] for name, dest in params}
        try:
            instances.append(cls(**kwargs))
        except Exception:
            logger.exception("Failed to instantiate %s with %s", cls.__name__, kwargs)
            raise
    if len(instances) == 1:
        return instances[0]
    return tuple(instances)
