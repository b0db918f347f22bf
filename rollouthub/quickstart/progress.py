"""The quickstart's live view: finished rollouts (counted in the store) and a table the training mode supplies."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Optional

__all__ = ["ProgressView"]

logger = logging.getLogger("rollouthub.quickstart")


class ProgressView(threading.Thread):
    """A rich live view of finished rollouts, refreshed from the store, above an optional table of the mode's own.

    ``table`` is called at each refresh and returns a rich renderable (or ``None`` for none): the APO mode shows its
    evaluations there.
    """

    def __init__(
        self, store_url: str, expected_rollouts: int, console: Any, table: Optional[Callable[[], Any]] = None
    ) -> None:
        super().__init__(name="quickstart-progress", daemon=True)
        self.store_url = store_url
        self.expected = expected_rollouts
        self.console = console
        self.table = table
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

        progress.update(task_id, completed=min(self.finished, self.expected), total=max(self.expected, self.finished))
        table = self.table() if self.table is not None else None
        return Group(progress, table) if table is not None else Group(progress)

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
                # while running; the algorithm may skip work).
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
