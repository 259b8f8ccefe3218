"""Tools: registry, validation, errors as results, built-ins, the tool loop (SPEC F5)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from jsonschema.exceptions import SchemaError

from foliko_cli.context import RequestContext
from foliko_cli.engine.framework import Framework
from foliko_cli.engine.handler import AgentChatHandler
from foliko_cli.engine.tools import BUILTIN_TOOLS, EMPTY_OBJECT_SCHEMA, Tool, ToolRegistry, run_tool
from foliko_cli.errors import ToolError
from foliko_cli.models.echo import EchoModel
from foliko_cli.storage.memory import MemoryStorage


def constant(name: str, value, schema: dict | None = None) -> Tool:
    if schema is None:
        return Tool(name, f"returns {value!r}", lambda args, fw: value)
    return Tool(name, f"returns {value!r}", lambda args, fw: value, schema)


def raising(name: str, exc: BaseException) -> Tool:
    def execute(args, fw):
        raise exc

    return Tool(name, "always fails", execute)


def call(fw: Framework, tool: Tool | None, name: str, arguments):
    return asyncio.run(run_tool(tool, name, arguments, fw.tool_context()))


@pytest.fixture
def fw() -> Framework:
    return Framework("memory")


# registry


def test_registry_basics():
    registry = ToolRegistry()
    assert len(registry) == 0 and registry.all() == []
    first, second = constant("t", 1), constant("t", 2)
    registry.register(first)
    registry.register(constant("u", 3))
    assert "t" in registry and "nope" not in registry
    assert registry.get("t") is first
    registry.register(second)
    assert registry.get("t") is second, "a later registration replaces the earlier one"
    assert len(registry) == 2
    assert [tool.name for tool in registry.all()] == ["t", "u"]
    assert registry.unregister("t") is True
    assert registry.unregister("t") is False
    assert registry.get("t") is None


def test_framework_starts_with_the_builtins(fw):
    names = {tool.name for tool in fw.tools.all()}
    assert {"get_session_info", "get_variable", "set_variable"} <= names
    assert names == {tool.name for tool in BUILTIN_TOOLS}
    fw.register_tool(constant("mine", 1))
    assert "mine" in fw.tools
    assert "mine" in fw.resolve_tools()


def test_tool_spec_and_default_schema():
    tool = Tool("t", "does t", lambda args, fw: None)
    assert tool.input_schema == EMPTY_OBJECT_SCHEMA
    assert tool.spec() == {
        "name": "t",
        "description": "does t",
        "input_schema": EMPTY_OBJECT_SCHEMA,
    }


def test_no_builtin_runs_commands_or_touches_files():
    for tool in BUILTIN_TOOLS:
        assert tool.name in {"get_session_info", "get_variable", "set_variable"}


# run_tool: every failure is a result


def test_result_is_rendered_as_json(fw):
    result = call(fw, constant("t", {"a": [1, 2]}), "t", {})
    assert result.is_error is False
    assert orjson.loads(result.content) == {"a": [1, 2]}
    assert call(fw, constant("s", "plain text"), "s", {}).content == "plain text"


def test_unknown_tool(fw):
    result = call(fw, None, "nope", {})
    assert result.is_error is True
    assert "unknown tool" in result.content and "nope" in result.content


@pytest.mark.parametrize("arguments", [[1, 2], "a string", 3, None])
def test_arguments_must_be_an_object(fw, arguments):
    result = call(fw, constant("t", 1), "t", arguments)
    assert result.is_error is True
    assert "must be a JSON object" in result.content


def test_schema_violations_name_the_problem(fw):
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}, "s": {"type": "string"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    ran = []
    tool = Tool("t", "t", lambda args, fw: ran.append(args), schema)

    missing = call(fw, tool, "t", {})
    assert missing.is_error and "'n' is a required property" in missing.content

    wrong = call(fw, tool, "t", {"n": 0, "s": 5, "extra": True})
    assert wrong.is_error
    assert "invalid arguments for 't'" in wrong.content
    assert "n: 0 is less than the minimum of 1" in wrong.content
    assert "s: 5 is not of type 'string'" in wrong.content
    assert "'extra' was unexpected" in wrong.content
    assert ran == [], "the tool never ran with bad arguments"

    assert call(fw, tool, "t", {"n": 2}).is_error is False
    assert ran == [{"n": 2}]


def test_tool_error_becomes_an_error_result(fw):
    result = call(fw, raising("t", ToolError("the thing is missing")), "t", {})
    assert result.is_error is True
    assert result.content == "error: the thing is missing"


def test_plain_exception_becomes_an_error_result(fw):
    result = call(fw, raising("t", ValueError("bad value")), "t", {})
    assert result.is_error is True
    assert "t failed" in result.content
    assert "ValueError" in result.content and "bad value" in result.content


def test_cancellation_is_not_swallowed(fw):
    with pytest.raises(asyncio.CancelledError):
        call(fw, raising("t", asyncio.CancelledError()), "t", {})


@pytest.mark.parametrize("value", [{1: "one"}, 2**70], ids=["int-keys", "big-int"])
def test_unencodable_return_value_is_not_a_crash(fw, value):
    result = call(fw, constant("t", value), "t", {})
    assert result.is_error or "one" in result.content or str(2**70) in result.content


def test_tool_with_an_invalid_schema_never_crashes_a_turn(fw):
    broken = Tool("broken", "bad schema", lambda args, fw: 1, {"type": "banana"})
    try:
        fw.register_tool(broken)
    except (ValueError, SchemaError):
        return  # rejected up front: also fine
    result = asyncio.run(fw.execute_tool("broken", {}))
    assert result.is_error is True
    assert "schema" in result.content


def test_async_tools(fw):
    async def execute(args, context):
        await asyncio.sleep(0)
        return {"doubled": args["n"] * 2, "context": type(context).__name__}

    async def failing(args, framework):
        await asyncio.sleep(0)
        raise ToolError("async failure")

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    result = call(fw, Tool("double", "x2", execute, schema), "double", {"n": 21})
    assert result.is_error is False
    assert orjson.loads(result.content) == {"doubled": 42, "context": "ToolContext"}
    failure = call(fw, Tool("f", "fails", failing), "f", {})
    assert failure.is_error and failure.content == "error: async failure"


# built-ins


def test_builtins_inside_a_session(fw):
    request = RequestContext(request_id="r1")

    async def body():
        info = await fw.execute_tool("get_session_info", {})
        missing = await fw.execute_tool("get_variable", {"key": "k"})
        stored = await fw.execute_tool("set_variable", {"key": "k", "value": [1, "two"]})
        found = await fw.execute_tool("get_variable", {"key": "k"})
        return info, missing, stored, found, fw.get_session_context()

    fw.get_or_create_agent_context("a1")
    info, missing, stored, found, session = asyncio.run(
        fw.run_in_full_context(request, "s1", "a1", body)
    )
    assert not any(r.is_error for r in (info, missing, stored, found))
    details = orjson.loads(info.content)
    assert details["session_id"] == "s1"
    assert details["request_id"] == "r1"
    assert details["message_count"] == 0
    assert details["elapsed"] >= 0
    assert orjson.loads(missing.content) == {"key": "k", "value": None, "exists": False}
    assert orjson.loads(stored.content)["ok"] is True
    assert orjson.loads(found.content) == {"key": "k", "value": [1, "two"], "exists": True}
    assert session.variables == {"k": [1, "two"]}


def test_variable_builtins_outside_a_session_are_errors(fw):
    async def scenario():
        return (
            await fw.execute_tool("get_variable", {"key": "k"}),
            await fw.execute_tool("set_variable", {"key": "k", "value": 1}),
            await fw.execute_tool("get_session_info", {}),
        )

    get, put, info = asyncio.run(scenario())
    assert get.is_error and "no session is active" in get.content
    assert put.is_error and "no session is active" in put.content
    assert info.is_error is False
    assert orjson.loads(info.content)["session_id"] is None


def test_variable_builtins_validate_their_arguments(fw):
    async def body():
        return (
            await fw.execute_tool("set_variable", {"key": "k"}),
            await fw.execute_tool("set_variable", {"key": "", "value": 1}),
            await fw.execute_tool("get_variable", {"key": 5}),
        )

    no_value, empty_key, bad_key = asyncio.run(fw.run_in_session("s1", body))
    assert no_value.is_error and "'value' is a required property" in no_value.content
    assert empty_key.is_error and "key" in empty_key.content
    assert bad_key.is_error and "not of type 'string'" in bad_key.content
    assert fw.context_manager.get_session_context("s1").variables == {}


# agent tools override global ones


def test_agent_tools_override_global_tools(fw):
    fw.register_tool(constant("shared", "global"))
    fw.register_tool(constant("only_global", "global"))
    agent = fw.get_or_create_agent_context("a1")
    agent.register_tool(constant("shared", "agent"))
    agent.register_tool(constant("only_agent", "agent"))
    agent.register_tool(constant("get_variable", "agent's get_variable"))

    async def body():
        resolved = fw.resolve_tools()
        shared = await fw.execute_tool("shared", {})
        builtin = await fw.execute_tool("get_variable", {})
        return resolved, shared, builtin

    resolved, shared, builtin = asyncio.run(fw.run_with_agent("a1", body))
    assert resolved["shared"] is agent.get_tool("shared")
    assert resolved["only_agent"] is agent.get_tool("only_agent")
    assert resolved["only_global"] is fw.tools.get("only_global")
    assert resolved["get_variable"] is agent.get_tool("get_variable")
    assert shared.content == "agent"
    assert builtin.content == "agent's get_variable"

    outside = fw.resolve_tools()
    assert outside["shared"] is fw.tools.get("shared")
    assert "only_agent" not in outside
    assert asyncio.run(fw.execute_tool("shared", {})).content == "global"


def test_agent_tools_are_used_by_the_agents_handler(fw):
    agent = fw.get_or_create_agent_context("a1")
    agent.register_tool(constant("get_session_info", "the agent's info"))
    handler = AgentChatHandler(fw, EchoModel(), agent=agent)
    plain = AgentChatHandler(fw, EchoModel())

    async def scenario():
        mine = await handler.chat("/tool get_session_info {}", session_id="s1")
        theirs = await plain.chat("/tool get_session_info {}", session_id="s2")
        return mine, theirs

    mine, theirs = asyncio.run(scenario())
    assert "the agent's info" in mine.message
    assert "the agent's info" not in theirs.message
    assert '"session_id":"s2"' in theirs.message


# the tool loop, end to end through the echo model


def roles(record) -> list[str]:
    return [m["role"] for m in record.messages]


def test_tool_loop_end_to_end():
    storage = MemoryStorage()
    fw = Framework(storage)
    handler = AgentChatHandler(fw, EchoModel())
    result = asyncio.run(
        handler.chat('/tool set_variable {"key": "k", "value": 1}', session_id="s1")
    )
    assert result.step_count == 2
    assert result.finish_reason == "stop"

    record = asyncio.run(storage.load("s1"))
    assert roles(record) == ["user", "assistant", "tool", "assistant"]
    user, asked, answered, final = record.messages
    assert user["content"] == '/tool set_variable {"key": "k", "value": 1}'
    (tool_call,) = asked["tool_calls"]
    assert tool_call["name"] == "set_variable"
    assert tool_call["arguments"] == {"key": "k", "value": 1}
    assert answered["tool_call_id"] == tool_call["id"]
    assert answered["name"] == "set_variable"
    assert "is_error" not in answered
    assert orjson.loads(answered["content"]) == {"key": "k", "value": 1, "ok": True}
    assert "set_variable returned" in final["content"]
    assert final["content"] == result.message
    assert record.variables == {"k": 1}
    assert fw.context_manager.get_session_context("s1").variables == {"k": 1}


def test_get_session_info_in_a_turn_sees_the_turn():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())
    request = RequestContext(request_id="turn-1")
    asyncio.run(handler.chat("/tool get_session_info", session_id="s1", request=request))
    record = asyncio.run(fw.session_storage.load("s1"))
    info = orjson.loads(record.messages[2]["content"])
    assert info["session_id"] == "s1"
    assert info["request_id"] == "turn-1"
    assert info["message_count"] == 2, "the user message and the assistant's tool call"


@pytest.mark.parametrize("exc", [ToolError("no can do"), ZeroDivisionError("division by zero")])
def test_raising_tool_comes_back_as_an_error_result(exc):
    fw = Framework("memory")
    fw.register_tool(raising("boom", exc))
    handler = AgentChatHandler(fw, EchoModel())
    result = asyncio.run(handler.chat("/tool boom {}", session_id="s1"))
    assert result.step_count == 2
    record = asyncio.run(fw.session_storage.load("s1"))
    assert roles(record) == ["user", "assistant", "tool", "assistant"]
    tool_message = record.messages[2]
    assert tool_message["is_error"] is True
    assert str(exc) in tool_message["content"]
    assert str(exc) in result.message


def test_arguments_failing_the_schema_come_back_as_an_error_result():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())
    result = asyncio.run(handler.chat('/tool set_variable {"key": "k"}', session_id="s1"))
    assert result.step_count == 2
    record = asyncio.run(fw.session_storage.load("s1"))
    assert roles(record) == ["user", "assistant", "tool", "assistant"]
    tool_message = record.messages[2]
    assert tool_message["is_error"] is True
    assert "'value' is a required property" in tool_message["content"]
    assert record.variables == {}


def test_invalid_json_arguments_come_back_as_an_error_result():
    fw = Framework("memory")
    handler = AgentChatHandler(fw, EchoModel())
    result = asyncio.run(handler.chat("/tool set_variable {key: k}", session_id="s1"))
    assert result.step_count == 2
    record = asyncio.run(fw.session_storage.load("s1"))
    assert record.messages[1]["tool_calls"][0]["arguments"] == "{key: k}"
    assert record.messages[2]["is_error"] is True
    assert "must be a JSON object" in record.messages[2]["content"]


def test_unknown_tool_in_a_turn_is_an_error_result():
    fw = Framework("memory")
    result = asyncio.run(
        AgentChatHandler(fw, EchoModel()).chat("/tool no_such_tool {}", session_id="s1")
    )
    assert result.step_count == 2
    record = asyncio.run(fw.session_storage.load("s1"))
    assert record.messages[2]["is_error"] is True
    assert "unknown tool 'no_such_tool'" in record.messages[2]["content"]
