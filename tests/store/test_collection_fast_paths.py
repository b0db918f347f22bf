"""The by-id and compiled-filter fast paths of the collections layer give exactly the general path's results.

``primary_key_of_filter`` recognises lookups by primary key (memory and SQL skip filter normalisation for them), and
the SQL backend compiles filters of exact scalar conditions once per signature. These tests pin the recognition rules
and check, on every collections backend, that repeated filters of one shape with different values, values of
another type than the column's, and contradictory or extra conditions all behave as the general path does.
"""

from __future__ import annotations

from typing import Any

import pytest

from rollouthub.store.collection.base import primary_key_of_filter
from rollouthub.types import Attempt, Rollout

PK_CASES = [
    ({"rollout_id": {"exact": "ro-1"}}, ("rollout_id",), ("ro-1",)),
    ({"rollout_id": {"exact": "ro-1"}, "_aggregate": "or"}, ("rollout_id",), ("ro-1",)),
    ({"_must": {"rollout_id": {"exact": "ro-1"}}}, ("rollout_id",), ("ro-1",)),
    (
        {"_must": {"rollout_id": {"exact": "ro-1"}, "attempt_id": {"exact": "at-1"}}},
        ("rollout_id", "attempt_id"),
        ("ro-1", "at-1"),
    ),
    (
        {"attempt_id": {"exact": "at-1"}, "rollout_id": {"exact": "ro-1"}},
        ("rollout_id", "attempt_id"),
        ("ro-1", "at-1"),
    ),
    # Not a pure lookup by key: the general path decides.
    (
        {"rollout_id": {"exact": "ro-1"}, "attempt_id": {"exact": "at-1"}, "_aggregate": "or"},
        ("rollout_id", "attempt_id"),
        None,
    ),
    ({"rollout_id": {"exact": "ro-1"}}, ("rollout_id", "attempt_id"), None),
    ({"rollout_id": {"exact": "ro-1"}, "status": {"exact": "running"}}, ("rollout_id",), None),
    ({"rollout_id": {"exact": "ro-1", "contains": "ro"}}, ("rollout_id",), None),
    ({"rollout_id": {"within": ["ro-1"]}}, ("rollout_id",), None),
    ({"rollout_id": {"exact": None}}, ("rollout_id",), None),
    ({"rollout_id": {"exact": 1}}, ("rollout_id",), None),
    ({"rollout_id": {"exact": "ro-1"}, "_aggregate": "xor"}, ("rollout_id",), None),
    ({"_must": [{"rollout_id": {"exact": "ro-1"}}]}, ("rollout_id",), None),
    ({"_must": {"rollout_id": {"exact": "ro-1"}}, "status": {"exact": "x"}}, ("rollout_id",), None),
    ({}, ("rollout_id",), None),
    (None, ("rollout_id",), None),
]


@pytest.mark.parametrize(("filter", "keys", "expected"), PK_CASES)
def test_primary_key_of_filter(filter: Any, keys: tuple[str, ...], expected: Any) -> None:
    assert primary_key_of_filter(filter, keys) == expected


def _attempt(rollout_id: str, attempt_id: str, sequence_id: int, status: str = "running") -> Attempt:
    return Attempt(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        start_time=100.0 + sequence_id,
        status=status,  # type: ignore[arg-type]
    )


@pytest.fixture
async def seeded(collections: Any) -> Any:
    async with collections.atomic(mode="rw") as c:
        await c.rollouts.insert([Rollout(rollout_id=f"ro-{i}", input=i, start_time=100.0 + i) for i in range(3)])
        await c.attempts.insert(
            [
                _attempt("ro-0", "at-a", 1, "failed"),
                _attempt("ro-0", "at-b", 2),
                _attempt("ro-1", "at-c", 1),
            ]
        )
    return collections


async def test_get_by_key_in_every_form(seeded: Any) -> None:
    async with seeded.atomic(mode="rw") as c:
        for rid in ("ro-0", "ro-1", "ro-2"):
            got = await c.rollouts.get(filter={"rollout_id": {"exact": rid}})
            assert got is not None and got.rollout_id == rid
            got = await c.rollouts.get(filter={"_must": {"rollout_id": {"exact": rid}}})
            assert got is not None and got.rollout_id == rid
        assert await c.rollouts.get(filter={"rollout_id": {"exact": "ro-404"}}) is None
        got_attempt = await c.attempts.get(
            filter={"_must": {"rollout_id": {"exact": "ro-0"}, "attempt_id": {"exact": "at-b"}}}
        )
        assert got_attempt is not None and got_attempt.sequence_id == 2
        # The attempt exists, but under another rollout: no match.
        assert (
            await c.attempts.get(filter={"_must": {"rollout_id": {"exact": "ro-1"}, "attempt_id": {"exact": "at-b"}}})
            is None
        )
        # A partial key is not a lookup by key; it still finds the rollout's attempts.
        partial = await c.attempts.get(
            filter={"rollout_id": {"exact": "ro-0"}}, sort={"name": "sequence_id", "order": "desc"}
        )
        assert partial is not None and partial.attempt_id == "at-b"


async def test_one_filter_shape_with_changing_values(seeded: Any) -> None:
    async with seeded.atomic(mode="r") as c:
        for _ in range(2):  # the second round runs from the compiled-shape cache
            for rid, expected in (("ro-0", ["at-a", "at-b"]), ("ro-1", ["at-c"]), ("ro-2", [])):
                page = await c.attempts.query(filter={"rollout_id": {"exact": rid}})
                assert [a.attempt_id for a in page.items] == expected
                page = await c.attempts.query(filter={"rollout_id": {"exact": rid}, "status": {"exact": "running"}})
                assert [a.attempt_id for a in page.items] == [a for a in expected if a != "at-a"]
            page = await c.attempts.query(filter={"sequence_id": {"exact": 2}})
            assert [a.attempt_id for a in page.items] == ["at-b"]
            page = await c.attempts.query(filter={"sequence_id": {"exact": 1}})
            assert [a.attempt_id for a in page.items] == ["at-a", "at-c"]


async def test_values_of_another_type_than_the_column(seeded: Any) -> None:
    async with seeded.atomic(mode="r") as c:
        for _ in range(2):
            # An int column compared with an integral float, a bool and a string, after the int shape was cached.
            assert [a.attempt_id for a in (await c.attempts.query(filter={"sequence_id": {"exact": 2}})).items] == [
                "at-b"
            ]
            assert [a.attempt_id for a in (await c.attempts.query(filter={"sequence_id": {"exact": 2.0}})).items] == [
                "at-b"
            ]
            assert [a.attempt_id for a in (await c.attempts.query(filter={"sequence_id": {"exact": True}})).items] == [
                "at-a",
                "at-c",
            ]
            assert (await c.attempts.query(filter={"sequence_id": {"exact": "2"}})).items == []
            # A float column compared with an int.
            page = await c.attempts.query(filter={"start_time": {"exact": 102}})
            assert [a.attempt_id for a in page.items] == ["at-b"]
            # OR of two exact conditions, then AND of the same ones.
            page = await c.attempts.query(
                filter={"attempt_id": {"exact": "at-a"}, "rollout_id": {"exact": "ro-1"}, "_aggregate": "or"}
            )
            assert sorted(a.attempt_id for a in page.items) == ["at-a", "at-c"]
            page = await c.attempts.query(filter={"attempt_id": {"exact": "at-a"}, "rollout_id": {"exact": "ro-1"}})
            assert page.items == []
