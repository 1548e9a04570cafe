"""`roundtable console` as a user runs it: a piped session, the real openai client, a local server."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.support import eventually
from tests.support.spawn import start_roundtable

SESSION = """\
/agent add name:planner role:"drafts the itinerary" prompt:"You plan trips."
/agent add name:budget role:"keeps the total honest" prompt:"You check costs."
/agent add name:discordbot role:x prompt:y
/roundtable config max_turns:5
/roundtable config max_turns:500
Plan a 3-day Tokyo trip for under $1,500
"""


def clean_env(tmp_path: Path, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
    env.update(OPENAI_API_KEY="sk-test-console-key", OPENAI_BASE_URL=base_url, ROUNDTABLE_MODEL="fake-model",
               PYTHONUNBUFFERED="1")
    return env


async def run_console(tmp_path: Path, base_url: str, stdin: str, *args: str) -> tuple[int, str, str]:
    proc = await start_roundtable(
        "--env-file", os.devnull, "console",
        "--db", str(tmp_path / "rt.db"), *args,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=clean_env(tmp_path, base_url), cwd=tmp_path,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 180)  # generous: a start is slow under load
    return proc.returncode or 0, out.decode(), err.decode()


async def test_piped_session_prints_the_conversation(tmp_path):
    script = GroupChatScript(
        selector=["planner", "budget", "planner", "TERMINATE"],
        agents={"planner": ["Day 1 Asakusa, day 2 Shibuya, day 3 Nikko: $1,700.", "Cheaper hotel: $1,450. TERMINATE"],
                "budget": ["@planner that is over by $200."]},
    )
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, SESSION)
    # lines 3 and 5 were refused (shown as errors below): the exit code tells a script so
    assert (code, err) == (1, "roundtable: 2 of 6 input lines were refused (lines 3, 5); exit code 1\n")
    lines = out.splitlines()
    assert "Added planner: drafts the itinerary. Tag it with @planner." in lines
    assert any(line.startswith("error: Discord refuses webhook names that contain 'discord'") for line in lines)
    assert any("max_turns: 5" in line for line in lines)
    assert "error: max_turns must be a whole number from 1 to 100 (got 500)." in lines
    convo = [line for line in lines if line.startswith("[")]
    assert convo == [
        "[you] Plan a 3-day Tokyo trip for under $1,500",
        "[planner] Day 1 Asakusa, day 2 Shibuya, day 3 Nikko: $1,700.",
        "[budget] @planner that is over by $200.",
        "[planner] Cheaper hotel: $1,450.",
    ]
    assert any(line.startswith("episode #1 ended: terminated after 3 agent messages") for line in lines)
    assert script.participant_order == ["planner", "budget", "planner"]
    assert "sk-test-console-key" not in out + err
    assert "\x1b" not in out and "you> " not in out and "typing" not in out  # a pipe gets plain lines
    assert not any(r.get("stream") for r in srv.requests)  # each row printed once, whole: nothing to stream


async def test_second_run_on_the_same_file_keeps_history_and_roster(tmp_path):
    script = GroupChatScript(selector=["planner", "TERMINATE"], agents={"planner": ["Again: $1,450."]})
    async with FakeOpenAI(script) as srv:
        await run_console(tmp_path, srv.base_url, '/agent add name:planner role:plans prompt:"You plan."\n')
        code, out, err = await run_console(tmp_path, srv.base_url, "/agent list\n/roundtable status\nonce more\n",
                                           "--as", "alice")
    assert code == 0, err
    assert "planner: plans" in out
    assert "[alice] once more" in out and "[planner] Again: $1,450." in out


async def test_missing_api_key_is_one_line(tmp_path):
    env = clean_env(tmp_path, "http://127.0.0.1:9/v1")
    del env["OPENAI_API_KEY"]
    proc = await start_roundtable(
        "--env-file", os.devnull, "console", "--db", str(tmp_path / "x.db"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        cwd=tmp_path,
    )
    _out, err = await asyncio.wait_for(proc.communicate(b""), 180)
    assert proc.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roundtable: OPENAI_API_KEY is missing")


async def test_a_second_console_on_the_same_group_is_refused_in_one_line(tmp_path):
    script = GroupChatScript(agents={"planner": [Reply("Slowly.", delay=3.0)]})
    async with FakeOpenAI(script) as srv:
        first = await start_roundtable(
            "--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=clean_env(tmp_path, srv.base_url), cwd=tmp_path)
        assert first.stdin is not None
        first.stdin.write(b'/agent add name:planner role:plans prompt:"You plan."\n@planner go\n')
        await first.stdin.drain()
        # the first console is in the middle of a model call
        await eventually(lambda: script.participant_order, "the first console's model call")
        code, out, err = await run_console(tmp_path, srv.base_url, "@planner me too\n")
        first.stdin.close()
        first_out, _first_err = await asyncio.wait_for(first.communicate(), 180)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roundtable: the group 'main' is open in another console (pid ")
    assert lines[0].endswith("close it there, or open another group with --group NAME")
    assert first.returncode == 0 and "[planner] Slowly." in first_out.decode()
    assert script.participant_order == ["planner"]  # the refused console called no model


async def test_a_console_beside_a_running_bot_never_touches_its_groups(tmp_path):
    from tests.discord.process import BotProcess, UniqueReplies
    from tests.discord_emulator import DiscordEmulator

    replies = UniqueReplies()
    async with DiscordEmulator() as emu, FakeOpenAI(replies) as llm:
        bot = BotProcess(tmp_path, emu, llm)
        bot.db = tmp_path / "rt.db"
        try:
            channel = await bot.add_group(emu.channel_id)
            await bot.start()
            replies.hang = 1  # the bot is in the middle of a run when the console opens the file
            await emu.user_post(emu.channel_id, emu.alice_id, "@echo are you there?")
            await emu.wait_for(lambda: replies.participant_order, timeout=20, what="the bot's model call")
            code, out, err = await run_console(
                tmp_path, llm.base_url, '/agent add name:planner role:plans prompt:"You plan."\n@planner hi\n')
            assert code == 0, err
            assert [line for line in out.splitlines() if line.startswith("[")] == [
                "[you] @planner hi", "[planner] planner reply 2."]
            assert bot.query("SELECT status FROM runs WHERE group_id = ?", (channel.group_id,)) == [("running",)]
            assert bot.query("SELECT label FROM leases WHERE group_id = ?", (channel.group_id,)) == [("discord bot",)]
            await bot.kill()  # the bot dies mid-run; the next start finishes its turn, once
            await bot.start()
            await bot.wait_settled()
            from tests.discord.process import check_once
            assert check_once(bot, [channel]) == {"people": 1, "replies": 1}
        finally:
            await bot.close()
            emu.release_all()


async def test_piped_agent_add_without_prompt_is_an_error_and_the_next_line_a_message(tmp_path):
    async with FakeOpenAI(GroupChatScript()) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url,
                                           "/agent add name:planner role:plans\nYou plan trips.\n")
    assert (code, err) == (1, "roundtable: 1 of 2 input lines was refused (line 1); exit code 1\n")
    assert out.splitlines()[:3] == [
        ('error: System prompt for planner is missing: give it as prompt:"..." (the console asks for it only '
         'when its input is a terminal).'),
        "[you] You plan trips.",
        ('No agents here yet: add one with /agent add name:planner role:"trip planner who drafts the itinerary" '
         'prompt:"You plan trips."'),
    ]


async def test_piped_input_exits_1_when_a_line_was_refused_and_0_when_every_line_was_taken(tmp_path):
    from bot.core.rules.validation import MESSAGE_MAX

    refused = ("/agnet list\n"  # an unknown command
               "/agent add name:planner role:plans prompt:\"You plan.\" colour:blue\n"  # an unknown option
               '/agent add name:planner role:"plans\n'  # an unclosed quote
               + "x" * (MESSAGE_MAX + 1) + "\n")  # a message over the limit
    taken = ('/agent add name:planner role:plans prompt:"You plan."\n'
             "@nobody hello\n")  # a hint (nobody is not an agent), not a refusal: the message is posted
    async with FakeOpenAI(GroupChatScript(agents={"planner": ["Hi."]})) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, refused + taken)
        assert (code, err) == (1, "roundtable: 4 of 6 input lines were refused (lines 1, 2, 3, 4); exit code 1\n")
        assert [line for line in out.splitlines() if line.startswith("error: ")][3] == (
            f"error: The message is {MESSAGE_MAX + 1} characters long; the limit is {MESSAGE_MAX}.")
        code, out, err = await run_console(tmp_path, srv.base_url, "@planner hi\n/agent list\n")
    assert (code, err) == (0, "")
    assert "[planner] Hi." in out


async def test_piped_hints_for_no_agents_and_unknown_tags(tmp_path):
    script = GroupChatScript(agents={"budget": ["Fine by me."]})
    session = ("hello?\nanyone?\n"
               '/agent add name:planner role:plans prompt:"You plan."\n'
               '/agent add name:budget role:costs prompt:"You count."\n'
               "/agent disable name:planner\n"
               "@plannr and @budget: `@code` is fine, so is bob@plannr.com\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    assert code == 0, err
    # ("episode #1 ended: quiet ..." may come before or after the next line is read: not looked at here)
    lines = [line for line in out.splitlines() if not line.startswith("episode #")]
    hint = ('No agents here yet: add one with /agent add name:planner role:"trip planner who drafts the itinerary" '
            'prompt:"You plan trips."')
    assert lines[:3] == ["[you] hello?", hint, "[you] anyone?"]  # the hint once, not for every message
    message = lines.index("[you] @plannr and @budget: `@code` is fine, so is bob@plannr.com")
    assert lines[message + 1] == "@plannr is not an agent here (agents: budget)"
    assert "[budget] Fine by me." in lines  # the message was posted and routed all the same
    assert script.participant_order == ["budget"]


async def test_piped_end_of_input_while_paused_says_what_waits_and_exits(tmp_path):
    script = GroupChatScript(agents={"planner": ["Never asked."]})
    session = ('/agent add name:planner role:plans prompt:"You plan."\n/roundtable pause\n'
               "@planner one\ntwo\nthree\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    assert code == 0, err
    assert out.splitlines()[-4:] == ["[you] @planner one", "[you] two", "[you] three",
                                     "paused: 3 messages wait for /roundtable resume"]
    assert script.calls == []


async def test_sigint_stops_a_piped_console_at_once_and_interrupts_the_run(tmp_path):
    import signal
    import sqlite3

    script = GroupChatScript(agents={"planner": [Reply("Too late.", delay=3600.0)]})
    async with FakeOpenAI(script) as srv:
        proc = await start_roundtable(
            "--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=clean_env(tmp_path, srv.base_url), cwd=tmp_path)
        assert proc.stdin is not None
        proc.stdin.write(b'/agent add name:planner role:plans prompt:"You plan."\n@planner go\n')
        await proc.stdin.drain()  # and the input stays open: the reading thread is blocked on it
        await eventually(lambda: script.participant_order, "the model call")
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 180)  # the model would answer in an hour
    assert proc.returncode == 130
    assert "Traceback" not in err.decode() and "[you] @planner go" in out.decode()
    with sqlite3.connect(tmp_path / "rt.db") as db:
        assert db.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]


async def test_the_four_reading_verbs_in_the_console(tmp_path):
    script = GroupChatScript(selector=["TERMINATE"] * 10, default_agent_reply=lambda name, n: f"{name} note {n}",
                             summary=["Bob asked the planner twice; it answered both."])
    async with FakeOpenAI(script) as srv:
        setup = '/agent add name:planner role:plans prompt:"You plan."\n/read\n'
        code, out, err = await run_console(tmp_path, srv.base_url, setup, "--as", "alice")
        assert code == 0, err
        await run_console(tmp_path, srv.base_url, "@planner one\n@planner two, and @alice please look\n",
                          "--as", "bob")
        code, out, err = await run_console(tmp_path, srv.base_url,
                                           "/unread\n/inbox\n/catchup\n/catchup\n/read\n/unread\n", "--as", "alice")
    assert code == 0, err
    lines = out.splitlines()
    assert "4 unread messages in main" in lines
    assert "  start reading at: #1 by bob" in lines
    assert "  tag you: #2 bob: @planner two, and @alice please look" in lines
    assert "1 message tags you" in lines and "  bob in main (#2): @planner two, and @alice please look" in lines
    assert lines.count("Bob asked the planner twice; it answered both.") == 2  # the second one is stored
    assert len([c for c in script.calls if c[0] == "other"]) == 1
    assert "Marked main read through #4." in lines
    assert lines[-1] == "Nothing new in main: you have read everything."


async def test_export_and_usage_typed_in_the_console(tmp_path):
    script = GroupChatScript(selector=["planner", "TERMINATE"],
                             agents={"planner": ["Day 1: **Asakusa** <script>x</script>"]})
    async with FakeOpenAI(script, models=["fake-model", "gpt-4o-mini"]) as srv:
        code, _, err = await run_console(tmp_path, srv.base_url, SESSION)
        assert code == 1, err  # two lines of SESSION are refused
        code, out, err = await run_console(tmp_path, srv.base_url,
                                           "/roundtable export format:md\n/roundtable export\n/roundtable usage\n")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"main: 2 messages, 1 episode, as Markdown. Written to {tmp_path}/main-transcript.md"
    assert lines[1] == f"main: 2 messages, 1 episode, as a page to read. Written to {tmp_path}/main-transcript.html"
    md = (tmp_path / "main-transcript.md").read_text()
    assert "> Plan a 3-day Tokyo trip for under $1,500" in md and "> Day 1: **Asakusa** &lt;script>x&lt;/script>" in md
    assert lines[2] == "Usage in the last 7 days"
    planner = next(line for line in lines if line.startswith("  planner: "))
    assert planner.startswith("  planner: 1 call · ") and "no price known" in planner  # fake-model has no price


async def test_ask_in_the_console_privately_then_posted(tmp_path):
    script = GroupChatScript(selector=lambda body: "TERMINATE")
    script.set_direct("planner", ["Start in Asakusa.", "Posted plan: Asakusa, Ueno."])
    session = (
        '/agent add name:planner role:plans prompt:"You plan trips."\n'
        '/ask agent:planner prompt:"where do we start?"\n'
        '/ask agent:nobody prompt:hi\n'
        '/ask agent:planner\n'
        '/ask agent:planner prompt:"post it" post:true\n'
    )
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session, "--as", "alice")
    assert (code, err) == (1, "roundtable: 2 of 5 input lines were refused (lines 3, 4); exit code 1\n")
    lines = out.splitlines()
    at = lines.index("planner (only you see this):")
    assert lines[at + 1] == "Start in Asakusa."
    assert any(line.startswith("error: No agent named 'nobody' in this group") for line in lines)
    assert "error: /ask needs prompt: /ask agent prompt [post]" in lines
    assert "[planner] Posted plan: Asakusa, Ueno." in lines  # once, as any public message
    assert lines.count("[planner] Posted plan: Asakusa, Ueno.") == 1
    assert "planner's answer is posted in the group: #1" in lines
    assert "alice asks you (planner) directly" in srv.requests[0]["messages"][-1]["content"]


async def test_memory_in_the_console(tmp_path):
    note = "Alice travels by train."
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("memory_write", note=note)]),
                                                 "Day 1: the train to Kyoto."]})
    session = ('/agent add name:planner role:plans prompt:"You plan."\n/roundtable config mode:tags\n'
               "/agent edit name:planner memory:on\n@planner plan Kyoto\n")
    later = ("/agent memory show name:planner\n/agent show name:planner\n/agent memory clear name:planner\n"
             "/agent memory show name:planner\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
        assert code == 0, err
        assert "Updated planner: memory is on." in out.splitlines()
        assert "[planner] Day 1: the train to Kyoto." in out.splitlines()
        code, out, err = await run_console(tmp_path, srv.base_url, later)
    assert code == 0, err
    lines = out.splitlines()
    start = lines.index("Memory of planner")
    assert lines[start + 1] == "1 note, newest first; memory is on."
    assert lines[start + 2].startswith("  ") and lines[start + 2].endswith(f" UTC: {note}")
    assert "  memory: on, 1 note" in lines
    assert lines[-2:] == ["Cleared 1 note of planner.", "planner has no notes (memory is on)."]


async def test_schedules_are_added_listed_and_removed(tmp_path):
    session = """\
/agent add name:planner role:plans prompt:"You plan."
/agent schedule add name:planner every:2h prompt:"sum up the day"
/agent schedule add name:planner at:9:00 tz:europe/paris prompt:"plan the morning"
/agent schedule add name:planner every:1m prompt:x
/agent schedule add name:planner at:09:00 tz:Mars/Base prompt:x
/agent schedule add name:planner every:2h at:09:00 prompt:x
/agent schedule add name:nobody every:2h prompt:x
/agent schedule list
/agent schedule remove id:1
/agent schedule remove id:7
/agent schedule list name:planner
"""
    async with FakeOpenAI(GroupChatScript()) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
        again, out2, err2 = await run_console(tmp_path, srv.base_url, "/agent schedule list\n")
    assert (code, err) == (1, "roundtable: 5 of 11 input lines were refused (lines 4, 5, 6, 7, 10); exit code 1\n")
    assert (again, err2) == (0, "")
    lines = out.splitlines()
    added = [line for line in lines if line.startswith("Scheduled #")]
    assert len(added) == 2
    assert added[0].startswith("Scheduled #1 for planner, every 2h: next run ") and added[0].endswith(
        " UTC. /agent schedule remove id:1 removes it.")
    assert added[1].startswith("Scheduled #2 for planner, daily at 09:00 Europe/Paris: next run ")
    assert " 09:00 CE" in added[1] and " UTC)." in added[1]  # in the schedule's zone (CET or CEST), and in UTC
    assert "error: every must be at least 5m (got '1m')." in lines
    assert any(line.startswith("error: Unknown time zone 'Mars/Base'") for line in lines)
    assert "error: Give either every (e.g. every:2h) or at (e.g. at:09:00), not both." in lines
    assert any(line.startswith("error: No agent named 'nobody'") for line in lines)
    first_list = lines.index("Schedules of main") if "Schedules of main" in lines else None
    assert first_list is not None, out
    assert any(line.startswith("  #1 planner: every 2h; next run ") for line in lines)
    assert "    sum up the day" in lines
    assert "Removed schedule #1 (planner, every 2h)." in lines
    assert "error: There is no schedule #7 here; /agent schedule list shows the ids." in lines
    after = lines[lines.index("Schedules of planner"):]
    assert not any(line.startswith("  #1 ") for line in after)
    assert any(line.startswith("  #2 planner") for line in after)
    # the schedules are in the file: a later session lists the one left
    assert "  #2 planner: daily at 09:00 Europe/Paris; next run" in out2 and "#1 planner" not in out2
    assert "Traceback" not in err + err2


async def test_the_console_refuses_a_person_named_like_an_agent_or_an_empty_name(tmp_path):
    async with FakeOpenAI(GroupChatScript()) as srv:
        await run_console(tmp_path, srv.base_url, '/agent add name:planner role:plans prompt:"You plan."\n')
        code, out, err = await run_console(tmp_path, srv.base_url, "hello\n", "--as", "Planner")
        assert code == 2 and out == ""
        assert err.strip() == ("roundtable: --as Planner: an agent of the group 'main' has that name; "
                               "the agents could not tell you apart. Choose another name.")
        for option in ("--as", "--group"):
            code, out, err = await run_console(tmp_path, srv.base_url, "hello\n", option, " ")
            assert code == 2 and out == ""
            assert err.strip().splitlines() == [
                f"roundtable: argument {option}: {option} needs a name, not an empty string "
                "(see roundtable console --help)"]


async def test_episode_lines_count_in_words_and_none_when_no_agent_answered(tmp_path):
    script = GroupChatScript(agents={"planner": ["Done. TERMINATE"]})
    session = 'hello, anyone?\n/agent add name:planner role:plans prompt:"You plan."\n@planner go\n'
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    assert code == 0, err
    episodes = [line for line in out.splitlines() if line.startswith("episode #")]
    # It said "episode #1 ended: quiet after 0 agent messages, 0 tokens" and "after 1 agent messages".
    assert len(episodes) == 1 and episodes[0].startswith("episode #2 ended: terminated after 1 agent message, ")
    assert episodes[0].endswith(" tokens") and "[planner] Done." in out


async def test_attach_refuses_what_is_not_a_regular_file(tmp_path):
    """`/attach /dev/zero` read without end (the console hung, its memory growing) and a named
    pipe blocked it for good: only a regular file is attached."""
    os.mkfifo(tmp_path / "pipe.txt")
    script = GroupChatScript(agents={"planner": ["Seen."]})
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, (
            '/agent add name:planner role:plans prompt:"You plan."\n'
            "/attach /dev/zero\n/attach pipe.txt\n/attach\n@planner hello\n"))
    assert code == 1, err  # the refused lines
    lines = out.splitlines()
    assert "error: /dev/zero is not a regular file: /attach takes the path of a file." in lines
    assert "error: pipe.txt is not a regular file: /attach takes the path of a file." in lines
    assert "Nothing is attached. /attach PATH attaches a file (an image or a text file) to your next message." in lines
    assert "[planner] Seen." in out


async def test_only_an_attached_images_path_is_kept_in_its_row(tmp_path):
    """A text file's content is in its row: its local path is not kept (an export shared later would
    show where the person keeps files); an image's is, as it is read again when a run is made."""
    import json
    import sqlite3

    from tests.discord.test_attachments import png

    (tmp_path / "notes.md").write_text("remember the milk\n")
    (tmp_path / "shot.png").write_bytes(png(4, 4))
    script = GroupChatScript(agents={"planner": ["Seen."]})
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, (
            '/agent add name:planner role:plans prompt:"You plan."\n'
            "/attach notes.md\n/attach shot.png\n@planner look\n"))
    assert code == 0, err
    with sqlite3.connect(tmp_path / "rt.db") as db:
        [(stored,)] = db.execute("SELECT attachments FROM messages WHERE attachments <> '[]'").fetchall()
    urls = {f["name"]: f.get("url") for f in json.loads(stored)}
    assert urls == {"notes.md": None, "shot.png": str(tmp_path / "shot.png")}
    assert "[planner] Seen." in out


async def test_what_agents_could_not_use_is_told_in_the_console_too(tmp_path):
    (tmp_path / "fake.png").write_text("not a picture at all\n")
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    script = GroupChatScript(agents={"planner": ["Seen."], "critic": ["Seen too."]})
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, (
            '/agent add name:planner role:plans prompt:"You plan."\n'
            '/agent add name:critic role:checks prompt:"You check."\n'
            "/roundtable config mode:tags\n/attach fake.png\n/attach blob.bin\n@planner @critic look\n"))
    assert code == 0, err
    told = [line for line in out.splitlines() if "📎" in line]
    assert [line.partition("📎 ")[2] for line in told] == [
        "you, not used: blob.bin (agents see only its name: it is no image or text file).",
        "you, not used: fake.png (it is not a PNG, JPEG, GIF or WebP image)."], out
    assert "[planner] Seen." in out and "[critic] Seen too." in out


async def test_mute_and_model_settings_in_the_console(tmp_path):
    script = GroupChatScript(default_agent_reply=lambda name, n: f"{name} reply {n}")
    session = """\
/agent add name:planner role:plans prompt:"You plan."
/agent add name:local role:"knows Tokyo" prompt:"You know the city."
/roundtable config mode:tags
/agent edit name:planner temperature:0.4 max_tokens:300
/agent edit name:planner temperature:3
/agent show name:planner
/agent mute name:local for:soon
/agent mute name:local for:1h
/agent list
@local hi
@all hello
"""
    later = "/agent unmute name:local\n@local again\n"
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
        lines = out.splitlines()
        assert code == 1 and "2 of 11 input lines were refused (lines 5, 7)" in err
        code, out, err = await run_console(tmp_path, srv.base_url, later)
    assert code == 0, err
    assert "error: temperature must be a number from 0 to 2, or default (got '3')." in lines
    assert "Updated planner: temperature 0.4, max_tokens 300, context_budget the group's." in lines
    assert "  model settings: temperature 0.4, max_tokens 300, context_budget the group's" in lines
    assert "error: for must be a duration such as 30m, 1h, 2d or 1h30m (got 'soon')." in lines
    assert any(line.startswith("local is muted until ") and "(1h left): it is left out of selection" in line
               for line in lines)
    assert any(line.startswith("  local (muted until ") for line in lines)  # /agent list
    told = [line for line in lines if "A muted agent does not answer tags" in line]
    assert len(told) == 1 and told[0].startswith("[roundtable] local is muted until ")  # @local only: @all is silent
    assert [line for line in lines if line.startswith(("[planner]", "[local]"))] == ["[planner] planner reply 1"]
    later_lines = out.splitlines()
    assert "local is unmuted: it can be selected and tagged again." in later_lines
    assert "[local] local reply 1" in later_lines
    planner = [r for r in srv.requests if GroupChatScript.classify(r) == ("participant", "planner")]
    assert [(r.get("temperature"), r.get("max_tokens")) for r in planner] == [(0.4, 300)]
async def test_regenerate_in_a_piped_console_prints_the_message_again(tmp_path):
    script = GroupChatScript(selector=["planner", "TERMINATE", "planner", "TERMINATE"],
                             agents={"planner": ["Day 1: temples.", "Day 1: sushi, then temples.", "Glad it helps."]})
    session = (
        "/regenerate\n"
        '/agent add name:planner role:plans prompt:"You plan trips."\n'
        "Plan day 1\n"
        "/regenerate\n"
        "/regenerate planner\n"
        "@planner thanks\n"
        "/help\n"
        "/help chat\n"
    )
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
    assert (code, err) == (1, "roundtable: 2 of 8 input lines were refused (lines 1, 5); exit code 1\n")
    lines = out.splitlines()
    assert any(line.startswith("/help chat") and line.endswith("/attach, /detach, /regenerate") for line in lines)
    assert any(line.startswith("/regenerate  Have the newest agent message written again") for line in lines)
    assert "error: There is no agent message here to regenerate yet." in lines
    assert "error: /regenerate takes nothing after it: it regenerates the newest agent message." in lines
    assert [line for line in lines if line.startswith("[")] == [
        "[you] Plan day 1",
        "[planner] Day 1: temples.",
        "[planner] (regenerated) Day 1: sushi, then temples.",
        "[you] @planner thanks",
        "[planner] Glad it helps.",
    ]
    planner = [r for r in srv.requests if "You are planner, the " in str(r["messages"])]
    assert planner[0]["messages"] == planner[1]["messages"]  # the same snapshot, the same prompt
    assert "Day 1: sushi, then temples." in str(planner[2]["messages"])  # later prompts read the new text
    assert "Day 1: temples." not in str(planner[2]["messages"])


@pytest.mark.slow
async def test_a_regenerate_killed_mid_run_changes_nothing_and_the_next_start_regenerates_once(tmp_path):
    """kill -9 while /regenerate waits for the model: the next start marks that run interrupted, runs
    nothing again for it, and the message keeps its text with no version; /regenerate then works once."""
    import signal
    import sqlite3

    script = GroupChatScript(selector=["planner", "TERMINATE"],
                             agents={"planner": ["Day 1: temples.", Reply("Never shown.", delay=3600.0),
                                                 "Day 1: sushi, then temples."]})
    async with FakeOpenAI(script) as srv:
        proc = await start_roundtable(
            "--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=clean_env(tmp_path, srv.base_url), cwd=tmp_path)
        assert proc.stdin is not None
        proc.stdin.write(b'/agent add name:planner role:plans prompt:"You plan."\nPlan day 1\n/regenerate\n')
        await proc.stdin.drain()
        await eventually(lambda: len(script.participant_order) == 2, "the regenerate's model call")
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.communicate(), 180)
        with sqlite3.connect(tmp_path / "rt.db") as db:
            assert db.execute("SELECT kind, status FROM runs ORDER BY id").fetchall() == [
                ("group", "posted"), ("regenerate", "running")]  # cut: nothing settled
        code, out, err = await run_console(tmp_path, srv.base_url, "/roundtable status\n")
        assert (code, err) == (0, "")
        assert "[planner]" not in out  # nothing shown again
        assert len(script.participant_order) == 2  # nothing run again for it
        with sqlite3.connect(tmp_path / "rt.db") as db:
            assert db.execute("SELECT kind, status FROM runs ORDER BY id").fetchall() == [
                ("group", "posted"), ("regenerate", "interrupted")]
            assert db.execute("SELECT text FROM messages WHERE seq = 2").fetchall() == [("Day 1: temples.",)]
            assert db.execute("SELECT COUNT(*) FROM message_versions").fetchall() == [(0,)]
        code, out, err = await run_console(tmp_path, srv.base_url, "/regenerate\n")
        assert (code, err) == (0, "")
        assert [line for line in out.splitlines() if line.startswith("[")] == [
            "[planner] (regenerated) Day 1: sushi, then temples."]
    with sqlite3.connect(tmp_path / "rt.db") as db:
        assert db.execute("SELECT version, text FROM message_versions").fetchall() == [(1, "Day 1: temples.")]
