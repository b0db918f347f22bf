"""Where a GRPO run keeps its per-step metrics: one *record rollout* per step in the store (no torch here).

The design uses the store's public API only. After each step (and for the initial evaluation, step 0) the algorithm
creates a rollout with :meth:`~rollouthub.store.base.LightningStore.start_rollout` -- so it never enters the queue
and no runner executes it -- and marks its attempt succeeded at once:

- ``input``: ``{"grpo_run": <run id>, "grpo_step": <step>}``;
- ``mode``: none, no spans: it has no final reward and no LLM call, so the learning curve (final rewards per
  resources version and mode), ``rollouthub export trajectories`` and every training export leave it out (the store
  gives it the latest resources id, the version the step published);
- ``metadata[STEP_RECORD_KEY]``: the step's metrics (see :class:`StepRecord`), JSON values only.

Anything that reads rollouts sees them: the dashboard (the rollout's raw JSON), ``GET /v1/agl/rollouts``, and
:func:`read_step_records`, which returns the records of one run (or every run) in step order.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from rollouthub.store.base import LightningStore

__all__ = ["STEP_RECORD_KEY", "StepRecord", "write_step_record", "read_step_records", "is_step_record"]

STEP_RECORD_KEY = "rollouthub.grpo.step"
"""The rollout-metadata key under which a record rollout keeps its :class:`StepRecord`."""


def _json_number(value: Any) -> Any:
    """Floats that JSON cannot carry (NaN, infinities) become ``None``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass
class StepRecord:
    """What one GRPO step did, as stored in its record rollout."""

    run_id: str
    step: int
    """Updates completed after this step (0: the initial evaluation, before any update)."""
    policy_version: int
    """The policy version served after this step."""
    session: str
    """Which process wrote it: a resumed run has a new session (steps the crashed run recorded stay in the store)."""
    resources_id: Optional[str] = None
    """The resources id of ``policy_version`` (what the next rollouts run with)."""
    eval_reward: Optional[float] = None
    """Mean reward of the validation rollouts of ``policy_version`` (``None``: not evaluated at this step)."""
    eval_rollouts: int = 0
    update: Dict[str, Any] = field(default_factory=dict)
    """The update's metrics (``UpdateMetrics.as_dict()``: reward and advantage stats, clip fraction, KL, entropy,
    grad norm, tokens/s...); empty for step 0."""
    rollouts: Dict[str, Any] = field(default_factory=dict)
    """The step's rollouts: ``enqueued``, ``finished``, ``dropped_rollouts`` (by reason), ``mismatches``,
    ``generated_tokens``."""
    seconds: Dict[str, float] = field(default_factory=dict)
    """Time split of the step: ``rollouts`` (enqueue to the last one finished), ``generation`` (the backend
    generating), ``waiting`` (the rest of ``rollouts``: runners, proxy, store), ``trajectories``, ``update``,
    ``weights`` (hold, load, release), ``eval``, ``checkpoint``, ``total``."""
    uniform_group_share: Optional[float] = None
    """Share of the step's groups whose rewards were all equal (no signal)."""
    tokens_per_second: Optional[float] = None
    """Tokens the backend generated during the step's rollouts per second of that phase."""

    def as_dict(self) -> Dict[str, Any]:
        """The record as JSON-ready values (non-finite floats become ``None``)."""

        def clean(value: Any) -> Any:
            if isinstance(value, dict):
                return {key: clean(item) for key, item in value.items()}
            if isinstance(value, list):
                return [clean(item) for item in value]
            return _json_number(value)

        return clean(asdict(self))  # type: ignore[no-any-return]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> StepRecord:
        """Read :meth:`as_dict`'s output back (unknown keys are ignored: newer writers may add some)."""
        known = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in values.items() if key in known})


def is_step_record(metadata: Optional[Mapping[str, Any]]) -> bool:
    """Whether rollout metadata is that of a GRPO record rollout."""
    return isinstance(metadata, Mapping) and isinstance(metadata.get(STEP_RECORD_KEY), Mapping)


async def write_step_record(store: LightningStore, record: StepRecord) -> str:
    """Store ``record`` as a finished record rollout; returns its rollout id."""
    rollout = await store.start_rollout(
        input={"grpo_run": record.run_id, "grpo_step": record.step},
        metadata={STEP_RECORD_KEY: record.as_dict()},
    )
    await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
    return rollout.rollout_id


async def read_step_records(store: LightningStore, run_id: Optional[str] = None) -> List[StepRecord]:
    """The step records in ``store`` (of ``run_id``, or of every run), in the order they were written."""
    result = await store.query_rollouts(status_in=["succeeded"], sort_by="start_time", sort_order="asc")
    records = []
    for rollout in result.items:
        if not is_step_record(rollout.metadata):
            continue
        assert rollout.metadata is not None
        record = StepRecord.from_dict(rollout.metadata[STEP_RECORD_KEY])
        if run_id is None or record.run_id == run_id:
            records.append(record)
    return records
