"""Learning curves of the RL demo with GRPO alone: no store, proxy or runners (the algorithm's own speed).

For each seed: a fresh tiny model (rollouthub.testing.tiny_lm, the demo's sizes), trained on the demo task
(rollouthub.rl_demo.task: reply with the last letter of a word) by sampling from the model directly and applying
the GRPO update, with the held-out eval reward (greedy) every eval_every steps. Prints each evaluation as it
happens (step, training rollouts so far, seconds, reward), then per seed the first evaluation reaching
--threshold and the final reward; --json PATH writes every curve and per-step metric. Exit status 1 when a
seed did not reach the threshold.

    python benchmarks/grpo_learning.py --seeds 0 1 2
    python benchmarks/grpo_learning.py --seeds 0 1 2 3 4 --max-steps 200 --json /tmp/curves.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, fields, replace
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from rollouthub.rl_demo.settings import DEMO_SETTINGS  # noqa: E402


def parse_overrides(items: List[str], parser: argparse.ArgumentParser) -> Dict[str, Any]:
    """``FIELD=VALUE`` strings as typed values of :class:`DemoSettings` fields (a parser error names a bad one)."""
    kinds = {item.name: type(getattr(DEMO_SETTINGS, item.name)) for item in fields(DEMO_SETTINGS)}
    values: Dict[str, Any] = {}
    for item in items:
        name, _, text = item.partition("=")
        if name not in kinds or not text:
            parser.error(f"--set {item!r}: expected FIELD=VALUE with FIELD one of {', '.join(kinds)}")
        try:
            values[name] = kinds[name](text)
        except ValueError:
            parser.error(f"--set {item!r}: {text!r} is not a valid {kinds[name].__name__}")
    return values


def main() -> int:
    """Run the seeds, print the curves; exit status 1 when a seed missed the threshold."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds to run (default 0 1 2)")
    parser.add_argument("--max-steps", type=int, default=200, help="updates per seed at most (default 200)")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="time limit per seed (default 600)")
    parser.add_argument("--threshold", type=float, default=0.9, help="eval reward to reach (default 0.9)")
    parser.add_argument("--stop-at-threshold", action="store_true", help="stop a seed at its first eval >= threshold")
    parser.add_argument("--eval-every", type=int, default=DEMO_SETTINGS.eval_every, help="steps between evals")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", help="write the curves and per-step metrics here")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field of rollouthub.rl_demo.settings.DemoSettings (repeatable), e.g. --set group_size=8",
    )
    args = parser.parse_args()

    import torch

    from rollouthub.rl_demo.direct import EvalPoint, run_direct

    if args.threads:
        torch.set_num_threads(args.threads)
    settings = replace(DEMO_SETTINGS, eval_every=args.eval_every, **parse_overrides(args.set, parser))
    print(f"settings: {json.dumps(asdict(settings))}; torch threads: {torch.get_num_threads()}", flush=True)
    runs = []
    for seed in args.seeds:

        def show(point: EvalPoint, seed: int = seed) -> None:
            print(
                f"seed {seed} step {point.step:4d} rollouts {point.rollouts:6d} "
                f"{point.seconds:7.1f} s eval reward {point.reward:.2f}",
                flush=True,
            )

        started = time.perf_counter()
        run = run_direct(
            seed,
            settings,
            max_steps=args.max_steps,
            max_seconds=args.max_seconds,
            stop_at=args.threshold if args.stop_at_threshold else None,
            on_eval=show,
        )
        runs.append((run, time.perf_counter() - started))

    heading = f"first >= {args.threshold:.2f} (step, rollouts, s)"
    print(f"\n{'seed':>4} {'initial':>7} {heading:>36} {'final':>6}")
    missed = 0
    for run, _ in runs:
        first = run.first_reaching(args.threshold)
        reached = f"{first.step}, {first.rollouts}, {first.seconds:.1f}" if first else "never"
        missed += first is None
        print(f"{run.seed:>4} {run.curve[0].reward:>7.2f} {reached:>36} {run.curve[-1].reward:>6.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "settings": asdict(settings),
                    "threshold": args.threshold,
                    "runs": [
                        {
                            "seed": run.seed,
                            "seconds": seconds,
                            "curve": [asdict(p) for p in run.curve],
                            "steps": run.steps,
                        }
                        for run, seconds in runs
                    ],
                },
                handle,
            )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
