"""Issue 19 item 1 through `roundtable run` and the Discord emulator: a model server whose
errors echo the bot token, the channel's webhook token and an API key has none of them shown
in the channel (the notice), in `/roundtable why`, in the bot's DEBUG log or in the database."""
from __future__ import annotations

import json

from tests.discord.process import BotProcess
from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply

API_KEY = "ordinary-api-key-LEAK-0006"
MARK = "LEAK-000"


async def test_model_errors_echoing_the_tokens_show_them_nowhere(tmp_path):
    echoed: list[str] = []  # the secrets, once the emulator and the group exist

    def failure(body: object) -> Reply:
        text = "proxy echo: " + " ".join(f"[{s}]" for s in echoed) + f" url=/api/webhooks/1/{echoed[1]}"
        return Reply(status=500, headers={"x-should-retry": "false"},
                     error_body={"error": {"message": text, "type": "server_error"}})

    script = GroupChatScript(selector=failure)
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm:
        bot = BotProcess(tmp_path, emu, llm, env={"ROUNDTABLE_LOG_LEVEL": "DEBUG", "SERVICE_API_KEY": API_KEY})
        try:
            channel = await bot.add_group(emu.channel_id, ("planner", "critic"), mode="selector")
            ((hook_token,),) = bot.query("SELECT token FROM webhooks")
            echoed.extend([emu.token, hook_token, API_KEY])
            script.set_agent("planner", [failure({}), "Fine."])
            await bot.start()
            await emu.user_post(emu.channel_id, emu.alice_id, "Plan a trip")
            notice = await emu.wait_for_messages(emu.channel_id, lambda m: "could not answer" in m["content"],
                                                 timeout=30)
            await bot.wait_settled()
            why = await emu.invoke_command(emu.guild_id, emu.channel_id, emu.alice_id, "roundtable why",
                                           {"message": "1"})
            answer = await why.wait_response(10)
            await bot.terminate()
        finally:
            await bot.close()
            emu.release_all()
    shown = json.dumps(answer)
    assert "selector replies" in shown and "<error: server error: HTTP 500" in shown and "[***]" in shown
    assert notice[0]["content"].startswith("planner could not answer")
    log = bot.log.read_text()
    assert "HTTP 500" in log and " DEBUG " in log and "proxy echo: [***] [***] [***]" in log
    sent = json.dumps([r.json for r in emu.requests_matching("POST")] + emu.channel_messages(emu.channel_id))
    database = b"".join(p.read_bytes() for p in tmp_path.glob("roundtable.db*")).decode("utf-8", "replace")
    stored = json.dumps(bot.query("SELECT error FROM runs") + bot.query("SELECT text FROM messages")
                        + bot.query("SELECT selector_raw, note FROM decisions"))
    assert "HTTP 500" in stored
    for where, text in (("the /roundtable why answer", shown), ("the log", log), ("what was sent to Discord", sent),
                        ("runs, messages and decisions", stored)):
        for secret in echoed:
            assert secret not in text, f"{where} holds {secret}"
    for secret in (emu.token, API_KEY):  # (the webhooks table keeps the channel's token: it posts with it)
        assert secret not in database
    assert MARK not in log + sent + stored + shown
    assert channel.group_id == 1


async def test_a_tool_returning_the_tokens_and_a_key_in_its_arguments_show_them_nowhere(tmp_path):
    """Issue 29 through `roundtable run`: a REAL MCP server's tool (mcp.json in the bot's directory) returns
    the bot token, the channel's webhook token and an API key (read from a file: only the bot's own
    registry knows them), and the model passes the key in another call's arguments; none of them is
    in the channel (the reply and its compact line of the calls), the bot's DEBUG log, the tool journal
    or the model's next request."""
    import sys
    from pathlib import Path

    from storage import open_store
    from tests.fakes.openai_server import tool_call

    bad = Path(__file__).resolve().parents[1] / "fakes" / "mcp_bad_server.py"
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"bad": {
        "command": sys.executable, "args": [str(bad)], "env": {"MCP_LEAK_FILE": str(tmp_path / "leak.txt")}}}}))
    script = GroupChatScript(agents={"planner": [
        Reply(text="Looking.", tool_calls=[tool_call("bad__secrets"), tool_call("bad__echo", text=f"key {API_KEY}")]),
        "Nothing to see."]})
    async with DiscordEmulator() as emu, FakeOpenAI(script) as llm:
        bot = BotProcess(tmp_path, emu, llm, env={"ROUNDTABLE_LOG_LEVEL": "DEBUG", "SERVICE_API_KEY": API_KEY})
        try:
            await bot.add_group(emu.channel_id, ("planner",))
            ((hook_token,),) = bot.query("SELECT token FROM webhooks")
            secrets = [emu.token, hook_token, API_KEY]
            (tmp_path / "leak.txt").write_text(" ".join(f"[{s}]" for s in secrets))
            store = await open_store(bot.target)
            try:
                group = await store.groups.find_group(f"discord:{emu.channel_id}")
                assert group is not None
                planner = await store.roster.find_agent(group.id, "planner")
                await store.tools.grant_tools(planner.id, ["bad.*"])
            finally:
                await store.close()
            await bot.start()
            await emu.user_post(emu.channel_id, emu.alice_id, "@planner show the configuration")
            await emu.wait_for_messages(emu.channel_id, lambda m: m["content"].startswith("Nothing to see."),
                                        timeout=60)
            await bot.wait_settled()
            await bot.terminate()
        finally:
            await bot.close()
            emu.release_all()
    asked = [r for r in llm.requests if GroupChatScript.classify(r) == ("participant", "planner")][-1]
    results = [m["content"] for m in asked["messages"] if m["role"] == "tool"]
    assert results == ["bot token , api key  [***] [***] [***]", "echo: key ***"]
    log = bot.log.read_text()
    sent = json.dumps([r.json for r in emu.requests_matching("POST")] + [r.json for r in emu.requests_matching("PATCH")]
                      + emu.channel_messages(emu.channel_id))
    assert "bad.secrets" in sent, sent  # the compact line of the calls went out
    stored = json.dumps(bot.query("SELECT arguments, result FROM tool_calls") + bot.query("SELECT text FROM messages"))
    assert "[***]" in stored
    for where, text in (("the log", log), ("what was sent to Discord", sent), ("the tool journal and messages", stored),
                        ("the model's next request", json.dumps(asked))):
        for secret in secrets:
            assert secret not in text, f"{where} holds {secret}"
    assert MARK not in log + sent + stored
