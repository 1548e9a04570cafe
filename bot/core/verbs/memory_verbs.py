"""The verbs behind `/agent memory show|clear` (declared in `bot.core.verbs.commands`): an agent's notes.

The notes are what an agent with memory on saved with memory_write (`bot.core.features.memory`);
the handler finds the agent by name (`RosterVerbs.agent`) and hands it here.
"""
from __future__ import annotations

from bot.core.models import Agent
from bot.core.ports import HasNotes
from bot.core.record.transcript import plural, when
from bot.core.rules.card import Card, Field

MEMORY_PAGE = 10  # notes per page where a surface pages (Discord)


class MemoryVerbs:
    def __init__(self, store: HasNotes) -> None:
        self.store = store

    async def show(self, agent: Agent) -> Card | str:
        """The agent's notes, newest first, with when each was saved."""
        state = f"memory is {'on' if agent.memory else 'off'}"
        notes = await self.store.notes.notes(agent.id)
        if not notes:
            return f"{agent.name} has no notes ({state})."
        fields = tuple(Field(when(n.created_at) or f"note {n.id}", n.text, inline=False) for n in reversed(notes))
        return Card(f"Memory of {agent.name}", f"{plural(len(notes), 'note')}, newest first; {state}.", fields,
                    page_size=MEMORY_PAGE)

    async def clear(self, agent: Agent) -> str:
        cleared = await self.store.notes.clear_notes(agent.id)
        if not cleared:
            return f"{agent.name} had no notes to clear."
        return f"Cleared {plural(cleared, 'note')} of {agent.name}."
