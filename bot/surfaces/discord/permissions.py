"""The Discord permissions Roundtable needs, why each, and the invite URL that asks for exactly them.

Each bit is named once in `NEEDED` with the code that needs it; the invite URL's
permissions integer, `roundtable doctor`'s check of a group's channel and
`/roundtable doctor`'s are all computed from it. Left out on purpose: Use
External Emojis (every emoji the bot sends is a Unicode one), Mention Everyone
(no post ever pings @everyone, @here or roles), Manage Messages (the bot deletes
only its webhook's own posts, through the webhook), Administrator.
"""
from __future__ import annotations

import discord

SCOPES = ("bot", "applications.commands")  # the bot user; its slash commands

# discord.Permissions flag -> what needs it (shown by `roundtable init`)
NEEDED: dict[str, str] = {
    "view_channel": "see the group's channel at all",
    "send_messages": "post notices (a stop after max_turns, delivery problems), keep pictures, show typing",
    "send_messages_in_threads": "the same in a group that is a thread",
    "read_message_history": "catch up on messages posted while the bot was offline, find its own posts "
                            "after a restart, react to messages",
    "add_reactions": "mark each task with its episode's state (⏳ ✅ 🛑 ⏹️ 💬 🔁)",
    "manage_webhooks": "create the channel's webhook, through which each agent posts under its own name and picture",
    "embed_links": "answer /roundtable status, why, usage, /agent list and show as embeds",
    "attach_files": "send exports and long /ask answers as files, keep an agent's picture given as an image",
}
THREAD_ONLY = "send_messages_in_threads"
CHANNEL_ONLY = "send_messages"  # in a thread, Send Messages in Threads stands for it


def needed_permissions() -> discord.Permissions:
    return discord.Permissions(**{name: True for name in NEEDED})


def invite_url(application_id: int) -> str:
    """The URL that adds the bot to a server with the scopes and the permissions it needs."""
    return discord.utils.oauth_url(application_id, permissions=needed_permissions(), scopes=SCOPES)


def label(flag: str) -> str:
    """'manage_webhooks' -> 'Manage Webhooks', as Discord's settings name it."""
    return " ".join(word.capitalize() for word in flag.split("_")).replace(" In ", " in ")


def missing(granted: discord.Permissions, *, thread: bool) -> list[str]:
    """The needed permissions `granted` lacks, as Discord names them, for a group in a text
    channel (or in a thread: checked against its parent channel)."""
    unneeded = CHANNEL_ONLY if thread else THREAD_ONLY
    return [label(name) for name in NEEDED if name != unneeded and not getattr(granted, name)]


def invite_lines(application_id: int) -> list[str]:
    """The invite URL and what each permission it asks for is for, to print."""
    value = needed_permissions().value
    lines = [f"Invite the bot to your server with this URL (scopes {' and '.join(SCOPES)}; permissions {value}, "
             "the sum of these bits):", f"  {invite_url(application_id)}"]
    for name, why in NEEDED.items():
        bit = getattr(discord.Permissions, name).flag
        lines.append(f"  {label(name)} (1<<{bit.bit_length() - 1} = {bit}): {why}")
    return lines
