"""``GRPO``: the algorithm that trains the agent's own model from its traces, under the ``Trainer`` (``[train]``).

It owns the policy: a :class:`~rollouthub.algorithm.grpo.update.PolicyUpdater` (the trainable model and AdamW), a
copy of the model served by a :class:`~rollouthub.llm_proxy.local_backend.LocalPolicyBackend` behind an
:class:`~rollouthub.llm_proxy.LLMProxy` (its own, in this process, unless the trainer configured one), and the run's
state (step, policy version, rollouts trained on). One step:

1. publish the current policy as the resources version ``<run_id>-v<policy version>`` (a ``ProxyLLM`` named
   ``resource_name`` whose sampling parameters carry the temperature); a new policy version is a new resources id;
2. enqueue ``group_size`` rollouts of each of ``inputs_per_step`` training inputs (drawn by a generator seeded with
   the config's seed and the step number: a resumed run draws what the crashed one would have);
3. wait for them on the store's wake-ups (``rollout_timeout``), read their spans into token samples
   (:mod:`rollouthub.adapter.trajectory`) and apply the counted drop rule of :mod:`.rollouts`;
4. update the policy (:meth:`PolicyUpdater.update`), then hold the backend's calls, load the new weights, release:
   the backend's policy version goes up by one;
5. every ``eval_every`` steps (and before the first), run one validation rollout (mode ``val``) per validation
   input with the new version: its mean reward is the version's eval reward;
6. store the step's metrics as a record rollout (:mod:`.metrics`), and a checkpoint every ``checkpoint_every``
   steps (:mod:`.checkpoint`).

Agents read the sampling temperature from the ``llm`` resource and must use temperature 0 for ``val`` rollouts
(``rollouthub.rl_demo.agent`` does).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from rollouthub.utils.extras import import_extra

import_extra("torch", extra="train", feature="GRPO")
import torch  # noqa: E402  (after the one-line message naming the extra when torch is missing)

from rollouthub.store.base import LightningStore  # noqa: E402
from rollouthub.types import ProxyLLM  # noqa: E402

from ..base import Algorithm, Dataset  # noqa: E402
from .checkpoint import TrainingState, resume, save_checkpoint  # noqa: E402
from .config import GRPOConfig  # noqa: E402
from .metrics import StepRecord, write_step_record  # noqa: E402
from .rollouts import collect_batch, enqueue_groups, final_rewards, wait_for_all  # noqa: E402
from .update import PolicyUpdater  # noqa: E402

__all__ = ["GRPO", "RunSummary"]

logger = logging.getLogger(__name__)

PROXY_CALLBACKS = ["return_token_ids", "logprobs", "opentelemetry"]
"""What the proxy adds to every call: token ids and log-probs in the answer, and the spans in the store."""


@dataclass
class RunSummary:
    """What a finished (or stopped) run did; :attr:`GRPO.summary` after :meth:`GRPO.run`."""

    run_id: str
    steps: int
    policy_version: int
    eval_rewards: Dict[int, float]
    """Eval reward per policy version, in version order."""
    checkpoint_dir: Optional[str]
    resumed_from: Optional[int]
    """The step of the checkpoint this run resumed from (``None``: a fresh run)."""
    seconds: float


class GRPO(Algorithm):
    """Train the served model with GRPO on the rollouts of the agent (see the module docstring).

    Args:
        model: a causal LM (``transformers``), or the path of a local Hugging Face checkpoint (loaded with
            ``local_files_only``; the tokenizer comes from the same path then).
        tokenizer: its tokenizer, with a chat template (``None`` with a path).
        config: the update's options (:class:`GRPOConfig`; ``checkpoint_every`` and ``device`` included).
        inputs_per_step: training inputs per step (each run ``config.group_size`` times).
        max_steps: updates to do in total (a resumed run counts those before the checkpoint).
        eval_every: validation every this many steps (0: only before the first and after the last step).
        eval_size: validation inputs per evaluation (``None``: the whole validation dataset).
        checkpoint_dir: where checkpoints go (required when ``config.checkpoint_every`` > 0 or ``resume``).
        resume: continue from the newest complete checkpoint in ``checkpoint_dir`` (a fresh run when none).
        stop_at: stop after an evaluation whose reward is at least this.
        rollout_timeout: seconds a step waits for its rollouts; the unfinished ones are cancelled and dropped.
        min_group_size: finished rollouts a group needs to stay in the batch (>= 2: a baseline needs two).
        resource_name: the name of the ``ProxyLLM`` resource agents receive.
        model_name: the model name agents ask the proxy for.
        run_id: prefix of the resources ids (``grpo-<6 hex>`` by default; a resume keeps the checkpoint's).
        backend_options: keyword arguments of :class:`LocalPolicyBackend` (e.g. ``max_batch_size``).
        proxy_port: port of the algorithm's own LLM proxy (``None``: a free one).
        on_step: called with each :class:`StepRecord` as it is stored (progress display).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        config: Optional[GRPOConfig] = None,
        *,
        inputs_per_step: int = 8,
        max_steps: int = 100,
        eval_every: int = 10,
        eval_size: Optional[int] = None,
        checkpoint_dir: Optional[str] = None,
        resume: bool = False,
        stop_at: Optional[float] = None,
        rollout_timeout: float = 600.0,
        min_group_size: int = 2,
        resource_name: str = "main_llm",
        model_name: str = "policy",
        run_id: Optional[str] = None,
        backend_options: Optional[Dict[str, Any]] = None,
        proxy_port: Optional[int] = None,
        on_step: Optional[Callable[[StepRecord], None]] = None,
    ) -> None:
        """Check the options and load the model; nothing is served or trained before :meth:`run`."""
        self.config = config if config is not None else GRPOConfig()
        for name, value, minimum in (
            ("inputs_per_step", inputs_per_step, 1),
            ("max_steps", max_steps, 0),
            ("eval_every", eval_every, 0),
            ("min_group_size", min_group_size, 2),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"GRPO: {name} must be an integer >= {minimum}, got {value!r}")
        if eval_size is not None and (not isinstance(eval_size, int) or eval_size < 1):
            raise ValueError(f"GRPO: eval_size must be an integer >= 1 or None, got {eval_size!r}")
        if not isinstance(rollout_timeout, (int, float)) or not rollout_timeout > 0:
            raise ValueError(f"GRPO: rollout_timeout must be a number > 0, got {rollout_timeout!r}")
        if (self.config.checkpoint_every or resume) and not checkpoint_dir:
            raise ValueError("GRPO: checkpoint_dir is required with config.checkpoint_every > 0 or resume=True")
        if isinstance(model, str):
            model, tokenizer = _load_pretrained(model, tokenizer)
        if tokenizer is None:
            raise ValueError("GRPO: a tokenizer is required with a model object")
        self.model = model
        self.tokenizer = tokenizer
        self.inputs_per_step = inputs_per_step
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.eval_size = eval_size
        self.checkpoint_dir = checkpoint_dir
        self.resume = resume
        self.stop_at = stop_at
        self.rollout_timeout = float(rollout_timeout)
        self.min_group_size = min_group_size
        self.resource_name = resource_name
        self.model_name = model_name
        self.run_id = run_id or f"grpo-{uuid.uuid4().hex[:6]}"
        self.backend_options = dict(backend_options or {})
        self.proxy_port = proxy_port
        self.on_step = on_step
        self.session = uuid.uuid4().hex[:8]
        """Identifies this process's records (a resumed run has a new one)."""
        self.updater: Optional[PolicyUpdater] = None
        self.backend: Any = None
        self.step = 0
        self.policy_version = 0
        self.eval_rewards: Dict[int, float] = {}
        self.trained_rollout_ids: List[str] = []
        self._trained: Set[str] = set()
        self.records: List[StepRecord] = []
        self.summary: Optional[RunSummary] = None
        self._resumed_from: Optional[int] = None
        self._restart_proxy = False

    # ------------------------------------------------------------------ naming

    def resources_id_of(self, policy_version: int) -> str:
        """The resources id of a policy version: ``<run_id>-v<version>``."""
        return f"{self.run_id}-v{policy_version}"

    def tasks_of_step(self, dataset: Dataset[Any], step: int) -> List[Any]:
        """The training inputs of ``step``: drawn without replacement (with, when the dataset is smaller) by a
        generator seeded with the config's seed and the step, so a resumed run draws the same ones."""
        picker = random.Random(self.config.seed * 1_000_003 + step)
        size = len(dataset)
        if size >= self.inputs_per_step:
            indices = picker.sample(range(size), self.inputs_per_step)
        else:
            indices = [picker.randrange(size) for _ in range(self.inputs_per_step)]
        return [dataset[index] for index in indices]

    # ------------------------------------------------------------------ run

    async def run(  # type: ignore[override]
        self, train_dataset: Optional[Dataset[Any]] = None, val_dataset: Optional[Dataset[Any]] = None
    ) -> None:
        """Train for ``max_steps`` steps (see the module docstring); the summary is in :attr:`summary`."""
        if train_dataset is None or len(train_dataset) == 0:
            raise ValueError("GRPO needs a non-empty train_dataset")
        store = self.get_store()
        started = time.perf_counter()
        self._prepare()
        proxy, own_proxy = self._proxy(store)
        if self._restart_proxy:
            await proxy.restart()
        elif not proxy.is_running():
            await proxy.start()
        try:
            if self._resumed_from is not None:
                await self._cancel_leftovers(store)
            await self._publish(store, proxy)
            if val_dataset is not None and len(val_dataset) and self.policy_version not in self.eval_rewards:
                record = self._record()
                await self._evaluate(store, val_dataset, record)
                await self._store_record(store, record)
            while self.step < self.max_steps and not self._reached_target():
                await self._train_step(store, proxy, train_dataset, val_dataset)
        finally:
            if own_proxy and proxy.is_running():
                await proxy.stop()
            if self.backend is not None:
                self.backend.close()
        self.summary = RunSummary(
            run_id=self.run_id,
            steps=self.step,
            policy_version=self.policy_version,
            eval_rewards=dict(sorted(self.eval_rewards.items())),
            checkpoint_dir=self.checkpoint_dir,
            resumed_from=self._resumed_from,
            seconds=time.perf_counter() - started,
        )

    async def _cancel_leftovers(self, store: LightningStore) -> None:
        """Cancel the rollouts of this run that the interrupted process left unfinished: they were never trained on,
        and the proxy they would call is gone."""
        unfinished = await store.query_rollouts(status_in=["queuing", "requeuing", "preparing", "running"])
        left = [r.rollout_id for r in unfinished.items if (r.metadata or {}).get("grpo_run") == self.run_id]
        for rollout_id in left:
            try:
                await store.update_rollout(rollout_id, status="cancelled")
            except Exception as exc:  # it may have finished meanwhile; either way it is not trained on
                logger.debug("Could not cancel rollout %s: %s", rollout_id, exc)
        if left:
            logger.info("GRPO %s: cancelled %d rollouts the interrupted run left unfinished", self.run_id, len(left))

    def _reached_target(self) -> bool:
        latest = self.eval_rewards.get(self.policy_version)
        return self.stop_at is not None and latest is not None and latest >= self.stop_at

    def _prepare(self) -> None:
        """Build the updater, resume from a checkpoint when asked, and the backend serving a copy of the policy."""
        from rollouthub.llm_proxy.local_backend import LocalPolicyBackend

        self.updater = PolicyUpdater(self.model, self.config)
        if self.resume:
            assert self.checkpoint_dir is not None
            state = resume(self.checkpoint_dir, self.updater)
            if state is not None:
                self.step, self.policy_version = state.step, state.policy_version
                self.trained_rollout_ids = list(state.trained_rollout_ids)
                self._trained = set(self.trained_rollout_ids)
                self.run_id = str(state.extra.get("run_id", self.run_id))
                self.eval_rewards = {int(k): float(v) for k, v in (state.extra.get("eval_rewards") or {}).items()}
                self._resumed_from = state.step
                logger.info(
                    "GRPO %s resumed at step %d (policy version %d)", self.run_id, self.step, self.policy_version
                )
        served = copy.deepcopy(self.updater.model).eval().requires_grad_(False)
        options = {"max_batch_size": 256, "max_tokens": 256, "seed": self.config.seed, **self.backend_options}
        self.backend = LocalPolicyBackend(served, self.tokenizer, policy_version=self.policy_version, **options)

    def _proxy(self, store: LightningStore) -> Any:
        """The trainer's LLM proxy with the backend added, or a proxy of our own (returns it and whether it is ours)."""
        from rollouthub.llm_proxy import LLMProxy

        entry: Any = {"model_name": self.model_name, "litellm_params": {"model": f"local/{self.model_name}"}}
        proxy = self.get_llm_proxy()
        if proxy is not None:
            proxy.set_local_backend(self.model_name, self.backend)
            proxy.set_store(store)
            if self.model_name not in [item.get("model_name") for item in proxy.model_list]:
                proxy.update_model_list([*proxy.model_list, entry])  # applied at the (re)start in run()
                self._restart_proxy = proxy.is_running()
            return proxy, False
        from rollouthub.utils.server_launcher import PythonServerLauncherArgs, pick_free_port

        launcher = PythonServerLauncherArgs(
            port=self.proxy_port or pick_free_port(),
            host="127.0.0.1",
            launch_mode="thread",
            healthcheck_url="/health",
            log_level=logging.WARNING,  # the server's start and stop lines stay out of the trainer's output
        )
        proxy = LLMProxy(
            launcher_args=launcher,
            model_list=[entry],
            store=store,
            callbacks=PROXY_CALLBACKS,
            local_backends={self.model_name: self.backend},
        )
        return proxy, True

    async def _publish(self, store: LightningStore, proxy: Any) -> str:
        """Publish the current policy version as a new resources id (the ProxyLLM with the temperature)."""
        resource = ProxyLLM(
            endpoint=proxy.endpoint,
            model=self.model_name,
            sampling_parameters={"temperature": self.config.temperature},
            api_key=proxy.as_resource(model=self.model_name).api_key,
        )
        resources_id = self.resources_id_of(self.policy_version)
        await store.update_resources(resources_id, {self.resource_name: resource})
        return resources_id

    def _record(self) -> StepRecord:
        return StepRecord(
            run_id=self.run_id,
            step=self.step,
            policy_version=self.policy_version,
            session=self.session,
            resources_id=self.resources_id_of(self.policy_version),
        )

    async def _store_record(self, store: LightningStore, record: StepRecord) -> None:
        await write_step_record(store, record)
        self.records.append(record)
        if self.on_step is not None:
            self.on_step(record)

    async def _train_step(
        self, store: LightningStore, proxy: Any, train_dataset: Dataset[Any], val_dataset: Optional[Dataset[Any]]
    ) -> None:
        assert self.updater is not None
        step = self.step + 1
        seconds: Dict[str, float] = {}
        began = time.perf_counter()
        before = self.backend.stats()
        groups = await enqueue_groups(
            store,
            self.tasks_of_step(train_dataset, step),
            self.config.group_size,
            mode="train",
            resources_id=self.resources_id_of(self.policy_version),
            group_prefix=f"{self.run_id}-s{step}",
            metadata={"grpo_run": self.run_id, "grpo_step": step},
        )
        finished = await wait_for_all(store, groups.all_ids, self.rollout_timeout)
        after = self.backend.stats()
        seconds["rollouts"] = time.perf_counter() - began
        seconds["generation"] = after.generation_seconds - before.generation_seconds
        seconds["waiting"] = max(seconds["rollouts"] - seconds["generation"], 0.0)
        mark = time.perf_counter()
        batch = await collect_batch(store, groups, finished, min_group_size=self.min_group_size, trained=self._trained)
        seconds["trajectories"] = time.perf_counter() - mark
        update: Dict[str, Any] = {}
        mark = time.perf_counter()
        if batch.samples:
            metrics = await asyncio.to_thread(self.updater.update, batch.samples)
            update = metrics.as_dict()
            self.trained_rollout_ids.extend(metrics.rollout_ids)
            self._trained.update(metrics.rollout_ids)
        else:
            self.updater.step += 1  # nothing to learn from: the step counts, the weights stay
            logger.warning("GRPO step %d: no group had %d usable rollouts; no update", step, self.min_group_size)
        seconds["update"] = time.perf_counter() - mark
        mark = time.perf_counter()
        state = {key: value.detach() for key, value in self.updater.model.state_dict().items()}
        async with self.backend.weight_update(timeout=self.rollout_timeout):
            self.backend.load_state_dict(state)
        self.step, self.policy_version = step, self.backend.policy_version
        await self._publish(store, proxy)
        seconds["weights"] = time.perf_counter() - mark
        generated = after.generated_tokens - before.generated_tokens
        record = self._record()
        record.update = update
        record.rollouts = {
            "enqueued": batch.enqueued,
            "finished": batch.finished,
            "trained": len(batch.rewards) - batch.dropped["small_group"],
            "dropped_rollouts": batch.dropped_rollouts,
            "dropped": dict(batch.dropped),
            "mismatches": batch.mismatches,
            "generated_tokens": generated,
            "reward_mean": _mean(list(batch.rewards.values())),
            "reward_std": _std(list(batch.rewards.values())),
        }
        groups_seen = update.get("groups") or 0
        record.uniform_group_share = update.get("uniform_groups", 0) / groups_seen if groups_seen else None
        record.tokens_per_second = generated / seconds["rollouts"] if seconds["rollouts"] > 0 else None
        due = self.eval_every and step % self.eval_every == 0
        if val_dataset is not None and len(val_dataset) and (due or step == self.max_steps):
            mark = time.perf_counter()
            await self._evaluate(store, val_dataset, record)
            seconds["eval"] = time.perf_counter() - mark
        if self.config.checkpoint_every and (step % self.config.checkpoint_every == 0 or step == self.max_steps):
            mark = time.perf_counter()
            await asyncio.to_thread(self._save_checkpoint)
            seconds["checkpoint"] = time.perf_counter() - mark
        seconds["total"] = time.perf_counter() - began
        record.seconds = seconds
        await self._store_record(store, record)

    async def _evaluate(self, store: LightningStore, val_dataset: Dataset[Any], record: StepRecord) -> None:
        """One ``val`` rollout per validation input with the current version; the mean reward (failed or
        unrewarded rollouts count 0) becomes the version's eval reward."""
        size = len(val_dataset) if self.eval_size is None else min(self.eval_size, len(val_dataset))
        groups = await enqueue_groups(
            store,
            [val_dataset[index] for index in range(size)],
            1,
            mode="val",
            resources_id=self.resources_id_of(self.policy_version),
            group_prefix=f"{self.run_id}-eval{self.policy_version}",
            metadata={"grpo_run": self.run_id, "grpo_step": self.step},
        )
        finished = await wait_for_all(store, groups.all_ids, self.rollout_timeout)
        rewards = await final_rewards(store, groups.all_ids, finished)
        reward = _mean(rewards)
        self.eval_rewards[self.policy_version] = reward
        record.eval_reward = reward
        record.eval_rollouts = len(rewards)
        logger.info("GRPO %s: eval reward of policy version %d: %.3f", self.run_id, self.policy_version, reward)

    def _save_checkpoint(self) -> None:
        assert self.updater is not None and self.checkpoint_dir is not None
        state = TrainingState(
            step=self.step,
            policy_version=self.policy_version,
            trained_rollout_ids=list(self.trained_rollout_ids),
            extra={"run_id": self.run_id, "eval_rewards": {str(k): v for k, v in self.eval_rewards.items()}},
        )
        save_checkpoint(self.checkpoint_dir, self.updater, state)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _std(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    mean = _mean(values)
    return math.sqrt(sum((value - mean) ** 2 for value in values) / len(values))


def _load_pretrained(path: str, tokenizer: Any) -> Any:
    """Model and tokenizer from a local Hugging Face checkpoint (no download)."""
    transformers = import_extra("transformers", extra="train", feature="GRPO")
    model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True, torch_dtype=torch.float32)
    if tokenizer is None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer
