from bot.groupchat import Participant, run_group_chat
from tests.fakes.scripted_llm import ScriptedLLM

TEAM = [Participant("planner", "drafts the itinerary", "You plan trips."),
        Participant("budget", "keeps the total honest", "You check costs.")]


async def test_run_group_chat_returns_answer_thread_and_status(tmp_path):
    llm = ScriptedLLM(selector=["planner", "budget", "planner", "TERMINATE"],
                      agents={"planner": ["Draft: $1,700.", "Revised: $1,450."], "budget": ["Over by $200."]})
    result = await run_group_chat("Plan a 3-day Tokyo trip for under $1,500", TEAM, llm, db_path=tmp_path / "a.db")
    assert result.status == "terminated"
    assert result.answer is not None and result.answer.text == "Revised: $1,450."
    assert [m.author_name for m in result.thread] == ["user", "planner", "budget", "planner"]
    assert result.agent_turns == 3 and result.usage.prompt_tokens > 0


async def test_run_group_chat_cap_reports_max_turns():
    llm = ScriptedLLM(default_agent_reply=lambda name, n: f"{name} idea {n}")
    llm.selector_default = "planner"
    result = await run_group_chat("brainstorm", TEAM, llm, max_turns=4)
    assert result.status == "max_turns"
    assert result.agent_turns == 4
    assert result.answer is not None and result.answer.author_name in ("planner", "budget")
