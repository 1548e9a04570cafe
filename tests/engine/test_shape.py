"""The runtime's shape (issue 32, STYLE.md "The shape of the house"): a group's parts work with
one another, not through a hub; the engine only starts and stops groups and is no one's way to
the store (wiring hands each consumer the roles it uses; only wiring names the whole store);
docs/layout.md's drawing of one message's path names each room once, top-down."""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

import bot
import storage.store
from bot.core import ports
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


# The store's roles: the holders the whole `Store` is made of (`HasThread`, `HasGroups`, ..., `HealthStore`).
STORE_ROLES = frozenset(base for base in ports.Store.__bases__ if base is not Protocol)
WIRING = "bot/wiring.py"  # the one module of bot/ that holds the whole store (it opens it)


def bot_modules() -> Iterator[tuple[str, object]]:
    """Every module of bot/ (but `python -m bot`'s entry point, which runs the command line), imported."""
    for info in pkgutil.walk_packages(bot.__path__, "bot."):
        if not info.name.endswith("__main__"):
            yield info.name, importlib.import_module(info.name)


def bot_files() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / "bot").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name != WIRING:
            yield name, ast.parse(path.read_text(), name)


def roles(cls: type) -> frozenset[type]:
    """The store roles a class names through its bases."""
    return frozenset(base for base in cls.__mro__ if base in STORE_ROLES)


def whole_stores() -> dict[str, str]:
    """The classes that are the whole store (name -> where): `ports.Store`, any Protocol of bot/ that names
    every role, and the concrete stores of `storage.store`."""
    found = {"Store": "bot.core.ports"}
    for module_name, module in bot_modules():
        for name, value in vars(module).items():
            if (inspect.isclass(value) and value.__module__ == module_name and value is not ports.Store
                    and getattr(value, "_is_protocol", False) and roles(value) == STORE_ROLES):
                found[name] = module_name
    for name, value in vars(storage.store).items():
        if inspect.isclass(value) and issubclass(value, storage.store.SqlStore):
            found[name] = "storage.store"
    return found


def annotation_names(node: ast.expr | None) -> set[str]:
    """The names an annotation mentions (`Store`, `ports.Store`, `Callable[[Store], X]`, "Store")."""
    names: set[str] = set()
    for part in ast.walk(node) if node is not None else ():
        if isinstance(part, ast.Name):
            names.add(part.id)
        elif isinstance(part, ast.Attribute):
            names.add(part.attr)
        elif isinstance(part, ast.Constant) and isinstance(part.value, str):
            with contextlib.suppress(SyntaxError):  # a string that is no annotation (a Literal's value)
                names |= annotation_names(ast.parse(part.value, mode="eval").body)
    return names


def annotated(tree: ast.Module) -> Iterator[tuple[int, ast.expr | None]]:
    """Each annotation of a module: its functions' parameters and returns, its annotated names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    yield arg.lineno, arg.annotation
            if not isinstance(node, ast.Lambda):
                yield node.lineno, node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.lineno, node.annotation


def reads_the_engines_store(node: ast.AST) -> bool:
    """`engine.store`, `self.engine.store`, `console.engine._store` ..."""
    if not isinstance(node, ast.Attribute) or node.attr not in {"store", "_store"}:
        return False
    held = node.value
    return (isinstance(held, ast.Name) and held.id == "engine") or (
        isinstance(held, ast.Attribute) and held.attr == "engine")


def test_no_module_of_bot_but_wiring_reaches_the_store_through_the_engine():
    """The engine is not the surfaces' or the verbs' way to the store: wiring hands them theirs."""
    found = [f"{name}:{node.lineno}" for name, tree in bot_files() for node in ast.walk(tree)
             if reads_the_engines_store(node)]
    assert found == []


def test_no_protocol_of_bot_but_ports_store_names_every_store_role():
    """A consumer names the roles it uses; a Protocol of every role is the whole store under another
    name (as `EngineStore` was). `ports.Store` is the one, and only wiring names it."""
    assert len(STORE_ROLES) > 15 and ports.HasThread in STORE_ROLES and ports.HealthStore in STORE_ROLES
    assert {name: where for name, where in whole_stores().items() if where != "storage.store"} \
        == {"Store": "bot.core.ports"}


def test_only_wiring_names_the_whole_store():
    """No annotation (a parameter, a return, an attribute) and no import outside bot/wiring.py names the
    whole store: `Store`, a Protocol of every role, or a concrete `SqlStore`."""
    whole = set(whole_stores())
    assert {"Store", "SqlStore", "SqliteStore"} <= whole
    found: list[str] = []
    for name, tree in bot_files():
        for line, annotation in annotated(tree):
            found += [f"{name}:{line} {hit}" for hit in sorted(annotation_names(annotation) & whole)]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                found += [f"{name}:{node.lineno} import {a.name}" for a in node.names if a.name in whole]
    assert found == []
