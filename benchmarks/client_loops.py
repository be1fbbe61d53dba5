"""Three agent libraries drive `tooldec serve` through a tool loop on the everyday questions.

The script starts `tooldec serve` (the embedded default model, llama.cpp where `xllamacpp` is installed) on
127.0.0.1 on a free port, then for each library and question runs the library's own tool loop: the model calls
a tool of `examples/everyday_tools.py`, the tool runs here, its result goes back, the model answers. The
libraries are the OpenAI Agents SDK (`Runner.run`), LangChain (`ChatOpenAI.bind_tools` and the loop of
`ToolMessage`s its docs show) and pydantic-ai (`Agent.run` on `OpenAIChatModel`); with `--stream` each loop is run
again with streamed requests (`Runner.run_streamed`, `astream`, pydantic-ai's `event_stream_handler`). Requests
carry `tooldec_answer` (the server's extension, through `extra_body`; not with `--plain`): a turn after tool
results that only repeats an answered call is decoded again with no call allowed.

Each loop is bounded: `--max-requests` model requests (the libraries' own limits: `max_turns`,
`UsageLimits.request_limit`, the loop's rounds) and `--loop-seconds`. A loop is right when its final answer
states the gold call's result (`default_model.everyday_right`: numbers within 1%). The server is stopped at the
end, whatever happened.

    nice python benchmarks/client_loops.py [--questions 0,3,6,8] [--libraries openai-agents,langchain,pydantic-ai]
        [--stream] [--plain] [--model qwen2.5-coder-0.5b] [--backend llamacpp] [--out benchmarks/results] [--stem client_loops]

Writes OUT/STEM.json and OUT/STEM.md. Needs `pip install openai-agents langchain-openai 'pydantic-ai-slim[openai]'`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.metadata
import importlib.util
import inspect
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

import everyday_tools
from default_model import EVERYDAY, everyday_right, load_average

from tooldec.backends import DEFAULT_MODEL

INSTRUCTIONS = "You are a helpful assistant. Use the tools to answer."
TOOLS = (everyday_tools.get_weather, everyday_tools.convert_currency, everyday_tools.convert_units)
PACKAGES = {"openai-agents": "openai-agents", "langchain": "langchain-openai", "pydantic-ai": "pydantic-ai-slim"}
MODULES = {"openai-agents": "agents", "langchain": "langchain_openai", "pydantic-ai": "pydantic_ai"}


@dataclass
class Loop:
    """One library's tool loop on one question: the calls its tools ran, the HTTP statuses, the final answer."""

    library: str
    question: str
    stream: bool
    calls: list[str] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    answer: str | None = None
    right: bool = False
    seconds: float = 0.0
    error: str | None = None


def recorded(function: Callable[..., Any], loop: Loop) -> Callable[..., Any]:
    """`function` with the same signature, noting each call in `loop.calls`; an error becomes the result text (as
    a tool result the model can read), the same way for every library."""

    signature = inspect.signature(function)

    @functools.wraps(function)
    def tool(*args: Any, **kwargs: Any) -> Any:
        arguments = signature.bind(*args, **kwargs).arguments
        loop.calls.append(f"{function.__name__}({json.dumps(arguments, ensure_ascii=False)})")
        try:
            return function(*args, **kwargs)
        except ValueError as exc:
            return f"error: {exc}"

    return tool


def http_client(loop: Loop, timeout: float) -> httpx.AsyncClient:
    """An httpx client that notes the status of every response in `loop.statuses`."""

    async def note(response: httpx.Response) -> None:
        loop.statuses.append(response.status_code)

    return httpx.AsyncClient(timeout=timeout, event_hooks={"response": [note]})


async def openai_agents(base_url: str, model: str, loop: Loop, tools: list[Callable[..., Any]], args: Any) -> str:
    """The OpenAI Agents SDK's Runner over the Chat Completions model."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                         http_client=http_client(loop, args.loop_seconds))
    agent = Agent(
        name="everyday", instructions=INSTRUCTIONS, tools=[function_tool(t) for t in tools],
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        model_settings=ModelSettings(temperature=0, max_tokens=args.max_tokens, extra_body=args.extra_body),
    )
    if loop.stream:
        streamed = Runner.run_streamed(agent, loop.question, max_turns=args.max_requests)
        async for _ in streamed.stream_events():
            pass
        return str(streamed.final_output)
    result = await Runner.run(agent, loop.question, max_turns=args.max_requests)
    return str(result.final_output)


async def langchain(base_url: str, model: str, loop: Loop, tools: list[Callable[..., Any]], args: Any) -> str:
    """LangChain's ChatOpenAI with bound tools, in the loop of its docs: call, run the tools, send ToolMessages."""
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool as as_tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=model, base_url=base_url, api_key="unused", temperature=0, max_tokens=args.max_tokens,
        max_retries=0, extra_body=args.extra_body,
        http_async_client=http_client(loop, args.loop_seconds),
    )
    by_name = {t.name: t for t in map(as_tool, tools)}
    bound = llm.bind_tools(list(by_name.values()))
    messages: list[BaseMessage] = [SystemMessage(INSTRUCTIONS), HumanMessage(loop.question)]
    for _ in range(args.max_requests):
        if loop.stream:
            reply: Any = None
            async for chunk in bound.astream(messages):
                reply = chunk if reply is None else reply + chunk
            reply = AIMessage(content=reply.content, tool_calls=reply.tool_calls)
        else:
            reply = await bound.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return str(reply.content)
        for call in reply.tool_calls:
            output = by_name[call["name"]].invoke(call["args"])
            messages.append(ToolMessage(str(output), tool_call_id=call["id"]))
    raise RuntimeError(f"no final answer in {args.max_requests} requests")


async def pydantic_ai(base_url: str, model: str, loop: Loop, tools: list[Callable[..., Any]], args: Any) -> str:
    """pydantic-ai's Agent on OpenAIChatModel; streamed requests through an event_stream_handler."""
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, UsageLimits
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                         http_client=http_client(loop, args.loop_seconds))
    agent = Agent(
        OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client)), instructions=INSTRUCTIONS,
        tools=tools, model_settings={"temperature": 0, "max_tokens": args.max_tokens,
                                     "extra_body": args.extra_body},
    )

    async def drain(_: Any, events: Any) -> None:
        async for _ in events:
            pass

    result = await agent.run(loop.question, usage_limits=UsageLimits(request_limit=args.max_requests),
                             event_stream_handler=drain if loop.stream else None)
    return str(result.output)


RUNNERS: dict[str, Callable[[str, str, Loop, list[Callable[..., Any]], Any], Awaitable[str]]] = {
    "openai-agents": openai_agents, "langchain": langchain, "pydantic-ai": pydantic_ai,
}


async def run_loop(library: str, base_url: str, model: str, question: str, gold: Any, stream: bool,
                   args: Any) -> Loop:
    """One bounded tool loop; an exception or a timeout is recorded as the loop's error."""
    loop = Loop(library, question, stream)
    tools = [recorded(t, loop) for t in TOOLS]
    start = time.perf_counter()
    try:
        loop.answer = await asyncio.wait_for(RUNNERS[library](base_url, model, loop, tools, args), args.loop_seconds)
    except Exception as exc:  # noqa: BLE001 - a library's failure is the result being measured
        loop.error = f"{type(exc).__name__}: {exc}"[:300]
    loop.seconds = round(time.perf_counter() - start, 1)
    loop.right = everyday_right(loop.answer, gold)
    return loop


def free_port() -> int:
    """A port of 127.0.0.1 free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(args: Any, log: Any) -> tuple[subprocess.Popen[bytes], str]:
    """`tooldec serve` on a free port of 127.0.0.1, one row at a time; waits for /health."""
    port = free_port()
    cmd = [sys.executable, "-m", "tooldec", "serve", "--model", args.model, "--backend", args.backend,
           "--port", str(port), "--max-batch", "1", "--max-waiting", "4", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.start_seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return proc, base + "/v1"
        except httpx.HTTPError:
            time.sleep(1)
    stop_server(proc)
    raise SystemExit("tooldec serve did not answer /health in time")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server: SIGTERM, then SIGKILL after 30 s."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def short(text: str | None, width: int = 70) -> str:
    """One table cell: newlines and pipes escaped, cut to `width`."""
    text = (text or "").replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown(doc: dict[str, Any]) -> str:
    """The results as a markdown table, a summary per library first."""
    versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items())
    lines = [
        f"Model `{doc['model']}` ({doc['backend']}) behind `tooldec serve` on 127.0.0.1, max batch 1; {versions}.",
        "",
        f"- {doc['date']}, at {doc['commit']}: {doc['command']}",
        (f"- each loop at most {doc['max_requests']} requests and {doc['loop_seconds']} s; extra_body "
         f"`{json.dumps(doc['extra_body'])}`; load average (2 cores) {doc['load']}"),
        "",
        "| library | requests | loops | final answer non-empty | right | errors | median s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (library, stream), rows in group(doc["loops"]).items():
        seconds = sorted(r["seconds"] for r in rows)
        lines.append(
            f"| {library} | {'streamed' if stream else 'whole'} | {len(rows)} | "
            f"{sum(bool((r['answer'] or '').strip()) for r in rows)} | {sum(r['right'] for r in rows)} | "
            f"{sum(r['error'] is not None for r in rows)} | {seconds[len(seconds) // 2]} |"
        )
    lines += ["", "| library | requests | question | tool calls made | HTTP statuses | final answer | non-empty | right | s |",
              "|---|---|---|---|---|---|---|---|---:|"]
    for r in doc["loops"]:
        answer = short(r["answer"]) if r["error"] is None else f"**{short(r['error'])}**"
        lines.append(
            f"| {r['library']} | {'streamed' if r['stream'] else 'whole'} | {r['question']} | "
            f"{short('; '.join(r['calls']), 120)} | {' '.join(map(str, r['statuses']))} | {answer} | "
            f"{'yes' if (r['answer'] or '').strip() else 'no'} | {'yes' if r['right'] else 'no'} | {r['seconds']} |"
        )
    return "\n".join(lines) + "\n"


def group(loops: list[dict[str, Any]]) -> dict[tuple[str, bool], list[dict[str, Any]]]:
    """The loops by (library, streamed), in first-seen order."""
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for r in loops:
        groups.setdefault((r["library"], r["stream"]), []).append(r)
    return groups


def main() -> None:
    """Start the server, run every library's loops, stop the server, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    default_backend = "llamacpp" if importlib.util.find_spec("xllamacpp") else "transformers"
    parser.add_argument("--backend", default=default_backend)
    parser.add_argument("--questions", default="0,3,6,8", help="indices into the everyday questions (0-9)")
    parser.add_argument("--libraries", default=",".join(RUNNERS))
    parser.add_argument("--stream", action="store_true", help="run every loop again with streamed requests")
    parser.add_argument("--plain", action="store_true", help="requests without the `tooldec_answer` extension")
    parser.add_argument("--max-requests", type=int, default=4, help="model requests per loop")
    parser.add_argument("--max-tokens", type=int, default=200, help="max_tokens of each request")
    parser.add_argument("--loop-seconds", type=float, default=300.0, help="wall seconds per loop")
    parser.add_argument("--start-seconds", type=float, default=600.0, help="wall seconds for the server to start")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--stem", default="client_loops")
    args = parser.parse_args()
    args.extra_body = {} if args.plain else {"tooldec_answer": True}

    libraries = [name.strip() for name in args.libraries.split(",") if name.strip()]
    missing = [name for name in libraries if name not in RUNNERS or not importlib.util.find_spec(MODULES[name])]
    if missing:
        raise SystemExit(f"unknown or not installed: {', '.join(missing)} (pip install {' '.join(PACKAGES.values())})")
    functions = {t.__name__: t for t in TOOLS}
    items = [(q, functions[name](**arguments)) for q, name, arguments in
             (EVERYDAY[int(i)] for i in args.questions.split(","))]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, cwd=ROOT, capture_output=True, text=True)
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit.stdout.strip(),
        "command": "nice python benchmarks/client_loops.py " + " ".join(sys.argv[1:]),
        "model": args.model, "backend": args.backend,
        "versions": {p: importlib.metadata.version(p) for p in ("openai", *(PACKAGES[n] for n in libraries))},
        "extra_body": args.extra_body, "max_requests": args.max_requests, "loop_seconds": args.loop_seconds,
        "loops": [],
    }
    loads = [load_average()]
    with tempfile.NamedTemporaryFile("w+b", suffix=".log") as log:
        proc, base_url = start_server(args, log)
        try:
            for stream in (False, True) if args.stream else (False,):
                for library in libraries:
                    for question, gold in items:
                        loop = asyncio.run(run_loop(library, base_url, args.model, question, gold, stream, args))
                        print(json.dumps(asdict(loop), ensure_ascii=False), flush=True)
                        doc["loops"].append(asdict(loop))
                        loads.append(load_average())
        finally:
            stop_server(proc)
            log.seek(0)
            doc["server_log_tail"] = log.read().decode(errors="replace")[-3000:]
    doc["load"] = f"{min(loads)}-{max(loads)}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.stem}.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    (args.out / f"{args.stem}.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
