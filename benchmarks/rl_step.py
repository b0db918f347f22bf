"""Where the time of a GRPO step goes on the RL demo through the full stack.

Starts a store server process (SQLite file in a temporary directory), runs the demo's GRPO (the demo settings:
8 inputs x 16 rollouts per step) with N runner processes calling the policy through the LLM proxy, and reports per
step, then as the mean over the measured steps (the first --warmup steps left out):

- the step's wall time split into generation (the local backend generating), waiting (the rest of the rollout
  phase: runners, proxy, store, HTTP), trajectory building (reading spans into token samples), the update, and
  loading the new weights into the backend;
- rollouts/s and generated tokens/s of the rollout phase;
- the CPU seconds of the store server process and of the LLM proxy's server thread (in this process), each as a
  share of the step's wall time (a share above 100 % would mean more than one core busy), and for comparison those
  of this whole process (algorithm, backend and proxy) and of the runner processes.

    python benchmarks/rl_step.py
    python benchmarks/rl_step.py --runners 4 --steps 12 --warmup 2 --json /tmp/rl_step.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(path: str) -> float:
    """User + system CPU seconds from a ``/proc/.../stat`` file (a process or one of its threads)."""
    with open(path, encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def proxy_thread_id() -> Optional[int]:
    """The native id of the thread serving the LLM proxy (the server launcher names it ``rollouthub-server``)."""
    for thread in threading.enumerate():
        if thread.name == "rollouthub-server":
            return thread.native_id
    return None


class CpuProbe:
    """Reads the CPU seconds of the store process and of the proxy thread at the end of each step."""

    def __init__(self, store_pid: int) -> None:
        self.store_stat = f"/proc/{store_pid}/stat"
        self.last: Optional[Dict[str, float]] = None
        self.last_time = time.perf_counter()

    def read(self) -> Dict[str, float]:
        """CPU seconds so far: ``store``, ``proxy`` (0 when the thread is not found), ``trainer`` (this whole
        process, the proxy included) and ``runners`` (the runner processes, children of this one)."""
        import psutil

        tid = proxy_thread_id()
        proxy = cpu_seconds(f"/proc/self/task/{tid}/stat") if tid is not None else 0.0
        runners = 0.0
        for child in psutil.Process().children():
            try:
                times = child.cpu_times()
                runners += times.user + times.system
            except psutil.Error:
                pass
        return {
            "store": cpu_seconds(self.store_stat),
            "proxy": proxy,
            "trainer": cpu_seconds("/proc/self/stat"),
            "runners": runners,
        }

    def delta(self) -> Dict[str, float]:
        """CPU seconds of each part since the previous call (``<part>_cpu``), and the wall seconds between."""
        now, at = self.read(), time.perf_counter()
        previous, self.last, wall = self.last or now, now, at - self.last_time
        self.last_time = at
        return {**{f"{key}_cpu": now[key] - previous[key] for key in now}, "wall": wall}


def main() -> int:
    """Run the measured steps and print the table; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runners", type=int, default=4, help="runner processes (default 4)")
    parser.add_argument("--steps", type=int, default=8, help="steps to run (default 8)")
    parser.add_argument("--warmup", type=int, default=1, help="first steps left out of the means (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of this process (default 1)")
    parser.add_argument("--json", help="write every step's figures here")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must be larger than --warmup")

    from rollouthub.utils.extras import MissingExtraError

    try:
        import torch

        from rollouthub.rl_demo.stack import build_demo_grpo, run_on_stack
    except (ImportError, MissingExtraError) as exc:
        print(f"rl_step: {exc}", file=sys.stderr)
        return 1
    from rollouthub.testing.store_process import StoreProcess

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rl-step-") as directory:
        with StoreProcess("--backend", f"sqlite:///{os.path.join(directory, 'rl.db')}") as store:
            probe = CpuProbe(store.pid)

            def on_step(record: Any) -> None:
                cpu = probe.delta()
                if not record.rollouts:  # the initial evaluation
                    return
                seconds = record.seconds
                row = {
                    "step": record.step,
                    **{key: seconds.get(key, 0.0) for key in ("total", "rollouts", "generation", "waiting")},
                    **{key: seconds.get(key, 0.0) for key in ("trajectories", "update", "weights")},
                    "rollouts_per_s": record.rollouts["enqueued"] / seconds["rollouts"],
                    "tokens_per_s": record.tokens_per_second or 0.0,
                    "store_share": cpu["store_cpu"] / cpu["wall"],
                    "proxy_share": cpu["proxy_cpu"] / cpu["wall"],
                    "trainer_share": cpu["trainer_cpu"] / cpu["wall"],
                    "runners_share": cpu["runners_cpu"] / cpu["wall"],
                }
                rows.append(row)
                print(
                    f"step {row['step']:3d}: {row['total']:.2f}s = rollouts {row['rollouts']:.2f} (generation "
                    f"{row['generation']:.2f}, waiting {row['waiting']:.2f}) + trajectories {row['trajectories']:.2f}"
                    f" + update {row['update']:.2f} + weights {row['weights']:.3f} | {row['rollouts_per_s']:.1f} "
                    f"rollouts/s, {row['tokens_per_s']:.0f} tokens/s | store CPU {row['store_share']:.0%}, proxy "
                    f"CPU {row['proxy_share']:.0%}, trainer process (proxy included) {row['trainer_share']:.0%}, runner "
                    f"processes {row['runners_share']:.0%} of the step",
                    flush=True,
                )

            grpo = build_demo_grpo(args.seed, max_steps=args.steps, eval_every=0, eval_size=1, on_step=on_step)
            run_on_stack(store.endpoint, grpo, n_runners=args.runners)
    measured = rows[args.warmup :]
    means = {key: sum(row[key] for row in measured) / len(measured) for key in measured[0] if key != "step"}
    print(
        f"\nmean of steps {measured[0]['step']}-{measured[-1]['step']} ({args.runners} runners): "
        f"{means['total']:.2f}s per step; generation {means['generation'] / means['total']:.0%}, waiting on runners "
        f"{means['waiting'] / means['total']:.0%}, trajectories {means['trajectories'] / means['total']:.0%}, update "
        f"{means['update'] / means['total']:.0%}, weights {means['weights'] / means['total']:.1%}; "
        f"{means['rollouts_per_s']:.1f} rollouts/s, {means['tokens_per_s']:.0f} tokens/s; store CPU "
        f"{means['store_share']:.0%} and proxy CPU {means['proxy_share']:.0%} of the step's wall time (trainer "
        f"process {means['trainer_share']:.0%}, runner processes {means['runners_share']:.0%})"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"runners": args.runners, "steps": rows, "means": means}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
