"""The console's command verbs in process (the same verbs Discord uses: `bot.core.verbs.admin.Verbs`)."""
from __future__ import annotations

import io

import pytest

from bot.core.models import Agent, GroupSettings
from bot.core.runtime.engine import Engine
from bot.core.verbs.admin import verbs_of
from bot.llm.tokens import make_token_counter
from bot.surfaces.console.surface import NO_AGENTS, Console, ConsoleSurface
from storage.store import SqliteStore
from tests.fakes.scripted_llm import ScriptedLLM
from tests.support import bound


@pytest.fixture
async def console(tmp_path):
    out = io.StringIO()
    store = await SqliteStore.open(tmp_path / "c.db")
    llm = ScriptedLLM(selector=["planner", "TERMINATE"], default_agent_reply=lambda name, n: f"{name} reply {n}")
    surface = ConsoleSurface(out)
    engine = Engine(store, llm, surface, make_token_counter())
    con = Console(engine, surface, store=store, verbs=verbs_of(engine, store), person="you", group_name="main",
                  defaults=GroupSettings(), interactive=True)
    await con.open()
    await engine.start()
    lines: list[str] = []

    async def read_line(*, more: bool = False) -> str:
        return lines.pop(0) + "\n" if lines else ""

    async def send(*inputs: str) -> list[str]:
        start = len(out.getvalue())
        for line in inputs:
            await con.handle(line, read_line)
        await engine.wait_idle(con.group.id, bound(10))
        return out.getvalue()[start:].splitlines()

    async def store_agent(name: str) -> Agent | None:
        return await store.roster.find_agent(con.opened().id, name)

    con.database = store  # the whole store the console was handed its roles of (a test reaches the others)
    con.send = send
    con.store_agent = store_agent
    con.pending_input = lines
    try:
        yield con
    finally:
        await engine.close()
        await store.close()


@pytest.mark.parametrize("verb", ["remove name:extra", "disable name:extra", "rename name:extra new_name:other",
                                  "edit name:extra role:another prompt:q"])
async def test_an_agent_another_process_removes_meanwhile_is_answered_by_name(console, tmp_path, verb):
    """The agent is found, then another process removes it before the change: the same answer
    as when it was gone already, never the store's id."""
    await console.send("/agent add name:extra role:r prompt:p")
    store, other = console.database, await SqliteStore.open(tmp_path / "c.db")
    find_agent, found = store.roster.find_agent, []

    async def found_then_removed(group_id: int, name: str) -> Agent | None:
        if not found:  # the first lookup: then the other process removes it
            found.append(await find_agent(group_id, name))
            await other.roster.remove_agent(found[0].id)
        return found[0]  # and a later lookup still sees it (read before the removal)

    store.roster.find_agent = found_then_removed
    try:
        out = await console.send(f"/agent {verb}")
    finally:
        del store.roster.find_agent
        await other.close()
    assert out == ["error: No agent named 'extra' in this group (agents: none yet)."]


async def test_agent_verbs_and_errors(console):
    out = await console.send('/agent add name:planner role:"drafts the itinerary" prompt:"You plan."')
    assert out == ["Added planner: drafts the itinerary. Tag it with @planner."]
    console.pending_input.extend(["You check costs.", "Every one of them.", "."])
    out = await console.send("/agent add name:budget role:costs")
    assert out == [("System prompt for budget: type it on one or more lines, then a line holding only a dot (.) "
                    "or Ctrl-D to end it:"),
                   "Added budget: costs. Tag it with @budget."]
    assert (await console.store_agent("budget")).system_prompt == "You check costs.\nEvery one of them."
    console.interactive = False  # input from a pipe: the next line is never taken as the prompt
    out = await console.send("/agent add name:local role:knows")
    assert out == [('error: System prompt for local is missing: give it as prompt:"..." (the console asks for it '
                    'only when its input is a terminal).')]
    assert (await console.send("/agent add name:PLANNER role:r prompt:p")) == [
        "error: An agent named 'planner' is already in this group; choose another name."]
    assert (await console.send("/agent add name:all role:r prompt:p"))[0].startswith("error: 'all' is reserved")
    spaced = await console.send('/agent add name:"two words" role:r prompt:p')
    assert "error: The agent name 'two words' contains a space" in spaced[0]
    assert "contains '🙂'" in (await console.send("/agent add name:🙂 role:r prompt:p"))[0]
    zero_width = await console.send("/agent add name:pla\u200bnner role:r prompt:p")
    assert "U+200B (zero width space)" in zero_width[0]
    assert (await console.send("/agent show name:nobody"))[0].startswith("error: No agent named 'nobody'")
    assert await console.send("/agent disable name:budget") == ["budget is disabled."]
    assert await console.send("/agent list") == ["Agents of main", "  planner: drafts the itinerary",
                                                 "  budget (disabled): costs"]
    assert await console.send("/agent edit name:planner model:gpt-x") == ["Updated planner."]  # the prompt is kept
    assert "  model: gpt-x" in await console.send("/agent show name:planner")
    assert (await console.store_agent("planner")).system_prompt == "You plan."
    assert (await console.send("/agent rename name:planner new_name:Planner2"))[0].startswith(
        "Renamed planner to Planner2: tag it with @Planner2.")
    assert (await console.send("/agent rename name:Planner2 new_name:budget"))[0] == (
        "error: An agent named 'budget' is already in this group; choose another name.")
    await console.send("/agent rename name:Planner2 new_name:planner")
    assert await console.send("/agent remove name:budget") == ["Removed budget. Its messages stay in the history."]
    assert (await console.send("/agent frobnicate name:x"))[0].startswith("error: Unknown command")
    assert (await console.send("/roundtable why 42")) == [
        "error: Unexpected '42' after /roundtable why: write its options as name:value (message:…)."]
    assert (await console.send("/help me")) == [
        "error: topic must be one of roundtable, agent, extras, chat (got 'me')."]
    assert (await console.send("/agent add name:x role:r prompt:p colour:red"))[0] == (
        "error: /agent add has no option 'colour' (options: name, role, prompt, model, avatar).")
    assert (await console.send("/agent add role:r"))[0] == (
        "error: /agent add needs name: /agent add name role [prompt] [model] [avatar]")


async def test_roundtable_verbs(console):
    await console.send('/agent add name:planner role:plans prompt:"You plan."')
    assert await console.send("/roundtable pause") == [
        "Paused: messages are still recorded, agents wait until /roundtable resume."]
    out = await console.send("@planner are you there?")
    assert out == ["[you] @planner are you there?"]  # recorded, nobody answers while paused
    out = await console.send("/roundtable resume")
    assert out[0].startswith("Resumed") and "[planner] planner reply 1" in out
    why = await console.send("/roundtable why message:1")
    assert why == ["#1 by you", "  source: tags", "  chosen: planner"]
    assert (await console.send("/roundtable why message:99"))[0].startswith("error: There is no message #99")
    usage = await console.send("/roundtable usage days:1")
    assert ("  planner: 1 call · 100 prompt / 10 cached / 20 completion tokens · no price known for fake (1 call)"
            in usage)
    assert usage[0] == "Usage in the last day"
    status = "\n".join(await console.send("/roundtable status"))
    assert "planner: read through #" in status and "  mode: selector" in status
    assert (await console.send("/roundtable config mode:chaos"))[0] == (
        "error: mode must be one of selector, round_robin, tags (got 'chaos').")
    assert (await console.send("/roundtable config pace:-1"))[0].startswith("error: pace must be a number")
    assert "  mode: tags" in await console.send("/roundtable config mode:tags")
    assert "  show_tools: on" in status
    assert "  show_tools: off" in await console.send("/roundtable config show_tools:off")
    assert await console.send("/roundtable stop") == ["No episode is running."]  # the selector said TERMINATE
    assert "\u200b" not in "".join(await console.send("/agent list"))
    assert (await console.send("/roundtable disable"))[0].startswith("Roundtable is off")
    assert (await console.send("hello?"))[0].startswith("error: Roundtable is off")
    assert (await console.send("/roundtable setup"))[0].startswith("Roundtable is on in main (mode tags, max_turns 12)")


async def test_hints_when_nobody_can_answer_or_a_tag_names_nobody(console):
    assert (await console.send("hi"))[:2] == ["[you] hi", NO_AGENTS]
    assert NO_AGENTS not in await console.send("again?")  # once, while the roster stays the same
    await console.send('/agent add name:planner role:plans prompt:"You plan."',
                       '/agent add name:budget role:costs prompt:"You count."',
                       "/agent disable name:planner", "/agent disable name:budget")
    assert (await console.send("hello"))[:2] == [
        "[you] hello",
        "No agent here is on (planner and budget are disabled): /agent enable name:planner lets it answer."]
    await console.send("/agent enable name:planner")
    out = await console.send("@budget, @plannr and @Plannr. @all @user @everyone `@x` a@b.c http://x.io/@y")
    assert out[1:3] == ["@plannr is not an agent here (agents: planner)",
                        "@budget is disabled: /agent enable name:budget lets it answer."]
    out = await console.send("@zed @yan")
    assert out[1] == "@zed and @yan are not agents here (agents: planner)"
    assert not any(line.startswith("@") for line in await console.send("@planner fine"))


async def test_end_of_input_while_paused_counts_what_waits(console):
    await console.send('/agent add name:planner role:plans prompt:"You plan."', "/roundtable pause")
    await console.send("one", "two")
    start = len(console.surface.screen.out.getvalue())
    await console.finish()
    assert console.surface.screen.out.getvalue()[start:] == "paused: 2 messages wait for /roundtable resume\n"
    await console.send("/roundtable resume")
    start = len(console.surface.screen.out.getvalue())
    await console.finish()
    assert "paused" not in console.surface.screen.out.getvalue()[start:]


async def test_a_console_whose_group_was_taken_over_says_so_once_and_keeps_the_message(console, tmp_path):
    await console.send('/agent add name:planner role:plans prompt:"You plan."')
    group = console.group
    console.engine.drop(group.id)  # what the lease keeper does when another process took the lease
    await console.database.leases.release_leases([group.id])
    other_store = await SqliteStore.open(tmp_path / "c.db")
    other = Engine(other_store, ScriptedLLM(), ConsoleSurface(io.StringIO()), make_token_counter(),
                   scope="console:main")
    try:
        assert await other.claim(group) is None
        first = await console.send("@planner are you there?")
        second = await console.send("@planner still?")
        assert first[0].startswith("error: the group 'main' is run by another ") and "(pid " in first[0]
        assert first[0].endswith("your messages are saved here and answered there")
        assert not any(line.startswith("error:") for line in second)  # said once
        texts = [m.text for m in await other_store.thread.messages(group.id)]
        assert texts[-2:] == ["@planner are you there?", "@planner still?"]
    finally:
        await other.close()
        await other_store.close()


async def test_status_after_reading_everything_printed(console):
    # It said "unread for you: 1" (the reply printed on the screen) and "last decision: #2 none -> nobody"
    # (the agent's row, which in tags mode routes nobody).
    await console.send('/agent add name:planner role:plans prompt:"You plan."', "/roundtable config mode:tags")
    assert (await console.send("@planner hi"))[:2] == ["[you] @planner hi", "[planner] planner reply 1"]
    status = await console.send("/roundtable status")
    assert "  unread for you: 0" in status and "  last decision: #1 tags -> planner" in status
    assert "  episode: #1 quiet, task #1, 1 agent message, " in "\n".join(status)
    assert await console.send("/unread") == ["Nothing new in main: you have read everything."]
    await console.send("again, @planner")
    assert "  last decision: #3 tags -> planner" in await console.send("/roundtable status")


async def test_why_without_a_message_explains_the_newest_person_or_agent_message(console):
    # The cap's notice is the newest row: `why` explained it ("Not routed yet": notices select nobody).
    await console.send('/agent add name:planner role:plans prompt:"You plan."')
    await console.send("/roundtable config max_turns:1 mode:tags")
    out = await console.send("@planner plan it")
    assert any(line.startswith("[roundtable] Stopped after 1 agent message") for line in out)
    rows = await console.database.thread.messages(console.group.id)
    newest_agent = max(m.seq for m in rows if m.author_type == "agent")
    assert rows[-1].author_type == "system" and newest_agent < rows[-1].seq
    why = await console.send("/roundtable why")
    assert why[0] == f"#{newest_agent} by planner"


async def test_newtask_is_in_help_and_makes_the_next_message_start_fresh(console):
    await console.send('/agent add name:planner role:plans prompt:"You plan."')
    await console.send("/roundtable config mode:tags")
    assert any("/roundtable newtask" in line for line in await console.send("/help roundtable"))
    await console.send("@planner [TASK1] plan Tokyo")
    assert await console.send("/roundtable newtask") == [
        "The next message starts a new task: earlier requests are not carried into its prompts."]
    await console.send("@planner plan Osaka")
    await console.send("@planner and add Nara")  # within followup_window: continues Osaka only
    prompts = ["\n".join(m.content for m in messages[1:]) for kind, _, messages in console.engine.llm.history
               if kind == "participant"]
    assert len(prompts) == 3
    assert "Earlier requests" not in prompts[1]
    assert ("<task>Earlier requests this continues (oldest first):\n[you] @planner plan Osaka\n"
            "Current request:\n[you] @planner and add Nara</task>") in prompts[2]


@pytest.mark.parametrize("typed, error", [
    ("/agnet", "Unknown command /agnet; did you mean /agent? /help lists the commands."),
    ("/agnet add name:x", "Unknown command /agnet add; did you mean /agent add? /help lists the commands."),
    ("/agent ad name:x", "Unknown command /agent ad; did you mean /agent add? /help lists the commands."),
    ("/roundtable stauts", "Unknown command /roundtable stauts; did you mean /roundtable status? /help lists the "
                           "commands."),
    ("/hlep", "Unknown command /hlep; did you mean /help? /help lists the commands."),
    ("/zzzz", "Unknown command /zzzz; /help lists the commands."),
    ("/agent", "/agent needs a subcommand: add, edit, rename, remove, enable, disable, mute, unmute, show, list, "
               "memory, tools, schedule "
               "(/help agent shows them with their options)."),
    ("/roundtable config stream:maybe",
     "stream must be true/yes/on/1 or false/no/off/0 (got 'maybe')."),
    ("/ask agent:x prompt:y post:perhaps", "post must be true/yes/on/1 or false/no/off/0 (got 'perhaps')."),
])
async def test_a_mistyped_command_names_the_nearest_and_a_bad_switch_every_form(console, typed, error):
    await console.send('/agent add name:x role:r prompt:p')
    assert await console.send(typed) == [f"error: {error}"]


async def test_help_is_short_and_help_topic_lists_one_group(console):
    summary = await console.send("/help")
    assert len(summary) <= 8 and summary[0].startswith("Commands by topic")
    assert [line.split()[1] for line in summary[1:5]] == ["roundtable", "agent", "extras", "chat"]
    agent = await console.send("/help agent")
    assert agent[0] == "/help agent, the agents (options in brackets are optional):" and len(agent) <= 14
    assert all(line.startswith(("/agent ", "e.g. /agent add", "e.g. /agent mute")) for line in agent[1:])
    assert "/agent mute name [for]  Keep an agent out of selection, rotation and @all (for:1h, 30m, 2d; default: " \
        "until unmuted)" in agent
    assert "e.g. /agent mute name:planner for:1h (30m, 2d); /agent edit name:planner temperature:0.3 " \
        "(temperature:default clears it)" in agent
    assert "/agent memory show name  An agent's memory notes, newest first" in await console.send("/help extras")
    assert await console.send("/help topic:agent") == agent
    assert "/attach PATH" in "\n".join(await console.send("/help chat"))
    assert any(line.startswith("Ctrl-C  Drops the line being typed; on an empty line it stops the turns running now")
               for line in await console.send("/help chat"))
