"""The reinforcement-learning quickstart: ``python -m rollouthub.quickstart --rl``.

1. starts ``rollouthub store`` on a SQLite file (``./rollouthub-rl.db``) on a free port;
2. builds the demo's tiny model from a config (no download) and trains it with
   :class:`~rollouthub.algorithm.grpo.GRPO` in this process: runner processes run the demo agent (reply with the
   last letter of a word), which calls the policy through the LLM proxy; the local backend serves it with exact
   token ids and log-probs, recorded in the spans the update reads;
3. prints one line per step (reward, eval reward when evaluated, rollouts/s), stops once the held-out eval reward
   reaches ``--target`` (or after ``--max-steps``), then prints the eval reward per policy version, where the
   checkpoints are and the dashboard URL; ``--summary-json PATH`` writes the summary there.

Exit status: 0 when the eval reward reached the target, 2 when the run ended below it, 130 when interrupted, and 1
without the ``[train]`` extra (one line naming it; no torch is imported before that check).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any, Dict, List, Optional

__all__ = ["build_parser", "main", "DEFAULT_DB"]

DEFAULT_DB = "rollouthub-rl.db"


def build_parser(parser: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    """The RL quickstart's options (added to ``parser`` when given)."""
    parser = parser or argparse.ArgumentParser(
        prog="python -m rollouthub.quickstart --rl", description="Train a tiny model with GRPO through the stack."
    )
    parser.add_argument("--db", default=DEFAULT_DB, help=f"SQLite file of the store (default {DEFAULT_DB})")
    parser.add_argument("--fresh", action="store_true", help="delete the database first")
    parser.add_argument("--port", type=int, default=None, help="store server port (default: a free one)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model, the data order and sampling")
    parser.add_argument("--runners", type=int, default=4, help="runner processes (default 4)")
    parser.add_argument("--max-steps", type=int, default=200, help="GRPO steps at most (default 200)")
    parser.add_argument("--target", type=float, default=0.9, help="stop at this held-out eval reward (default 0.9)")
    parser.add_argument("--checkpoint-dir", help="where checkpoints go (default: next to the database)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints (default 10)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of the trainer (default 1)")
    parser.add_argument("--summary-json", help="write the final summary (JSON) here")
    parser.add_argument("--keep-serving", action="store_true", help="keep the store and dashboard up until Ctrl+C")
    return parser


def _step_line(record: Any, started: float) -> str:
    """One progress line per stored step record."""
    elapsed = time.perf_counter() - started
    evaluated = f"eval {record.eval_reward:.2f}" if record.eval_reward is not None else "eval  -  "
    if not record.rollouts:
        return f"step {record.step:3d}  v{record.policy_version:<3d} {evaluated}  (initial policy)  {elapsed:6.1f}s"
    rollouts, seconds = record.rollouts, record.seconds
    rate = rollouts["enqueued"] / seconds["rollouts"] if seconds.get("rollouts") else 0.0
    return (
        f"step {record.step:3d}  v{record.policy_version:<3d} {evaluated}  train reward {rollouts['reward_mean']:.3f}"
        f"  {rate:5.1f} rollouts/s  dropped {rollouts['dropped_rollouts']}  {elapsed:6.1f}s"
    )


def main(argv: Optional[List[str]] = None) -> int:
    """Run the RL quickstart; returns the exit status (1 without the ``[train]`` extra)."""
    args = build_parser().parse_args(argv)
    from rollouthub.utils.extras import MissingExtraError, import_extra

    try:
        torch = import_extra("torch", extra="train", feature="The RL quickstart")
        import_extra("transformers", extra="train", feature="The RL quickstart")
        from rollouthub.rl_demo.stack import build_demo_grpo, run_on_stack
    except MissingExtraError as exc:
        print(f"rollouthub quickstart --rl: {exc}", file=sys.stderr)
        return 1
    from rollouthub.testing.store_process import StoreProcess

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    db_path = os.path.abspath(args.db)
    if args.fresh:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db_path + suffix):
                os.remove(db_path + suffix)
    checkpoint_root = os.path.abspath(args.checkpoint_dir or os.path.splitext(db_path)[0] + "-checkpoints")
    checkpoint_dir = os.path.join(checkpoint_root, f"seed-{args.seed}")
    print(f"rollouthub quickstart --rl: store {db_path}, seed {args.seed}, {args.runners} runners", flush=True)
    started = time.perf_counter()
    with StoreProcess("--backend", f"sqlite:///{db_path}", port=args.port) as store:
        print(f"store server: {store.endpoint}  (dashboard: {store.endpoint}/)", flush=True)
        grpo = build_demo_grpo(
            args.seed,
            max_steps=args.max_steps,
            stop_at=args.target,
            checkpoint_dir=checkpoint_dir,
            resume=args.resume,
            config={"checkpoint_every": args.checkpoint_every},
            on_step=lambda record: print(_step_line(record, started), flush=True),
        )
        try:
            run_on_stack(store.endpoint, grpo, n_runners=args.runners, progress=False)
        except KeyboardInterrupt:
            print("Interrupted.", file=sys.stderr)
            return 130
        summary = grpo.summary
        assert summary is not None
        curve = summary.eval_rewards
        versions = sorted(curve)
        result: Dict[str, Any] = {
            "run_id": summary.run_id,
            "seed": args.seed,
            "initial_eval_reward": curve[versions[0]] if versions else None,
            "final_eval_reward": curve[versions[-1]] if versions else None,
            "steps": summary.steps,
            "policy_versions": summary.policy_version + 1,
            "eval_reward_per_policy_version": {str(version): curve[version] for version in versions},
            "checkpoint_dir": checkpoint_dir,
            "database": db_path,
            "seconds": round(time.perf_counter() - started, 1),
        }
        print()
        print(f"Eval reward per policy version (run {summary.run_id}, held-out words, greedy):")
        print("  " + "  ".join(f"v{version}: {curve[version]:.2f}" for version in versions))
        print(f"{summary.steps} steps, policy versions v0-v{summary.policy_version}, {result['seconds']:.0f} s")
        print(f"Checkpoints: {checkpoint_dir}")
        if args.summary_json:
            with open(args.summary_json, "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=1)
            print(f"Summary: {os.path.abspath(args.summary_json)}")
        if args.keep_serving:
            print(f"Dashboard: {store.endpoint}/  (serving until Ctrl+C)", flush=True)
            try:
                store.process.wait()
            except KeyboardInterrupt:
                pass
        else:
            print(f"Dashboard later: rollouthub store --backend sqlite:///{db_path}  then open http://127.0.0.1:4747/")
    final = result["final_eval_reward"]
    if final is None or final < args.target:
        print(f"The eval reward did not reach {args.target} within {summary.steps} steps.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
