"""AgentOps-LangChain instrumentation hooks: not implemented by rollouthub yet (requires the optional ``langchain_core`` package)."""

from __future__ import annotations

from .placeholder import skip_unimplemented

__all__ = ["instrument_agentops_langchain", "uninstrument_agentops_langchain"]


def instrument_agentops_langchain(*, requested: bool = True) -> bool:
    """Apply the AgentOps-LangChain patches: not implemented yet, so this says so (once per process) and returns False.

    Args:
        requested: the user asked for this integration (a warning); ``instrument_all`` passes False (a debug line).

    Raises:
        ImportError: ``langchain_core`` is not installed.
    """
    return skip_unimplemented("agentops_langchain", "langchain_core", requested=requested)


def uninstrument_agentops_langchain() -> None:
    """Remove the AgentOps-LangChain patches (nothing to remove)."""
