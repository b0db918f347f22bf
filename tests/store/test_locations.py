"""The one way every command names a store: backends (memory, SQLite path/URL, PostgreSQL URL) and server URLs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollouthub.store.locations import LocationError, parse_backend, sqlite_path, store_root_url


def test_bare_path_and_both_sqlite_url_styles_name_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    expected = str(tmp_path / "runs.db")
    for text in (
        "runs.db",
        "./runs.db",
        "sqlite:///runs.db",
        f"sqlite:///{expected}",
        f"sqlite+aiosqlite:///{expected}",
    ):
        backend = parse_backend(text)
        assert (backend.kind, backend.path, backend.url) == ("sqlite", expected, f"sqlite:///{expected}"), text
    assert sqlite_path("runs.db") == expected
    assert parse_backend("sqlite:///runs.db").describe() == f"SQLite file {expected}"


def test_postgresql_and_memory_pass_through() -> None:
    url = "postgresql://postgres:secret@127.0.0.1:5432/test"
    backend = parse_backend(url)
    assert (backend.kind, backend.url, backend.path) == ("postgresql", url, None)
    assert "secret" not in backend.describe()
    assert parse_backend("memory").kind == "memory"
    assert sqlite_path(url) is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("mysql://root@localhost/db", "unsupported backend 'mysql://'"),
        ("sqlite://relative.db", "not a SQLite URL"),
        ("sqlite:///:memory:", "names no SQLite file"),
        ("postgresql:///db", "names no host"),
        ("postgresql://h:99999/db", "invalid port"),
    ],
)
def test_unusable_backends_are_one_line_errors(text: str, words: str) -> None:
    with pytest.raises(LocationError, match=words) as info:
        parse_backend(text)
    assert "\n" not in str(info.value)


def test_a_sqlite_file_in_a_missing_directory_names_the_directory(tmp_path: Path) -> None:
    missing = tmp_path / "missing-dir"
    with pytest.raises(LocationError, match=f"the directory {missing} does not exist"):
        parse_backend(str(missing / "x.db"))
    with pytest.raises(LocationError, match="it is a directory"):
        parse_backend(str(tmp_path))


def test_read_only_commands_need_an_existing_file_and_may_refuse_memory(tmp_path: Path) -> None:
    with pytest.raises(LocationError, match=f"no database at {tmp_path / 'none.db'}"):
        parse_backend(str(tmp_path / "none.db"), must_exist=True)
    (tmp_path / "there.db").write_bytes(b"")
    assert parse_backend(str(tmp_path / "there.db"), must_exist=True).path == os.path.join(tmp_path, "there.db")
    with pytest.raises(LocationError, match="'memory' is not a database here"):
        parse_backend("memory", allow_memory=False)


@pytest.mark.parametrize(
    ("text", "root"),
    [
        ("http://127.0.0.1:4747", "http://127.0.0.1:4747"),
        ("http://127.0.0.1:4747/", "http://127.0.0.1:4747"),
        ("http://127.0.0.1:4747/v1/agl", "http://127.0.0.1:4747"),
        ("http://127.0.0.1:4747/v1/agl/", "http://127.0.0.1:4747"),
        ("127.0.0.1:4747", "http://127.0.0.1:4747"),
        ("  localhost:4747 ", "http://localhost:4747"),
        ("https://example.org/rollouthub/v1/agl", "https://example.org/rollouthub"),
        ("http://[::1]:4747", "http://[::1]:4747"),
    ],
)
def test_store_urls_in_every_printed_form_give_the_root(text: str, root: str) -> None:
    assert store_root_url(text) == root


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("ftp://host:21", "not http"),
        ("http://:4747", "names no host"),
        ("127.0.0.1:99999", "invalid port"),
        ("http://host:4747/?x=1", "query or fragment"),
    ],
)
def test_unusable_store_urls_are_one_line_errors(text: str, words: str) -> None:
    with pytest.raises(LocationError, match=words):
        store_root_url(text)
