"""Code, tests, docs and the dashboard state the rules they follow; they never cite the specification's section numbers.

The behavioural specification the project was written against is not part of the project: a comment that points at a
numbered section of it tells a reader nothing. Every tracked text file of the package, the tests, the benchmarks, the
examples, the docs, the dashboard sources and the README is scanned for a spec file name (store, runtime or dashboard,
with the ``.md`` suffix) or the word "spec" followed by a section number, and for numbered reference quirks. The
project's own ``docs/*.md`` pages may be linked freely: only a section number after the name is a citation.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, List

ROOT = Path(__file__).resolve().parent.parent
SCANNED = (
    "rollouthub",
    "tests",
    "benchmarks",
    "examples",
    "docs",
    "dashboard/src",
    "README.md",
    "pyproject.toml",
    ".ci",
)
SKIPPED_DIRS = {"node_modules", "__pycache__", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache", "dist", "build"}

_SECTION = r"[ \t]*[,:(]?[ \t]*(?:sections?[ \t]*|§[ \t]*)?\d+(?:\.\d+)*"
CITATION = re.compile(
    r"\b(?:store|runtime|dashboard)\.md\b"
    + _SECTION
    + r"|\b(?:(?:store|runtime|dashboard)[ \t]+)?spec(?:ification)?\b"
    + _SECTION
    + r"|\bquirks?[ \t]+\d+\.\d+",
    re.IGNORECASE,
)


def _tracked_files() -> List[Path]:
    """The files under :data:`SCANNED` that git tracks or would track (not ignored); without git, every file there."""
    git = shutil.which("git")
    if git is not None and (ROOT / ".git").exists():
        listed = subprocess.run(
            [git, "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *SCANNED],
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8")
        return [ROOT / name for name in listed.split("\0") if name]
    files: List[Path] = []
    for name in SCANNED:
        top = ROOT / name
        if top.is_file():
            files.append(top)
        elif top.is_dir():
            for path in top.rglob("*"):
                if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                    files.append(path)
    return files


def _text_lines(path: Path) -> Iterator[str]:
    """The lines of ``path`` when it is UTF-8 text; nothing for binary files."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:  # listed by git but deleted in the working tree
        return
    if b"\0" in data:
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    yield from text.splitlines()


def find_citations() -> List[str]:
    """``file:line: matched text`` for every spec section citation in the scanned files."""
    hits: List[str] = []
    for path in sorted(_tracked_files()):
        for number, line in enumerate(_text_lines(path), start=1):
            for match in CITATION.finditer(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0).strip()}")
    return hits


def test_the_scan_sees_the_tree() -> None:
    files = {path.relative_to(ROOT).as_posix() for path in _tracked_files()}
    assert {"README.md", "rollouthub/__init__.py", "tests/test_no_spec_citations.py"} <= files
    assert any(name.startswith("docs/") for name in files)
    assert any(name.startswith("dashboard/src/") for name in files)


def test_the_pattern_catches_citations_and_spares_doc_links() -> None:
    name = "store" + ".md"
    cited = [
        f"({name} 11.7)",
        f"see {name} section 2",
        f"runtime{name[5:]}, 10.6",
        f"dashboard{name[5:]} §3",
        "(runtime spec" + " 9.4)",
        "fixing quirk" + " 16.2.7",
    ]
    spared = [f"see `docs/{name}`", f"docs/{name} for the architecture", "the spec's pseudo-signature", "spec'd"]
    assert [text for text in cited if not CITATION.search(text)] == []
    assert [text for text in spared if CITATION.search(text)] == []


def test_no_spec_section_citations() -> None:
    hits = find_citations()
    assert not hits, (
        f"{len(hits)} citation(s) of a spec section number; state the rule itself (or link a docs/ page) instead:\n"
        + "\n".join(hits)
    )
