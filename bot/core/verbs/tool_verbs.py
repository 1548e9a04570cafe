"""The verb behind `/agent tools name [grant] [revoke] [confirm]` (declared in `bot.core.verbs.commands`).

An agent has no tool until an operator grants it (SPEC §6b): `grant` and `revoke` take one or
more tool names (`server.tool`, `server.*` for every tool of a server), separated by commas or
blanks; `confirm` sets on or off for what is granted (the patterns given, else all the agent's).
The answer always lists what the agent is granted and what the MCP servers offer now. Tools
come from the engine's registry (`bot.core.features.tools`); built-ins of a feature (memory_write)
come with it and are not granted.
"""
from __future__ import annotations

import re

from bot.core.errors import InvalidInput
from bot.core.features.tools import ToolRegistry, check_pattern, full_name, matches
from bot.core.models import Agent, ToolGrant
from bot.core.ports import HasTools

SHOWN_MAX = 40  # tools named in the answer (the rest counted)


def patterns(text: str | None) -> list[str]:
    """The tool names of an option (commas or blanks between them), each checked, in order, once."""
    found = [check_pattern(p) for p in re.split(r"[,\s]+", text or "") if p]
    return list(dict.fromkeys(found))


class ToolVerbs:
    def __init__(self, store: HasTools, registry: ToolRegistry) -> None:
        self.store = store
        self.registry = registry

    async def agent_tools(self, agent: Agent, *, grant: str | None = None, revoke: str | None = None,
                          confirm: bool | None = None) -> str:
        granting, revoking = patterns(grant), patterns(revoke)
        builtins = {full_name(s.name, t.name) for s in self.registry.sources for t in s.tools() if t.builtin}
        for pattern in granting:
            if pattern in builtins:
                raise InvalidInput(f"{pattern} comes with its feature and is not granted (memory_write: "
                                   "/agent edit memory:on).")
        said: list[str] = []
        if revoking:
            removed = await self.store.tools.revoke_tools(agent.id, revoking)
            said.append(f"Revoked {removed} of {len(revoking)} ({', '.join(revoking)})." if removed
                        else f"{', '.join(revoking)} {'was' if len(revoking) == 1 else 'were'} not granted.")
        if granting:
            await self.store.tools.grant_tools(agent.id, granting, confirm=confirm)
            said.append(f"Granted {', '.join(granting)}.")
            names = self.registry.names()
            idle = [p for p in granting if not any(matches(p, n) for n in names)]
            if idle:
                said.append(f"{', '.join(idle)} matches no tool offered now (a server down, or a name to check).")
        elif confirm is not None:
            current = [g.pattern for g in await self.store.tools.tool_grants(agent.id)]
            if current:
                await self.store.tools.grant_tools(agent.id, current, confirm=confirm)
            what = ", ".join(current) or "nothing (none granted)"
            said.append(f"confirm is {'on' if confirm else 'off'} for {what}.")
        if confirm:
            said.append("Its calls of those tools wait for Approve by the person who started the episode or an "
                        "operator (denied after approval_timeout).")
        said.append(self._listing(agent, await self.store.tools.tool_grants(agent.id)))
        return "\n".join(said)

    def _listing(self, agent: Agent, grants: list[ToolGrant]) -> str:
        available = [(full_name(src.name, spec.name), spec) for src, spec in self.registry.available()
                     if not spec.builtin]
        if grants:
            parts = []
            for g in grants:
                covered = [n for n, _ in available if matches(g.pattern, n)]
                note = "" if g.confirm is None else f", confirm {'on' if g.confirm else 'off'}"
                shown = f" ({', '.join(covered[:SHOWN_MAX])})" if g.pattern.endswith(".*") and covered else ""
                parts.append(f"{g.pattern}{shown}{note}")
            granted = f"{agent.name} may call: {'; '.join(parts)}."
        else:
            granted = f"{agent.name} has no tool granted."
        if not available:
            return f"{granted} No tools are offered (ROUNDTABLE_MCP_CONFIG names the MCP servers)."
        names = [f"{n}{' (read-only)' if s.read_only else ' (destructive)' if s.destructive else ''}"
                 f"{' (asks approval)' if s.confirm and not s.destructive else ''}"
                 for n, s in available]
        more = f" and {len(names) - SHOWN_MAX} more" if len(names) > SHOWN_MAX else ""
        return f"{granted} Available: {', '.join(names[:SHOWN_MAX])}{more}."
