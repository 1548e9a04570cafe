import pytest

from bot.core.errors import InvalidInput
from bot.surfaces.console.commandline import parse_command


@pytest.mark.parametrize(
    "line, path, options",
    [
        ("/roundtable status", ("roundtable", "status"), {}),
        ('/agent add name:planner role:"drafts the itinerary" prompt:"You plan trips."', ("agent", "add"),
         {"name": "planner", "role": "drafts the itinerary", "prompt": "You plan trips."}),
        ("/roundtable config max_turns:3 allow_repeat:true", ("roundtable", "config"),
         {"max_turns": "3", "allow_repeat": "true"}),
        ('/agent edit name:x prompt:"say \\"hi\\" twice"', ("agent", "edit"),
         {"name": "x", "prompt": 'say "hi" twice'}),
        ("/Agent LIST", ("agent", "list"), {}),
        ("/roundtable config brief:", ("roundtable", "config"), {"brief": ""}),
    ],
)
def test_parse_command(line, path, options):
    cmd = parse_command(line)
    assert cmd.path == path and cmd.options == options


@pytest.mark.parametrize(
    "line, message",
    [
        ('/agent add name:"unclosed', "close every double quote"),
        ("/agent add name:a name:b", "given twice"),
        ("/agent add name:a stray", "Unexpected 'stray'"),
        ("/", "Type a command"),
    ],
)
def test_parse_command_errors(line, message):
    with pytest.raises(InvalidInput, match=message):
        parse_command(line)
