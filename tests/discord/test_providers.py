"""Providers in Discord: `/agent add model:` completes from every provider's model list, and an agent on a
named provider answers through it."""
from __future__ import annotations

import contextlib
import sqlite3

import pytest

from bot.llm.openai_llm import OpenAILLM
from bot.llm.providers import Providers
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript


@pytest.fixture
async def local_server():
    async with FakeOpenAI(GroupChatScript(agents={"coder": ["Done on the local box."]}),
                          models=["llama3.1:8b", "qwen2.5-coder:7b"]) as srv:
        yield srv


@pytest.fixture
async def harness(tmp_path, script, original_discord_endpoints, local_server):
    from tests.discord.conftest import BotHarness
    from tests.discord_emulator import DiscordEmulator

    async with DiscordEmulator() as emu, FakeOpenAI(script, models=["fake-model", "gpt-4o-mini"]) as llm_server:
        h = BotHarness(emu, llm_server, tmp_path / "roundtable.db")

        def make(counter):
            def client(name: str, url: str) -> OpenAILLM:
                return OpenAILLM(api_key="sk-test", base_url=url, default_model="fake-model", timeout=10,
                                 max_retries=0, counter=counter, provider=name)
            return Providers({"default": client("default", llm_server.base_url),
                              "local": client("local", local_server.base_url)}, default_model="fake-model")
        h.make_llm = make
        await h.start()
        try:
            yield h
        finally:
            await h.stop()


async def test_model_autocompletes_from_every_provider_and_the_agent_runs_on_its_own(harness, local_server):
    emu = harness.emu
    await harness.setup_group(mode="tags")
    auto = await emu.invoke_autocomplete(emu.guild_id, emu.channel_id, emu.alice_id, "agent add",
                                         {"name": "coder", "role": "codes", "model": "loc"}, "model")
    choices = [c["value"] for c in (await auto.wait_response(5))["data"]["choices"]]
    assert choices == ["local/llama3.1:8b", "local/qwen2.5-coder:7b"]
    auto = await emu.invoke_autocomplete(emu.guild_id, emu.channel_id, emu.alice_id, "agent add",
                                         {"name": "coder", "role": "codes", "model": "mini"}, "model")
    assert [c["value"] for c in (await auto.wait_response(5))["data"]["choices"]] == ["gpt-4o-mini"]
    refused = await harness.command("agent add", {"name": "coder", "role": "codes", "prompt": "You code.",
                                                  "model": "lokal/llama3.1:8b"})
    assert "No provider is named 'lokal' (providers: default, local)" in refused["data"]["content"]
    added = await harness.command("agent add", {"name": "coder", "role": "codes", "prompt": "You code.",
                                                "model": "local/llama3.1:8b"})
    assert added["data"]["content"].startswith("Added coder"), added
    await emu.user_post(emu.channel_id, emu.alice_id, "@coder write it")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=15)
    await harness.idle()
    assert harness.webhook_posts()[0]["content"] == "Done on the local box."
    assert [r["model"] for r in local_server.requests] == ["llama3.1:8b"]
    run = (await harness.store.record.runs_by_id([1]))[1]
    assert (run.model, run.provider) == ("llama3.1:8b", "local")
    usage = await harness.command("roundtable usage")
    assert harness.embed_fields(usage)["coder"].endswith("· on local")


async def test_a_provider_down_is_told_once_per_outage(harness, local_server, tmp_path):
    """The local provider stops: the first tag of its agent gets a notice, later ones are skipped quietly; once
    it has answered again, the next outage is told again (the real openai client, the fake server stopped)."""
    emu = harness.emu
    await harness.setup_group(mode="tags")
    added = await harness.command("agent add", {"name": "coder", "role": "codes", "prompt": "You code.",
                                                "model": "local/llama3.1:8b"})
    assert added["data"]["content"].startswith("Added coder"), added

    def failed_runs() -> int:
        with contextlib.closing(sqlite3.connect(tmp_path / "roundtable.db")) as db:
            return int(db.execute("SELECT COUNT(*) FROM runs WHERE status = 'failed'").fetchone()[0])

    def told() -> list[str]:
        return [m["content"] for m in emu.channel_messages(emu.channel_id)
                if m["author"]["id"] == str(emu.bot_user_id) and "could not be reached" in m["content"]]

    await local_server.close()
    for n in range(1, 4):
        await emu.user_post(emu.channel_id, emu.alice_id, f"@coder try {n}")
        await emu.wait_for(lambda n=n: failed_runs() == n, timeout=30, what=f"run {n} failed")
    await emu.wait_for(told, timeout=30, what="the notice")
    await harness.idle()
    assert told() == [
        "coder could not answer: the model service could not be reached (provider local). Its turn was skipped; "
        "until the model service answers again, the turns of agents on it are skipped without another notice."]

    await local_server.start()  # back, on the same address
    await emu.user_post(emu.channel_id, emu.alice_id, "@coder now?")
    await emu.wait_for(lambda: harness.webhook_posts(), timeout=30, what="the reply")
    assert harness.webhook_posts()[0]["content"] == "Done on the local box."

    await local_server.close()  # a new outage: told again, once
    for n in range(4, 6):
        await emu.user_post(emu.channel_id, emu.alice_id, f"@coder again {n}")
        await emu.wait_for(lambda n=n: failed_runs() == n, timeout=30, what=f"run {n} failed")
    await emu.wait_for(lambda: len(told()) >= 2, timeout=30, what="the second notice")
    await harness.idle()
    assert len(told()) == 2


async def test_the_outage_is_told_once_in_each_group(harness, local_server, tmp_path):
    """People of another channel never saw the first group's notice: each group is told once."""
    emu = harness.emu
    random_id = emu.add_channel(emu.guild_id, "random")
    for channel in (emu.channel_id, random_id):
        for name, options in (("roundtable setup", {}),
                              ("agent add", {"name": "coder", "role": "codes", "prompt": "You code.",
                                             "model": "local/llama3.1:8b"}),
                              ("roundtable config", {"mode": "tags"})):
            rec = await emu.invoke_command(emu.guild_id, channel, emu.alice_id, name, options)
            await rec.wait_response(5)

    def failed_runs() -> int:
        with contextlib.closing(sqlite3.connect(tmp_path / "roundtable.db")) as db:
            return int(db.execute("SELECT COUNT(*) FROM runs WHERE status = 'failed'").fetchone()[0])

    def told(channel: str) -> int:
        return sum(m["author"]["id"] == str(emu.bot_user_id) and "could not be reached" in m["content"]
                   for m in emu.channel_messages(channel))

    await local_server.close()
    for n, channel in enumerate((emu.channel_id, random_id, emu.channel_id, random_id), 1):
        await emu.user_post(channel, emu.alice_id, f"@coder try {n}")
        await emu.wait_for(lambda n=n: failed_runs() == n, timeout=30, what=f"run {n} failed")
    await emu.wait_for(lambda: told(emu.channel_id) and told(random_id), timeout=30, what="a notice in each")
    await harness.idle()
    assert (told(emu.channel_id), told(random_id)) == (1, 1)
