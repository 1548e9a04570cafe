"""open_engine checks the model server before an engine or a surface exists."""
from __future__ import annotations

import sqlite3

import pytest

from bot.config import load_settings
from bot.core.errors import ConfigError, StoreError
from bot.wiring import open_engine
from tests.fakes.openai_server import closed_base_url
from tests.fakes.strict_openai import StrictOpenAI
from tests.fakes.surface import RecordingSurface


def settings(tmp_path, base_url: str, **more: str):
    return load_settings({"OPENAI_API_KEY": "sk-wiring", "OPENAI_BASE_URL": base_url, "ROUNDTABLE_LLM_RETRIES": "0",
                          "ROUNDTABLE_DB": str(tmp_path / "rt.db"), **more}, need_discord=False)


@pytest.mark.parametrize("server", ["unreachable", "refuses the key"])
async def test_a_failed_check_builds_no_surface_and_takes_no_group(tmp_path, server):
    built = []

    def make_surface(store):
        built.append(store)
        return RecordingSurface()

    async with StrictOpenAI(key="sk-other") as srv:
        url = closed_base_url() if server == "unreachable" else srv.base_url
        with pytest.raises(ConfigError, match="did not answer" if server == "unreachable" else "was refused"):
            async with open_engine(settings(tmp_path, url), make_surface, scope="console:main", label="console"):
                pytest.fail("the engine was opened")
    assert built == []
    with sqlite3.connect(tmp_path / "rt.db") as conn:  # the store was closed: the file is free, nothing leased
        assert conn.execute("SELECT COUNT(*) FROM leases").fetchone() == (0,)


async def test_a_passed_check_opens_the_engine(tmp_path):
    async with StrictOpenAI(key="sk-wiring") as srv:
        async with open_engine(settings(tmp_path, srv.base_url), lambda store: RecordingSurface(),
                               scope="console:main", label="console") as engine:
            assert engine is not None
    assert srv.model_list_calls == 1


async def test_the_db_setting_is_named_when_the_file_cannot_be_opened(tmp_path):
    with pytest.raises(StoreError, match=r"^ROUNDTABLE_DB: cannot open the database .*/nowhere/rt.db: the directory"):
        async with open_engine(settings(tmp_path, closed_base_url(), ROUNDTABLE_DB=str(tmp_path / "nowhere" / "rt.db")),
                               lambda store: RecordingSurface(), scope="console:main", label="console"):
            pass
    with pytest.raises(StoreError, match=r"^--db: cannot open the database "):
        async with open_engine(settings(tmp_path, closed_base_url()), lambda store: RecordingSurface(),
                               scope="console:main", label="console", db=str(tmp_path / "nowhere" / "rt.db")):
            pass
    assert not (tmp_path / "nowhere").exists()
