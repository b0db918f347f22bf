"""APO: Automatic Prompt Optimization by textual-gradient beam search.

The optimiser talks to any OpenAI-compatible *async* client (``await client.chat.completions.create(model=,
messages=, temperature=)``). Its critique and edit prompts are plain Python renderers
(:mod:`rollouthub.algorithm.apo.prompts`), so POML is not required.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Generic, Iterator, List, Optional, Sequence, Tuple, TypeVar

from rollouthub.store.base import LightningStore
from rollouthub.types import NamedResources, PromptTemplate, RolloutMode

from ..base import Algorithm, Dataset
from ..utils import batch_iter_over_dataset, rollout_wait_step, with_llm_proxy, with_store
from .prompts import CRITIQUE_TEMPLATES, EDIT_TEMPLATES, ChatMessages

if TYPE_CHECKING:  # pragma: no cover
    from rollouthub.llm_proxy import LLMProxy

__all__ = ["APO", "VersionedPromptTemplate", "RolloutResultForAPO"]

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")

RolloutResultForAPO = Dict[str, Any]
"""One evaluated rollout: ``{"status", "final_reward", "spans", "messages"}``."""


@dataclass
class VersionedPromptTemplate:
    """A prompt template with its version string (``"v0"``, ``"v1"``, ...) and its latest score."""

    version: str
    prompt_template: PromptTemplate
    score: Optional[float] = None


class APO(Algorithm, Generic[T_task]):
    """Textual-gradient beam search over one :class:`PromptTemplate` resource (ideas from ProTeGi and TextGrad).

    Args:
        async_openai_client: object exposing ``await client.chat.completions.create(model=, messages=,
            temperature=)`` returning an object with ``.choices[0].message.content``.
        gradient_model: model of the critique calls.
        apply_edit_model: model of the rewrite calls.
        diversity_temperature: temperature of both calls.
        gradient_batch_size: rollout results per critique, and train batch size per parent evaluation.
        val_batch_size: validation batch size for beam selection.
        beam_width: prompts kept after each round (and parents sampled per round).
        branch_factor: children generated per parent.
        beam_rounds: number of rounds.
        rollout_batch_timeout: maximum seconds to wait for a batch of rollouts.
        run_initial_validation: evaluate the seed on the full validation set first.
        _poml_trace: debug switch: dump every rendered optimiser prompt to ``pomltrace/``.
    """

    def __init__(
        self,
        async_openai_client: Any,
        *,
        gradient_model: str = "gpt-5-mini",
        apply_edit_model: str = "gpt-4.1-mini",
        diversity_temperature: float = 1.0,
        gradient_batch_size: int = 4,
        val_batch_size: int = 16,
        beam_width: int = 4,
        branch_factor: int = 4,
        beam_rounds: int = 3,
        rollout_batch_timeout: float = 3600.0,
        run_initial_validation: bool = True,
        _poml_trace: bool = False,
    ) -> None:
        self.async_openai_client = async_openai_client
        self.gradient_model = gradient_model
        self.apply_edit_model = apply_edit_model
        self.diversity_temperature = diversity_temperature
        self.gradient_batch_size = gradient_batch_size
        self.val_batch_size = val_batch_size
        self.beam_width = beam_width
        self.branch_factor = branch_factor
        self.beam_rounds = beam_rounds
        self.rollout_batch_timeout = rollout_batch_timeout
        self.run_initial_validation = run_initial_validation
        self._poml_trace = _poml_trace
        self._poll_interval = 2.0
        self._version_counter = 0
        self.run_id: Optional[str] = None
        """Set by :meth:`run` (``"apo-<6 hex>"``): prefixes the resources ids this run publishes, so a run never
        overwrites the prompts of an earlier one in the same store."""
        self._published: Dict[str, str] = {}
        self._best_prompt: Optional[VersionedPromptTemplate] = None
        self.history: List[Tuple[str, str, float]] = []
        """``(phase, version, score)`` for every scored evaluation, in order (useful for progress displays)."""

    # -- wiring -----------------------------------------------------------------------------------------------------

    def get_adapter(self) -> Any:
        """The adapter, which must be a :class:`~rollouthub.adapter.TraceToMessages` (``ValueError`` otherwise)."""
        adapter = super().get_adapter()
        from rollouthub.adapter import TraceToMessages

        if not isinstance(adapter, TraceToMessages):
            raise ValueError(
                f"APO requires the adapter to be a TraceToMessages, got {type(adapter).__name__}. "
                "Pass adapter=TraceToMessages() to the Trainer."
            )
        return adapter

    def get_seed_prompt_template(self) -> Tuple[str, PromptTemplate]:
        """Return ``(resource_name, template)`` of the first :class:`PromptTemplate` in the initial resources."""
        resources: Optional[NamedResources] = self.get_initial_resources()
        if resources is None:
            raise ValueError("APO requires initial resources containing a PromptTemplate; none were set.")
        for name, resource in resources.items():
            if isinstance(resource, PromptTemplate):
                return name, resource
        raise ValueError("APO requires a PromptTemplate among the initial resources; none was found.")

    def get_best_prompt(self) -> PromptTemplate:
        """The best prompt found so far (``ValueError`` before :meth:`run`)."""
        if self._best_prompt is None:
            raise ValueError("No best prompt yet: call run() first.")
        return self._best_prompt.prompt_template

    def _create_versioned(self, template: PromptTemplate) -> VersionedPromptTemplate:
        version = f"v{self._version_counter}"
        self._version_counter += 1
        return VersionedPromptTemplate(version=version, prompt_template=template)

    # -- LLM calls --------------------------------------------------------------------------------------------------

    def _trace(self, kind: str, messages: ChatMessages) -> None:
        if not self._poml_trace:
            return
        os.makedirs("pomltrace", exist_ok=True)
        path = os.path.join("pomltrace", f"{time.time():.6f}-{kind}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(messages, fh, ensure_ascii=False, indent=2)

    async def _chat(self, model: str, messages: ChatMessages) -> Optional[str]:
        response = await self.async_openai_client.chat.completions.create(
            model=model, messages=messages, temperature=self.diversity_temperature
        )
        return response.choices[0].message.content

    async def compute_textual_gradient(
        self, current_prompt: VersionedPromptTemplate, rollout_results: List[RolloutResultForAPO]
    ) -> Optional[str]:
        """Ask ``gradient_model`` for a critique of the prompt given sampled rollout results."""
        render = random.choice(CRITIQUE_TEMPLATES)
        if len(rollout_results) < self.gradient_batch_size:
            logger.warning(
                "Only %d rollout results available for the critique (gradient_batch_size=%d); using all of them.",
                len(rollout_results),
                self.gradient_batch_size,
            )
            sampled = list(rollout_results)
        else:
            sampled = random.sample(rollout_results, self.gradient_batch_size)
        messages = render(current_prompt.prompt_template.template, sampled)
        self._trace("gradient", messages)
        critique = await self._chat(self.gradient_model, messages)
        logger.info("[APO] Critique for %s: %s", current_prompt.version, (critique or "").strip()[:500])
        return critique

    async def textual_gradient_and_apply_edit(
        self, current_prompt: VersionedPromptTemplate, rollout_results: List[RolloutResultForAPO]
    ) -> Optional[str]:
        """Compute a critique and ask ``apply_edit_model`` to rewrite the template accordingly."""
        critique = await self.compute_textual_gradient(current_prompt, rollout_results)
        if not critique:
            logger.error("[APO] Empty critique for %s; keeping the template unchanged.", current_prompt.version)
            return current_prompt.prompt_template.template
        render = random.choice(EDIT_TEMPLATES)
        messages = render(current_prompt.prompt_template.template, critique)
        self._trace("edit", messages)
        new_text = await self._chat(self.apply_edit_model, messages)
        logger.info("[APO] Edited %s into: %s", current_prompt.version, (new_text or "").strip()[:500])
        return new_text

    # -- evaluation -------------------------------------------------------------------------------------------------

    def _wait_step(self, store: LightningStore) -> float:
        """How long one ``wait_for_rollouts`` call may block: HTTP clients accept at most 0.1 s."""
        return rollout_wait_step(store, self._poll_interval)

    def resources_id_of(self, version: str) -> str:
        """The resources id under which ``version`` is published: ``"<run_id>-<version>"`` (``version`` itself
        before :meth:`run` sets :attr:`run_id`)."""
        return f"{self.run_id}-{version}" if self.run_id else version

    async def _publish(self, store: LightningStore, prompt: VersionedPromptTemplate, resource_name: str) -> str:
        """Add ``prompt`` to the store once (its first evaluation); later evaluations reuse the snapshot.

        Every prompt version is a new resources id of this run, created with version 1 and never updated: rollouts
        keep pointing at the exact prompt they ran with, also after later runs on the same store (the reference
        updated the ids ``v0``, ``v1``, ... in place, so a second run rewrote the history of the first).
        """
        resources_id = self._published.get(prompt.version)
        if resources_id is None:
            resources_id = self.resources_id_of(prompt.version)
            await store.update_resources(resources_id, {resource_name: prompt.prompt_template})
            self._published[prompt.version] = resources_id
        return resources_id

    @with_store
    async def evaluate_prompt_on_batch(
        self,
        store: LightningStore,
        prompt: VersionedPromptTemplate,
        resource_name: str,
        dataset: Sequence[T_task],
        mode: RolloutMode,
    ) -> Tuple[List[RolloutResultForAPO], float]:
        """Run ``prompt`` on every task of ``dataset``; return the finished results and the average reward."""
        from rollouthub.emitter import find_final_reward

        resources_id = await self._publish(store, prompt, resource_name)
        rollout_ids: List[str] = []
        for task in dataset:
            rollout = await store.enqueue_rollout(input=task, mode=mode, resources_id=resources_id)
            rollout_ids.append(rollout.rollout_id)
        deadline = time.monotonic() + self.rollout_batch_timeout
        step = self._wait_step(store)
        finished: Dict[str, Any] = {}
        while True:
            pending = [rid for rid in rollout_ids if rid not in finished]
            remaining = deadline - time.monotonic()
            done = await store.wait_for_rollouts(rollout_ids=pending, timeout=max(0.0, min(step, remaining)))
            for rollout in done:
                finished[rollout.rollout_id] = rollout
            if len(finished) == len(rollout_ids):
                break
            if time.monotonic() >= deadline:
                logger.warning(
                    "[APO] Timed out after %.1fs: %d of %d rollouts of %s unfinished (ignored).",
                    self.rollout_batch_timeout,
                    len(rollout_ids) - len(finished),
                    len(rollout_ids),
                    prompt.version,
                )
                break
            if step <= 0.1:  # HTTP client: the server returned quickly, pace the polling ourselves.
                await asyncio.sleep(min(self._poll_interval, max(0.0, deadline - time.monotonic())))
        adapter = self.get_adapter()
        results: List[RolloutResultForAPO] = []
        total = 0.0
        for rid in rollout_ids:
            finished_rollout = finished.get(rid)
            if finished_rollout is None:
                continue
            spans = list(await store.query_spans(rid))
            reward = find_final_reward(spans)
            total += reward if reward is not None else 0.0
            try:
                messages = adapter.adapt(spans)
            except Exception:
                logger.exception("[APO] The adapter failed on rollout %s.", rid)
                messages = []
            results.append(
                {
                    "status": finished_rollout.status,
                    "final_reward": reward,
                    "spans": [span.model_dump(mode="json") for span in spans],
                    "messages": messages,
                }
            )
        average = total / max(1, len(results))
        logger.info("[APO] %s scored %.4f on %d %s rollouts.", prompt.version, average, len(results), mode)
        return results, average

    # -- main loop --------------------------------------------------------------------------------------------------

    @with_llm_proxy()
    @with_store
    async def run(  # type: ignore[override]
        self,
        store: LightningStore,
        llm_proxy: Optional[LLMProxy],
        train_dataset: Optional[Dataset[T_task]] = None,
        val_dataset: Optional[Dataset[T_task]] = None,
    ) -> None:
        """Beam search: critique and edit parents on train batches, select on validation batches."""
        if train_dataset is None or val_dataset is None:
            raise ValueError("APO requires both a train_dataset and a val_dataset.")
        resource_name, seed_template = self.get_seed_prompt_template()
        self.get_adapter()  # validate early
        grad_iter: Iterator[List[T_task]] = batch_iter_over_dataset(train_dataset, self.gradient_batch_size)
        val_iter: Iterator[List[T_task]] = batch_iter_over_dataset(val_dataset, self.val_batch_size)
        full_val = [val_dataset[i] for i in range(len(val_dataset))]

        self.run_id = f"apo-{uuid.uuid4().hex[:6]}"
        self._published = {}
        seed = self._create_versioned(seed_template)
        self._best_prompt = VersionedPromptTemplate(seed.version, seed.prompt_template, score=-math.inf)
        beam: List[VersionedPromptTemplate] = [seed]

        if self.run_initial_validation:
            _, score = await self.evaluate_prompt_on_batch(seed, resource_name, full_val, "val")
            seed.score = score
            self._best_prompt = VersionedPromptTemplate(seed.version, seed.prompt_template, score=score)
            self.history.append(("initial", seed.version, score))
            logger.info("[APO] Seed prompt %s scores %.4f on the full validation set.", seed.version, score)

        for round_index in range(self.beam_rounds):
            logger.info("[APO] Round %d/%d: beam %s", round_index + 1, self.beam_rounds, [p.version for p in beam])
            if len(beam) < self.beam_width:
                logger.warning(
                    "[APO] Beam has %d prompt(s) (< beam_width=%d); replicating parents cyclically.",
                    len(beam),
                    self.beam_width,
                )
                parents = [beam[i % len(beam)] for i in range(self.beam_width)]
            else:
                parents = random.sample(beam, self.beam_width)

            candidates: List[VersionedPromptTemplate] = []
            for parent in parents:
                for _ in range(self.branch_factor):
                    batch = next(grad_iter)
                    results, _ = await self.evaluate_prompt_on_batch(parent, resource_name, batch, "train")
                    new_text = await self.textual_gradient_and_apply_edit(parent, results)
                    if not new_text:
                        logger.warning("[APO] Empty edit for parent %s; skipping the candidate.", parent.version)
                        continue
                    candidate = self._create_versioned(PromptTemplate(template=new_text, engine="f-string"))
                    candidates.append(candidate)

            pool = beam + candidates
            val_batch = next(val_iter)
            for prompt in pool:
                _, prompt.score = await self.evaluate_prompt_on_batch(prompt, resource_name, val_batch, "val")
                self.history.append(("select", prompt.version, prompt.score))
            pool.sort(key=lambda p: p.score if p.score is not None else -math.inf, reverse=True)
            beam = pool[: self.beam_width]
            if not beam:
                raise ValueError("No beam candidates any more")

            leader = beam[0]
            _, leader_score = await self.evaluate_prompt_on_batch(leader, resource_name, full_val, "val")
            self.history.append(("leader", leader.version, leader_score))
            best_score = self._best_prompt.score if self._best_prompt.score is not None else -math.inf
            if leader_score > best_score:
                logger.info(
                    "[APO] New best prompt %s with score %.4f (previous %.4f).",
                    leader.version,
                    leader_score,
                    best_score,
                )
                self._best_prompt = VersionedPromptTemplate(leader.version, leader.prompt_template, score=leader_score)
            else:
                logger.warning(
                    "[APO] Beam leader %s scores %.4f, not better than the best so far (%.4f).",
                    leader.version,
                    leader_score,
                    best_score,
                )
        logger.info(
            "[APO] Finished. Best prompt %s (score %s): %s",
            self._best_prompt.version,
            self._best_prompt.score,
            self._best_prompt.prompt_template.template,
        )
