"""``rollouthub`` command line: ``rollouthub <subcommand> [args...]`` (store.md 13.2).

Subcommands: ``store`` (run the store server), ``prometheus`` (expose a Prometheus multiprocess directory) and
``export`` (training data out of a store).
"""

from __future__ import annotations

import importlib
import sys
from typing import Dict, List, Optional, Sequence

__all__ = ["main", "SUBCOMMANDS"]

SUBCOMMANDS: Dict[str, str] = {
    "store": "Run the LightningStore server (REST API, OTLP traces, Prometheus, dashboard).",
    "prometheus": "Serve the metrics of a Prometheus multiprocess directory.",
    "export": "Export rollouts as training data (messages, triplets, preferences, rewards; JSONL or Parquet).",
}


def _usage() -> str:
    lines = ["usage: rollouthub <subcommand> [args...]", "", "subcommands:"]
    lines += [f"  {name:<12} {desc}" for name, desc in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch to ``rollouthub.cli.<subcommand>.main(rest)`` and return its exit status (0 when it returns None)."""
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in SUBCOMMANDS:
        print(f"rollouthub: unknown subcommand {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__name__}.{command}")
    result = module.main(rest)
    return 0 if result is None else int(result)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
