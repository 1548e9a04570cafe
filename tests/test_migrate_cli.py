"""`roundtable migrate`: the schema brought up to date on SQLite and PostgreSQL, one line saying
the version; a database that cannot be opened is one `roundtable:` line, exit 2, no password."""
from __future__ import annotations

from pathlib import Path

import pytest

from storage import MIGRATIONS, describe
from tests.fakes.databases import Place
from tests.test_cli import roundtable

VERSION = max(mid for mid, _, _ in MIGRATIONS)


async def test_migrate_applies_once_then_reports_the_version(place: Place, tmp_path: Path) -> None:
    first = await roundtable(tmp_path, "migrate", "--db", place.target)
    assert (first.code, first.err) == (0, "")
    shown = describe(place.target)  # a password in ROUNDTABLE_TEST_PG is masked
    assert first.out == f"roundtable: {shown} is at schema version {VERSION} (applied {len(MIGRATIONS)} now)\n"
    again = await roundtable(tmp_path, "migrate", ROUNDTABLE_DB=place.target)
    assert again.out == f"roundtable: {shown} is at schema version {VERSION} (applied 0 now)\n"
    assert [r[0] for r in await place.fetch("SELECT id FROM _migrations ORDER BY id")] == [m[0] for m in MIGRATIONS]


async def test_migrate_takes_a_sqlite_url_and_the_default_file(tmp_path: Path) -> None:
    url = await roundtable(tmp_path, "migrate", "--db", "sqlite:///rt.db")
    assert url.out == f"roundtable: sqlite:///rt.db is at schema version {VERSION} (applied {len(MIGRATIONS)} now)\n"
    assert (tmp_path / "rt.db").is_file()
    default = await roundtable(tmp_path, "migrate")
    assert default.out.startswith("roundtable: roundtable.db is at schema version")
    assert (tmp_path / "roundtable.db").is_file()


@pytest.mark.parametrize("target, expected", [
    ("postgresql://rt:s3cr3t-pw@127.0.0.1:1/db", "cannot open the database postgresql://rt:***@127.0.0.1:1/db: "),
    ("postgresql://rt@127.0.0.1:1/db?password=s3cr3t-pw", "cannot open the database postgresql://rt@127.0.0.1:1/db"
                                                          "?password=***: "),
    ("postgresql://rt:s3cr3t-pw@[::1/db", "cannot open the database postgresql://...: "),
    ("mysql://rt:s3cr3t-pw@host/db", "unknown database URL scheme mysql://"),
    ("missing-dir/rt.db", "cannot open the database missing-dir/rt.db: the directory missing-dir does not exist"),
])
async def test_a_database_that_cannot_be_opened_is_one_line_without_its_password(
        tmp_path: Path, target: str, expected: str) -> None:
    result = await roundtable(tmp_path, "migrate", "--db", target)
    assert result.problem.startswith(f"roundtable: --db: {expected}")
    assert "s3cr3t-pw" not in result.err + result.out


async def test_help_lists_migrate(tmp_path: Path) -> None:
    result = await roundtable(tmp_path, "--help")
    assert "migrate" in result.out
    verb = await roundtable(tmp_path, "migrate", "--help")
    assert "postgresql://" in verb.out and "--db" in verb.out
