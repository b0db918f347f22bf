"""The main job: an end-to-end prompt-optimisation run, offline, on the embedded default store (a SQLite file).

``python -m rollouthub.quickstart``:

1. starts ``rollouthub store`` on ``./rollouthub-quickstart.db`` (SQLite) on a free port;
2. starts the built-in mock OpenAI-compatible LLM (:mod:`rollouthub.testing`) -- or, with ``--llm-endpoint``, uses
   a real OpenAI-compatible endpoint (``OPENAI_BASE_URL`` when no URL is given; ``OPENAI_API_KEY``), checked first;
3. trains with a :class:`~rollouthub.trainer.Trainer`: several runner processes execute a small sentiment agent while
   :class:`~rollouthub.algorithm.apo.APO` improves the agent's prompt by textual-gradient beam search;
4. shows live progress, then prints the best prompt, the dashboard URL and where the data is, and exits 0.

The mock LLM behaves like a model that only answers well when the prompt asks for it: a one-word answer format,
attention to sarcasm, and a rule for mixed reviews. Its "optimiser" answers critique requests with a missing
instruction (one of those the template still lacks) and edit requests by adding it, so APO climbs from about 0.25 to
1.0 in three rounds.

Running it again **reuses** the database: earlier rollouts, spans, workers and prompt resources stay and the new run
is appended (its prompts are new resources ``apo-<run>-v0``, ``apo-<run>-v1``, ...). ``--fresh`` deletes the
file (and its ``-wal``/``-shm`` companions) first. ``--keep-serving`` keeps the store (and its dashboard) running
after training until Ctrl+C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["main", "REVIEWS", "SEED_TEMPLATE", "mock_llm_reply", "make_agent", "score_answer"]

logger = logging.getLogger("rollouthub.quickstart")

DEFAULT_DB = "rollouthub-quickstart.db"
SEED_TEMPLATE = "Classify the sentiment of this review: {review}"
AGENT_MODEL_ENV = "ROLLOUTHUB_QUICKSTART_MODEL"
MOCK_AGENT_MODEL = "mock-sentiment"
MOCK_CRITIC_MODEL = "mock-critic"
MOCK_EDITOR_MODEL = "mock-editor"


@dataclass(frozen=True)
class Hint:
    """An instruction the mock model needs to see in the prompt to handle one kind of review."""

    key: str
    sentence: str


HINTS = (
    Hint("one lowercase word", "Answer with one lowercase word: positive, negative or neutral."),
    Hint("sarcasm", "Watch for sarcasm: praise followed by a complaint is negative."),
    Hint("both praise and criticism", "Reviews with both praise and criticism are neutral."),
)

# (review, label, kind): kind "plain", "sarcastic" or "mixed".
REVIEWS: List[Tuple[str, str, str]] = [
    ("The battery lasts all week and the screen is gorgeous.", "positive", "plain"),
    ("Broke after two days and support never answered.", "negative", "plain"),
    ("Oh great, another update that deletes my settings. Just wonderful.", "negative", "sarcastic"),
    ("The food was tasty but the service was painfully slow.", "neutral", "mixed"),
    ("Absolutely love it, best purchase this year.", "positive", "plain"),
    ("Terrible fit and the fabric feels cheap.", "negative", "plain"),
    ("Wow, a charger that stops working in a month. Truly impressive engineering.", "negative", "sarcastic"),
    ("Great camera, although the app crashes every other day.", "neutral", "mixed"),
    ("Setup took five minutes and everything just works.", "positive", "plain"),
    ("Loud, slow and overpriced.", "negative", "plain"),
    ("Fantastic, the delivery only took three months.", "negative", "sarcastic"),
    ("Comfortable seats, but the legroom is tiny.", "neutral", "mixed"),
    ("My kids play with it every single day.", "positive", "plain"),
    ("The manual is useless and half the parts were missing.", "negative", "plain"),
    ("Brilliant, it crashed right before I saved my work.", "negative", "sarcastic"),
    ("Nice design, yet the sound quality is only average.", "neutral", "mixed"),
    ("Five stars, would buy again.", "positive", "plain"),
    ("It smells like burnt plastic when it runs.", "negative", "plain"),
]
TRAIN_TASKS = [{"review": r, "label": label} for r, label, _ in REVIEWS[:10]]
VAL_TASKS = [{"review": r, "label": label} for r, label, _ in REVIEWS[10:]]
_KIND = {r: (label, kind) for r, label, kind in REVIEWS}


# ---------------------------------------------------------------------------------------------------------------------
# The mock LLM: an agent model, a critic and an editor
# ---------------------------------------------------------------------------------------------------------------------


def _text_of(request: Dict[str, Any]) -> str:
    parts = []
    for message in request.get("messages") or []:
        content = message.get("content")
        parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


def _template_in(text: str) -> Optional[str]:
    for start_tag, end_tag in (("<template>\n", "\n</template>"), ("<prompt>\n", "\n</prompt>")):
        start = text.find(start_tag)
        if start >= 0:
            start += len(start_tag)
            end = text.find(end_tag, start)
            return text[start:end] if end >= 0 else None
    return None


def _mock_agent(prompt: str) -> str:
    review = next((r for r in _KIND if r in prompt), None)
    if review is None:
        return "I am not sure what to classify."
    label, kind = _KIND[review]
    lowered = prompt.lower()
    if kind == "sarcastic" and "sarcasm" not in lowered:
        label = "positive"
    elif kind == "mixed" and "both praise and criticism" not in lowered:
        label = "positive"
    if "one lowercase word" in lowered:
        return label
    return f"The sentiment of this review is {label}."


def _mock_critic(text: str) -> str:
    template = _template_in(text) or ""
    missing = [h for h in HINTS if h.key not in template.lower()]
    if not missing:
        return "- The template already covers the answer format, sarcasm and mixed reviews; keep it as it is."
    hint = missing[zlib.crc32(text.encode()) % len(missing)]
    return f'- Several runs lost reward. Add this instruction to the template: "{hint.sentence}"'


def _mock_editor(text: str) -> str:
    template = _template_in(text)
    if template is None:
        return ""
    match = re.search(r'"([^"{}]+)"', text[text.find("</template>") + 1 :] if "</template>" in text else text)
    if match is None or match.group(1) in template:
        return template
    return f"{template.rstrip()} {match.group(1)}"


def mock_llm_reply(request: Dict[str, Any]) -> str:
    """Deterministic replies of the quickstart's mock LLM, dispatched on the model name."""
    text = _text_of(request)
    model = request.get("model")
    if model == MOCK_CRITIC_MODEL:
        return _mock_critic(text)
    if model == MOCK_EDITOR_MODEL:
        return _mock_editor(text)
    return _mock_agent(text)


# ---------------------------------------------------------------------------------------------------------------------
# The agent
# ---------------------------------------------------------------------------------------------------------------------


def score_answer(answer: str, label: str) -> float:
    """1.0 for exactly the label, 0.5 when the label appears in a longer answer, else 0.0."""
    normalized = answer.strip().lower().rstrip(".!")
    if normalized == label:
        return 1.0
    return 0.5 if label in re.findall(r"[a-z]+", normalized) else 0.0


def make_agent() -> Any:
    """Build the ``@rollout`` sentiment agent (imports the OpenAI client lazily)."""
    from openai import AsyncOpenAI

    from rollouthub.litagent import rollout
    from rollouthub.types import PromptTemplate

    clients: Dict[Tuple[int, int], AsyncOpenAI] = {}

    def client_for_this_loop() -> AsyncOpenAI:
        # Creating a client costs ~0.1 s (TLS context); reuse one per process and event loop.
        key = (os.getpid(), id(asyncio.get_running_loop()))
        if key not in clients:
            clients[key] = AsyncOpenAI()
        return clients[key]

    @rollout
    async def sentiment_agent(task: Dict[str, str], prompt_template: PromptTemplate) -> float:
        """Ask the LLM for the sentiment of ``task["review"]``; reward the answer against ``task["label"]``."""
        client = client_for_this_loop()
        model = os.environ.get(AGENT_MODEL_ENV, MOCK_AGENT_MODEL)
        response = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt_template.format(review=task["review"])}],
            temperature=0.0,
            # The mock, like vLLM, returns the token ids when asked: the spans keep them for `rollouthub export
            # trajectories`. Real endpoints such as api.openai.com reject the parameter.
            extra_body={"return_token_ids": True} if model == MOCK_AGENT_MODEL else None,
        )
        return score_answer(response.choices[0].message.content or "", task["label"])

    return sentiment_agent


# ---------------------------------------------------------------------------------------------------------------------
# Store server process and progress display
# ---------------------------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch_store(db_path: str, port: int, log_path: str) -> subprocess.Popen[bytes]:
    """Start ``rollouthub store`` on the SQLite file (returns immediately; see :func:`_wait_for_store`)."""
    with open(log_path, "ab") as log:
        cmd = [sys.executable, "-m", "rollouthub.cli", "store", "--backend", f"sqlite:///{db_path}"]
        cmd += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "WARNING"]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def _wait_for_store(process: subprocess.Popen[bytes], port: int, log_path: str) -> subprocess.Popen[bytes]:
    """Block until the store answers its health check (``RuntimeError`` if it exits or takes over 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"`rollouthub store` exited with code {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/agl/health", timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError("`rollouthub store` did not become healthy within 60 s")


def _stop_store(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


class ProgressView(threading.Thread):
    """A rich live view of finished rollouts and APO's evaluations, refreshed from the store and the algorithm."""

    def __init__(self, store_url: str, apo: Any, expected_rollouts: int, console: Any) -> None:
        super().__init__(name="quickstart-progress", daemon=True)
        self.store_url = store_url
        self.apo = apo
        self.expected = expected_rollouts
        self.console = console
        self.finished = 0
        self._baseline: Optional[int] = None
        self._stop_evt = threading.Event()

    async def _count_finished(self, client: Any) -> int:
        page = await client.query_rollouts(status_in=["succeeded", "failed", "cancelled"], limit=1)
        return int(page.total)

    def _refresh(self, loop: asyncio.AbstractEventLoop, client: Any) -> None:
        try:
            total = loop.run_until_complete(self._count_finished(client))
            if self._baseline is None:
                self._baseline = total
            self.finished = total - self._baseline
        except Exception:  # the view must never break the run
            logger.debug("Progress refresh failed", exc_info=True)

    def _render(self, progress: Any, task_id: Any) -> Any:
        from rich.console import Group
        from rich.table import Table

        progress.update(task_id, completed=min(self.finished, self.expected), total=max(self.expected, self.finished))
        table = Table(title="APO evaluations (latest first)", expand=False)
        table.add_column("phase")
        table.add_column("prompt")
        table.add_column("score", justify="right")
        for phase, version, score in list(self.apo.history)[-8:][::-1]:
            table.add_row(phase, version, f"{score:.3f}")
        best = getattr(self.apo, "_best_prompt", None)
        caption = "best so far: (pending)"
        if best is not None and best.score is not None and best.score > float("-inf"):
            caption = f"best so far: {best.version} = {best.score:.3f}"
        table.caption = caption
        return Group(progress, table)

    def run(self) -> None:
        """Refresh the view twice a second until stopped."""
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from rollouthub.store.client import LightningStoreClient

        progress = Progress(
            TextColumn("[bold]rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=self.console
        )
        task_id = progress.add_task("rollouts", total=self.expected)
        loop = asyncio.new_event_loop()
        client = LightningStoreClient(self.store_url, retry_delays=(), health_retry_delays=())
        try:
            with Live(self._render(progress, task_id), console=self.console, refresh_per_second=4) as live:
                while True:
                    self._refresh(loop, client)
                    live.update(self._render(progress, task_id))
                    if self._stop_evt.wait(0.5):
                        break
                # The run is over: count once more and end the bar complete (the estimate only guides the bar
                # while running; APO may skip candidates).
                self._refresh(loop, client)
                self.expected = self.finished
                live.update(self._render(progress, task_id))
        finally:
            loop.run_until_complete(client.close())
            loop.close()

    def stop(self) -> None:
        """Stop refreshing and wait for the final render."""
        self._stop_evt.set()
        self.join(10)


# ---------------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------------


def _expected_rollouts(beam_width: int, branch_factor: int, rounds: int, grad_batch: int, val_batch: int) -> int:
    """Rollouts APO runs: the seed on the full validation set, then per round the parents' train batches, one
    validation batch per prompt of the pool (the beam -- only the seed in the first round -- plus the candidates) and
    the leader on the full validation set."""
    total = len(VAL_TASKS)
    for round_index in range(rounds):
        pool = (1 if round_index == 0 else beam_width) + beam_width * branch_factor
        total += beam_width * branch_factor * grad_batch + pool * val_batch + len(VAL_TASKS)
    return total


def _configure_logging(log_path: str) -> None:
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    file_handler = logging.FileHandler(log_path, encoding="utf-8")
    file_handler.setFormatter(
        logging.Formatter("%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s", "%H:%M:%S")
    )
    root.addHandler(file_handler)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.ERROR)
    root.addHandler(console)
    for noisy in ("httpx", "httpx2", "openai", "uvicorn", "uvicorn.access", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


ENV_ENDPOINT = "$OPENAI_BASE_URL"


class EndpointError(RuntimeError):
    """The requested LLM endpoint is unusable; the message is one line."""


def check_llm_endpoint(requested: str, timeout: float = 10.0) -> Tuple[str, str]:
    """Resolve ``--llm-endpoint`` and check it answers before any work starts: ``(base URL, API key)``.

    ``GET <base>/models`` with the key: no answer, or 401/403, is an :class:`EndpointError`; any other HTTP answer
    (some servers have no ``/models``) counts as reachable.
    """
    base = os.environ.get("OPENAI_BASE_URL", "") if requested == ENV_ENDPOINT else requested
    if not base:
        raise EndpointError("--llm-endpoint without a URL needs OPENAI_BASE_URL to be set")
    if not base.startswith(("http://", "https://")):
        raise EndpointError(f"--llm-endpoint {base!r} is not an http(s) URL")
    key = os.environ.get("OPENAI_API_KEY", "")
    if not key:
        raise EndpointError(f"the LLM endpoint {base} needs an API key: set OPENAI_API_KEY")
    request = urllib.request.Request(base.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise EndpointError(f"the LLM endpoint {base} rejected OPENAI_API_KEY (HTTP {exc.code})") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise EndpointError(f"cannot reach the LLM endpoint {base}: {reason}") from None
    return base, key


def build_parser() -> argparse.ArgumentParser:
    """Command-line flags of the quickstart."""
    from rollouthub.cli import plain_text

    parser = argparse.ArgumentParser(
        prog="python -m rollouthub.quickstart",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", default=DEFAULT_DB, help=f"SQLite file of the store (default: ./{DEFAULT_DB}).")
    parser.add_argument("--fresh", action="store_true", help="Delete the database file first instead of reusing it.")
    parser.add_argument("--port", type=int, default=None, help="Store server port (default: a free port).")
    parser.add_argument("--runners", type=int, default=4, help="Runner processes (default: 4).")
    parser.add_argument("--rounds", type=int, default=3, help="APO beam-search rounds (default: 3).")
    parser.add_argument(
        "--llm-endpoint",
        nargs="?",
        const=ENV_ENDPOINT,
        default=None,
        metavar="URL",
        help="Use a real OpenAI-compatible endpoint instead of the built-in mock: URL, or $OPENAI_BASE_URL when no "
        "URL is given (key: $OPENAI_API_KEY). Checked before the run starts.",
    )
    parser.add_argument("--model", default=None, help="Model for a real endpoint (default: gpt-4.1-mini).")
    parser.add_argument("--keep-serving", action="store_true", help="Keep the store and dashboard up until Ctrl+C.")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the quickstart; returns the process exit code."""
    args = build_parser().parse_args(argv)
    from rich.console import Console

    console = Console(soft_wrap=True)  # never break paths and URLs
    db_path = os.path.abspath(args.db)
    log_path = os.path.splitext(db_path)[0] + ".log"
    if args.fresh:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db_path + suffix):
                os.remove(db_path + suffix)
        if os.path.exists(log_path):
            os.remove(log_path)
    endpoint: Optional[Tuple[str, str]] = None
    if args.llm_endpoint is not None:
        try:
            endpoint = check_llm_endpoint(args.llm_endpoint)
        except EndpointError as exc:
            print(f"rollouthub quickstart: error: {exc}", file=sys.stderr)
            return 1
    reused = os.path.exists(db_path)
    _configure_logging(log_path)
    port = args.port or _free_port()
    store_url = f"http://127.0.0.1:{port}"

    with ExitStack() as stack:
        console.print(f"[bold]rollouthub quickstart[/bold]: {'reusing' if reused else 'creating'} {db_path}")
        store_process = _launch_store(db_path, port, log_path)  # starts while we import the training stack
        stack.callback(_stop_store, store_process)
        from openai import AsyncOpenAI

        from rollouthub.adapter import TraceToMessages
        from rollouthub.algorithm.apo import APO
        from rollouthub.store.client import LightningStoreClient
        from rollouthub.trainer import Trainer
        from rollouthub.types import PromptTemplate

        _wait_for_store(store_process, port, log_path)
        console.print(f"store server: {store_url}  (dashboard: {store_url}/)")
        # The runner processes inherit the environment: OPENAI_BASE_URL/OPENAI_API_KEY say which LLM they call (an
        # OPENAI_BASE_URL the user had exported is only used with --llm-endpoint); restored when the run ends.
        for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
            previous = os.environ.get(name)
            stack.callback(_restore_env, name, previous)
        if endpoint is None:
            from rollouthub.testing import MockOpenAIServer

            llm = stack.enter_context(MockOpenAIServer(reply=mock_llm_reply))
            os.environ["OPENAI_BASE_URL"] = llm.base_url
            os.environ["OPENAI_API_KEY"] = "dummy"  # never send a real key to the mock
            os.environ[AGENT_MODEL_ENV] = MOCK_AGENT_MODEL
            critic, editor = MOCK_CRITIC_MODEL, MOCK_EDITOR_MODEL
            console.print(f"LLM: built-in mock at {llm.base_url} (--llm-endpoint uses a real endpoint)")
        else:
            os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"] = endpoint
            model = args.model or "gpt-4.1-mini"
            os.environ[AGENT_MODEL_ENV] = model
            critic = editor = model
            console.print(f"LLM: {endpoint[0]} (model {model})")

        beam_width, branch_factor, grad_batch, val_batch = 2, 2, 4, 6
        apo: APO[Any] = APO(
            AsyncOpenAI(),
            gradient_model=critic,
            apply_edit_model=editor,
            gradient_batch_size=grad_batch,
            val_batch_size=val_batch,
            beam_width=beam_width,
            branch_factor=branch_factor,
            beam_rounds=args.rounds,
            rollout_batch_timeout=600.0,
        )
        apo._poll_interval = 0.1
        trainer = Trainer(
            algorithm=apo,
            n_runners=args.runners,
            store=LightningStoreClient(store_url),
            strategy={"type": "cs", "managed_store": False, "n_runners": args.runners},
            adapter=TraceToMessages(),
            # Runners long-poll the server (woken as soon as a rollout is queued), so the default poll interval of
            # 5 s costs no latency; the heartbeat keeps the dashboard's runner view fresh.
            runner={"type": "rollouthub.runner.LitAgentRunner", "heartbeat_interval": 2.0},
            initial_resources={"prompt_template": PromptTemplate(template=SEED_TEMPLATE, engine="f-string")},
        )
        expected = _expected_rollouts(beam_width, branch_factor, args.rounds, grad_batch, val_batch)
        view = ProgressView(store_url, apo, expected, console)
        view.start()
        start = time.time()
        try:
            trainer.fit(make_agent(), train_dataset=TRAIN_TASKS, val_dataset=VAL_TASKS)
        finally:
            view.stop()
        elapsed = time.time() - start

        if apo._best_prompt is None or not apo.history:
            console.print("Interrupted before the seed prompt was evaluated; nothing to report.")
            console.print(f"Data: {db_path} (SQLite; log: {log_path})")
            return 130
        best = apo.get_best_prompt()
        best_score = apo._best_prompt.score
        seed_score = apo.history[0][2]
        stats = asyncio.run(_statistics(store_url))
        console.print()
        console.print(f"[bold green]Best prompt[/bold green] (score {best_score:.3f}, seed {seed_score:.3f}):")
        console.print(f"  {best.template}", markup=False, highlight=False)
        console.print(
            f"Trained in {elapsed:.1f}s with {args.runners} runners; {view.finished} rollouts this run. Store totals: "
            f"{stats.get('total_rollouts')} rollouts, {stats.get('total_spans')} spans, "
            f"{stats.get('total_workers')} workers."
        )
        console.print(f"Data: {db_path} (SQLite; log: {log_path})")
        if args.keep_serving:
            console.print(f"Dashboard: {store_url}/  (serving until Ctrl+C)")
            try:
                while store_process.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
        else:
            # The store stops with this process: only print what works afterwards.
            console.print(
                f"Browse it later: rollouthub store --backend sqlite:///{db_path}  then open http://127.0.0.1:4747/",
                markup=False,
                highlight=False,
            )
    return 0


def _restore_env(name: str, value: Optional[str]) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


async def _statistics(store_url: str) -> Dict[str, Any]:
    from rollouthub.store.client import LightningStoreClient

    client = LightningStoreClient(store_url)
    try:
        return dict(await client.statistics())
    finally:
        await client.close()


if __name__ == "__main__":
    sys.exit(main())
