"""``WeaveTracer`` (optional, experimental). Requires the ``weave`` package.

Never imported by ``import rollouthub``. This is a stub: the W&B Weave integration is out of scope for the core.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .otel import OtelTracer

__all__ = ["WeaveTracer"]


class WeaveTracer(OtelTracer):
    """Experimental tracer backed by W&B Weave (not implemented beyond the OpenTelemetry base).

    Raises ``ImportError`` with install instructions when ``weave`` is missing; otherwise it behaves as an
    :class:`~rollouthub.tracer.otel.OtelTracer` (Weave calls are not converted into store spans yet).
    """

    def __init__(
        self,
        *,
        project_name: Optional[str] = None,
        weave_user_settings: Optional[Dict[str, Any]] = None,
        instrument_managed: bool = True,
    ) -> None:
        """Check that ``weave`` is importable and remember the settings."""
        try:
            import weave  # noqa: F401
        except ImportError as exc:
            raise ImportError("WeaveTracer requires the 'weave' package: pip install 'rollouthub[weave]'") from exc
        super().__init__()
        self.project_name = project_name
        self.weave_user_settings = weave_user_settings or {}
        self.instrument_managed = instrument_managed
