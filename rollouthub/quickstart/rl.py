"""The quickstart's RL mode (``--rl``): a tiny model built from a config learns the demo task with GRPO.

Runner processes run the demo agent (reply with the last letter of a word), which calls the policy through the LLM
proxy; the local backend serves it in this process with exact token ids and log-probs; GRPO trains on the spans
(:mod:`rollouthub.rl_demo`). One line per step; at the end the eval reward per policy version and where the
checkpoints are. The run stops at the first evaluation reaching ``--target``; ending below it fails the run.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Dict

from rollouthub.cli.arguments import positive_int
from rollouthub.quickstart.session import Outcome, QuickstartError, Session

__all__ = ["add_arguments", "check", "preload", "run", "step_line"]


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser, env_endpoint: str) -> None:
    """The flags of the RL mode."""
    group = parser.add_argument_group("RL mode (--rl)")
    group.add_argument(
        "--rl",
        dest="mode",
        action="store_const",
        const="rl",
        help="Train the agent's own model with GRPO instead of optimising a prompt: a tiny model built locally "
        "learns to answer with the last letter of a word (needs the [train] extra: torch, transformers).",
    )
    group.add_argument("--seed", type=int, default=0, help="RL: seed of the model, the data and sampling (default 0).")
    group.add_argument("--max-steps", type=positive_int, default=200, help="RL: GRPO steps at most (default 200).")
    group.add_argument(
        "--target", type=_fraction, default=0.9, help="RL: stop at this held-out eval reward (default 0.9)."
    )
    group.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="PATH",
        help="RL: where checkpoints go (default: ./rollouthub-rl-checkpoints/seed-<seed>).",
    )
    group.add_argument(
        "--checkpoint-every", type=positive_int, default=10, help="RL: steps between checkpoints (default 10)."
    )
    group.add_argument("--resume", action="store_true", help="RL: continue from the newest checkpoint.")
    group.add_argument(
        "--threads", type=positive_int, default=1, help="RL: torch CPU threads of the trainer (default 1)."
    )


def check(args: argparse.Namespace) -> str:
    """Before any work starts: the training stack is installed (one line naming the extra otherwise); returns the
    checkpoint directory."""
    from rollouthub.utils.extras import MissingExtraError, import_extra

    try:
        import_extra("torch", extra="train", feature="The RL quickstart")
        import_extra("transformers", extra="train", feature="The RL quickstart")
    except MissingExtraError as exc:
        raise QuickstartError(str(exc)) from None
    return os.path.abspath(args.checkpoint_dir or os.path.join("rollouthub-rl-checkpoints", f"seed-{args.seed}"))


def preload() -> None:
    """Import the training stack (called while the store server starts)."""
    import rollouthub.rl_demo.stack  # noqa: F401


def step_line(record: Any, elapsed: float) -> str:
    """One progress line per step record."""
    evaluated = f"eval {record.eval_reward:.2f}" if record.eval_reward is not None else "eval  -  "
    if not record.rollouts:
        return f"step {record.step:3d}  v{record.policy_version:<3d} {evaluated}  (initial policy)  {elapsed:6.1f}s"
    rollouts, seconds = record.rollouts, record.seconds
    rate = rollouts["enqueued"] / seconds["rollouts"] if seconds.get("rollouts") else 0.0
    return (
        f"step {record.step:3d}  v{record.policy_version:<3d} {evaluated}  train reward {rollouts['reward_mean']:.3f}"
        f"  {rate:5.1f} rollouts/s  dropped {rollouts['dropped_rollouts']}  {elapsed:6.1f}s"
    )


def run(session: Session, checkpoint_dir: str) -> Outcome:
    """Train the demo model with GRPO through the stack; prints the eval reward per policy version.

    Raises:
        KeyboardInterrupt: Ctrl+C or SIGTERM (the Trainer has stopped the runners and cancelled the run's rollouts).
    """
    import torch

    from rollouthub.rl_demo.stack import build_demo_grpo, run_on_stack

    args, console = session.args, session.console
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    def show(record: Any) -> None:
        console.print(step_line(record, time.perf_counter() - started), markup=False, highlight=False)

    grpo = build_demo_grpo(
        args.seed,
        max_steps=args.max_steps,
        stop_at=args.target,
        checkpoint_dir=checkpoint_dir,
        resume=args.resume,
        config={"checkpoint_every": args.checkpoint_every},
        on_step=show,
    )
    console.print(f"GRPO run {grpo.run_id}: seed {args.seed}, {args.runners} runners, target {args.target}")
    run_on_stack(session.store_url, grpo, n_runners=args.runners, progress=False)
    elapsed = time.perf_counter() - started
    summary = grpo.summary
    assert summary is not None
    curve = summary.eval_rewards
    versions = sorted(curve)
    final = curve[versions[-1]] if versions else None
    result: Dict[str, Any] = {
        "run_id": summary.run_id,
        "seed": args.seed,
        "initial_eval_reward": curve[versions[0]] if versions else None,
        "final_eval_reward": final,
        "target": args.target,
        "steps": summary.steps,
        "policy_versions": summary.policy_version + 1,
        "eval_reward_per_policy_version": {str(version): curve[version] for version in versions},
        "checkpoint_dir": checkpoint_dir,
        "seconds": round(elapsed, 1),
    }
    console.print()
    console.print(
        f"[bold green]Eval reward per policy version[/bold green] (held-out words, greedy; run {summary.run_id}):"
    )
    console.print("  " + "  ".join(f"v{version}: {curve[version]:.2f}" for version in versions))
    console.print(f"Checkpoints: {checkpoint_dir}", markup=False, highlight=False)
    failure = None
    if final is None or final < args.target:
        failure = f"the eval reward did not reach {args.target} within {summary.steps} steps"
    rollouts = sum(record.rollouts.get("enqueued", 0) + record.eval_rollouts for record in grpo.records)
    return Outcome(elapsed=elapsed, rollouts_this_run=rollouts, summary=result, failure=failure)
