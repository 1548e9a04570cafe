"""The checks the core judges from plain data (`bot.core.rules.doctor`): their lines, the database's, the card."""
from __future__ import annotations

import pytest

from bot.core.models import Group, GroupSettings
from bot.core.rules.doctor import (
    Check,
    DatabaseReport,
    Holder,
    Waiting,
    all_passed,
    database_checks,
    delivery_check,
    doctor_card,
    lease_check,
    outbox_check,
)


@pytest.mark.parametrize("check, line", [
    (Check("token", True, "the bot is rt"), "✓ token: the bot is rt"),
    (Check("token", True, "fine", "never shown when it passed"), "✓ token: fine"),
    (Check("token", False, "rejected", "copy a fresh one"), "✗ token: rejected; fix: copy a fresh one"),
    (Check("db", False, "two\nlines  of   text"), "✗ db: two lines of text"),
])
def test_a_check_is_one_line(check: Check, line: str) -> None:
    assert check.line() == line


@pytest.mark.parametrize("version, ok, says", [
    (9, True, "rt.db is reachable, at schema version 9 (this version's)"),
    (7, True, "at schema version 7 (this version's is 9); the next start or `roundtable migrate` brings it up"),
    (12, False, "rt.db is at schema version 12, newer than this version of Roundtable knows (9)"),
])
def test_the_schema_version_against_the_code(version: int, ok: bool, says: str) -> None:
    schema = database_checks(DatabaseReport("rt.db", True, version, 9))[0]
    assert schema.ok is ok and says in schema.detail
    assert bool(schema.fix) is not ok


def test_a_database_not_created_yet_is_one_passing_line() -> None:
    assert database_checks(DatabaseReport("rt.db", False, 0, 9)) == [
        Check("database", True, "rt.db does not exist yet; the first start creates it (schema version 9)")]


@pytest.mark.parametrize("waiting, ok, detail", [
    ((), True, "no reply is waiting to be posted"),
    ((Waiting("#a", 1, 3.0),), True, "1 reply being posted: #a 1 (oldest 3 s)"),
    ((Waiting("#a", 2, 30.0), Waiting("#b", 5, 301.0)), False, "7 replies not posted yet: #a 2 (oldest 30 s), "
                                                                "#b 5 (oldest 5 min)"),
])
def test_the_outbox_fails_once_a_reply_waited_five_minutes(waiting: tuple[Waiting, ...], ok: bool,
                                                           detail: str) -> None:
    check = outbox_check(waiting)
    assert (check.ok, check.detail) == (ok, detail)
    if not ok:
        assert "#b" in check.fix and "#a" not in check.fix


@pytest.mark.parametrize("holder, says", [
    (Holder("#a", "console (pid 7)", 25.0), "#a by console (pid 7) (for 25 s more unless renewed)"),
    (Holder("#a", "console (pid 7)", -1.0), "#a by console (pid 7) (expired; the next start takes it over)"),
    (Holder("#a", "discord bot (pid 7)", 25.0, gone=True),
     "#a by discord bot (pid 7) (that process has exited; the next start takes it over at once)"),
])
def test_leases_say_who_holds_them(holder: Holder, says: str) -> None:
    assert lease_check([holder]) == Check("leases", True, says)
    assert lease_check([]).detail == "no process runs a group now"


def test_a_delivery_problem_fails_and_names_what_to_fix() -> None:
    group = Group(1, "discord:1", "#a", GroupSettings())
    assert delivery_check(group).ok
    problem = "I can't post in #a: Discord answered 403 (code 50013, Missing Permissions)."
    check = delivery_check(Group(1, "discord:1", "#a", GroupSettings(), delivery_problem=problem))
    assert not check.ok and check.detail == problem


def test_the_card_puts_failures_first_and_turns_red() -> None:
    card = doctor_card([Check("a", True, "fine"), Check("b", False, "broken", "mend it")], "Doctor: #a")
    assert card.tone == "bad" and card.description == "1 check of 2 failed."
    assert [(f.name, f.value) for f in card.fields] == [("✗ b", "broken\nFix: mend it"), ("✓ a", "fine")]
    good = doctor_card([Check("a", True, "fine")], "Doctor: #a")
    assert good.tone == "good" and good.description == "All 1 checks passed."


def test_a_warning_passes_but_shows_its_fix() -> None:
    advice = Check("DISCORD_GUILD_ID", True, "not set", "set it", warn=True)
    assert advice.line() == "! DISCORD_GUILD_ID: not set; fix: set it"
    assert Check("a", True, "fine", "never shown").line() == "✓ a: fine"
    card = doctor_card([Check("a", True, "fine"), advice], "Doctor: #a")
    assert card.tone == "good" and card.description == "All 2 checks passed; 1 warning."
    assert [(f.name, f.value) for f in card.fields] == [("! DISCORD_GUILD_ID", "not set\nFix: set it"),
                                                        ("✓ a", "fine")]
    assert all_passed([advice])
