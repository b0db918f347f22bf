"""Optional dependencies ("extras"): import them lazily, and fail with one line that says what to install.

Every message names the extra quoted for shells, e.g. ``pip install 'rollouthub[prometheus]'`` (unquoted brackets are
glob patterns in zsh).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtraError", "import_extra", "install_hint"]


def install_hint(extra: str) -> str:
    """``pip install 'rollouthub[<extra>]'``, quoted for shells."""
    return f"pip install 'rollouthub[{extra}]'"


class MissingExtraError(ImportError):
    """An optional dependency is not installed; ``str(error)`` is one line naming the extra to install."""

    def __init__(self, feature: str, package: str, extra: str) -> None:
        super().__init__(f"{feature} needs the optional package {package!r}: {install_hint(extra)}", name=package)
        self.feature = feature
        self.package = package
        self.extra = extra


def import_extra(module: str, *, extra: str, feature: str, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` (``feature`` says what needs it, e.g. ``"--tracker
    prometheus"``; ``package`` is the distribution name when it differs from the top-level module)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".", 1)[0]
        if exc.name is not None and exc.name != top and not exc.name.startswith(top + "."):
            raise  # the package is there but one of *its* dependencies is broken: show the real error
        raise MissingExtraError(feature, package or top, extra) from exc
