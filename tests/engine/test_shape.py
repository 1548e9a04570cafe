"""The runtime's shape (issue 32, STYLE.md "The shape of the house"): a group's parts work with
one another, not through a hub; the engine only starts and stops groups; docs/layout.md's
drawing of one message's path names each room once, top-down."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from bot.core.models import GroupSettings
from bot.core.runtime.engine import Engine
from bot.llm.tokens import make_token_counter
from storage.store import SqliteStore
from tests.fakes.scripted_llm import ScriptedLLM
from tests.fakes.surface import RecordingSurface

ROOT = Path(__file__).resolve().parents[2]
STARTS_AND_STOPS = {"spawn", "drop"}  # what a group's parts may ask of the engine: a kept task; stop running here


@pytest.fixture
async def store(tmp_path):
    store = await SqliteStore.open(tmp_path / "shape.db")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def engine(store):
    engine = Engine(store, ScriptedLLM(), RecordingSurface(), make_token_counter())
    try:
        yield engine
    finally:
        await engine.close()


def engine_calls(deps: object, engine: Engine) -> set[str]:
    """The engine's methods a deps dataclass holds, bound or closed over."""
    found: set[str] = set()
    for field in dataclasses.fields(deps):  # type: ignore[arg-type]
        value = getattr(deps, field.name)
        if getattr(value, "__self__", None) is engine:
            found.add(f"{field.name}={value.__name__}")
        cells = getattr(value, "__closure__", None) or ()
        if any(cell.cell_contents is engine for cell in cells):
            found.add(f"{field.name}=<closure over the engine>")
    return found


def test_a_groups_parts_never_call_back_into_the_engine(engine):
    parts = {
        "dispatcher": engine.groups.parts.dispatching, "outbox": engine.groups.parts.showing,
        "turn": engine.turn.deps, "intake": engine.intake.deps, "direct": engine.direct.deps,
        "regenerate": engine.regenerations.deps,
    }
    calls = {name: engine_calls(deps, engine) for name, deps in parts.items()}
    assert {name: {c for c in found if c.split("=")[1] not in STARTS_AND_STOPS} for name, found in calls.items()} \
        == {name: set() for name in parts}


async def test_a_groups_dispatcher_and_outbox_share_one_runtime(engine, store):
    group = await store.groups.create_group("console:shape", "shape", GroupSettings())
    await engine.start()
    runtime = engine.groups.get(group.id)
    assert runtime.dispatcher.outbox is runtime.outbox
    assert engine.groups.get(group.id) is runtime  # one per group
    engine.drop(group.id)
    assert runtime.dispatcher.stopped and runtime.outbox.stopped
    assert engine.groups.get(group.id) is not runtime  # taken again: a fresh runtime


def test_the_layout_draws_one_messages_path_through_each_room_once_top_down():
    text = (ROOT / "docs" / "layout.md").read_text()
    drawing = text.split("## One message's path", 1)[1].split("```")[1]
    rooms = [m.group(1) for m in re.finditer(r"^(\S+\.py)\s", drawing, re.MULTILINE)]
    assert rooms[:2] == ["surfaces/discord/client.py", "surfaces/discord/events.py"]
    assert len(rooms) == len(set(rooms)), f"a room is walked into twice: {rooms}"
    for room in rooms:
        assert (ROOT / "bot" / room).is_file(), room
    order = ["engine.py", "intake.py", "group.py", "dispatcher.py", "turn.py", "outbox.py"]
    assert [Path(r).name for r in rooms if r.startswith("core/runtime/")] == order
