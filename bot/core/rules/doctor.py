"""What `roundtable doctor` and `/roundtable doctor` report: checks as data, and the checks the core can judge.

A `Check` is one line: a name, whether it passed, what was found and, when it
failed, the fix. A check that passed with a `warn`ing (the set-up works, but not as
well as it could: DISCORD_GUILD_ID unset) is marked `!` and shows its fix too; it
does not fail the doctor. Each place that can look at something makes its own checks
(the settings and Discord's REST API on the command line, the gateway's cache in
the bot, the model endpoints in `bot.llm.endpoints`); the database's and a
group's are judged here, from plain data (`DatabaseReport`, `Group`), so both
surfaces word them the same. `doctor_card` shows a list of checks as a card
(an embed in Discord, lines in the console); `Check.line` is the command line's.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from bot.core.models import Group
from bot.core.rules.card import Card, Field

PASS, FAIL, WARN = "✓", "✗", "!"
STUCK_AFTER = 300.0  # seconds a row may wait to be posted before the outbox check fails


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""  # what to do, when it failed (or warns)
    warn: bool = False  # passed, but could be better: marked `!`, with its fix

    @property
    def mark(self) -> str:
        return FAIL if not self.ok else WARN if self.warn else PASS

    @property
    def advised(self) -> bool:
        """Its fix is shown: it failed, or warns."""
        return bool(self.fix) and (not self.ok or self.warn)

    def line(self) -> str:
        """`✓ name: detail`, `✗ name: detail; fix: ...` or `! name: detail; fix: ...`, on one line."""
        text = f"{self.mark} {self.name}: {self.detail}"
        if self.advised:
            text += f"; fix: {self.fix}"
        return " ".join(text.split())


Probe = Callable[[], Awaitable[list[Check]]]


def mcp_server_check(name: str, tools: int | None, problem: str | None, *, command: str | None = None,
                     url: str | None = None, where: str = "ROUNDTABLE_MCP_CONFIG") -> Check:
    """One MCP server of the config file (SPEC §6b): ✓ started with its tools counted, or ✗ with
    why it did not start and what to fix (`command`: a stdio server's command line; `url`: an
    HTTP server's address)."""
    label = f"MCP server {name}"
    if tools is not None:
        return Check(label, True, f"started; {tools} tool{'' if tools == 1 else 's'} listed")
    why = problem or "it did not start"
    if url is not None:
        fix = f"start the server at {url} (or correct its \"url\" and \"headers\" in {where})"
    elif "not found" in why:
        fix = f"install the program, or correct the server's \"command\" in {where} (a name on PATH, or a full path)"
    else:
        fix = (f"run its command by hand to see why ({command}), then correct \"command\", \"args\" or "
               f"\"env\" in {where}" if command else f"correct the server's entry in {where}")
    return Check(label, False, f"did not start ({why})", fix)


@dataclass(frozen=True)
class Waiting:
    """Rows of one group that no surface has confirmed yet (the outbox)."""

    group: str
    rows: int
    oldest_age: float  # seconds since the oldest of them was stored


@dataclass(frozen=True)
class Holder:
    """A group's lease: who runs the group now."""

    group: str
    holder: str  # 'discord bot (pid 1234)', '... on host-b'
    expires_in: float  # seconds; <= 0: expired
    gone: bool = False  # the holder is a process of this host that has exited


@dataclass(frozen=True)
class DatabaseReport:
    """What a database says about itself, read without changing it."""

    where: str  # the path, or the URL without its password
    exists: bool  # False: a SQLite file not created yet (the first start creates it)
    version: int  # the highest migration recorded (0: none)
    known: int  # the highest migration this code has
    waiting: tuple[Waiting, ...] = ()
    leases: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class AgentModel:
    """An enabled agent with a model of its own (`roundtable doctor` checks its endpoint lists it)."""

    group: str  # the group's name, '#general'
    agent: str
    model: str  # as the agent has it: 'gpt-4o', 'local/llama3'


def database_checks(health: DatabaseReport) -> list[Check]:
    """The database's schema, its outbox and its leases."""
    where = health.where
    if not health.exists:
        return [Check("database", True, f"{where} does not exist yet; the first start creates it "
                                        f"(schema version {health.known})")]
    if health.version > health.known:
        schema = Check("database", False, f"{where} is at schema version {health.version}, newer than this "
                                          f"version of Roundtable knows ({health.known}): it would refuse to start",
                       "upgrade Roundtable (pip install -U roundtable, or git pull and pip install -e .), or point "
                       "ROUNDTABLE_DB at another database")
    elif health.version < health.known:
        schema = Check("database", True, f"{where} is reachable, at schema version {health.version} (this version's "
                                         f"is {health.known}); the next start or `roundtable migrate` brings it up "
                                         "to date")
    else:
        schema = Check("database", True, f"{where} is reachable, at schema version {health.version} (this "
                                         "version's)")
    return [schema, outbox_check(health.waiting), lease_check(health.leases)]


def outbox_check(waiting: Sequence[Waiting]) -> Check:
    if not waiting:
        return Check("outbox", True, "no reply is waiting to be posted")
    rows = sum(w.rows for w in waiting)
    where = ", ".join(f"{w.group} {w.rows} (oldest {_age(w.oldest_age)})" for w in waiting)
    stuck = [w.group for w in waiting if w.oldest_age > STUCK_AFTER]
    if stuck:
        return Check("outbox", False, f"{_plural(rows, 'reply', 'replies')} not posted yet: {where}",
                     f"start the bot (`roundtable run`) if it is not running; otherwise see the delivery "
                     f"problem of {', '.join(stuck)} (/roundtable status there)")
    return Check("outbox", True, f"{_plural(rows, 'reply', 'replies')} being posted: {where}")


def lease_check(leases: Sequence[Holder]) -> Check:
    if not leases:
        return Check("leases", True, "no process runs a group now")
    parts = []
    for lease in leases:
        if lease.gone:
            state = "that process has exited; the next start takes it over at once"
        elif lease.expires_in <= 0:
            state = "expired; the next start takes it over"
        else:
            state = f"for {_age(lease.expires_in)} more unless renewed"
        parts.append(f"{lease.group} by {lease.holder} ({state})")
    return Check("leases", True, "; ".join(parts))


def delivery_check(group: Group) -> Check:
    """The group's lasting delivery problem (a refusal of the surface), as `/roundtable status` shows it."""
    name = f"{group.name} delivery"
    if group.delivery_problem:
        return Check(name, False, group.delivery_problem,
                     "fix what it names; the bot retries by itself and the problem clears at the next post that "
                     "goes through")
    if group.paused:
        return Check(name, True, "paused: replies wait until /roundtable resume")
    return Check(name, True, "no delivery problem")


def all_passed(checks: Sequence[Check]) -> bool:
    return all(c.ok for c in checks)


def summary(checks: Sequence[Check]) -> str:
    """The card's: `2 checks of 14 failed.`, `All 14 checks passed.` or `All 14 checks passed; 1 warning.`"""
    failed = sum(not c.ok for c in checks)
    if failed:
        return f"{_plural(failed, 'check')} of {len(checks)} failed."
    warned = sum(c.warn for c in checks)
    return f"All {len(checks)} checks passed" + (f"; {_plural(warned, 'warning')}." if warned else ".")


def doctor_card(checks: Sequence[Check], title: str) -> Card:
    """The checks as a card: one field per check, failures first, then warnings; red when one failed."""
    failed = [c for c in checks if not c.ok]
    ordered = failed + [c for c in checks if c.ok and c.warn] + [c for c in checks if c.ok and not c.warn]
    fields = tuple(Field(f"{c.mark} {c.name}", c.detail + (f"\nFix: {c.fix}" if c.advised else ""), inline=False)
                   for c in ordered)
    return Card(title, summary(checks), fields, tone="bad" if failed else "good")


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"
