"""open_db makes no directory: the file's directory must exist, and the path must not be one."""
from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.errors import StoreError
from storage import open_db


@pytest.mark.parametrize("where, reason", [
    ("missing/dir/rt.db", "the directory {tmp}/missing/dir does not exist; create it first, or choose another file"),
    ("", "it is a directory; name a file in it, e.g. {tmp}/roundtable.db"),
    ("file/rt.db", "{tmp}/file is not a directory"),
])
async def test_a_path_without_a_place_is_refused(tmp_path: Path, where: str, reason: str) -> None:
    (tmp_path / "file").write_text("a file where a directory should be")
    path = tmp_path / where if where else tmp_path
    with pytest.raises(StoreError) as info:
        await open_db(path)
    assert str(info.value) == f"cannot open the database {path}: {reason.format(tmp=tmp_path)}"
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing was made


async def test_a_file_in_an_existing_directory_is_made(tmp_path: Path) -> None:
    conn = await open_db(tmp_path / "rt.db")
    await conn.close()
    assert (tmp_path / "rt.db").is_file()
