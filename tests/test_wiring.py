"""open_engine checks the model server before an engine or a surface exists."""
from __future__ import annotations

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
    assert not (tmp_path / "rt.db").exists()  # the store is opened only once the checks passed


async def test_a_model_the_server_does_not_serve_stops_a_strict_start_before_the_store(tmp_path):
    async with StrictOpenAI(key="sk-wiring", models=("fake-model", "llama3:latest")) as srv:
        with pytest.raises(ConfigError) as raised:
            async with open_engine(settings(tmp_path, srv.base_url, ROUNDTABLE_MODEL="gpt-4o-mini"),
                                   lambda store: RecordingSurface(), scope="console:main", label="console",
                                   strict_models=True):
                pytest.fail("the engine was opened")
    assert str(raised.value) == (f"ROUNDTABLE_MODEL=gpt-4o-mini is not a model 127.0.0.1:{srv.port} serves (it "
                                 "serves fake-model, llama3:latest); set ROUNDTABLE_MODEL to one of them")
    assert not (tmp_path / "rt.db").exists()


@pytest.mark.parametrize("strict", [True, False])
async def test_a_served_model_opens_the_engine_and_an_unserved_one_only_warns_when_not_strict(tmp_path, strict,
                                                                                              caplog):
    async with StrictOpenAI(key="sk-wiring", models=("fake-model", "llama3:latest")) as srv:
        model = "llama3" if strict else "ghost"  # Ollama serves llama3 as llama3:latest
        async with open_engine(settings(tmp_path, srv.base_url, ROUNDTABLE_MODEL=model),
                               lambda store: RecordingSurface(), scope="discord:", label="discord bot",
                               strict_models=strict) as opened:
            assert opened.engine is not None
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == ([] if strict else [f"ROUNDTABLE_MODEL=ghost is not a model 127.0.0.1:{srv.port} serves (it "
                                         "serves fake-model, llama3:latest); set ROUNDTABLE_MODEL to one of them"])


async def test_a_rejected_check_before_the_store_creates_no_database(tmp_path):
    async def refuse() -> None:
        raise ConfigError("Discord rejected DISCORD_TOKEN")

    async with StrictOpenAI(key="sk-wiring") as srv:
        with pytest.raises(ConfigError, match="Discord rejected"):
            async with open_engine(settings(tmp_path, srv.base_url), lambda store: RecordingSurface(),
                                   scope="discord:", label="discord bot", before_store=refuse):
                pytest.fail("the engine was opened")
    assert not (tmp_path / "rt.db").exists()


async def test_a_passed_check_opens_the_engine(tmp_path):
    async with StrictOpenAI(key="sk-wiring") as srv:
        async with open_engine(settings(tmp_path, srv.base_url), lambda store: RecordingSurface(),
                               scope="console:main", label="console") as opened:
            assert opened.engine is not None
    assert srv.model_list_calls == 1


async def test_the_db_setting_is_named_when_the_file_cannot_be_opened(tmp_path):
    async with StrictOpenAI(key="sk-wiring", models=("gpt-4o-mini",)) as srv:
        with pytest.raises(StoreError, match=r"^ROUNDTABLE_DB: cannot open the database .*/nowhere/rt.db: the dir"):
            async with open_engine(settings(tmp_path, srv.base_url, ROUNDTABLE_DB=str(tmp_path / "nowhere" / "rt.db")),
                                   lambda store: RecordingSurface(), scope="console:main", label="console"):
                pass
        with pytest.raises(StoreError, match=r"^--db: cannot open the database "):
            async with open_engine(settings(tmp_path, srv.base_url), lambda store: RecordingSurface(),
                                   scope="console:main", label="console", db=str(tmp_path / "nowhere" / "rt.db")):
                pass
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("model, listed, served", [
    ("fake-model", ["fake-model"], True),
    ("llama3", ["llama3:latest"], True),  # Ollama serves `llama3` as `llama3:latest`
    ("llama3:8b", ["llama3:latest"], False),
    ("llama3", ["llama3:8b"], False),
    ("gpt-4o-mini", ["gpt-4o"], False),
])
def test_which_model_names_a_server_serves(model, listed, served):
    from bot.llm.providers import is_served

    assert is_served(model, listed) is served
