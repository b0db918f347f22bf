"""Query objects: what a store query filters, sorts and pages by, declared once.

The public store methods keep their keyword arguments (the Agent Lightning API) and build one of these; the wire
models of the REST API extend them, the client sends them and the business logic reads them.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel
from typing_extensions import Self

from .core import RolloutStatus, SortOptions, WorkerStatus

__all__ = ["AttemptQuery", "ResourcesQuery", "RolloutQuery", "SpanQuery", "WorkerQuery"]


class _Query(BaseModel):
    """Sort and page of a query (the filters are the subclass's)."""

    limit: int = -1
    offset: int = 0
    sort_by: Optional[str] = None
    sort_order: Literal["asc", "desc"] = "asc"

    @classmethod
    def of(cls, **arguments: Any) -> Self:
        """The query of a store method's keyword arguments, as given (not validated: the store checks their
        domains); an unknown argument is a ``TypeError``, as for the method itself."""
        unknown = sorted(set(arguments) - set(cls.model_fields))
        if unknown:
            raise TypeError(f"{cls.__name__}: unexpected keyword argument {unknown[0]!r}")
        return cls.model_construct(**arguments)

    def sort(self) -> Optional[SortOptions]:
        """The sort options (``None``: unsorted)."""
        return {"name": self.sort_by, "order": self.sort_order} if self.sort_by else None


class _PooledQuery(_Query):
    """A query whose filters are pooled by ``filter_logic``."""

    filter_logic: Literal["and", "or"] = "and"


class RolloutQuery(_PooledQuery):
    """The filters, sort and page of ``query_rollouts`` (its keyword arguments, deprecated aliases resolved)."""

    status_in: Optional[List[RolloutStatus]] = None
    rollout_id_in: Optional[List[str]] = None
    rollout_id_contains: Optional[str] = None


class AttemptQuery(_Query):
    """The sort and page of ``query_attempts`` (its keyword arguments after ``rollout_id``)."""

    sort_by: Optional[str] = "sequence_id"


class ResourcesQuery(_Query):
    """The filters, sort and page of ``query_resources`` (its keyword arguments; the filters are ANDed)."""

    resources_id: Optional[str] = None
    resources_id_contains: Optional[str] = None


class SpanQuery(_PooledQuery):
    """The filters, sort and page of ``query_spans`` (its keyword arguments after ``rollout_id``/``attempt_id``).

    ``*_contains`` is a substring match, the other filters exact; the filters are pooled by ``filter_logic``.
    """

    trace_id: Optional[str] = None
    trace_id_contains: Optional[str] = None
    span_id: Optional[str] = None
    span_id_contains: Optional[str] = None
    parent_id: Optional[str] = None
    parent_id_contains: Optional[str] = None
    name: Optional[str] = None
    name_contains: Optional[str] = None
    sort_by: Optional[str] = "sequence_id"

    def conditions(self) -> Dict[str, Dict[str, Any]]:
        """The filters as store filter conditions (field -> ``{"exact"/"contains": value}``), unset ones left out."""
        conditions: Dict[str, Dict[str, Any]] = {}
        for field, exact, contains in (
            ("trace_id", self.trace_id, self.trace_id_contains),
            ("span_id", self.span_id, self.span_id_contains),
            ("parent_id", self.parent_id, self.parent_id_contains),
            ("name", self.name, self.name_contains),
        ):
            ops: Dict[str, Any] = {}
            if exact is not None:
                ops["exact"] = exact
            if contains is not None:
                ops["contains"] = contains
            if ops:
                conditions[field] = ops
        return conditions


class WorkerQuery(_PooledQuery):
    """The filters, sort and page of ``query_workers`` (its keyword arguments)."""

    status_in: Optional[List[WorkerStatus]] = None
    worker_id_contains: Optional[str] = None
