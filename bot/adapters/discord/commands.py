"""Slash commands: `/roundtable ...` and `/agent ...` (guild-only), over `bot.core.admin`.

Admin commands need Manage Server or the group's operator role, checked when
the command runs (not only by default permissions); refusals are ephemeral
and say why. Agent names autocomplete; system prompts are entered in a modal.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Awaitable, Callable, Optional

import discord
from discord import app_commands

from bot.adapters.discord.render import split_message
from bot.core.admin import Admin
from bot.core.errors import Forbidden, InvalidInput, UserFacingError
from bot.core.models import Group
from bot.core import validation as v

if TYPE_CHECKING:
    from bot.adapters.discord.client import RoundtableBot

log = logging.getLogger(__name__)

MODE_CHOICES = [app_commands.Choice(name=m, value=m) for m in ("selector", "round_robin", "tags")]


def group_key(channel_id: int) -> str:
    return f"discord:{channel_id}"


def is_operator(member: discord.abc.User, group: Group | None) -> bool:
    if not isinstance(member, discord.Member):
        return False
    if member.guild_permissions.manage_guild:
        return True
    role = group.settings.operator_role if group else None
    return role is not None and any(str(r.id) == role for r in member.roles)


async def answer(interaction: discord.Interaction, text: str) -> None:
    """Ephemeral answer, split into follow-ups when it is longer than one message."""
    chunks = split_message(text) or ["(nothing to show)"]
    first, rest = chunks[0], chunks[1:]
    if interaction.response.is_done():
        await interaction.followup.send(first, ephemeral=True)
    else:
        await interaction.response.send_message(first, ephemeral=True)
    for chunk in rest:
        await interaction.followup.send(chunk, ephemeral=True)


class PromptModal(discord.ui.Modal):
    def __init__(self, title: str, default: str | None, on_prompt: Callable[[str], Awaitable[str]]) -> None:
        super().__init__(title=title[:45], timeout=900)
        self.prompt: discord.ui.TextInput[PromptModal] = discord.ui.TextInput(
            label="System prompt", custom_id="prompt", style=discord.TextStyle.paragraph,
            default=default, max_length=v.PROMPT_MAX, required=True,
        )
        self.add_item(self.prompt)
        self.on_prompt = on_prompt

    async def on_submit(self, interaction: discord.Interaction) -> None:  # type: ignore[override]
        try:
            await answer(interaction, await self.on_prompt(self.prompt.value))
        except UserFacingError as exc:
            await answer(interaction, str(exc))

    async def on_error(self, interaction: discord.Interaction, error: Exception) -> None:  # type: ignore[override]
        log.error("prompt modal failed", exc_info=error)
        await answer(interaction, "Something went wrong; nothing was changed.")


class Commands:
    """Builds the two command groups and runs them against the engine."""

    def __init__(self, bot: "RoundtableBot") -> None:
        self.bot = bot
        self.admin = Admin(bot.engine)
        self.store = bot.engine.store

    async def group_of(self, interaction: discord.Interaction, *, required: bool = True) -> Group | None:
        channel = interaction.channel
        group = await self.store.find_group(group_key(channel.id)) if channel else None
        if required and (group is None or not group.enabled):
            raise UserFacingError("Roundtable is not set up in this channel: an admin can run /roundtable setup.")
        return group

    async def check_admin(self, interaction: discord.Interaction, group: Group | None) -> None:
        if not is_operator(interaction.user, group):
            raise Forbidden("Only people with Manage Server (or this group's operator role) can do that.")

    def run(self, admin_only: bool, action: Callable[[discord.Interaction, Group], Awaitable[str | None]],
            *, needs_group: bool = True) -> Callable[..., Awaitable[None]]:
        async def handler(interaction: discord.Interaction) -> None:
            try:
                group = await self.group_of(interaction, required=needs_group)
                if admin_only:
                    await self.check_admin(interaction, group)
                text = await action(interaction, group)  # type: ignore[arg-type]
                if text is not None:
                    await answer(interaction, text)
            except UserFacingError as exc:
                await answer(interaction, str(exc))
        return handler

    async def autocomplete_agent(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        group = await self.group_of(interaction, required=False)
        if group is None:
            return []
        agents = await self.store.list_agents(group.id)
        typed = current.casefold()
        return [app_commands.Choice(name=a.name, value=a.name) for a in agents if typed in a.name.casefold()][:25]

    # /roundtable setup ---------------------------------------------------
    async def setup(self, interaction: discord.Interaction, mode: Optional[str]) -> str:
        channel = interaction.channel
        if not isinstance(channel, (discord.TextChannel, discord.Thread)) or interaction.guild is None:
            raise UserFacingError("Run /roundtable setup in a server text channel or thread.")
        existing = await self.store.find_group(group_key(channel.id))
        await self.check_admin(interaction, existing)
        parent = channel.parent_id if isinstance(channel, discord.Thread) else None
        hook_channel = str(parent or channel.id)
        if await self.store.get_webhook(hook_channel) is None:
            await self.bot.surface.create_webhook(hook_channel)
        defaults = self.bot.group_defaults
        if mode:
            defaults = defaults.with_changes(mode=v.mode(mode))
        group = await self.admin.setup(
            group_key(channel.id), f"#{channel.name}", defaults, guild_id=str(interaction.guild.id),
            channel_id=str(channel.id), parent_channel_id=str(parent) if parent else None,
            setup_message_id=str(interaction.id),
        )
        self.bot.ingest.resync_channel(channel.id)  # what was posted since the command is the group's from now on
        if mode and existing is not None:
            await self.admin.config(group, {"mode": mode})
        group = await self.store.get_group(group.id)
        return (f"Roundtable is on in #{channel.name} (mode {group.settings.mode}, max_turns "
                f"{group.settings.max_agent_turns}). Add agents with /agent add.")

    async def resolve_seq(self, group: Group, message: str | None) -> int | None:
        """A message link, Discord id or seq number -> seq."""
        if not message:
            return None
        token = message.strip().rstrip("/").split("/")[-1].lstrip("#")
        if not token.isdigit():
            raise InvalidInput("message must be a message link, a message id or a number such as 12.")
        if len(token) < 15:
            return int(token)
        found = await self.store.find_message_by_external_id(token)
        if found is None or found.group_id != group.id:
            raise InvalidInput("That message is not part of this group chat.")
        return found.seq


def register(tree: app_commands.CommandTree, commands: Commands) -> None:
    """Add `/roundtable` and `/agent` to the tree (guild-only)."""
    c = commands
    admin = c.admin
    roundtable = app_commands.Group(name="roundtable", description="Run this channel's group chat", guild_only=True)
    agent = app_commands.Group(name="agent", description="Manage this group's agents", guild_only=True)

    @roundtable.command(name="setup", description="Make this channel a group chat and create its webhook")
    @app_commands.choices(mode=MODE_CHOICES)
    async def setup(interaction: discord.Interaction, mode: Optional[app_commands.Choice[str]] = None) -> None:
        async def act(i: discord.Interaction, _g: Group) -> str:
            return await c.setup(i, mode.value if mode else None)
        await c.run(False, act, needs_group=False)(interaction)

    @roundtable.command(name="disable", description="Stop the group chat here; the history is kept")
    async def disable(interaction: discord.Interaction) -> None:
        await c.run(True, lambda i, g: admin.disable(g))(interaction)

    @roundtable.command(name="config", description="Change this group's settings (no options: show them)")
    @app_commands.choices(mode=MODE_CHOICES)
    @app_commands.describe(
        max_turns="cap on consecutive agent messages (1-100)", allow_repeat="let an agent speak twice in a row",
        context_budget="tokens of thread per prompt", pace="seconds between agent messages",
        selector_model="model that picks the next speaker", operator_role="role whose members run the group",
        allow_bots="ingest other bots and webhooks", brief="text added to every agent's system prompt",
    )
    async def config(
        interaction: discord.Interaction,
        mode: Optional[app_commands.Choice[str]] = None,
        max_turns: Optional[app_commands.Range[int, 1, 100]] = None,
        allow_repeat: Optional[bool] = None,
        context_budget: Optional[app_commands.Range[int, 500, 200000]] = None,
        pace: Optional[app_commands.Range[float, 0.0, 60.0]] = None,
        selector_model: Optional[str] = None,
        operator_role: Optional[discord.Role] = None,
        allow_bots: Optional[bool] = None,
        brief: Optional[str] = None,
    ) -> None:
        changes = {k: val for k, val in {
            "mode": mode.value if mode else None, "max_turns": max_turns, "allow_repeat": allow_repeat,
            "context_budget": context_budget, "pace": pace, "selector_model": selector_model,
            "operator_role": str(operator_role.id) if operator_role else None, "allow_bots": allow_bots,
            "brief": brief,
        }.items() if val is not None}
        await c.run(bool(changes), lambda i, g: admin.config(g, changes))(interaction)

    @roundtable.command(name="pause", description="Hold deliveries (messages are still recorded)")
    async def pause(interaction: discord.Interaction) -> None:
        await c.run(True, lambda i, g: admin.pause(g))(interaction)

    @roundtable.command(name="resume", description="Release held deliveries")
    async def resume(interaction: discord.Interaction) -> None:
        await c.run(True, lambda i, g: admin.resume(g))(interaction)

    @roundtable.command(name="stop", description="End the current episode")
    async def stop(interaction: discord.Interaction) -> None:
        await c.run(True, lambda i, g: admin.stop(g))(interaction)

    @roundtable.command(name="status", description="Settings, episode, agents' cursors, last decision")
    async def status(interaction: discord.Interaction) -> None:
        await c.run(False, lambda i, g: admin.status(g))(interaction)

    @roundtable.command(name="why", description="Why a message went to whom (default: the latest)")
    @app_commands.describe(message="a message link, id or number")
    async def why(interaction: discord.Interaction, message: Optional[str] = None) -> None:
        async def act(i: discord.Interaction, g: Group) -> str:
            return await admin.why(g, await c.resolve_seq(g, message))
        await c.run(False, act)(interaction)

    @roundtable.command(name="usage", description="Tokens per agent and selector")
    async def usage(interaction: discord.Interaction, days: Optional[app_commands.Range[int, 1, 365]] = 7) -> None:
        await c.run(False, lambda i, g: admin.usage(g, days or 7))(interaction)

    @agent.command(name="add", description="Add an agent (without prompt, a form asks for it)")
    @app_commands.describe(name="1-32 letters, digits, _ - .", role="one line: what it does",
                           prompt="its system prompt", model="model (default: the bot's)", avatar="image URL")
    async def add(interaction: discord.Interaction, name: str, role: str, prompt: Optional[str] = None,
                  model: Optional[str] = None, avatar: Optional[str] = None) -> None:
        async def act(i: discord.Interaction, g: Group) -> str | None:
            checked = (v.agent_name(name), v.role(role), v.model(model), v.avatar_url(avatar))
            v.check_name_free(checked[0], [a.name for a in await c.store.list_agents(g.id)])  # before the form opens
            if prompt is None:
                await i.response.send_modal(PromptModal(
                    f"System prompt for {checked[0]}", None,
                    lambda text: admin.add_agent(g, name, role, text, model, avatar)))
                return None
            return await admin.add_agent(g, name, role, prompt, model, avatar)
        await c.run(True, act)(interaction)

    @agent.command(name="edit", description="Change an agent (without prompt, a form shows it)")
    async def edit(interaction: discord.Interaction, name: str, role: Optional[str] = None,
                   prompt: Optional[str] = None, model: Optional[str] = None, avatar: Optional[str] = None) -> None:
        async def act(i: discord.Interaction, g: Group) -> str | None:
            found = await admin.agent(g, name)
            changes = {"role": role, "model": model, "avatar": avatar}
            if role is not None:
                v.role(role)  # checked before the form opens, so a bad value is reported at once
            v.model(model)
            v.avatar_url(avatar)
            if prompt is None:
                await i.response.send_modal(PromptModal(
                    f"System prompt for {found.name}", found.system_prompt,
                    lambda text: admin.edit_agent(g, found.name, prompt=text, **changes)))
                return None
            return await admin.edit_agent(g, found.name, prompt=prompt, **changes)
        await c.run(True, act)(interaction)

    async def simple(interaction: discord.Interaction, name: str, verb: str) -> None:
        actions = {
            "remove": lambda g: admin.remove_agent(g, name),
            "enable": lambda g: admin.set_enabled(g, name, True),
            "disable": lambda g: admin.set_enabled(g, name, False),
            "show": lambda g: admin.show_agent(g, name),
        }
        await c.run(verb != "show", lambda i, g: actions[verb](g))(interaction)

    @agent.command(name="remove", description="Take an agent off the roster (its messages stay)")
    async def remove(interaction: discord.Interaction, name: str) -> None:
        await simple(interaction, name, "remove")

    @agent.command(name="enable", description="Let an agent take part again")
    async def enable(interaction: discord.Interaction, name: str) -> None:
        await simple(interaction, name, "enable")

    @agent.command(name="disable", description="Keep an agent on the roster but silent")
    async def disable_agent(interaction: discord.Interaction, name: str) -> None:
        await simple(interaction, name, "disable")

    @agent.command(name="show", description="An agent's settings and system prompt")
    async def show(interaction: discord.Interaction, name: str) -> None:
        await simple(interaction, name, "show")

    @agent.command(name="list", description="The roster")
    async def list_(interaction: discord.Interaction) -> None:
        await c.run(False, lambda i, g: admin.list_agents(g))(interaction)

    for command in (edit, remove, enable, disable_agent, show):
        command.autocomplete("name")(c.autocomplete_agent)
    tree.add_command(roundtable)
    tree.add_command(agent)
