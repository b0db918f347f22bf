"""litellm instrumentation hooks: not implemented by rollouthub yet (requires the optional ``litellm`` package)."""

from __future__ import annotations

from .placeholder import skip_unimplemented

__all__ = ["instrument_litellm", "uninstrument_litellm"]


def instrument_litellm(*, requested: bool = True) -> bool:
    """Apply the litellm patches: not implemented yet, so this says so (once per process) and returns False.

    Args:
        requested: the user asked for this integration (a warning); ``instrument_all`` passes False (a debug line).

    Raises:
        ImportError: ``litellm`` is not installed.
    """
    return skip_unimplemented("litellm", "litellm", requested=requested)


def uninstrument_litellm() -> None:
    """Remove the litellm patches (nothing to remove)."""
