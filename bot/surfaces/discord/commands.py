"""Slash commands built from the one declaration (`bot.core.verbs.commands.COMMANDS`), and the
"Why this reply?" and "Regenerate reply" message menus (their names declared there too).

Each declared command becomes an app command of its group (`/roundtable ...`,
`/agent ...`, or top level), guild-only, with a description on the command and
on every option, Discord's own types, ranges and choices, and agent names
autocompleted. The declaration's rules run on every call: who may run it
(Manage Server or the group's operator role, checked at run time; refusals are
ephemeral and say why) and the same option checks as the console. A system
prompt that was not given is asked for in a form (text input `prompt`).
Tables of facts are answered as embeds.

Each command, click and form is first taken (`bot.surfaces.discord.interactions`): one
process of several handles it, and one that is slow to answer is deferred in time.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import io
import keyword
import logging
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import discord
from discord import app_commands

from bot.core.errors import InvalidInput, StoreUnavailable, UserFacingError
from bot.core.features.reading import Reader
from bot.core.models import Group, GroupSettings, Message
from bot.core.ports import HasGroups, HasRoster, HasThread, HasWebhooks
from bot.core.rules import validation as v
from bot.core.rules.card import Attachment, Card, MarkRead, Reply
from bot.core.rules.doctor import Check
from bot.core.rules.secrets import mask
from bot.core.runtime.engine import Engine
from bot.core.verbs import commands as declared
from bot.core.verbs.admin import Verbs
from bot.core.verbs.commands import Command, Option, model_choices, tool_choices
from bot.surfaces.discord.approvals import APPROVE_ID, custom_id
from bot.surfaces.discord.controls import STOP_EMOJI, STOP_ID, STOP_LABEL, stop_custom_id
from bot.surfaces.discord.doctor import channel_checks, permission_check
from bot.surfaces.discord.events import Ingest
from bot.surfaces.discord.interactions import ClaimStore, Interactions, defer, finish, first_answer, send
from bot.surfaces.discord.render import jump_link, split_message
from bot.surfaces.discord.webhooks import DiscordSurface

log = logging.getLogger(__name__)

GROUP_DESCRIPTIONS = {"roundtable": "Run this channel's group chat", "agent": "Manage this group's agents"}
TONE_COLOURS = {"neutral": discord.Colour.blurple(), "good": discord.Colour.green(),
                "warning": discord.Colour.gold(), "bad": discord.Colour.red()}
WHY_MENU, REGENERATE_MENU = declared.WHY_MENU, declared.REGENERATE_MENU
MAX_IMAGE_BYTES = 8 * 2**20
SOMETHING_WENT_WRONG = "Something went wrong; nothing was changed. The error is in the bot's log."
DATABASE_AWAY = "The database cannot be reached right now (it may be restarting); nothing was changed. Try again soon."


def group_key(channel_id: int) -> str:
    return f"discord:{channel_id}"


def is_operator(member: discord.abc.User, group: Group | None) -> bool:
    if not isinstance(member, discord.Member):
        return False
    if member.guild_permissions.manage_guild:
        return True
    role = group.settings.operator_role if group else None
    return role is not None and any(str(r.id) == role for r in member.roles)


# answers ----------------------------------------------------------------------
def card_embed(card: Card) -> discord.Embed:
    """A card as an embed, clipped to Discord's limits (fields 1024, description 4096)."""
    embed = discord.Embed(title=card.title[:256], description=_clip(card.description, 4096) or None,
                          colour=TONE_COLOURS[card.tone])
    for f in card.fields[:25]:
        embed.add_field(name=f.name[:256], value=_clip(f.value, 1024) or "\u200b", inline=f.inline)
    if card.thumbnail_url:
        embed.set_thumbnail(url=card.thumbnail_url)
    if card.footer:
        embed.set_footer(text=_clip(card.footer, 2048))
    return embed


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def pages(card: Card) -> list[Card]:
    """A card cut into pages of `card.page_size` fields (one page when it has no page size)."""
    size = card.page_size or len(card.fields) or 1
    chunks = [card.fields[i:i + size] for i in range(0, len(card.fields), size)] or [()]
    if len(chunks) == 1:
        return [card]
    return [dataclasses.replace(card, fields=chunk, footer=" · ".join(
        filter(None, [f"page {n} of {len(chunks)}", card.footer]))) for n, chunk in enumerate(chunks, 1)]


class MarkReadButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=r"roundtable:read:(?P<marks>[0-9.,]+)"):
    """Mark read: moves the clicker's cursor of each group through its seq. It works after a
    restart too: its custom_id carries the marks (`roundtable:read:<group>.<seq>,...`)."""

    def __init__(self, marks: str) -> None:
        super().__init__(discord.ui.Button(label="Mark read", style=discord.ButtonStyle.primary, emoji="✅",
                                           custom_id=f"roundtable:read:{marks}"))
        self.marks = marks

    @classmethod
    def of(cls, mark: MarkRead) -> MarkReadButton:
        return cls(",".join(f"{group_id}.{seq}" for group_id, seq in mark.through))

    @classmethod
    async def from_custom_id(cls, interaction: discord.Interaction, item: discord.ui.Item[Any],
                             match: re.Match[str]) -> MarkReadButton:
        return cls(match["marks"])

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        return await taken(interaction)

    async def callback(self, interaction: discord.Interaction) -> None:
        marks = [(int(g), int(q)) for g, q in (pair.split(".") for pair in self.marks.split(",") if pair)]
        await slash_of(interaction).verbs.reading.mark(marks, reader_of(interaction))
        await interaction.response.edit_message(content="✅ Marked read.", embeds=[], view=None)


class ApprovalButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=APPROVE_ID):
    """Approve or Deny on a tool call held for approval (`bot.surfaces.discord.approvals`): only
    the person who started the episode or an operator decides; anyone else is told privately."""

    def __init__(self, key: str, approve: bool) -> None:
        super().__init__(discord.ui.Button(label="Approve" if approve else "Deny", custom_id=custom_id(key, approve)))
        self.key, self.approve = key, approve

    @classmethod
    async def from_custom_id(cls, interaction: discord.Interaction, item: discord.ui.Item[Any],
                             match: re.Match[str]) -> ApprovalButton:
        return cls(match["key"], match["choice"] == "yes")

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        return await taken(interaction)

    async def callback(self, interaction: discord.Interaction) -> None:
        slash = slash_of(interaction)
        held = slash.surface.approvals.get(self.key)
        if held is None:
            await send(interaction, {"content": "This request is no longer waiting for a decision."})
            return
        group = await slash.store.groups.get_group(held.group_id)
        starter = held.ask.starter_user_id
        if str(interaction.user.id) != starter and not is_operator(interaction.user, group):
            who = f"<@{starter}>" if starter else "the person who started this"
            await send(interaction, {"content": f"Only {who} or an operator can approve this.",
                                     "allowed_mentions": discord.AllowedMentions.none()})
            return
        await interaction.response.defer()  # the message's edit (the decision, no buttons) follows from the run
        if not slash.surface.approvals.decide(self.key, self.approve, interaction.user.display_name):
            await interaction.followup.send("This request is no longer waiting for a decision.", ephemeral=True)


class StopButton(discord.ui.DynamicItem[discord.ui.Button[Any]], template=STOP_ID):
    """⏹ Stop on an agent's provisional message (SPEC §8 "People steer a reply",
    `bot.surfaces.discord.controls`): the person who started the episode or an operator stops
    the agent's run at once; anyone else is told privately who may."""

    def __init__(self, group_id: int, agent_id: int) -> None:
        super().__init__(discord.ui.Button(label=STOP_LABEL, emoji=STOP_EMOJI,
                                           custom_id=stop_custom_id(group_id, agent_id)))
        self.group_id, self.agent_id = group_id, agent_id

    @classmethod
    async def from_custom_id(cls, interaction: discord.Interaction, item: discord.ui.Item[Any],
                             match: re.Match[str]) -> StopButton:
        return cls(int(match["group"]), int(match["agent"]))

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        return await taken(interaction)

    async def callback(self, interaction: discord.Interaction) -> None:
        slash = slash_of(interaction)
        group = await slash.store.groups.get_group(self.group_id)
        answer = await slash.engine.stops.reply(self.group_id, self.agent_id, user_id=str(interaction.user.id),
                                                operator=is_operator(interaction.user, group),
                                                by=interaction.user.display_name)
        if answer.refused:
            who = f"<@{answer.starter}>" if answer.starter else "the person who started this"
            await send(interaction, {"content": f"Only {who} or an operator can stop this.",
                                     "allowed_mentions": discord.AllowedMentions.none()})
        elif not answer.stopped:
            await send(interaction, {"content": "This reply is no longer running."})
        else:  # the message's last edit ("(stopped)", no buttons) follows from the run
            await interaction.response.defer()


class Pager(discord.ui.View):
    """Newer/Older buttons over the pages of one answer (and its Mark read button)."""

    def __init__(self, cards: list[Card], mark: MarkRead | None) -> None:
        super().__init__(timeout=900)
        self.cards, self.page = cards, 0
        if len(cards) > 1:
            self.newer.disabled = True
        else:
            self.remove_item(self.newer)
            self.remove_item(self.older)
        if mark is not None:
            self.add_item(MarkReadButton.of(mark))

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        return await taken(interaction)

    @discord.ui.button(label="◀ Newer", style=discord.ButtonStyle.secondary)
    async def newer(self, interaction: discord.Interaction, button: discord.ui.Button[Any]) -> None:
        await self.turn(interaction, -1)

    @discord.ui.button(label="Older ▶", style=discord.ButtonStyle.secondary)
    async def older(self, interaction: discord.Interaction, button: discord.ui.Button[Any]) -> None:
        await self.turn(interaction, +1)

    async def turn(self, interaction: discord.Interaction, step: int) -> None:
        self.page = max(0, min(len(self.cards) - 1, self.page + step))
        self.newer.disabled, self.older.disabled = self.page == 0, self.page == len(self.cards) - 1
        await interaction.response.edit_message(embed=card_embed(self.cards[self.page]), view=self)


async def answer(interaction: discord.Interaction, reply: Reply) -> None:
    """An ephemeral answer: text (split when long), embeds with their buttons (pages, Mark read),
    or a file (attached; deleted here once sent)."""
    if isinstance(reply, Attachment):
        await send_file(interaction, reply)
        return
    if isinstance(reply, str):
        parts: list[dict[str, Any]] = [{"content": chunk} for chunk in split_message(reply) or ["(nothing to show)"]]
    elif isinstance(reply, Card) and (reply.mark_read is not None or reply.page_size):
        cards = pages(reply)
        parts = [{"embed": card_embed(cards[0]), "view": Pager(cards, reply.mark_read)}]
    else:
        cards = [reply] if isinstance(reply, Card) else list(reply)
        parts = [{"embeds": [card_embed(c) for c in cards[i:i + 10]]} for i in range(0, len(cards), 10)]
    for part in parts:
        await send(interaction, part)


async def send_file(interaction: discord.Interaction, attachment: Attachment) -> None:
    """The file as an attachment of the answer, unless it is over what Discord takes here (then
    the answer says its size and how else to get it). The temporary file is deleted either way."""
    try:
        # In a thread: the event loop serves every group meanwhile (the upload then reads the file
        # through aiohttp, which does so off the loop too).
        size, limit = await asyncio.to_thread(os.path.getsize, attachment.path), interaction.filesize_limit
        if size > limit:
            text = (f"{attachment.text} The file is {_size(size)}, more than the {_size(limit)} Discord takes "
                    f"here: where the bot runs, `{attachment.elsewhere}` writes it.")
            await send(interaction, {"content": text})
            return
        with await asyncio.to_thread(open, attachment.path, "rb") as data:
            await send(interaction, {"content": attachment.text,
                                      "file": discord.File(data, filename=attachment.filename)})
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(attachment.path)


def _size(n: int) -> str:
    """1.5 MB, 25 MB, 12 KB."""
    if n < 2**20:
        return f"{max(1, round(n / 2**10))} KB"
    return f"{n / 2**20:.1f}".rstrip("0").rstrip(".") + " MB"


async def taken(interaction: discord.Interaction) -> bool:
    """`Interactions.take` for a button or a form (their objects do not hold the bot)."""
    return await slash_of(interaction).interactions.take(interaction)


def slash_of(interaction: discord.Interaction) -> SlashCommands:
    """The slash commands of the client the interaction came to, for a button or a form: discord.py
    builds those itself (a Mark read button after a restart) and hands them only the interaction.
    The client keeps its `SlashCommands` as `slash` (`bot.surfaces.discord.client`)."""
    slash = getattr(interaction.client, "slash", None)
    if not isinstance(slash, SlashCommands):
        raise TypeError(f"{type(interaction.client).__name__} keeps no SlashCommands as .slash")
    return slash


def reader_of(interaction: discord.Interaction) -> Reader:
    return Reader(str(interaction.user.id), interaction.user.display_name)


class PromptModal(discord.ui.Modal):
    def __init__(self, title: str, default: str | None,
                 on_prompt: Callable[[discord.Interaction, str], Awaitable[None]]) -> None:
        super().__init__(title=title[:45], timeout=900)
        self.prompt: discord.ui.TextInput[PromptModal] = discord.ui.TextInput(
            label="System prompt", custom_id="prompt", style=discord.TextStyle.paragraph,
            default=default, max_length=v.PROMPT_MAX, required=True,
        )
        self.add_item(self.prompt)
        self.on_prompt = on_prompt

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        return await taken(interaction)

    async def on_submit(self, interaction: discord.Interaction) -> None:
        await self.on_prompt(interaction, self.prompt.value)

    async def on_error(self, interaction: discord.Interaction, error: Exception) -> None:  # type: ignore[override]  # discord.py's Modal types it more narrowly
        log.error("prompt form failed", exc_info=error)
        try:
            await answer(interaction, SOMETHING_WENT_WRONG)
        finally:
            finish(interaction)


# a command's call -------------------------------------------------------------
class DiscordCaller:
    """What a slash command may ask of Discord (`bot.core.verbs.commands.Caller`)."""

    surface = "discord"

    def __init__(self, slash: SlashCommands, interaction: discord.Interaction, command: Command,
                 given: Mapping[str, object]) -> None:
        self.slash = slash
        self.interaction = interaction
        self.command = command
        self.given = dict(given)
        self._group: Group | None = None

    @property
    def is_operator(self) -> bool:
        return is_operator(self.interaction.user, self._group)

    async def group(self) -> Group | None:
        channel = self.interaction.channel
        self._group = await self.slash.store.groups.find_group(group_key(channel.id)) if channel is not None else None
        return self._group

    async def setup(self, mode: str | None) -> Group:
        interaction = self.interaction
        channel = interaction.channel
        if not isinstance(channel, (discord.TextChannel, discord.Thread)) or interaction.guild is None:
            raise UserFacingError("Run /roundtable setup in a server text channel or thread.")
        parent = channel.parent_id if isinstance(channel, discord.Thread) else None
        await self.slash.ensure_webhook(str(parent or channel.id))
        existing = self._group
        settings = existing.settings if existing else self.slash.group_defaults
        if mode:
            settings = settings.with_changes(mode=mode)
        group = await self.slash.verbs.groups.setup(
            group_key(channel.id), f"#{channel.name}", settings, guild_id=str(interaction.guild.id),
            channel_id=str(channel.id), parent_channel_id=str(parent) if parent else None,
            setup_message_id=str(interaction.id),
        )
        if mode and existing is not None:
            group = await self.slash.store.groups.update_group(group.id, settings=settings)
        self.slash.ingest.resync_channel(channel.id)  # what was posted since the command is the group's from now on
        return group

    async def ask_text(self, label: str, current: str | None) -> str | None:
        async def submitted(interaction: discord.Interaction, text: str) -> None:
            await self.slash.invoke(interaction, self.command, {**self.given, "prompt": text})
        async with first_answer(self.interaction) as due:
            if not due:  # a form can only be the first answer
                raise UserFacingError("The form for the prompt could not open (the bot was slow to answer); "
                                      "run the command again, or give the prompt as its prompt option.")
            await self.interaction.response.send_modal(PromptModal(label, current, submitted))
        return None

    @property
    def reader(self) -> Reader:
        return reader_of(self.interaction)

    def link(self, group: Group, message: Message) -> str:
        if group.guild_id and group.channel_id and message.external_ids and message.external_ids[0].isdigit():
            return jump_link(group.guild_id, group.channel_id, message.external_ids[0])
        return f"#{message.seq}"

    async def reading_groups(self) -> list[tuple[Group, bool]]:
        guild = self.interaction.guild
        if guild is None:
            return []
        groups = await self.slash.store.groups.list_groups(guild_id=str(guild.id))
        return [(g, is_operator(self.interaction.user, g)) for g in groups if g.key.startswith("discord:")]

    async def checks(self, group: Group | None) -> list[Check]:
        """The channel's webhook and the bot's permissions there (for a channel that is not a
        group yet: what /roundtable setup would need)."""
        if group is None:
            channel = self.interaction.channel
            if not isinstance(channel, (discord.TextChannel, discord.Thread)) or channel.guild is None:
                return []
            parent = channel.parent if isinstance(channel, discord.Thread) else channel
            if parent is None:
                return []
            return [permission_check(f"#{channel.name}", parent.permissions_for(channel.guild.me),
                                     thread=isinstance(channel, discord.Thread))]
        return await channel_checks(self.slash.client, group, await self.slash.store.webhooks.get_webhook(
            group.parent_channel_id or group.channel_id or ""))

    async def keep_image(self, image: object, label: str) -> str:
        """Post the attachment in the channel as the bot, so Discord keeps it (an option's
        attachment is deleted after a while), and answer that message's attachment URL.
        Its signed URL expires; the surface refreshes it before use."""
        if not isinstance(image, discord.Attachment):
            raise UserFacingError("The picture must be an image attachment.")
        if not (image.content_type or "").startswith("image/") or image.size > MAX_IMAGE_BYTES:
            raise UserFacingError(f"{image.filename} is not a picture Discord can show (PNG, JPEG, GIF or WebP, "
                                  f"at most {MAX_IMAGE_BYTES // 2**20} MB).")
        await defer(self.interaction)  # copying the picture may take longer than Discord waits
        channel = self.interaction.channel
        if not isinstance(channel, discord.abc.Messageable):
            raise UserFacingError("Add pictures in a text channel of the group.")
        try:
            data = await image.read()
            sent = await channel.send(f"🖼️ {label}", file=discord.File(io.BytesIO(data), filename=image.filename),
                                      allowed_mentions=discord.AllowedMentions.none())
        except discord.HTTPException as exc:
            raise UserFacingError(f"Discord did not take the picture ({exc.status}); try again.") from None
        return sent.attachments[0].url


class SlashStore(ClaimStore, HasGroups, HasRoster, HasThread, HasWebhooks, Protocol):
    """What the slash commands ask of the store themselves (their verbs ask theirs): an interaction's
    claim (`ClaimStore`), the channel's group, its agents (autocomplete), a message's row (the message
    menus) and the channel's webhook (/roundtable setup, /roundtable doctor)."""


class SlashCommands:
    """Builds the app command tree from the declaration and runs each call: `verbs` answer them
    (wiring makes them: `bot.core.verbs.admin.verbs_of`), `store` is what the commands read themselves."""

    def __init__(self, client: discord.Client, engine: Engine, surface: DiscordSurface, ingest: Ingest,
                 group_defaults: GroupSettings, *, store: SlashStore, verbs: Verbs) -> None:
        self.client = client
        self.engine = engine
        self.surface = surface
        self.ingest = ingest  # (a command's caller is a person: `@name` tags them from now on)
        self.group_defaults = group_defaults  # a new group's settings
        self.verbs = verbs
        self.store = store
        self.interactions = Interactions(store, group_key)
        self._webhook_locks: dict[str, asyncio.Lock] = {}  # channel -> held while its webhook is found or made

    async def failed(self, interaction: discord.Interaction, error: app_commands.AppCommandError) -> None:
        """A command that raised (the tree's on_error): an option value Discord should not have
        let through gets one line; anything else is logged with its traceback and answered briefly."""
        name = interaction.command.qualified_name if interaction.command else "?"
        original = getattr(error, "original", None)
        if isinstance(error, app_commands.TransformerError):
            log.info("command %s: %s", name, error)
            text = f"{error.value!r} is not a {error.type.name} this option takes; pick one from Discord's list."
        elif isinstance(original, StoreUnavailable):  # expected while the server restarts; the store logs it
            log.info("command %s: %s", name, original)
            text = DATABASE_AWAY
        else:
            log.error("command %s failed", name, exc_info=error)
            text = SOMETHING_WENT_WRONG
        try:
            await send(interaction, {"content": text})
        except discord.HTTPException:
            pass
        finally:
            finish(interaction)

    # the channel's webhook --------------------------------------------------------
    async def ensure_webhook(self, channel_id: str) -> None:
        """A webhook of the channel stored for the group's posts: the one stored, else one this bot
        made there before (an earlier setup, whose row was lost or never written), else a new one.
        One setup of a channel at a time (two admins, a double click), so they end with one webhook."""
        async with self._webhook_locks.setdefault(channel_id, asyncio.Lock()):
            if await self.store.webhooks.get_webhook(channel_id) is not None:
                return
            made = await self._made_before(channel_id)
            if made is None or made.token is None:  # (`_made_before` keeps only webhooks with a token)
                await self.surface.create_webhook(channel_id)
                return
            await self.store.webhooks.save_webhook(channel_id, str(made.id), made.token)
            log.info("channel %s: using the webhook %s this bot made there before", channel_id, made.id)

    async def _made_before(self, channel_id: str) -> discord.Webhook | None:
        """The oldest webhook of the channel that this bot made (None when it cannot tell)."""
        channel = self.client.get_channel(int(channel_id))
        me = self.client.user
        if not isinstance(channel, discord.TextChannel) or me is None:
            return None
        try:
            hooks = await channel.webhooks()
        except discord.HTTPException:  # no Manage Webhooks, say: creating one says what is missing
            return None
        mine = [h for h in hooks if h.type is discord.WebhookType.incoming and h.token
                and h.user is not None and h.user.id == me.id]
        return min(mine, key=lambda h: h.id, default=None)

    # running a command ------------------------------------------------------------
    async def invoke(self, interaction: discord.Interaction, command: Command, given: Mapping[str, object]) -> None:
        try:
            await self._invoke(interaction, command, given)
        finally:
            finish(interaction)

    async def _invoke(self, interaction: discord.Interaction, command: Command, given: Mapping[str, object]) -> None:
        if command.is_slow(given):  # a model call: Discord waits only 3 s
            await defer(interaction)
        if interaction.guild is not None:
            await self.ingest.remember(str(interaction.guild.id), interaction.user)
        try:
            reply = await declared.run(command, self.verbs, DiscordCaller(self, interaction, command, given), given)
        except UserFacingError as exc:
            reply = mask(str(exc))
        if isinstance(reply, Card) and reply.thumbnail_url:  # a stored picture's signed URL may have expired
            reply = dataclasses.replace(reply, thumbnail_url=await self.surface.fresh_url(reply.thumbnail_url))
        if reply is not None:
            await answer(interaction, reply)

    async def autocomplete_agent(
        self, interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        channel = interaction.channel
        group = await self.store.groups.find_group(group_key(channel.id)) if channel is not None else None
        if group is None:
            return []
        typed = current.casefold()
        return [app_commands.Choice(name=a.name, value=a.name)
                for a in await self.store.roster.list_agents(group.id) if typed in a.name.casefold()][:25]

    async def autocomplete_model(
        self, interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        """Every provider's listed models (`provider/model` on a named one) containing what is typed."""
        return [app_commands.Choice(name=m, value=m)
                for m in model_choices(await self.engine.llm.model_names(), current)]

    async def autocomplete_tool(
        self, interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        """The tools an agent may be granted (`server.tool`, `server.*`, a built-in) completing what is typed."""
        return [app_commands.Choice(name=t, value=t) for t in tool_choices(self.engine.tools.names(), current)]

    async def why_this_reply(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """The message menu: `/roundtable why` for the message it was opened on."""
        await self.invoke(interaction, declared.find(("roundtable", "why")), {"message": str(message.id)})

    async def regenerate_reply(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """The message menu "Regenerate reply" (`bot.core.runtime.regenerate`): the group's newest agent
        message written again and edited in place; refusals (and the outcome) are told privately."""
        try:
            await defer(interaction)  # a model call: Discord waits only 3 s
            reply = await self._regenerate(interaction, message)
        except UserFacingError as exc:
            reply = str(exc)
        try:
            await answer(interaction, mask(reply))
        finally:
            finish(interaction)

    async def _regenerate(self, interaction: discord.Interaction, message: discord.Message) -> str:
        channel = interaction.channel
        group = await self.store.groups.find_group(group_key(channel.id)) if channel is not None else None
        if group is None or not group.enabled:
            return declared.NOT_SET_UP
        stored = await self.store.thread.find_message_by_external_id(str(message.id))
        if stored is None or stored.group_id != group.id:
            return "That message is not in this group's record, so it cannot be regenerated."
        done = await self.engine.regenerate(group, stored.seq, user_id=str(interaction.user.id),
                                            operator=is_operator(interaction.user, group))
        return (f"{done.message.author_name}'s reply was written again (run #{done.run.id}); the message is edited, "
                "and the earlier text is kept in the record.")

    # building the tree ----------------------------------------------------------
    def register(self, tree: app_commands.CommandTree) -> None:
        self.client.add_dynamic_items(MarkReadButton, ApprovalButton, StopButton)
        groups: dict[tuple[str, ...], app_commands.Group] = {
            (name,): app_commands.Group(name=name, description=text, guild_only=True)
            for name, text in GROUP_DESCRIPTIONS.items()}
        for command in declared.COMMANDS:
            parent = self._group_of(groups, command.path[:-1])
            app: app_commands.Command[Any, ..., None] = app_commands.Command(
                name=command.path[-1], description=command.description[:100],
                callback=self._callback(command), parent=parent)
            app.guild_only = True
            for option in command.options_for("discord"):
                if option.kind == "agent":
                    app.autocomplete(_param(option.name))(self.autocomplete_agent)
                elif option.kind == "model":
                    app.autocomplete(_param(option.name))(self.autocomplete_model)
                elif option.kind == "tool":
                    app.autocomplete(_param(option.name))(self.autocomplete_tool)
            if parent is None:
                tree.add_command(app)
            else:
                parent.add_command(app)
        for path, group in groups.items():
            if len(path) == 1:
                tree.add_command(group)
        for name, callback in ((WHY_MENU, self.why_this_reply), (REGENERATE_MENU, self.regenerate_reply)):
            menu = app_commands.ContextMenu(name=name, callback=callback)
            menu.guild_only = True
            tree.add_command(menu)

    @staticmethod
    def _group_of(groups: dict[tuple[str, ...], app_commands.Group],
                  path: tuple[str, ...]) -> app_commands.Group | None:
        """The command group for `path` (`/agent memory show` lives in agent > memory), made when first needed."""
        if not path:
            return None
        if path not in groups:
            parent = groups[path[:1]]
            groups[path] = app_commands.Group(name=path[-1], description=f"/{' '.join(path)} commands",
                                              parent=parent, guild_only=True)
        return groups[path]

    def _callback(self, command: Command) -> Any:
        """A callback whose signature is the command's options, for discord.py to read."""
        async def callback(interaction: discord.Interaction, **values: Any) -> None:
            try:
                given = {named[p]: _plain(kinds[named[p]], named[p], value) for p, value in values.items()
                         if value is not None}
            except UserFacingError as exc:
                try:
                    await answer(interaction, str(exc))
                finally:
                    finish(interaction)
                return
            await self.invoke(interaction, command, given)

        options = command.options_for("discord")
        kinds = {o.name: o.kind for o in options}
        named = {_param(o.name): o.name for o in options}  # the callback's parameter -> the option
        parameters = [inspect.Parameter("interaction", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        annotation=discord.Interaction)]
        parameters += [inspect.Parameter(_param(o.name), inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(o),
                                         default=inspect.Parameter.empty if o.required else None) for o in options]
        callback.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # discord.py reads the signature we give it
        callback.__discord_app_commands_param_description__ = {  # type: ignore[attr-defined]  # what app_commands.describe would set
            _param(o.name): o.description[:100] for o in options}
        renamed = {p: name for p, name in named.items() if p != name}
        if renamed:  # an option named like a Python keyword (`/agent mute ... for:1h`)
            callback.__discord_app_commands_param_rename__ = renamed  # type: ignore[attr-defined]  # what app_commands.rename would set
        choices = {_param(o.name): [app_commands.Choice(name=c, value=c) for c in o.choices]
                   for o in options if o.choices}
        if choices:
            callback.__discord_app_commands_param_choices__ = choices  # type: ignore[attr-defined]  # what app_commands.choices would set
        return callback


def _param(name: str) -> str:
    """The callback's parameter for an option: its name, or `for_` for `for` (a Python keyword)."""
    return f"{name}_" if keyword.iskeyword(name) else name


def _annotation(option: Option) -> Any:
    """Discord's type for a declared option (ranges and lengths included)."""
    kind = option.kind
    if kind == "integer":
        return app_commands.Range[int, int(option.low or 0), int(option.high or 2**31)]
    if kind == "number":
        return app_commands.Range[float, option.low or 0.0, option.high if option.high is not None else 1e9]
    if kind == "boolean":
        return bool
    if kind == "choice":
        return str  # with its choices; the declaration checks the value (a modified client may send another)
    if kind == "role":
        return discord.Role
    if kind == "image":
        return discord.Attachment
    if option.max_length is not None:
        return app_commands.Range[str, 1, min(option.max_length, 6000)]
    return str


def _plain(kind: str, name: str, value: object) -> object:
    """A discord.py value as the declaration's handlers take it."""
    if isinstance(value, discord.Role):
        return str(value.id)
    if isinstance(value, discord.Object):  # an id Discord did not resolve (a modified client's)
        what = "role" if kind == "role" else "such thing"
        raise InvalidInput(f"{name}: there is no {what} {value.id} in this server.")
    return value  # an attachment stays itself: `DiscordCaller.keep_image` copies it
