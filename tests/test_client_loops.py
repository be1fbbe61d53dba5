"""The OpenAI Agents SDK, LangChain and pydantic-ai drive `tooldec serve` through their own tool loops.

A tiny scripted model (`test_serve.scripted_server`) writes the same weather call in every answer: the library
reads it from the wire, runs the tool here and sends its result back; with `tooldec_answer` the server decodes the
repeated call again with no call allowed, so the loop ends in a text answer. The checks are the wire shapes each
library accepts: the call it ran, its arguments, a final answer that is not empty, whole and streamed. A library
that is not installed is skipped (`pip install openai-agents langchain-openai 'pydantic-ai-slim[openai]'`);
`benchmarks/client_loops.py` runs the same loops with the default model on everyday questions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from test_serve import MODEL, WEATHER_CALL, Server, scripted_server

pytestmark = pytest.mark.slow
EXTRA = {"tooldec_answer": True}
QUESTION = "Weather in Paris for 3 days?"


class Weather:
    """The tool the libraries run: it notes every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def tool(self) -> Any:
        """`get_weather(city, days)` as a plain function, the way the libraries take tools."""

        def get_weather(city: str, days: int) -> str:
            """Current weather in a city, for the next days."""
            self.calls.append((city, days))
            return f"sunny, 21 C in {city} for {days} days"

        return get_weather


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with scripted_server(f"<tool_call>\n{WEATHER_CALL}\n</tool_call>") as srv:
        yield srv


def client(server: Server) -> Any:
    """An async OpenAI client of the test server."""
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_agents_sdk(server: Server, stream: bool) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    weather = Weather()
    agent = agents.Agent(
        name="weather", instructions="Use the tools.", tools=[agents.function_tool(weather.tool())],
        model=agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client(server)),
        model_settings=agents.ModelSettings(temperature=0, max_tokens=96, extra_body=EXTRA),
    )

    async def run() -> Any:
        if not stream:
            return await agents.Runner.run(agent, QUESTION, max_turns=3)
        streamed = agents.Runner.run_streamed(agent, QUESTION, max_turns=3)
        async for _ in streamed.stream_events():
            pass
        return streamed

    result = asyncio.run(run())
    assert weather.calls == [("Paris", 3)]
    assert isinstance(result.final_output, str) and result.final_output.strip()


@pytest.mark.parametrize("stream", [False, True])
def test_langchain(server: Server, stream: bool) -> None:
    pytest.importorskip("langchain_openai")
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool as as_tool
    from langchain_openai import ChatOpenAI

    weather = Weather()
    tool = as_tool(weather.tool())
    llm = ChatOpenAI(model=MODEL, base_url=server.url + "/v1", api_key="unused", temperature=0, max_tokens=96,
                     max_retries=0, extra_body=EXTRA).bind_tools([tool])
    messages: list[BaseMessage] = [HumanMessage(QUESTION)]
    for _ in range(3):
        if stream:
            chunks = list(llm.stream(messages))
            whole = sum(chunks[1:], chunks[0])
            reply = AIMessage(content=whole.content, tool_calls=whole.tool_calls)
        else:
            reply = llm.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            assert call["name"] == "get_weather"
            messages.append(ToolMessage(str(tool.invoke(call["args"])), tool_call_id=call["id"]))
    assert weather.calls == [("Paris", 3)]
    assert not reply.tool_calls and isinstance(reply.content, str) and reply.content.strip()


@pytest.mark.parametrize("stream", [False, True])
def test_pydantic_ai(server: Server, stream: bool) -> None:
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    weather = Weather()
    agent = pydantic_ai.Agent(
        OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client(server))), instructions="Use the tools.",
        tools=[weather.tool()], model_settings={"temperature": 0, "max_tokens": 96, "extra_body": EXTRA},
    )

    async def drain(_: Any, events: Any) -> None:
        async for _ in events:
            pass

    result = asyncio.run(agent.run(QUESTION, usage_limits=pydantic_ai.UsageLimits(request_limit=3),
                                   event_stream_handler=drain if stream else None))
    assert weather.calls == [("Paris", 3)]
    assert isinstance(result.output, str) and result.output.strip()
