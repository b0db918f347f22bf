"""The quickstart's APO mode: the LLM it calls (the built-in mock or a real endpoint), the APO algorithm, the
Trainer with its runner processes, and the best prompt it found."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Optional, Tuple

from rollouthub.cli.arguments import positive_int
from rollouthub.quickstart.endpoint import EndpointError, check_llm_endpoint
from rollouthub.quickstart.progress import ProgressView
from rollouthub.quickstart.sentiment import (
    AGENT_MODEL_ENV,
    MOCK_AGENT_MODEL,
    MOCK_CRITIC_MODEL,
    MOCK_EDITOR_MODEL,
    SEED_TEMPLATE,
    TRAIN_TASKS,
    VAL_TASKS,
    make_agent,
    mock_llm_reply,
)
from rollouthub.quickstart.session import Outcome, QuickstartError, Session

__all__ = ["add_arguments", "check", "expected_rollouts", "run"]

DEFAULT_MODEL = "gpt-4.1-mini"
BEAM_WIDTH, BRANCH_FACTOR, GRADIENT_BATCH, VAL_BATCH = 2, 2, 4, 6


def add_arguments(parser: argparse.ArgumentParser, env_endpoint: str) -> None:
    """The flags of the APO mode."""
    parser.add_argument("--rounds", type=positive_int, default=3, help="APO beam-search rounds (default: 3).")
    parser.add_argument(
        "--llm-endpoint",
        nargs="?",
        const=env_endpoint,
        default=None,
        metavar="URL",
        help="Use a real OpenAI-compatible endpoint instead of the built-in mock: URL, or $OPENAI_BASE_URL when no "
        "URL is given (key: $OPENAI_API_KEY). Checked before the run starts.",
    )
    parser.add_argument("--model", default=None, help=f"Model for a real endpoint (default: {DEFAULT_MODEL}).")


def check(args: argparse.Namespace) -> Optional[Tuple[str, str]]:
    """Checks before any work starts: the ``(base URL, API key)`` of ``--llm-endpoint`` (``None`` for the mock)."""
    if args.llm_endpoint is None:
        return None
    try:
        return check_llm_endpoint(args.llm_endpoint, model=args.model or DEFAULT_MODEL)
    except EndpointError as exc:
        raise QuickstartError(str(exc)) from None


def expected_rollouts(beam_width: int, branch_factor: int, rounds: int, grad_batch: int, val_batch: int) -> int:
    """Rollouts APO runs: the seed on the full validation set, then per round the parents' train batches, one
    validation batch per prompt of the pool (the beam -- only the seed in the first round -- plus the candidates) and
    the leader on the full validation set."""
    total = len(VAL_TASKS)
    for round_index in range(rounds):
        pool = (1 if round_index == 0 else beam_width) + beam_width * branch_factor
        total += beam_width * branch_factor * grad_batch + pool * val_batch + len(VAL_TASKS)
    return total


def _use_llm(session: Session, endpoint: Optional[Tuple[str, str]]) -> Tuple[str, str]:
    """Point the environment (inherited by the runner processes) at the LLM; returns the critic and editor models."""
    # OPENAI_BASE_URL/OPENAI_API_KEY say which LLM the runners call (an OPENAI_BASE_URL the user had exported is only
    # used with --llm-endpoint); restored when the run ends.
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        session.stack.callback(_restore_env, name, os.environ.get(name))
    if endpoint is None:
        from rollouthub.testing import MockOpenAIServer

        llm = session.stack.enter_context(MockOpenAIServer(reply=mock_llm_reply))
        os.environ["OPENAI_BASE_URL"] = llm.base_url
        os.environ["OPENAI_API_KEY"] = "dummy"  # never send a real key to the mock
        os.environ[AGENT_MODEL_ENV] = MOCK_AGENT_MODEL
        session.console.print(f"LLM: built-in mock at {llm.base_url} (--llm-endpoint uses a real endpoint)")
        return MOCK_CRITIC_MODEL, MOCK_EDITOR_MODEL
    os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = endpoint
    model = session.args.model or DEFAULT_MODEL
    os.environ[AGENT_MODEL_ENV] = model
    session.console.print(f"LLM: {endpoint[0]} (model {model})")
    return model, model


def _apo_table(apo: Any) -> Any:
    """The progress view's table: APO's latest evaluations and the best prompt so far."""
    from rich.table import Table

    table = Table(title="APO evaluations (latest first)", expand=False)
    table.add_column("phase")
    table.add_column("prompt")
    table.add_column("score", justify="right")
    for phase, version, score in list(apo.history)[-8:][::-1]:
        table.add_row(phase, version, f"{score:.3f}")
    best = getattr(apo, "_best_prompt", None)
    caption = "best so far: (pending)"
    if best is not None and best.score is not None and best.score > float("-inf"):
        caption = f"best so far: {best.version} = {best.score:.3f}"
    table.caption = caption
    return table


def run(session: Session, endpoint: Optional[Tuple[str, str]]) -> Outcome:
    """Train the sentiment prompt with APO; prints the best prompt.

    Raises:
        QuickstartError: the run ended without evaluating the seed prompt.
        KeyboardInterrupt: Ctrl+C or SIGTERM (the Trainer has stopped the runners and cancelled the run's rollouts).
    """
    from openai import AsyncOpenAI

    from rollouthub.adapter import TraceToMessages
    from rollouthub.algorithm.apo import APO
    from rollouthub.store.client import LightningStoreClient
    from rollouthub.trainer import Trainer
    from rollouthub.types import PromptTemplate

    args, console = session.args, session.console
    critic, editor = _use_llm(session, endpoint)
    apo: APO[Any] = APO(
        AsyncOpenAI(),
        gradient_model=critic,
        apply_edit_model=editor,
        gradient_batch_size=GRADIENT_BATCH,
        val_batch_size=VAL_BATCH,
        beam_width=BEAM_WIDTH,
        branch_factor=BRANCH_FACTOR,
        beam_rounds=args.rounds,
        rollout_batch_timeout=600.0,
    )
    apo._poll_interval = 0.1
    trainer = Trainer(
        algorithm=apo,
        n_runners=args.runners,
        store=LightningStoreClient(session.store_url),
        strategy={"type": "cs", "managed_store": False, "n_runners": args.runners},
        adapter=TraceToMessages(),
        # Runners long-poll the server (woken as soon as a rollout is queued), so the default poll interval of
        # 5 s costs no latency; the heartbeat keeps the dashboard's runner view fresh.
        runner={"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 2.0},
        initial_resources={"prompt_template": PromptTemplate(template=SEED_TEMPLATE, engine="f-string")},
    )
    expected = expected_rollouts(BEAM_WIDTH, BRANCH_FACTOR, args.rounds, GRADIENT_BATCH, VAL_BATCH)
    view = ProgressView(session.store_url, expected, console, table=lambda: _apo_table(apo))
    view.start()
    start = time.time()
    try:
        trainer.fit(make_agent(), train_dataset=TRAIN_TASKS, val_dataset=VAL_TASKS)
    finally:
        view.stop()
    elapsed = time.time() - start

    if apo._best_prompt is None or not apo.history:
        raise QuickstartError(f"the run ended before the seed prompt was evaluated (log: {session.log_path})")
    best = apo.get_best_prompt()
    console.print()
    console.print(
        f"[bold green]Best prompt[/bold green] (score {apo._best_prompt.score:.3f}, seed {apo.history[0][2]:.3f}):"
    )
    console.print(f"  {best.template}", markup=False, highlight=False)
    summary = {
        "best_prompt": best.template,
        "best_prompt_version": apo._best_prompt.version,
        "best_score": apo._best_prompt.score,
        "seed_score": apo.history[0][2],
        "rounds": args.rounds,
        "seconds": round(elapsed, 1),
    }
    return Outcome(elapsed=elapsed, rollouts_this_run=view.finished, summary=summary)


def _restore_env(name: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def preload() -> None:
    """Import the training stack (called while the store server starts, to overlap the two)."""
    import rollouthub.adapter  # noqa: F401
    import rollouthub.algorithm.apo  # noqa: F401
    import rollouthub.trainer  # noqa: F401
