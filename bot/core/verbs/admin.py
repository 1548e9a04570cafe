"""The verbs behind the commands (`bot.core.verbs.commands` declares them), shared by every surface.

Each verb validates its input (`bot.core.rules.validation`), acts through the
engine's store, and returns its answer: text, or a `Card` when the answer is
a table of facts. Refusals are `UserFacingError`s. Who may run a verb is
decided before it runs (`bot.core.verbs.commands.run`).
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Mapping

from bot.core.errors import InvalidInput, NotFound, StoreError, UserFacingError
from bot.core.features.context import find_window, participant_step
from bot.core.features.reading import Reader, Reading
from bot.core.features.spending import budget_refusal, month_cost, usage_card
from bot.core.features.summary import MIN_WINDOW, Summaries
from bot.core.features.tools import decision_of
from bot.core.models import DEFAULT_PROVIDER, MUTED_FOREVER, Agent, Completion, Decision, Group, GroupSettings, Message
from bot.core.ports import AgentChanges
from bot.core.record.export import file_name, write_export
from bot.core.record.transcript import plural, when
from bot.core.rules import mute
from bot.core.rules import validation as v
from bot.core.rules.card import Attachment, Card, Field, Tone
from bot.core.rules.doctor import Check, database_checks, delivery_check
from bot.core.rules.pricing import dollars, exact_dollars
from bot.core.rules.store_health import outage_status
from bot.core.rules.tool_lines import CALLS_SHOWN, call_detail
from bot.core.runtime.engine import Engine
from bot.core.settings import GROUP_SETTINGS, Setting
from bot.core.verbs.schedule_verbs import ScheduleVerbs

MEMORY_PAGE = 10  # notes per page where a surface pages (Discord)
LAST_DECISION_WITHIN = 200  # rows /roundtable status looks back for the last decision that chose someone
WHY_PAGE = 50  # rows /roundtable why (no message) reads at a time looking for the newest person's or agent's row

CONFIG_SETTINGS = {s.option_name: s for s in GROUP_SETTINGS}  # /roundtable config's options


def parse_config(changes: Mapping[str, object]) -> dict[str, object]:
    """Option values -> GroupSettings field values, each checked against its declaration."""
    out: dict[str, object] = {}
    for key, value in changes.items():
        if key not in CONFIG_SETTINGS:
            raise InvalidInput(f"Unknown option {key!r}: the options are {', '.join(CONFIG_SETTINGS)}.")
        out[CONFIG_SETTINGS[key].name] = v.group_setting(CONFIG_SETTINGS[key], value)
    return out


def shown_setting(declared: Setting, value: object) -> str:
    """A setting's value on the settings card: `on`, `40,000`, `120 min`, `$5.00`, `(default)`, `off`."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "":
        return declared.unset or "off"
    if declared.zero and value == 0:
        return "off"
    if declared.kind == "long_text":
        text = str(value)
        return (text[:60] + "...") if len(text) > 60 else text
    if declared.unit == "dollars":
        return exact_dollars(float(value))  # type: ignore[arg-type]  # a number setting's value
    return declared.shown.format(value)


def settings_fields(settings: GroupSettings) -> tuple[Field, ...]:
    return tuple(Field(s.option_name, shown_setting(s, getattr(settings, s.name))) for s in GROUP_SETTINGS)


def model_settings(agent: Agent) -> str:
    """An agent's model settings as /agent show gives them: 'temperature 0.3, max_tokens 800,
    context_budget the group's' ('default' for one not set)."""
    temperature = "default" if agent.temperature is None else f"{agent.temperature:g}"
    cap = "default (no cap)" if agent.max_tokens is None else f"{agent.max_tokens:,}"
    budget = "the group's" if agent.context_budget is None else f"{agent.context_budget:,}"
    return f"temperature {temperature}, max_tokens {cap}, context_budget {budget}"


def agent_flags(agent: Agent, now: float) -> str:
    """What a roster line adds to an agent's name: ' (disabled)', ' (muted until 14:30 UTC (1h left))', ' (worker)'."""
    flags = [] if agent.enabled else ["disabled"]
    flags += [muted] if (muted := mute.state(agent, now)) else []
    flags += ["worker"] if agent.mode == "worker" else []
    return "".join(f" ({f})" for f in flags)


def agent_card(agent: Agent, notes: int, now: float) -> Card:
    muted = mute.state(agent, now)
    return Card(
        title=agent.name + ("" if agent.enabled else " (disabled)") + (f" ({muted})" if muted else ""),
        description=agent.role,
        fields=(
            Field("model", agent.model or "(default)"),
            Field("model settings", model_settings(agent), inline=False),
            Field("avatar", agent.avatar_url or "(none)"),
            Field("delivered through", f"#{agent.delivered_through}"),
            Field("memory", f"{'on' if agent.memory else 'off'}, {plural(notes, 'note')}"),
            Field("mode", "worker (speaks only through group_post)" if agent.mode == "worker" else "talk"),
            Field("system prompt", agent.system_prompt, inline=False),
        ),
        tone="neutral" if agent.enabled and not muted else "warning",
        thumbnail_url=agent.avatar_url,
    )


WHY_PRIVATE = 900  # characters of a worker's final text shown by "Why this reply?"


class Admin:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = engine.store
        self.reading = Reading(engine.store, engine.llm,
                               lambda group: group.settings.selector_model or engine.selector_model)
        self.schedules = ScheduleVerbs(engine.store, engine.clock)

    async def setup(self, key: str, name: str, settings: GroupSettings, **ids: str | None) -> Group:
        group = await self.store.groups.create_group(key, name, settings, **ids)
        self.engine.wake(group.id)
        return group

    async def disable(self, group: Group) -> str:
        await self.engine.stop_episode(group)
        await self.store.groups.update_group(group.id, enabled=False)
        return "Roundtable is off here. The history is kept; /roundtable setup turns it back on."

    async def config(self, group: Group, changes: Mapping[str, object]) -> Card:
        if not changes:
            return Card("Settings", fields=settings_fields(group.settings))
        if changes.get("selector_model"):
            await self.check_model(str(changes["selector_model"]))
        updated = await self.store.groups.update_group(
            group.id, settings=group.settings.with_changes(**parse_config(changes)))
        if "monthly_budget" in changes and await self.engine.check_budget(group.id):
            cost = await month_cost(self.store, updated, self.engine.prices)
            note = (f"This month's model cost ({dollars(cost)}) has already reached monthly_budget: the group is "
                    "paused until the budget is raised (or the month turns) and /roundtable resume.")
            return Card("Updated", note, settings_fields(updated.settings), tone="warning")
        self.engine.wake(group.id)
        return Card("Updated", fields=settings_fields(updated.settings), tone="good")

    async def doctor(self, group: Group | None) -> list[Check]:
        """/roundtable doctor's checks that any surface can make: the database (and an outage of its
        writes), the group's delivery problem, the model endpoints, the MCP servers."""
        try:
            checks = database_checks(await self.store.diagnosis.database_report())
        except StoreError as exc:
            checks = [Check("database", False, f"cannot be read: {exc}", "check the database (the disk, the file's "
                                                                            "permissions, the server)")]
        outage = self.store.health.outage
        if outage is not None:
            checks.append(Check("database writes", False, outage_status(outage, self.store.health.clock()),
                                "fix what it names (disk space, the file's permissions, the database server); "
                                "the bot keeps trying by itself"))
        if group is not None:
            checks.append(delivery_check(await self.store.groups.get_group(group.id)))
        if self.engine.endpoint_checks is not None:
            checks.extend(await self.engine.endpoint_checks())
        if self.engine.tool_checks is not None:
            checks.extend(await self.engine.tool_checks())
        return checks

    async def pause(self, group: Group) -> str:
        await self.store.groups.update_group(group.id, paused=True)
        return "Paused: messages are still recorded, agents wait until /roundtable resume."

    async def resume(self, group: Group) -> str:
        budget = group.settings.monthly_budget
        if budget:
            cost = await month_cost(self.store, group, self.engine.prices)
            if cost >= budget:
                raise UserFacingError(budget_refusal(cost, budget))
        await self.store.groups.update_group(group.id, paused=False)
        self.engine.wake(group.id)
        return "Resumed: waiting deliveries go out now."

    async def stop(self, group: Group) -> str:
        episode = await self.engine.stop_episode(group)
        if episode is None:
            return "No episode is running."
        return f"Stopped the episode after {plural(episode.agent_turns, 'agent message')}."

    async def newtask(self, group: Group) -> str:
        """`/roundtable newtask`: the next person's message starts a fresh task (SPEC §6), even within
        followup_window or as a reply; kept in the store, so it holds after a restart."""
        await self.store.episodes.break_tasks(group.id)
        return "The next message starts a new task: earlier requests are not carried into its prompts."

    async def status(self, group: Group, viewer: Reader | None = None) -> Card:
        group = await self.store.groups.get_group(group.id)
        state = "paused" if group.paused else "on" if group.enabled else "off"
        fields = [Field("messages", str(group.latest_seq)),
                  Field("agent messages in a row", f"{group.agent_streak} of {group.settings.max_agent_turns}")]
        if group.episode_id is not None:
            ep = await self.store.episodes.get_episode(group.episode_id)
            fields.append(Field("episode", f"#{ep.id} {ep.status}, task #{ep.task_seq}, "
                                           f"{plural(ep.agent_turns, 'agent message')}, "
                                           f"{plural(ep.total_tokens, 'token')} ({ep.cached_tokens:,} cached)",
                                inline=False))
        agents, now = await self.store.roster.list_agents(group.id), self.engine.clock()
        fields.append(Field("agents", "\n".join(
            f"{a.name}{agent_flags(a, now)}: read through #{a.delivered_through}" for a in agents)
            or "(none yet: /agent add)", inline=False))
        decision = await self.last_decision(group)
        if decision is not None:
            fields.append(Field("last decision", f"#{decision.seq} {decision.source} -> {chosen(decision)}"))
        seen = await self.context_seen(group, group.latest_seq)
        if seen:
            fields.append(Field("context", seen, inline=False))
        if group.delivery_problem:
            fields.append(Field("delivery problem", group.delivery_problem, inline=False))
        outage = self.store.health.outage
        if outage is not None:
            fields.append(Field("database problem", outage_status(outage, self.store.health.clock()), inline=False))
        upcoming = await self.store.schedules.next_schedule(group.id)
        if upcoming is not None:
            fields.append(Field("next schedule", f"#{upcoming.id} {await self.schedules.describe(upcoming)}",
                                inline=False))
        if viewer is not None:
            fields.append(Field("unread for you", str(await self.reading.unread_count(group, viewer))))
        fields.extend(settings_fields(group.settings))
        tone: Tone = "bad" if group.delivery_problem or outage else "warning" if state != "on" else "good"
        return Card(f"{group.name} ({state})", fields=tuple(fields), tone=tone)

    async def last_decision(self, group: Group) -> Decision | None:
        """The newest decision that chose someone (or TERMINATE), among the last LAST_DECISION_WITHIN
        rows: a notice, or an agent's row in tags mode, routes nobody ("none"), which says nothing
        of who speaks (status showed "#14 none -> nobody")."""
        through, oldest = group.latest_seq, max(0, group.latest_seq - LAST_DECISION_WITHIN)
        while through > oldest:
            after = max(oldest, through - 50)
            decisions = await self.store.routing.decisions(group.id, after=after, through=through)
            for seq in sorted(decisions, reverse=True):
                if decisions[seq].source not in ("none", "superseded"):
                    return decisions[seq]
            through = after
        return None

    async def context_seen(self, group: Group, through: int) -> str:
        """How much of the thread through `through` a prompt holds ('' when all of it)."""
        if through <= 0:
            return ""
        budget = group.settings.context_budget
        summarised = budget >= MIN_WINDOW
        window = await find_window(self.store, group.id, through=through, budget=budget,
                                   task_seq=None, task_apart=True, step=participant_step(budget),
                                   reserve=Summaries.reserve() if summarised else 0)
        if not window.omitted:
            return ""
        return (f"prompts hold the newest {through - window.omitted} of {through} messages (plus the tasks); "
                f"the oldest {window.omitted} were trimmed to fit context_budget {group.settings.context_budget}"
                + ("; a rolling summary stands for them" if summarised else ""))

    async def why(self, group: Group, ref: str | None = None) -> Card:
        group = await self.store.groups.get_group(group.id)
        seq = await self.message_seq(group, ref) if ref else await self.newest_spoken(group)
        if not 1 <= seq <= group.latest_seq:
            raise NotFound(f"There is no message #{seq} in this group (it has {group.latest_seq}).")
        decision = await self.store.routing.get_decision(group.id, seq)
        message = await self.store.thread.get_message(group.id, seq)
        title = f"#{seq} by {message.author_name}"
        calls = await self._tool_fields(message)
        if decision is None:
            return Card(title, "Not routed yet.", calls)
        fields = [Field("source", decision.source), Field("chosen", chosen(decision))]
        if decision.selector_raw:
            fields.append(Field("selector replies", " | ".join(decision.selector_raw), inline=False))
            fields.append(Field("attempts", str(decision.attempts)))
        if decision.confidence is not None:
            fields.append(Field("confidence", f"{decision.confidence:.2f}"))
        if decision.usage.prompt_tokens:
            u = decision.usage
            fields.append(Field("selector tokens", f"{u.prompt_tokens} prompt, {u.completion_tokens} completion, "
                                                   f"{u.cached_tokens} cached"))
        fields.extend(calls)
        if message.source_run_id is not None:
            held = [said for call in await self.store.tools.run_tool_calls(message.source_run_id)
                    if (said := decision_of(call.tool, call.result)) is not None]
            if held:
                fields.append(Field("tool approvals", "; ".join(held), inline=False))
        if message.source_run_id is not None:  # a worker's post: the run's final text, never posted
            run = (await self.store.record.runs_by_id([message.source_run_id])).get(message.source_run_id)
            if run is not None and run.private_text is not None:
                private = run.private_text if len(run.private_text) <= WHY_PRIVATE else (
                    run.private_text[:WHY_PRIVATE] + " [...]")
                fields.append(Field("worker's final text (private)", private or "(empty)", inline=False))
        return Card(title, decision.note, tuple(fields), footer=await self._context_footer(group, seq))

    async def _tool_fields(self, message: Message) -> tuple[Field, ...]:
        """Each tool call of the run behind an agent's reply, with its arguments and result (cut, masked)."""
        if message.author_type != "agent" or message.source_run_id is None:
            return ()
        calls = await self.store.tools.run_tool_calls(message.source_run_id)
        fields = [Field(*call_detail(c.tool, c.arguments, c.status, c.result), inline=False)
                  for c in calls[:CALLS_SHOWN]]
        if len(calls) > CALLS_SHOWN:
            fields.append(Field("more calls", f"{len(calls) - CALLS_SHOWN} more (the exports show every call)",
                                inline=False))
        return tuple(fields)

    async def newest_spoken(self, group: Group) -> int:
        """The newest row a person or an agent wrote (the bot's own notices select nobody, so `why` without a
        message explains the newest message people read as the conversation); the newest row when none is."""
        through = group.latest_seq
        while through > max(0, group.latest_seq - LAST_DECISION_WITHIN):
            page = await self.store.thread.messages(group.id, after=max(0, through - WHY_PAGE), through=through)
            spoken = [m.seq for m in page if m.author_type != "system"]
            if spoken:
                return spoken[-1]
            through -= WHY_PAGE
        return group.latest_seq

    async def _context_footer(self, group: Group, seq: int) -> str:
        seen = await self.context_seen(group, seq)
        return f"context at #{seq}: {seen}" if seen else ""

    async def message_seq(self, group: Group, ref: str) -> int:
        """A message link, a message id or a number such as 12 (or #12) -> its seq here."""
        token = ref.strip().rstrip("/").split("/")[-1].lstrip("#")
        if not token.isdigit():
            raise InvalidInput("message must be a message link, a message id or a number such as 12.")
        if len(token) < 15:
            return int(token)
        found = await self.store.thread.find_message_by_external_id(token)
        if found is None or found.group_id != group.id:
            raise InvalidInput("That message is not part of this group chat.")
        return found.seq

    async def usage(self, group: Group, days: int = 7) -> Card | str:
        """Calls, tokens and cost per agent and selector, and a total (`bot.core.features.spending`)."""
        days = v.integer("days", days, 1, 365)
        return await usage_card(self.store, await self.store.groups.get_group(group.id), self.engine.prices, days)

    async def export(self, group: Group, fmt: str = "html") -> Attachment:
        """The whole thread as a file (html, json or md), built in a temporary file a page at a time."""
        descriptor, path = tempfile.mkstemp(prefix="roundtable-export-", suffix=f".{fmt}")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8", newline="\n") as out:
                totals = await write_export(self.store, group, fmt, out.write)
        except BaseException:  # a cancel too: no half-written export left behind; re-raised
            os.unlink(path)
            raise
        label = {"html": "a page to read", "json": "JSON data", "md": "Markdown"}[fmt]
        text = f"{group.name}: {plural(totals.messages, 'message')}, {plural(totals.episodes, 'episode')}, as {label}."
        return Attachment(path, file_name(group, fmt), text,
                          elsewhere=f"roundtable export --group {group.id} --format {fmt} --out FILE")

    # agents --------------------------------------------------------------
    async def agent(self, group: Group, name: str) -> Agent:
        agent = await self.store.roster.find_agent(group.id, name.strip().lstrip("@"))
        if agent is None:
            raise await self._no_agent(group, name)
        return agent

    async def _no_agent(self, group: Group, name: str) -> NotFound:
        names = ", ".join(a.name for a in await self.store.roster.list_agents(group.id)) or "none yet"
        return NotFound(f"No agent named {name!r} in this group (agents: {names}).")

    @contextlib.asynccontextmanager
    async def _still_there(self, group: Group, name: str) -> AsyncIterator[None]:
        """Around a change of an agent just looked up: one removed meanwhile (by another
        process, say) is answered as if it had been gone already, not with the store's id."""
        try:
            yield
        except NotFound:
            raise await self._no_agent(group, name) from None

    async def check_name_free(self, group: Group, name: str) -> None:
        v.check_name_free(name, [a.name for a in await self.store.roster.list_agents(group.id)])

    async def check_model(self, model: str | None) -> None:
        """Refuse a model whose `name/` prefix names no provider, when the default provider (where
        such a model would run, as the whole string) lists its models and this is not one of them.
        Anything else is taken: a provider's list may not show every model it serves."""
        text = (model or "").strip()
        prefix, slash, _ = text.partition("/")
        if not slash:
            return
        lists = await self.engine.llm.model_names()
        if prefix.lower() in lists:
            return
        default = lists.get(DEFAULT_PROVIDER)
        if default is None or text in default:
            return
        raise InvalidInput(
            f"No provider is named {prefix!r} (providers: {', '.join(lists)}), and the default provider has no "
            f"model {text!r}. Define it with ROUNDTABLE_PROVIDER_{prefix.upper()}_BASE_URL (and _API_KEY), "
            "or pick a model the list offers.")

    async def add_agent(self, group: Group, name: str, role: str, prompt: str,
                        model: str | None = None, avatar: str | None = None) -> str:
        await self.check_model(v.model(model))
        agent = await self.store.roster.add_agent(
            group.id, v.agent_name(name), v.role(role), v.system_prompt(prompt),
            model=v.model(model), avatar_url=v.avatar_url(avatar),
        )
        return f"Added {agent.name}: {agent.role}. Tag it with @{agent.name}."

    async def edit_agent(self, group: Group, name: str, *, memory: bool | None = None, mode: str | None = None,  # noqa: C901 - update_agent's typed fields (issue 32 item 2, another branch) reshape it
                         settings: Mapping[str, float | int | None] | None = None, **changes: str | None) -> str:
        """`settings`: model settings to set (temperature, max_tokens, context_budget; None clears one)."""
        agent = await self.agent(group, name)
        update: AgentChanges = {}
        for key, value in (settings or {}).items():
            value = v.agent_setting(key, "default" if value is None else value)
            if value != getattr(agent, key):
                if key == "temperature":
                    update["temperature"] = value
                elif key == "max_tokens":
                    update["max_tokens"] = None if value is None else int(value)
                elif key == "context_budget":
                    update["context_budget"] = None if value is None else int(value)
        if changes.get("role") is not None:
            update["role"] = v.role(changes["role"] or "")
        if changes.get("prompt") is not None and changes["prompt"] != agent.system_prompt:
            update["system_prompt"] = v.system_prompt(changes["prompt"] or "")
        if changes.get("model") is not None:
            update["model"] = v.model(changes["model"])
            await self.check_model(update["model"])
        if changes.get("avatar") is not None:
            update["avatar_url"] = v.avatar_url(changes["avatar"])
        if memory is not None and memory != agent.memory:
            update["memory"] = memory
        if mode is not None and mode != agent.mode:
            update["mode"] = mode
        if not update:
            if settings:
                return f"{agent.name} has these model settings already: {model_settings(agent)}."
            if memory is not None:
                return f"Memory is already {'on' if memory else 'off'} for {agent.name}."
            if mode is not None:
                return f"{agent.name} is already in {mode} mode."
            return (f"Nothing to change for {agent.name}: give role, prompt, model, avatar, memory, mode, "
                    "temperature, max_tokens or context_budget.")
        await self._check_tools(agent, update)
        async with self._still_there(group, name):
            agent = await self.store.roster.update_agent(agent.id, **update)
        if "mode" in update:
            if agent.mode == "worker":
                return f"Updated {agent.name}: worker mode: its runs are private and it speaks only through group_post."
            return f"Updated {agent.name}: talk mode: it posts its replies."
        if "memory" in update:
            return f"Updated {agent.name}: memory is {'on' if agent.memory else 'off'}."
        if set(update) & {"temperature", "max_tokens", "context_budget"}:
            return f"Updated {agent.name}: {model_settings(agent)}."
        return f"Updated {agent.name}."

    async def _check_tools(self, agent: Agent, update: AgentChanges) -> None:
        """Memory and worker mode need tool calls: refuse (changing nothing) to turn either on, or to
        change the model of an agent that has one on, when the model does not take them or that
        cannot be checked."""
        worker = update.get("mode", agent.mode) == "worker"
        if not (update.get("memory", agent.memory) or worker) or not ({"memory", "mode", "model"} & set(update)):
            return
        model = update.get("model", agent.model)
        spent: list[Completion] = []
        reason = await self.engine.llm.tools_refusal(str(model) if model else None, spent=spent)
        for call in spent:  # a model call like any other: /roundtable usage counts it with the agent's
            await self.store.spending.record_call(agent.group_id, agent.id, "memory check", call)
        if reason is not None:
            if "mode" in update and worker:
                raise UserFacingError(f"{agent.name} stays in talk mode: {reason}.")
            raise UserFacingError(f"Memory stays off for {agent.name}: {reason}." if "memory" in update else
                                  f"{agent.name} keeps its model: {'worker mode' if worker else 'memory'} is on "
                                  f"for it, and {reason}.")

    async def rename_agent(self, group: Group, name: str, new_name: str) -> str:
        agent = await self.agent(group, name)
        async with self._still_there(group, name):
            renamed = await self.store.roster.update_agent(agent.id, name=v.agent_name(new_name))
        return (f"Renamed {agent.name} to {renamed.name}: tag it with @{renamed.name}. "
                f"Its earlier messages keep the name {agent.name}.")

    async def remove_agent(self, group: Group, name: str) -> str:
        agent = await self.agent(group, name)
        async with self._still_there(group, name):
            await self.store.roster.remove_agent(agent.id)
        return f"Removed {agent.name}. Its messages stay in the history."

    async def set_enabled(self, group: Group, name: str, enabled: bool) -> str:
        agent = await self.agent(group, name)
        async with self._still_there(group, name):
            await self.store.roster.update_agent(agent.id, enabled=enabled)
        if enabled:
            self.engine.wake(group.id)
        return f"{agent.name} is {'enabled' if enabled else 'disabled'}."

    async def list_agents(self, group: Group) -> Card | str:
        agents = await self.store.roster.list_agents(group.id)
        if not agents:
            return "No agents yet: add one with /agent add."
        now = self.engine.clock()
        fields = tuple(Field(a.name + agent_flags(a, now), a.role, inline=False) for a in agents)
        return Card(f"Agents of {group.name}", fields=fields)

    async def show_agent(self, group: Group, name: str) -> Card:
        agent = await self.agent(group, name)
        return agent_card(agent, await self.store.notes.note_count(agent.id), self.engine.clock())

    async def mute_agent(self, group: Group, name: str, duration: str | None = None) -> str:
        """/agent mute: out of selection, rotation and @all until `duration` ('1h', '30m', '2d') has
        passed, or until /agent unmute (no duration). Kept as a time, so it ends by itself, also
        after a restart."""
        seconds = None if duration is None or not duration.strip() else mute.parse_duration(duration)
        agent = await self.agent(group, name)
        now = self.engine.clock()
        until = MUTED_FOREVER if seconds is None else now + seconds
        async with self._still_there(group, name):
            agent = await self.store.roster.update_agent(agent.id, muted_until=until)
        return (f"{agent.name} is muted {mute.until(until, now)}: it is left out of selection, rotation and @all, "
                f"and a tag of it gets a notice instead of a reply. /agent unmute {agent.name} lifts it.")

    async def unmute_agent(self, group: Group, name: str) -> str:
        agent = await self.agent(group, name)
        if not agent.muted(self.engine.clock()):
            return f"{agent.name} is not muted."
        async with self._still_there(group, name):
            await self.store.roster.update_agent(agent.id, muted_until=None)
        return f"{agent.name} is unmuted: it can be selected and tagged again."

    async def show_memory(self, group: Group, name: str) -> Card | str:
        """The agent's notes, newest first, with when each was saved."""
        agent = await self.agent(group, name)
        state = f"memory is {'on' if agent.memory else 'off'}"
        notes = await self.store.notes.notes(agent.id)
        if not notes:
            return f"{agent.name} has no notes ({state})."
        fields = tuple(Field(when(n.created_at) or f"note {n.id}", n.text, inline=False) for n in reversed(notes))
        return Card(f"Memory of {agent.name}", f"{plural(len(notes), 'note')}, newest first; {state}.", fields,
                    page_size=MEMORY_PAGE)

    async def clear_memory(self, group: Group, name: str) -> str:
        agent = await self.agent(group, name)
        cleared = await self.store.notes.clear_notes(agent.id)
        if not cleared:
            return f"{agent.name} had no notes to clear."
        return f"Cleared {plural(cleared, 'note')} of {agent.name}."


def chosen(decision: Decision) -> str:
    return ", ".join(decision.agent_names) or ("TERMINATE" if decision.terminate else "nobody")
