"""vllm instrumentation hooks: not implemented by rollouthub yet (requires the optional ``vllm`` package)."""

from __future__ import annotations

from .placeholder import skip_unimplemented

__all__ = ["instrument_vllm", "uninstrument_vllm"]


def instrument_vllm(*, requested: bool = True) -> bool:
    """Apply the vllm patches: not implemented yet, so this says so (once per process) and returns False.

    Args:
        requested: the user asked for this integration (a warning); ``instrument_all`` passes False (a debug line).

    Raises:
        ImportError: ``vllm`` is not installed.
    """
    return skip_unimplemented("vllm", "vllm", requested=requested)


def uninstrument_vllm() -> None:
    """Remove the vllm patches (nothing to remove)."""
