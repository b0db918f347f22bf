"""``system_snapshot()``: a cheap host telemetry sample used as worker heartbeat payload."""

from __future__ import annotations

import datetime
import platform
import socket
from typing import Any, Dict, List

__all__ = ["system_snapshot"]

_GIB = 1024**3
_MIB = 1024**2


def _cpu_name() -> str:
    name = platform.processor()
    if name:
        return name
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown"


def _gpus() -> List[Dict[str, Any]]:
    try:
        import gpustat  # type: ignore[import-not-found]

        stats = gpustat.new_query()
        return [
            {
                "gpu": gpu.name,
                "util_pct": gpu.utilization,
                "mem_used_mb": gpu.memory_used,
                "mem_total_mb": gpu.memory_total,
                "temp_c": gpu.temperature,
            }
            for gpu in stats.gpus
        ]
    except Exception:  # noqa: BLE001 - gpustat missing or no GPU: report nothing
        return []


def system_snapshot(include_gpu: bool = False) -> Dict[str, Any]:
    """Return host, CPU, memory, disk and network figures (and GPUs when ``include_gpu``); never blocks on CPU."""
    import psutil

    vm = psutil.virtual_memory()
    try:
        disk = psutil.disk_usage("/")
        disk_used, disk_total, disk_pct = disk.used / _GIB, disk.total / _GIB, disk.percent
    except OSError:
        disk_used = disk_total = disk_pct = 0.0
    net = psutil.net_io_counters()
    snapshot: Dict[str, Any] = {
        "timestamp": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu_name": _cpu_name(),
        "cpu_cores": psutil.cpu_count(logical=False),
        "cpu_threads": psutil.cpu_count(logical=True),
        "cpu_usage_pct": psutil.cpu_percent(interval=None),
        "mem_used_gb": round(vm.used / _GIB, 2),
        "mem_total_gb": round(vm.total / _GIB, 2),
        "mem_pct": vm.percent,
        "disk_used_gb": round(disk_used, 2),
        "disk_total_gb": round(disk_total, 2),
        "disk_pct": disk_pct,
        "bytes_sent_mb": round((net.bytes_sent if net else 0) / _MIB, 2),
        "bytes_recv_mb": round((net.bytes_recv if net else 0) / _MIB, 2),
    }
    if include_gpu:
        snapshot["gpus"] = _gpus()
    return snapshot
