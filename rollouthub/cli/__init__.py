"""``rollouthub`` command line: ``rollouthub <subcommand> [args...]``.

Subcommands: ``store`` (run the store server), ``prometheus`` (expose a Prometheus multiprocess directory),
``export`` (training data out of a store) and ``inspect`` (what a store holds); ``rollouthub --version``. The same
commands run as ``python -m rollouthub`` and ``python -m rollouthub.cli``. :func:`plain_text` turns docstrings into
the plain text that ``--help`` output shows.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Dict, List, Optional, Sequence

__all__ = ["main", "SUBCOMMANDS", "plain_text", "version_text"]

SUBCOMMANDS: Dict[str, str] = {
    "store": "Run the LightningStore server (REST API, OTLP traces, Prometheus, dashboard).",
    "prometheus": "Serve the metrics of a Prometheus multiprocess directory.",
    "export": "Export rollouts as training data (messages, triplets, preferences, rewards, trajectories; JSONL or "
    "Parquet).",
    "inspect": "Show what a store holds: counts, recent rollouts, final reward per resources version.",
}


_ROLE = re.compile(r":[\w.+-]+:`(~?)([^`<]*?)(?:\s*<[^`>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``")
_INTERPRETED = re.compile(r"`([^`]+)`")
_STRONG = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
_DIRECTIVE = re.compile(r"^(\s*)\.\. (\w[\w-]*)::\s*", re.MULTILINE)


def plain_text(text: Optional[str]) -> str:
    """Turn a reStructuredText/Sphinx docstring into plain text for ``--help`` output.

    Roles keep their text (``:class:`~a.b.C``` -> ``C``, ``:func:`x <a.b.x>``` -> ``x``), literals and emphasis
    lose their markers, directives such as ``.. note::`` become ``Note:`` and ``\\ `` escapes disappear.
    """
    if not text:
        return ""
    text = _ROLE.sub(lambda m: m.group(2).strip().rsplit(".", 1)[-1] if m.group(1) else m.group(2).strip(), text)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    text = _STRONG.sub(r"\1", text)
    text = _DIRECTIVE.sub(lambda m: f"{m.group(1)}{m.group(2).capitalize()}: ", text)
    return text.replace("\\ ", "")


def version_text() -> str:
    """``rollouthub <package version> (Agent Lightning <API version> API)``."""
    from importlib.metadata import PackageNotFoundError, version

    from rollouthub import __version__ as api_version

    try:
        package_version = version("rollouthub")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
        package_version = "unknown"
    return f"rollouthub {package_version} (Agent Lightning {api_version} API)"


def _usage() -> str:
    lines = ["usage: rollouthub [--version] <subcommand> [args...]", "", "subcommands:"]
    lines += [f"  {name:<12} {desc}" for name, desc in SUBCOMMANDS.items()]
    lines += ["", "Run 'rollouthub <subcommand> --help' for the options of a subcommand."]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Dispatch to ``rollouthub.cli.<subcommand>.main(rest)`` and return its exit status (0 when it returns None)."""
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(version_text())
        return 0
    command, rest = args[0], args[1:]
    if command not in SUBCOMMANDS:
        print(f"rollouthub: unknown subcommand {command!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__name__}.{command}")
    result = module.main(rest)
    return 0 if result is None else int(result)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
