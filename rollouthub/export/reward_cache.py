"""Final rewards of finished rollouts, remembered between exports: :class:`FinalRewardCache`.

The dashboard's learning curve asks the store server for every finished rollout's final reward every few seconds
(``GET /v1/agl/export?format=rewards``). The reward comes from the spans of the rollout's latest attempt; reading and
parsing them for every rollout at every refresh is what made a refresh cost seconds of server CPU on a big store. The
server keeps one cache (:mod:`rollouthub.store.server.export`); every export that computes a final reward feeds it.

**Exact validation.** An entry holds the reward together with the *version* of the spans it was computed from: the
rollout's latest attempt id and that attempt's ``last_heartbeat_time``. Both are in the rollout the export reads
anyway (``query_rollouts`` returns each rollout with its latest attempt), so checking an entry costs no store call:

* a new attempt (a retry, ``start_attempt``) changes the latest attempt id;
* a span added to the latest attempt -- a late reward span included -- is a heartbeat: the store sets the attempt's
  ``last_heartbeat_time = now`` in the same transactional unit as the insert (the contract of every
  store), so the stored value changes.

The export reads the rollout *before* its spans, so an entry's version is never newer than its spans: a span stored
between the two reads makes the next lookup miss (and recompute), never serve a stale value. The one case not covered
is a span write stamping the very ``time.time()`` value the entry holds (two writers of one attempt within the
clock's resolution, well under a microsecond, or a clock stepped back onto the same value).

Only rollouts in a terminal status (``succeeded``, ``failed``, ``cancelled``) are cached: a running attempt's
heartbeat changes all the time, its entry would never be reused.

**Bounded memory.** At most ``max_entries`` entries (default :data:`DEFAULT_MAX_ENTRIES`; ≈275 bytes per entry
measured, ids included: ≈27 MB when full); ``0`` disables the cache. A full cache admits no new rollout -- only newer versions of
the rollouts it holds replace their entries. An export scans rollouts in start-time order, a pattern under which
evicting the least recently used entry would evict every entry before its next use (no hit at all once the finished
rollouts outnumber the cap); without eviction the cached part stays useful and a refresh reads the spans of the
other rollouts only. Rollouts are never deleted from a store, so entries do not go stale by deletion.
"""

from __future__ import annotations

import threading
from typing import Dict, Optional, Tuple

from rollouthub.store.base import is_finished
from rollouthub.types import Rollout

__all__ = ["FinalRewardCache", "DEFAULT_MAX_ENTRIES", "reward_version"]

DEFAULT_MAX_ENTRIES = 100_000
"""Default cap of a :class:`FinalRewardCache` (the store server's: ``ROLLOUTHUB_REWARD_CACHE_ENTRIES``)."""

RewardVersion = Tuple[str, Optional[float]]
"""The latest attempt's id and ``last_heartbeat_time``: what a final reward was computed from."""


def reward_version(rollout: Rollout) -> Optional[RewardVersion]:
    """The version of ``rollout``'s final reward (see the module doc), or ``None`` when it is not cached: the rollout
    is not in a terminal status or has no attempt."""
    attempt = getattr(rollout, "attempt", None)
    if attempt is None or not is_finished(rollout):
        return None
    return attempt.attempt_id, attempt.last_heartbeat_time


class FinalRewardCache:
    """Final rewards of finished rollouts keyed by rollout id and checked against the rollout's current version.

    Shared by every export of a store server; safe to use from several threads (admissions take a lock, so the cap
    holds). ``hits`` and ``misses`` count the lookups.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        """Hold at most ``max_entries`` rewards (``0``: cache nothing)."""
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        self.max_entries = max_entries
        self._entries: Dict[str, Tuple[str, Optional[float], Optional[float]]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """Number of cached rewards."""
        return len(self._entries)

    def lookup(self, rollout: Rollout) -> Tuple[bool, Optional[float]]:
        """``(True, reward)`` when a reward of ``rollout``'s current version is cached (``reward`` may be ``None``:
        no span carries one), else ``(False, None)``."""
        version = reward_version(rollout)
        if version is not None:
            entry = self._entries.get(rollout.rollout_id)
            if entry is not None and entry[0] == version[0] and entry[1] == version[1]:
                self.hits += 1
                return True, entry[2]
        self.misses += 1
        return False, None

    def store(self, rollout: Rollout, reward: Optional[float]) -> None:
        """Remember ``reward`` as ``rollout``'s final reward, computed from spans read *after* ``rollout`` was read.

        Ignored for rollouts that are not cached (see :func:`reward_version`) and for new rollouts once the cache is
        full."""
        version = reward_version(rollout)
        if version is None:
            return
        rollout_id = rollout.rollout_id
        with self._lock:
            if rollout_id in self._entries or len(self._entries) < self.max_entries:
                self._entries[rollout_id] = (version[0], version[1], reward)
