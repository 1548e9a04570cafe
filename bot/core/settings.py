"""Every group setting, declared once: its name, type, default, range, help, and where it comes from.

A setting is a field of `GroupSettings` whose default is a `setting(...)`: the field gives
its name and type, the declaration the rest. Everything else is derived from `GROUP_SETTINGS`:

  the /roundtable config options (`bot.core.verbs.commands`), their checks and the settings
  card (`bot.core.verbs.group_verbs`), the environment variable that sets the default of new groups
  (`bot.config`), and the checks of `config.example.env` and of docs/settings.md's table
  against it (tests/test_settings_declared.py).

Adding a group setting is one field here, and the test of what it does; the checks then name
the lines config.example.env and docs/settings.md lack. Process-wide settings (the token, the
API key, the database ...) are declared the same way on `bot.config.Settings`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Literal, TypeVar

T = TypeVar("T")
SettingKind = Literal["integer", "number", "boolean", "choice", "text", "long_text", "model", "role"]
Scope = Literal["group", "process"]
DECLARED = "setting"  # the key of a field's metadata that holds its `Setting`

MODES: tuple[str, ...] = ("selector", "round_robin", "tags")
PROMPT_LAYOUTS: tuple[str, ...] = ("shared", "seed")  # SPEC §6: how a group's prompts are laid out
DEFAULT_MAX_TURNS = 12
MAX_TURNS_RANGE = (1, 100)
CONTEXT_BUDGET_RANGE = (500, 200_000)  # a group's, and an agent's own (/agent edit context_budget)
BRIEF_MAX = 4000
MODEL_MAX = 100  # characters of a model's name (a group's selector model, an agent's model)


@dataclass(frozen=True)
class Setting:
    """One setting's declaration. Only `kind`, `default` and `help` are always given.

    A number whose default is None (none set) becomes None again when given as 0.
    """

    kind: SettingKind
    default: object
    help: str  # the option's description (Discord, /help) and the docs' table's
    low: float | None = None  # the range of an integer or a number, both ends included
    high: float | None = None
    choices: tuple[str, ...] = ()
    max_length: int | None = None
    option: str = ""  # the /roundtable config option, when it is not the field's name
    env: str = ""  # the environment variable: a process setting's value, a group setting's default for new groups
    unit: str = ""  # what a number counts ("minutes"): the environment's fix names it
    zero: str = ""  # what 0 means ("never", "off"): the card shows off
    unset: str = ""  # what an empty value means, on the card: "(default)"
    shown: str = "{}"  # the card's format of a value: "{:,}", "{} min"
    fix: str = ""  # how to write the environment variable, where the text derived from the range does not fit
    secret: bool = False  # never quoted back in an error
    parse: Callable[[str], Any] | None = None  # a process setting's own parser (raises ValueError)
    scope: Scope = "group"
    name: str = ""  # the field's name: filled in by `declared`

    @property
    def option_name(self) -> str:
        return self.option or self.name

    def range_text(self) -> str:
        """`1-100`, `0-1000000`, `selector, round_robin, tags`, `on/off`, or "" (text), as config.example.env
        and docs/settings.md write it."""
        if self.kind == "boolean":
            return "on/off"
        if self.choices:
            return ", ".join(self.choices)
        if self.low is None or self.high is None:
            return ""
        return f"{_number(self.low)}-{_number(self.high)}"

    def default_text(self) -> str:
        """The default as the environment writes it: `on`, `12`, `60`, `gpt-4o-mini`, or "" (none)."""
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if isinstance(self.default, float):
            return _number(self.default)
        return "" if self.default is None else str(self.default)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def setting(default: T, kind: SettingKind, help: str, *, low: float | None = None, high: float | None = None,
            choices: tuple[str, ...] = (), max_length: int | None = None, option: str = "", env: str = "",
            unit: str = "", zero: str = "", unset: str = "", shown: str = "{}", fix: str = "",
            secret: bool = False, parse: Callable[[str], Any] | None = None, scope: Scope = "group") -> T:
    """A dataclass field that declares a setting (its default is `default`)."""
    declared = Setting(kind, default, help, low, high, choices, max_length, option, env, unit, zero, unset, shown,
                       fix, secret, parse, scope)
    made: T = field(default=default, metadata={DECLARED: declared})
    return made


def declared(cls: type) -> tuple[Setting, ...]:
    """The settings declared on a dataclass's fields, in their order, each with its name."""
    found: tuple[Field[Any], ...] = fields(cls)
    return tuple(replace(f.metadata[DECLARED], name=f.name) for f in found if DECLARED in f.metadata)


@dataclass(frozen=True)
class GroupSettings:
    """What an operator can change with `/roundtable config`, in the order it lists them."""

    mode: str = setting("selector", "choice", "who speaks when nobody is tagged", choices=MODES)
    max_agent_turns: int = setting(
        DEFAULT_MAX_TURNS, "integer", f"cap on consecutive agent messages ({MAX_TURNS_RANGE[0]}-{MAX_TURNS_RANGE[1]})",
        low=MAX_TURNS_RANGE[0], high=MAX_TURNS_RANGE[1], option="max_turns", env="ROUNDTABLE_MAX_TURNS")
    allow_repeat: bool = setting(False, "boolean", "let an agent speak twice in a row")
    # Measured on the bench's Tokyo task (docs/benchmarks.md, issue 22): with rolling summaries a 3,000-token
    # window bills less than 6,000 at a 50% and a 90% cache discount; a 400-token selector window stays under
    # the providers' 1,024-token caching minimum and costs less than a cached 1,500-token one.
    context_budget: int = setting(
        3000, "integer", "tokens of thread in each prompt", low=CONTEXT_BUDGET_RANGE[0], high=CONTEXT_BUDGET_RANGE[1],
        env="ROUNDTABLE_CONTEXT_BUDGET", fix="use a whole number of tokens from 500 to 200000")  # as it always read
    selector_budget: int = setting(  # the selector reads the newest row or two (issue 22's measurements)
        400, "integer", "tokens of thread the selector reads", low=300, high=200_000,
        env="ROUNDTABLE_SELECTOR_BUDGET", fix="use a whole number of tokens from 300 to 200000")
    pace: float = setting(0.0, "number", "seconds between agent messages", low=0.0, high=60.0)
    selector_model: str | None = setting(
        None, "model", "the model that picks the next speaker (provider/model on a named provider)",
        max_length=MODEL_MAX, unset="(default)")
    operator_role: str | None = setting(None, "role", "the role whose members run the group",
                                        unset="(Manage Server)")
    allow_bots: bool = setting(False, "boolean", "take in messages of other bots and webhooks")
    brief: str = setting("", "long_text", "text added to every agent's system prompt", max_length=BRIEF_MAX,
                         unset="(none)")
    min_confidence: float | None = setting(
        None, "number", "below this selector confidence, the rotation picks (0: off)", low=0.0, high=1.0, zero="off",
        unset="off")
    monthly_budget: float | None = setting(  # dollars a calendar month (UTC); reached: the group pauses
        None, "number", "dollars of model calls a month; reached: the group pauses (0: no budget)", low=0.0,
        high=1_000_000.0, unit="dollars", zero="no budget", unset="off")
    max_images: int = setting(  # images sent from one message, and in one prompt
        4, "integer", "images of a message (and of a prompt) sent to models that take images", low=0, high=20,
        env="ROUNDTABLE_MAX_IMAGES", unit="images")
    max_text: int = setting(  # characters of a message's text files inlined in prompts
        40_000, "integer", "characters of a message's text files put in prompts (the rest is cut)", low=0,
        high=1_000_000, env="ROUNDTABLE_MAX_TEXT", unit="characters", shown="{:,}")
    stream: bool = setting(  # replies appear as they are written (provisional messages, then the committed text)
        True, "boolean", "show replies as they are written (off: whole messages)", env="ROUNDTABLE_STREAM")
    show_tools: bool = setting(  # SPEC §6b
        True, "boolean", "a reply that used tools keeps a line of its calls (off: the reply only)",
        env="ROUNDTABLE_SHOW_TOOLS")
    followup_window: int = setting(  # its task stays in the prompts (SPEC §6)
        120, "integer", "minutes after an episode's end in which a message continues its task (0: never)", low=0,
        high=10_080, env="ROUNDTABLE_FOLLOWUP_WINDOW", unit="minutes", zero="never", shown="{} min")
    approval_timeout: int = setting(
        600, "integer", "seconds a tool call held for approval waits; then it is denied", low=1, high=86_400,
        env="ROUNDTABLE_APPROVAL_TIMEOUT", unit="seconds", shown="{} s")
    max_tool_steps: int = setting(  # then one last call without them
        8, "integer", "model calls of a run that offer its granted tools", low=1, high=50,
        env="ROUNDTABLE_MAX_TOOL_STEPS", unit="model calls")
    prompt_layout: str = setting(  # 'shared': every caller's prompt opens with the same bytes; 'seed': seed 000's
        "shared", "choice", "shared: every prompt of the group opens alike (cached once); seed: seed 000's prompts",
        choices=PROMPT_LAYOUTS)

    def with_changes(self, **changes: Any) -> GroupSettings:
        return replace(self, **changes)


GROUP_SETTINGS = declared(GroupSettings)  # every field (tests/test_settings_declared.py)
