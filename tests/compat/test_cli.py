"""Issue 17 item 7: CLI parity -- ``rollouthub --version``, ``python -m rollouthub``, and plain-text ``--help``.

Every command a user can ask for ``--help`` (the ``rollouthub`` script and its subcommands, ``python -m rollouthub``,
``python -m rollouthub.cli``, ``python -m rollouthub.quickstart``, and the scripts under ``benchmarks/`` and
``examples/``) is run for real; its output must read as plain text, without reStructuredText/Sphinx markup.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from rollouthub.cli import SUBCOMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
SPHINX_MARKUP = re.compile(r":[\w.+-]+:`|``|`|\.\. [\w-]+::|\*\*|\\ ")
"""Roles (``:class:`...```), literals, interpreted text, directives (``.. note::``), strong emphasis, escapes."""


def _rollouthub_script() -> str:
    script = Path(sys.executable).with_name("rollouthub")
    found = str(script) if script.exists() else shutil.which("rollouthub")
    assert found, "the rollouthub console script is not installed (pip install -e .)"
    return found


def _scripts_with_help() -> List[Path]:
    scripts = sorted([*ROOT.glob("benchmarks/*.py"), *ROOT.glob("examples/*.py")])
    return [p for p in scripts if "argparse" in p.read_text(encoding="utf-8")]


def _help_commands() -> Dict[str, List[str]]:
    script, python = _rollouthub_script(), sys.executable
    commands: Dict[str, List[str]] = {
        "rollouthub --help": [script, "--help"],
        "python -m rollouthub --help": [python, "-m", "rollouthub", "--help"],
        "python -m rollouthub.cli --help": [python, "-m", "rollouthub.cli", "--help"],
        "python -m rollouthub.quickstart --help": [python, "-m", "rollouthub.quickstart", "--help"],
    }
    for name in SUBCOMMANDS:
        commands[f"rollouthub {name} --help"] = [script, name, "--help"]
        commands[f"python -m rollouthub {name} --help"] = [python, "-m", "rollouthub", name, "--help"]
    for path in _scripts_with_help():
        commands[f"{path.relative_to(ROOT)} --help"] = [python, str(path), "--help"]
    return commands


def _run(command: List[str]) -> Tuple[int, str]:
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def help_outputs() -> Dict[str, Tuple[int, str]]:
    commands = _help_commands()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(commands, pool.map(_run, commands.values()), strict=True))
    return results


def test_every_help_output_is_plain_text(help_outputs: Dict[str, Tuple[int, str]]) -> None:
    assert len(help_outputs) >= 4 + 2 * len(SUBCOMMANDS) + 8  # the scripts of benchmarks/ and examples/ included
    for name, (code, output) in help_outputs.items():
        assert code == 0, f"{name} exited {code}:\n{output}"
        assert "usage:" in output, f"{name}:\n{output}"
        markup = sorted({m.group(0) for m in SPHINX_MARKUP.finditer(output)})
        assert not markup, f"{name} shows markup {markup}:\n{output}"


def test_python_m_rollouthub_has_the_same_subcommands(help_outputs: Dict[str, Tuple[int, str]]) -> None:
    assert help_outputs["python -m rollouthub --help"] == help_outputs["rollouthub --help"]
    for name in SUBCOMMANDS:
        assert name in help_outputs["rollouthub --help"][1]
        assert help_outputs[f"python -m rollouthub {name} --help"] == help_outputs[f"rollouthub {name} --help"]


def test_version_flag() -> None:
    from importlib.metadata import version

    import rollouthub
    from rollouthub.cli import version_text

    expected = f"rollouthub {version('rollouthub')} (Agent Lightning {rollouthub.__version__} API)"
    assert version_text() == expected
    for command in ([_rollouthub_script(), "--version"], [sys.executable, "-m", "rollouthub", "--version"]):
        code, output = _run(command)
        assert (code, output.strip()) == (0, expected)


def test_unknown_subcommand_and_missing_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: rollouthub" in capsys.readouterr().out
    assert main(["nope"]) == 2
    assert "unknown subcommand 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":class:`~rollouthub.trainer.Trainer`", "Trainer"),
        (":mod:`rollouthub.testing`", "rollouthub.testing"),
        (":func:`go <rollouthub.go>`", "go"),
        (":meth:`LitAgentRunner.step`", "LitAgentRunner.step"),
        ("``--fresh`` deletes", "--fresh deletes"),
        ("the `default` role", "the default role"),
        ("**reuses** it", "reuses it"),
        ("ValueError\\ s", "ValueErrors"),
        ("  .. note:: careful", "  Note: careful"),
        ("2 * 3 and a*b stay", "2 * 3 and a*b stay"),
        (None, ""),
    ],
)
def test_plain_text(text: str, expected: str) -> None:
    from rollouthub.cli import plain_text

    assert plain_text(text) == expected
