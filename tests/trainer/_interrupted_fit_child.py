"""Child process of the interruption tests: a ``Trainer.fit`` whose rollouts never finish by themselves.

``python _interrupted_fit_child.py <sqlite file> <marker dir> <n_runners> <port> [cs|shm]``: the client-server
strategy with ``n_runners`` runner processes (or the shared-memory one with runner threads) around a SQLite store; each rollout touches ``<marker dir>/started-<task>`` and then
waits (for ten minutes), so the run only ends when it is interrupted. Prints ``INTERRUPTED <exception class>`` and
exits with 130 (Ctrl+C) or 143 (SIGTERM).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Dict

import rollouthub as agl
from rollouthub.algorithm.fast import Baseline
from rollouthub.store.sql import SqlLightningStore
from rollouthub.utils.process_lifetime import exit_code_of

DB, MARKERS, N_RUNNERS, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
STRATEGY = sys.argv[5] if len(sys.argv) > 5 else "cs"


@agl.rollout
async def agent(task: Dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    open(os.path.join(MARKERS, f"started-{task['q']}"), "w").close()
    await asyncio.sleep(600)
    return 1.0


if __name__ == "__main__":
    trainer = agl.Trainer(
        algorithm=Baseline(span_verbosity="none", polling_interval=0.2),
        store=SqlLightningStore(f"sqlite:///{DB}"),
        strategy=(
            {
                "type": "cs",
                "n_runners": N_RUNNERS,
                "server_port": PORT,
                "graceful_timeout": 2.0,
                "terminate_timeout": 2.0,
            }
            if STRATEGY == "cs"
            else {"type": "shm", "n_runners": N_RUNNERS, "main_thread": "algorithm", "graceful_delay": 1.0}
        ),
        initial_resources={"prompt_template": agl.PromptTemplate(template="Q: {q}", engine="f-string")},
    )
    try:
        trainer.fit(agent, train_dataset=[{"q": str(i)} for i in range(20)])
    except KeyboardInterrupt as exc:
        print(f"INTERRUPTED {type(exc).__name__}", flush=True)
        sys.exit(exit_code_of(exc))
    print("FINISHED", flush=True)
