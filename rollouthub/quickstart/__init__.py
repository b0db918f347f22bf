"""The main job, ``python -m rollouthub.quickstart``: an end-to-end training run, offline, on a SQLite store.

One module per job: :mod:`~rollouthub.quickstart.sentiment` (the task, the mock LLM, the agent),
:mod:`~rollouthub.quickstart.apo` (the APO mode), :mod:`~rollouthub.quickstart.progress` (the live view),
:mod:`~rollouthub.quickstart.processes` (the store server process), :mod:`~rollouthub.quickstart.endpoint` (the
check of a real LLM endpoint) and :mod:`~rollouthub.quickstart.main` (the command line).
"""

from rollouthub.quickstart.endpoint import EndpointError, check_llm_endpoint
from rollouthub.quickstart.main import DEFAULT_DB, build_parser, main
from rollouthub.quickstart.progress import ProgressView
from rollouthub.quickstart.sentiment import (
    HINTS,
    REVIEWS,
    SEED_TEMPLATE,
    TRAIN_TASKS,
    VAL_TASKS,
    Hint,
    make_agent,
    mock_llm_reply,
    score_answer,
)

__all__ = [
    "DEFAULT_DB",
    "EndpointError",
    "HINTS",
    "Hint",
    "ProgressView",
    "REVIEWS",
    "SEED_TEMPLATE",
    "TRAIN_TASKS",
    "VAL_TASKS",
    "build_parser",
    "check_llm_endpoint",
    "main",
    "make_agent",
    "mock_llm_reply",
    "score_answer",
]
