"""CPU time of the PostgreSQL server processes serving a benchmark's connections.

PostgreSQL runs one backend process per connection. The benchmarks give their connections a known
``application_name`` and find those backends' pids in ``pg_stat_activity``; their CPU time (user + system) comes from
``/proc/<pid>/stat`` -- so this only works when the database runs on the same machine (a remote server yields ``nan``).
Other users' connections to the same server are not counted.

    sampler = BackendCpuSampler(url, "rh-bench-%")
    before = await sampler.sample()
    ...
    after = await sampler.sample()
    cpu_seconds = BackendCpuSampler.delta(before, after)
"""

from __future__ import annotations

import os
from typing import Dict

__all__ = ["BackendCpuSampler", "proc_cpu_seconds", "MONITOR_APPLICATION_NAME"]

MONITOR_APPLICATION_NAME = "rh-bench-monitor"
"""The ``application_name`` of the sampler's own connection."""


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (from /proc/<pid>/stat); ``nan`` when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


class BackendCpuSampler:
    """Samples the CPU time of the backends whose ``application_name`` is ``LIKE pattern``."""

    def __init__(self, url: str, pattern: str) -> None:
        self.url = url.replace("postgresql+asyncpg://", "postgresql://")
        self.pattern = pattern

    async def sample(self) -> Dict[int, float]:
        """``pid -> CPU seconds`` of the matching backends now."""
        import asyncpg

        conn = await asyncpg.connect(self.url, server_settings={"application_name": MONITOR_APPLICATION_NAME})
        try:
            rows = await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 AND pid <> pg_backend_pid()",
                self.pattern,
            )
        finally:
            await conn.close()
        out: Dict[int, float] = {}
        for row in rows:
            cpu = proc_cpu_seconds(int(row["pid"]))
            if cpu == cpu:  # not nan: the backend still exists
                out[int(row["pid"])] = cpu
        return out

    @staticmethod
    def delta(before: Dict[int, float], after: Dict[int, float]) -> float:
        """CPU seconds spent between two samples by the backends alive at the second one (a backend that started in
        between counts from zero; one that ended in between is missed -- pooled connections live for the run)."""
        if not after and not before:
            return float("nan")
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
