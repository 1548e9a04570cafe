"""Worker mode in the console (issue 29 item 8): `/agent edit name mode:worker`, its posts shown, its
final text not, and `/agent show` / `/agent list` naming the mode."""
from __future__ import annotations

from tests.fakes.openai_server import FakeOpenAI, GroupChatScript, Reply, tool_call
from tests.test_console import run_console


async def test_a_worker_in_the_console(tmp_path):
    script = GroupChatScript(agents={"planner": [Reply(tool_calls=[tool_call("group_post", content="Day 1: Kyoto.")]),
                                                 "Private: posted day 1."]})
    session = ('/agent add name:planner role:plans prompt:"You plan."\n/roundtable config mode:tags\n'
               "/agent edit name:planner mode:worker\n@planner plan Kyoto\n")
    async with FakeOpenAI(script) as srv:
        code, out, err = await run_console(tmp_path, srv.base_url, session)
        assert code == 0, err
        lines = out.splitlines()
        assert ("Updated planner: worker mode: its runs are private and it speaks only through group_post."
                in lines)
        assert "[planner] Day 1: Kyoto." in lines
        assert not any("Private: posted day 1." in line for line in lines)
        later = "/agent show name:planner\n/agent list\n/agent edit name:planner mode:talk\n"
        code, out, err = await run_console(tmp_path, srv.base_url, later)
    assert code == 0, err
    lines = out.splitlines()
    assert "  mode: worker (speaks only through group_post)" in lines
    assert any(line.startswith("  planner (worker)") for line in lines), lines
    assert "Updated planner: talk mode: it posts its replies." in lines
