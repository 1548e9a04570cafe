"""Several named providers, as a user sets them up: three OpenAI-compatible servers, one agent on each,
run through `roundtable console` with ROUNDTABLE_PROVIDER_<NAME>_BASE_URL / _API_KEY."""
from __future__ import annotations

import asyncio
import base64
import os

import pytest

from tests.discord.test_attachments import png
from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, closed_base_url, image_urls, message_text
from tests.support.spawn import start_roundtable
from tests.test_console import clean_env

TEAM = """\
/agent add name:planner role:"drafts the plan" prompt:"You plan."
/agent add name:coder role:"writes the code" prompt:"You code." model:local/llama3.1:8b
/agent add name:critic role:"finds the flaws" prompt:"You criticise." model:CLOUD/big-model
/roundtable config mode:round_robin max_turns:3
"""


async def console(tmp_path, env: dict[str, str], stdin: str) -> tuple[int, str, str]:
    proc = await start_roundtable(
        "--env-file", os.devnull, "console", "--db", str(tmp_path / "rt.db"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env, cwd=tmp_path)
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 180)  # generous: a start is slow under load
    return proc.returncode or 0, out.decode(), err.decode()


def provider_env(tmp_path, default: str, **providers: str) -> dict[str, str]:
    env = clean_env(tmp_path, default)
    env["ROUNDTABLE_LLM_RETRIES"] = "0"
    for name, url in providers.items():
        env[f"ROUNDTABLE_PROVIDER_{name.upper()}_BASE_URL"] = url
        env[f"ROUNDTABLE_PROVIDER_{name.upper()}_API_KEY"] = f"sk-{name}-secret-key"
    return env


async def test_three_agents_on_three_providers_answer_one_task_in_turn(tmp_path):
    planner = GroupChatScript(agents={"planner": ["Plan: a CLI in three steps."]})
    coder = GroupChatScript(agents={"coder": ["Code: done, see main.py."]})
    critic = GroupChatScript(agents={"critic": ["Flaw: no tests."]})
    async with FakeOpenAI(planner) as default, FakeOpenAI(coder, models=["llama3.1:8b"]) as local, \
            FakeOpenAI(critic, models=["big-model"]) as cloud:
        env = provider_env(tmp_path, default.base_url, local=local.base_url, cloud=cloud.base_url)
        code, out, err = await console(tmp_path, env, TEAM + "Build a todo CLI\n")
        assert code == 0, err
        code, shown, err = await console(tmp_path, env, "/roundtable usage\n")  # once the agents are done
    assert code == 0, err
    convo = [line for line in out.splitlines() if line.startswith("[")]
    assert convo[:4] == ["[you] Build a todo CLI", "[planner] Plan: a CLI in three steps.",
                         "[coder] Code: done, see main.py.", "[critic] Flaw: no tests."]
    # each server answered only its agent, under the model name it knows (the provider prefix gone)
    assert [r["model"] for r in default.requests] == ["fake-model"]
    assert [r["model"] for r in local.requests] == ["llama3.1:8b"]
    assert [r["model"] for r in cloud.requests] == ["big-model"]
    assert local.requests[0].headers["authorization"] == "Bearer sk-local-secret-key"
    assert cloud.requests[0].headers["authorization"] == "Bearer sk-cloud-secret-key"
    # the coder's prompt holds what the planner said: one conversation across providers
    assert "Plan: a CLI in three steps." in "".join(message_text(m) for m in local.requests[0]["messages"])
    usage = {line.split(":")[0].strip(): line for line in shown.splitlines() if " call" in line}
    assert usage["planner"].endswith("· on default")
    assert "no price known for local/llama3.1:8b" in usage["coder"] and usage["coder"].endswith("· on local")
    assert usage["critic"].endswith("· on cloud")
    assert "sk-local-secret-key" not in out + err and "sk-cloud-secret-key" not in out + err


async def test_a_provider_down_at_start_up_is_one_line_and_its_agent_gets_a_notice(tmp_path):
    script = GroupChatScript(agents={"planner": ["Here."]})
    async with FakeOpenAI(script) as default:
        env = provider_env(tmp_path, default.base_url, gone=closed_base_url())
        code, out, err = await console(tmp_path, env, (
            '/agent add name:planner role:plans prompt:"You plan."\n'
            '/agent add name:ghost role:haunts prompt:"Boo." model:gone/phantom-1\n'
            "/roundtable config mode:tags\n@planner @ghost roll call\n"))
    assert code == 0, err
    down = [line for line in err.splitlines() if "provider gone" in line and "did not answer" in line]
    assert len(down) == 1, err
    assert "ROUNDTABLE_PROVIDER_GONE_BASE_URL=http://127.0.0.1:" in down[0] and "did not answer" in down[0]
    assert "Traceback" not in err
    assert "[planner] Here." in out
    assert ("[roundtable] ghost could not answer: the model service could not be reached (provider gone). "
            "Its turn was skipped; until the model service answers again, the turns of agents on it are skipped "
            "without another notice.") in out


async def test_every_provider_down_stops_the_start_with_one_line(tmp_path):
    env = provider_env(tmp_path, closed_base_url(), gone=closed_base_url())
    code, _out, err = await console(tmp_path, env, "hello\n")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "OPENAI_BASE_URL=" in lines[0] and "ROUNDTABLE_PROVIDER_GONE_BASE_URL=" in lines[0]


async def test_an_undefined_provider_prefix_is_refused_when_the_default_provider_lacks_the_model(tmp_path):
    async with FakeOpenAI(models=["fake-model", "openai/gpt-4o"]) as default:
        env = provider_env(tmp_path, default.base_url)
        code, out, err = await console(tmp_path, env, (
            '/agent add name:a role:r prompt:p model:nowhere/llama3\n'
            '/agent add name:b role:r prompt:p model:openai/gpt-4o\n'))
    assert code == 1, err  # the refused line makes piped input exit 1
    assert ("error: No provider is named 'nowhere' (providers: default), and the default provider has no model "
            "'nowhere/llama3'. Define it with ROUNDTABLE_PROVIDER_NOWHERE_BASE_URL (and _API_KEY), or pick a model "
            "the list offers.") in out
    assert "Added b: r." in out  # a gateway's own `vendor/model` name still runs on the default provider


async def test_a_console_image_reaches_a_named_provider_as_an_image_part(tmp_path):
    image = png(20, 10)
    (tmp_path / "shot.png").write_bytes(image)
    (tmp_path / "notes.md").write_text("# Notes\nremember the milk\n")
    script = GroupChatScript(agents={"looker": ["A grey bar."]})
    async with FakeOpenAI(GroupChatScript()) as default, FakeOpenAI(script) as local:
        env = provider_env(tmp_path, default.base_url, local=local.base_url)
        code, out, err = await console(tmp_path, env, (
            '/agent add name:looker role:looks prompt:"You look." model:local/vision-1\n'
            "/roundtable config mode:tags\n"
            "/attach missing.png\n/attach .\n/attach shot.png\n/attach notes.md\n/attach\n"
            "@looker what is in it?\n"))
    assert code == 1, err  # the refused /attach lines make piped input exit 1
    lines = out.splitlines()
    assert f"error: No file at missing.png (from {tmp_path}): /attach takes the path of a file." in lines
    assert "error: . is a directory: attach its files one at a time." in lines
    assert "Attached shot.png (1 KB): an image. It goes with your next message." in lines or any(
        line.startswith("Attached shot.png (") and line.endswith("an image. It goes with your next message.")
        for line in lines)
    assert any(line.startswith("Attached to your next message: shot.png (") for line in lines)
    [request] = local.requests
    assert image_urls(request) == ["data:image/png;base64," + base64.b64encode(image).decode()]
    text = "".join(message_text(m) for m in request["messages"])
    assert "[image: shot.png, 20×10, " in text
    assert '<file name="notes.md"' in text and "remember the milk" in text
    assert "[looker] A grey bar." in out
    assert any(line.startswith("[you] @looker what is in it?") for line in lines)
    assert "[image: shot.png, 20×10, " in out  # the person's row shows what went with it


async def test_a_missing_providers_model_is_refused_at_call_time_and_never_reaches_the_default_server():
    """The real client against a default server whose model list is known: `local/llama3` (no provider
    `local`, not listed) is refused before any request; `openai/gpt-4o`, which the gateway lists, runs."""
    from bot.core.errors import ProviderMissing
    from bot.core.models import ChatMessage
    from bot.llm.openai_llm import OpenAILLM
    from bot.llm.providers import Providers

    class Chars:
        def count(self, text: str) -> int:
            return len(text)

    async with FakeOpenAI(["from the gateway", "again"], models=["fake-model", "openai/gpt-4o"]) as default:
        llm = Providers({"default": OpenAILLM(api_key="sk-default-key", base_url=default.base_url,
                                              default_model="fake-model", timeout=10, max_retries=0,
                                              counter=Chars())}, default_model="fake-model")
        try:
            hello = [ChatMessage("user", "hello")]
            for call in (llm.complete(hello, model="local/llama3"),
                         llm.stream(hello, on_text=lambda _: None, model="local/llama3"),
                         llm.tools_refusal("local/llama3")):
                with pytest.raises(ProviderMissing) as refused:
                    await call
                assert "ROUNDTABLE_PROVIDER_LOCAL_BASE_URL and ROUNDTABLE_PROVIDER_LOCAL_API_KEY" in \
                    refused.value.public
            assert (await llm.complete(hello, model="openai/gpt-4o")).text == "from the gateway"
            default.models.append("local/llama3")  # a gateway that serves it under that name: it runs there
            llm.clients["default"]._models = None
            assert (await llm.complete(hello, model="local/llama3")).text == "again"
        finally:
            await llm.aclose()
    assert [r["model"] for r in default.requests] == ["openai/gpt-4o", "local/llama3"]


async def test_an_agent_whose_provider_is_gone_after_a_restart_is_told_once_and_sends_nothing(tmp_path):
    """An agent added on `local/llama3` while ROUNDTABLE_PROVIDER_LOCAL_* was set; the console started
    again without it: each tag of the agent sends nothing to the default server, and the notice naming the
    missing settings is said once, not on every tag."""
    script = GroupChatScript(agents={"planner": ["Plan.", "Plan again."]})
    async with FakeOpenAI(script) as default, FakeOpenAI(models=["llama3"]) as local:
        code, out, err = await console(tmp_path, provider_env(tmp_path, default.base_url, local=local.base_url), (
            '/agent add name:planner role:plans prompt:"You plan."\n'
            '/agent add name:coder role:codes prompt:"You code." model:local/llama3\n'
            "/roundtable config mode:tags\n"))
        assert code == 0, err
        code, out, err = await console(tmp_path, provider_env(tmp_path, default.base_url), (
            "@coder @planner write it\n@coder and now?\n@planner @coder once more\n"))
    assert code == 0, err
    assert local.requests == []
    assert all(r["model"] != "local/llama3" and r["model"] != "llama3" for r in default.requests)
    told = [line for line in out.splitlines() if "ROUNDTABLE_PROVIDER_LOCAL_BASE_URL" in line]
    assert len(told) == 1, out
    assert ("coder could not answer: its model local/llama3 names provider local, which is not set up "
            "(ROUNDTABLE_PROVIDER_LOCAL_BASE_URL and ROUNDTABLE_PROVIDER_LOCAL_API_KEY are missing)") in told[0]
    assert "[planner] Plan." in out
