"""GRPO through the full stack: a store server process, runner processes calling the policy through the LLM proxy,
the local backend, and the algorithm under the Trainer -- exactness, metrics storage, learning, crash and resume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

from rollouthub.testing.store_process import StoreProcess
from tests.train_stack import TRAIN_ONLY

from .stack_run import REPLY_TOKENS, several_tokens_agent, small_run

pytestmark = TRAIN_ONLY

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[StoreProcess]:
    with StoreProcess("--backend", f"sqlite:///{tmp_path / 'rl.db'}") as server:
        yield server


def query(store_url: str, call: Callable[[Any], Any]) -> Any:
    """Run ``await call(client)`` against the store server with a fresh client."""
    from rollouthub.store.client import LightningStoreClient

    async def go() -> Any:
        client = LightningStoreClient(store_url)
        try:
            return await call(client)
        finally:
            await client.close()

    return asyncio.run(go())


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Check ``condition`` every 50 ms until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(300)
def test_served_logprobs_are_recomputed_exactly_and_the_first_ratio_is_one(store: StoreProcess) -> None:
    """The samples the algorithm read from the spans: the initial policy recomputes their serving log-probs (mean
    |delta| < 1e-4, float32), and the update's first (on-policy) mini-batch has ratio 1 and no clipping."""
    import torch

    from rollouthub.adapter.trajectory import build_trajectories
    from rollouthub.algorithm.grpo import read_step_records
    from rollouthub.algorithm.grpo.loss import pack_batch, token_logprobs
    from rollouthub.rl_demo import DEMO_SETTINGS
    from rollouthub.testing.tiny_lm import build_tiny_lm

    grpo = small_run(store.endpoint, max_steps=1, agent=several_tokens_agent, eval_every=0, eval_size=4)
    records = query(store.endpoint, lambda client: read_step_records(client, grpo.run_id))
    assert [record.step for record in records] == [0, 1]
    update = records[1].update
    assert update["trained_samples"] > 0, "every group was uniform: the exactness check saw no update"
    assert abs(update["first_ratio_mean"] - 1) < 1e-5 and update["first_clip_fraction"] == 0

    async def samples(client: Any) -> List[Any]:
        found = []
        for rollout in (await client.query_rollouts(status_in=["succeeded"])).items:
            if rollout.mode == "train" and rollout.resources_id == f"{grpo.run_id}-v0":
                spans = list(await client.query_spans(rollout.rollout_id, "latest"))
                found += build_trajectories(spans, rollout=rollout).samples
        return found

    trained = query(store.endpoint, samples)
    assert len(trained) == 2 * 4 and all(sample.policy_version == 0 for sample in trained)
    assert max(len(sample.response_ids) for sample in trained) > 1
    torch.manual_seed(0)
    initial, _ = build_tiny_lm(seed=0, **DEMO_SETTINGS.model_sizes())
    batch = pack_batch(
        [s.prompt_ids for s in trained],
        [s.response_ids for s in trained],
        [s.response_mask for s in trained],
        pad_token_id=0,
    )
    with torch.no_grad():
        recomputed = token_logprobs(initial.eval(), batch, DEMO_SETTINGS.temperature)[0]
    deltas = [
        abs(float(recomputed[row, column]) - served)
        for row, sample in enumerate(trained)
        for column, served in enumerate(sample.response_logprobs or [])
    ]
    assert len(deltas) == sum(len(sample.response_ids) for sample in trained) <= 8 * (REPLY_TOKENS + 1)
    assert sum(deltas) / len(deltas) < 1e-4, max(deltas)


@pytest.mark.timeout(300)
def test_step_records_round_trip_and_stay_out_of_the_training_data(store: StoreProcess) -> None:
    """Each step's metrics come back from the store as written; the record rollouts have no reward, mode or
    resources, and give no trajectory rows."""
    from rollouthub.algorithm.grpo import read_step_records
    from rollouthub.algorithm.grpo.metrics import STEP_RECORD_KEY
    from rollouthub.export import export

    grpo = small_run(store.endpoint, max_steps=2, eval_every=1, eval_size=6)
    stored = query(store.endpoint, lambda client: read_step_records(client, grpo.run_id))
    assert [record.as_dict() for record in stored] == [record.as_dict() for record in grpo.records]
    assert [(r.step, r.policy_version, r.eval_rollouts) for r in stored] == [(0, 0, 6), (1, 1, 6), (2, 2, 6)]
    assert grpo.summary.eval_rewards == {0: stored[0].eval_reward, 1: stored[1].eval_reward, 2: stored[2].eval_reward}
    last = stored[-1]
    assert last.rollouts["enqueued"] == 8 and last.rollouts["dropped_rollouts"] == sum(
        last.rollouts["dropped"].values()
    )
    assert {"rollouts", "generation", "waiting", "trajectories", "update", "weights", "eval", "total"} <= set(
        last.seconds
    )
    assert last.update["rollouts"] + last.rollouts["dropped_rollouts"] - last.rollouts["dropped"][
        "small_group"
    ] == 8 or (not last.update)
    rows_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"rewards-{grpo.run_id}.jsonl"
    export("rewards", str(rows_path), store_url=store.endpoint)
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    rows_path.unlink()
    records = [row for row in rows if row["mode"] is None]
    assert len(records) == 3 and all(row["reward"] is None for row in records)
    # the store gives a rollout started without resources the latest version: the one the record's step published
    assert [row["resources_id"] for row in records] == [record.resources_id for record in stored]
    modes = Counter(row["mode"] for row in rows)
    assert modes["train"] == 16 and modes["val"] == 18
    metadata = query(store.endpoint, lambda client: client.query_rollouts(status_in=["succeeded"]))
    assert sum(STEP_RECORD_KEY in (r.metadata or {}) for r in metadata.items) == 3


@pytest.mark.timeout(300)
def test_the_trainers_llm_proxy_serves_the_policy_when_there_is_one(store: StoreProcess) -> None:
    from rollouthub.llm_proxy import LLMProxy

    proxy = LLMProxy(
        host="127.0.0.1", launch_mode="thread", callbacks=["return_token_ids", "logprobs", "opentelemetry"]
    )
    grpo = small_run(store.endpoint, max_steps=1, eval_every=0, eval_size=4, llm_proxy=proxy)
    assert [entry["model_name"] for entry in proxy.model_list] == ["policy"] and proxy.local_backends["policy"]
    assert (
        grpo.summary.policy_version == 1
        and grpo.records[-1].rollouts["trained"] + grpo.records[-1].rollouts["dropped_rollouts"] == 8
    )
    resources = query(store.endpoint, lambda client: client.get_resources_by_id(f"{grpo.run_id}-v1"))
    assert resources.resources["llm"].endpoint == proxy.endpoint


@pytest.mark.timeout(420)
def test_a_short_run_raises_the_eval_reward(store: StoreProcess) -> None:
    """The demo through the stack, shortened to 20 steps. In every measured curve (docs/rl.md: 10 seeds without the
    stack, 3 through it) the initial eval reward is 0.00 and the reward at step 20 is at least 0.05 higher: the greedy
    policy has learnt the letter of some inputs. Each step's first mini-batch is on-policy (ratio 1)."""
    grpo = small_run(
        store.endpoint, max_steps=20, inputs_per_step=8, group_size=16, n_runners=4, eval_every=20, eval_size=100
    )
    curve = grpo.summary.eval_rewards
    assert sorted(curve) == [0, 20]
    assert curve[20] >= curve[0] + 0.05, curve
    updates = [record.update for record in grpo.records if record.update]
    assert updates and all(abs(update["first_ratio_mean"] - 1) < 1e-5 for update in updates)


@pytest.mark.timeout(420)
def test_a_trainer_killed_mid_run_resumes_at_the_next_step_without_training_a_rollout_twice(
    store: StoreProcess, tmp_path: Path
) -> None:
    from rollouthub.algorithm.grpo import latest_checkpoint, read_step_records

    checkpoints = tmp_path / "checkpoints"
    command = [sys.executable, "-m", "tests.algorithm.grpo.stack_run", "--store", store.endpoint]
    command += ["--checkpoint-dir", str(checkpoints), "--max-steps", "6", "--checkpoint-every", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = open(tmp_path / "first.log", "wb")
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: latest_checkpoint(checkpoints) is not None or first.poll() is not None, 240, "a checkpoint")
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the trainer and its runner processes, mid-run
        first.wait(30)
        log.close()
    saved = latest_checkpoint(checkpoints)
    assert saved is not None
    saved_state = json.loads((saved / "state.json").read_text())
    killed_at = saved_state["step"]
    assert killed_at < 6

    second = subprocess.run(command + ["--resume"], cwd=REPO, env=env, capture_output=True, timeout=300)
    assert second.returncode == 0, second.stdout.decode()[-3000:] + second.stderr.decode()[-3000:]
    summary = json.loads(second.stdout.decode().strip().splitlines()[-1])
    assert summary["resumed_from"] == killed_at and summary["steps"] == 6 and summary["policy_version"] == 6
    run_id = saved_state["extra"]["run_id"]
    assert summary["run_id"] == run_id

    records = query(store.endpoint, lambda client: read_step_records(client, run_id))
    steps_done = [record for record in records if record.session == summary["session"] and record.rollouts]
    resumed = [record.step for record in steps_done]  # (an evaluation-only record has no rollouts)
    assert resumed == list(range(killed_at + 1, 7))  # continued at the next step, up to the last
    assert [record.policy_version for record in steps_done] == resumed

    final = latest_checkpoint(checkpoints)
    assert final is not None
    state = json.loads((final / "state.json").read_text())
    assert state["step"] == 6 and state["policy_version"] == 6
    trained: List[str] = state["trained_rollout_ids"]
    assert len(trained) == len(set(trained))  # no rollout trained on twice
    assert trained[: len(saved_state["trained_rollout_ids"])] == saved_state["trained_rollout_ids"]

    async def rollouts(client: Any) -> Dict[str, Any]:
        return {r.rollout_id: r for r in (await client.query_rollouts(rollout_id_in=trained)).items}

    by_id = query(store.endpoint, rollouts)
    assert set(by_id) == set(trained)
    steps = Counter(by_id[rid].metadata["grpo_step"] for rid in trained)
    assert set(steps) <= set(range(1, 7)) and all(count <= 8 for count in steps.values())
    for rid in trained:  # step s trained on rollouts served by policy version s - 1
        rollout = by_id[rid]
        assert rollout.status == "succeeded" and rollout.mode == "train"
        assert rollout.resources_id == f"{run_id}-v{rollout.metadata['grpo_step'] - 1}"
