"""The verbs behind `/roundtable setup|disable|config|pause|resume|stop|newtask|doctor` (declared in
`bot.core.verbs.commands`): a group turned on and off, its settings, its runtime held and released.

A group's settings are declared once (`bot.core.settings`): `/roundtable config` takes one option
per setting (`parse_config`) and shows them as a card (`settings_fields`). What only the runtime
can do (wake a group, stop its episode, pause it at its budget) comes in `GroupVerbsDeps` as the
engine's functions, so this part never holds the engine.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import InvalidInput, StoreError, UserFacingError
from bot.core.features.spending import budget_refusal, month_cost
from bot.core.models import Episode, Group, GroupSettings
from bot.core.ports import HasDiagnosis, HasEpisodes, HasGroups, HasSpending, HealthStore
from bot.core.record.transcript import plural
from bot.core.rules import validation as v
from bot.core.rules.card import Card, Field
from bot.core.rules.doctor import Check, Probe, database_checks, delivery_check
from bot.core.rules.pricing import Price, dollars, exact_dollars
from bot.core.rules.store_health import outage_status
from bot.core.settings import GROUP_SETTINGS, Setting
from bot.core.verbs.roster_verbs import ModelLists, check_model

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


class GroupVerbsStore(HasGroups, HasEpisodes, HasSpending, HasDiagnosis, HealthStore, Protocol):
    """What the group verbs use: the group, its task breaks, this month's spending (budgets), and the
    database's own report and health (/roundtable doctor)."""


@dataclass(frozen=True)
class GroupVerbsDeps:
    """What the group verbs work with (`bot.core.verbs.admin.verbs_of` composes it from an engine)."""

    store: GroupVerbsStore
    llm: ModelLists  # a selector_model given is checked against the providers' lists
    prices: Mapping[str, Price]  # this month's cost, against monthly_budget
    wake: Callable[[int], None]  # something changed in the group: route and deliver
    stop_episode: Callable[[Group], Awaitable[Episode | None]]  # end the episode, skip pending deliveries
    check_budget: Callable[[int], Awaitable[bool]]  # pause the group (one notice) when the month's cost reached it
    endpoint_checks: Probe | None = None  # /roundtable doctor's lines of the model endpoints
    tool_checks: Probe | None = None  # and of the MCP servers


class GroupVerbs:
    def __init__(self, deps: GroupVerbsDeps) -> None:
        self.deps = deps
        self.store = deps.store

    async def setup(self, key: str, name: str, settings: GroupSettings, **ids: str | None) -> Group:
        group = await self.store.groups.create_group(key, name, settings, **ids)
        self.deps.wake(group.id)
        return group

    async def disable(self, group: Group) -> str:
        await self.deps.stop_episode(group)
        await self.store.groups.update_group(group.id, enabled=False)
        return "Roundtable is off here. The history is kept; /roundtable setup turns it back on."

    async def config(self, group: Group, changes: Mapping[str, object]) -> Card:
        if not changes:
            return Card("Settings", fields=settings_fields(group.settings))
        if changes.get("selector_model"):
            await check_model(self.deps.llm, str(changes["selector_model"]))
        updated = await self.store.groups.update_group(
            group.id, settings=group.settings.with_changes(**parse_config(changes)))
        if "monthly_budget" in changes and await self.deps.check_budget(group.id):
            cost = await month_cost(self.store, updated, self.deps.prices)
            note = (f"This month's model cost ({dollars(cost)}) has already reached monthly_budget: the group is "
                    "paused until the budget is raised (or the month turns) and /roundtable resume.")
            return Card("Updated", note, settings_fields(updated.settings), tone="warning")
        self.deps.wake(group.id)
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
        if self.deps.endpoint_checks is not None:
            checks.extend(await self.deps.endpoint_checks())
        if self.deps.tool_checks is not None:
            checks.extend(await self.deps.tool_checks())
        return checks

    async def pause(self, group: Group) -> str:
        await self.store.groups.update_group(group.id, paused=True)
        return "Paused: messages are still recorded, agents wait until /roundtable resume."

    async def resume(self, group: Group) -> str:
        budget = group.settings.monthly_budget
        if budget:
            cost = await month_cost(self.store, group, self.deps.prices)
            if cost >= budget:
                raise UserFacingError(budget_refusal(cost, budget))
        await self.store.groups.update_group(group.id, paused=False)
        self.deps.wake(group.id)
        return "Resumed: waiting deliveries go out now."

    async def stop(self, group: Group) -> str:
        episode = await self.deps.stop_episode(group)
        if episode is None:
            return "No episode is running."
        return f"Stopped the episode after {plural(episode.agent_turns, 'agent message')}."

    async def newtask(self, group: Group) -> str:
        """`/roundtable newtask`: the next person's message starts a fresh task (SPEC §6), even within
        followup_window or as a reply; kept in the store, so it holds after a restart."""
        await self.store.episodes.break_tasks(group.id)
        return "The next message starts a new task: earlier requests are not carried into its prompts."
