"""What a request asks the decoder to do: its tools, how calls are guided, its sampling and limits.

`tools` are read with `tooldec.specs.from_openai_tools` and compiled by the model's compiler (cached,
thread-safe) in the model's chat syntax; `tool_choice` and `parallel_tool_calls` become the row's policy through
the chat layer's one builder (`tooldec.chat.plan_calls`), as for the agents, the vLLM processor and the
evaluation. With `tooldec_answer` (sent through the client's `extra_body`), a turn after tool results that only
repeats calls already answered is decoded again in the "answer" mode, where no call can start. `response_format`
json_schema guides the whole answer by the schema's grammar, and vLLM's `structured_outputs` by the output type of
its one key (`tooldec.structured.structured_output`): `json` (a JSON Schema), `regex`, `choice`, or `grammar` (GBNF
when a line of it defines a rule with `::=`, Lark otherwise). Its other keys (`structural_tag`, ...) are refused by
name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tooldec.cfg_guide import CompiledCfg
from tooldec.chat import CallPlan, ChatTemplate, ToolChoiceError, plan_calls
from tooldec.compiler import CompiledGrammar, Compiler
from tooldec.decoding import CallController, FreeController, Policy
from tooldec.decoding.sampling import SamplingParams
from tooldec.errors import GrammarError, ToolDecError
from tooldec.serve.errors import APIError, grammar_error, pointer_param, tool_error
from tooldec.serve.output import WHOLE, Kind
from tooldec.serve.protocol import (
    MAX_STOP,
    ChatCompletionRequest,
    NamedCustomChoice,
    NamedToolChoice,
    StructuredOutputs,
)
from tooldec.specs import ToolSet, from_openai_tools
from tooldec.structured import STRUCTURED_KEYS, OutputType, structured_output


@dataclass
class Plan:
    """A checked request, before its grammar is compiled."""

    kind: Kind
    tools: ToolSet | None
    calls: CallPlan | None
    schema: Any
    strict: bool
    stop: tuple[str, ...]
    params: SamplingParams
    max_tokens: int | None
    structured: OutputType | None = None
    """The output type of `structured_outputs.<output>` (kind "grammar")."""
    output: str = "grammar"
    """Which key of `structured_outputs` the request used: json, regex, choice or grammar."""

    def compile(self, compiler: Compiler) -> CompiledGrammar | CompiledCfg | None:
        """The grammar this request decodes with (slow the first time for a tool set: run it in a thread);
        raises APIError naming the tool and JSON path of a schema, or the line and column of a grammar, that
        cannot be compiled."""
        if self.kind == "grammar":
            assert self.structured is not None
            try:
                return self.structured.compile(compiler)
            except (ToolDecError, RecursionError) as exc:
                raise _output_error(exc, self.output) from exc
        if self.kind == "json":
            try:
                return compiler.compile_schema(self.schema, additional_properties=not self.strict)
            except (ToolDecError, RecursionError) as exc:
                raise tool_error(exc, "response_format.json_schema.schema") from exc
        if self.kind == "tools":
            assert self.calls is not None and self.tools is not None
            try:
                return self.calls.compile(compiler)
            except (ToolDecError, RecursionError) as exc:
                raise _located(exc, self.tools) from exc
        return None

    def timeout_error(self, seconds: float) -> APIError:
        """The error of a compile that took longer than `seconds`, naming what did not compile."""
        if self.kind == "grammar" and self.output == "json":
            what, param, code = "schema", "structured_outputs.json", "schema_too_complex"
        elif self.kind == "grammar":
            what, param, code = self.output, f"structured_outputs.{self.output}", "grammar_too_complex"
        elif self.kind == "json":
            what, param, code = "response schema", "response_format.json_schema.schema", "schema_too_complex"
        else:
            what, param, code = "tool schemas", "tools", "schema_too_complex"
        return APIError(f"the {what} did not compile within {seconds:g} s", param=param, code=code)

    def policy(self, grammar: CompiledGrammar | CompiledCfg | None, vocab: Any, *, answer: bool = False) -> Policy:
        """A fresh policy for one row (`answer`: the tools' calls in the "answer" mode, no call can start)."""
        if self.kind == "text" or grammar is None:
            return FreeController(vocab, None, stop=self.stop)
        if self.kind in WHOLE:
            return CallController(grammar)
        assert self.calls is not None
        calls = replace(self.calls, mode="answer") if answer else self.calls
        return calls.policy(grammar, stop=self.stop)


def _located(exc: Exception, tools: ToolSet) -> APIError:
    """A compile error whose path is inside one tool's parameters (or a custom tool's grammar), placed at that
    tool in the request."""
    tool, path = getattr(exc, "tool", None), getattr(exc, "path", None)
    if isinstance(exc, GrammarError):
        if tool in tools:
            return APIError(str(exc), param=f"tools[{tools.names.index(tool)}].custom.format", code="invalid_grammar")
        return APIError(str(exc), param="tools", code="unsupported_value")
    if tool in tools and path and path.startswith("#/parameters"):
        i = tools.names.index(tool)
        error = tool_error(exc)
        error.param = pointer_param(f"tools[{i}].function.parameters", "#" + path[len("#/parameters"):])
        return error
    return tool_error(exc)


def _output_error(exc: Exception, key: str) -> APIError:
    """A `structured_outputs.<key>` that cannot be compiled, as a 400: a schema's error at its JSON path, a
    grammar's at its line and column."""
    return tool_error(exc, "structured_outputs.json") if key == "json" else grammar_error(exc, key)


def _structured(outputs: StructuredOutputs | None) -> tuple[str, OutputType] | None:
    """The one key of `structured_outputs` and its output type, None without the object; raises APIError naming a
    key not supported, a value of the wrong kind, or two keys given at once."""
    if outputs is None:
        return None
    for key, value in (outputs.model_extra or {}).items():
        if value is not None:
            raise APIError(
                f"structured_outputs.{key} is not supported (only {', '.join(STRUCTURED_KEYS)})",
                param=f"structured_outputs.{key}", code="unsupported_value",
            )
    values = {"json": outputs.json_, "regex": outputs.regex, "choice": outputs.choice, "grammar": outputs.grammar}
    given = [(k, values[k]) for k in STRUCTURED_KEYS if values[k] is not None]
    if not given:
        raise APIError("structured_outputs needs one of json, regex, choice and grammar", param="structured_outputs")
    if len(given) > 1:
        raise APIError(f"structured_outputs takes one of {', '.join(STRUCTURED_KEYS)}, not {given[0][0]} and "
                       f"{given[1][0]}", param=f"structured_outputs.{given[1][0]}")
    key, value = given[0]
    try:
        return key, structured_output(key, value)
    except ToolDecError as exc:
        raise _output_error(exc, key) from exc


def plan_request(req: ChatCompletionRequest, template: ChatTemplate) -> Plan:
    """Check a request's parameters against each other and read its tools; raises APIError."""
    if req.n != 1:
        raise APIError("only n=1 is supported", param="n", code="unsupported_value")
    if req.logprobs or req.top_logprobs:
        raise APIError("logprobs are not supported", param="logprobs", code="unsupported_value")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise APIError(f"{name} is not supported (only 0)", param=name, code="unsupported_value")
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    if len(stop) > MAX_STOP:
        raise APIError(f"at most {MAX_STOP} stop sequences", param="stop")
    if any(not s for s in stop):
        raise APIError("stop sequences must not be empty", param="stop")
    if req.max_tokens is not None and req.max_completion_tokens is not None and (
        req.max_tokens != req.max_completion_tokens
    ):
        raise APIError("max_tokens and max_completion_tokens disagree", param="max_completion_tokens")
    temperature = 0.0 if req.top_p == 0 else req.temperature
    params = SamplingParams(temperature=temperature, top_p=req.top_p or 1.0, seed=req.seed)
    max_tokens = req.max_completion_tokens or req.max_tokens

    tools = None
    if req.tools is not None:
        raw = [t.model_dump(exclude_none=True, by_alias=True) for t in req.tools]
        try:
            tools = ToolSet(from_openai_tools(raw))
        except (ToolDecError, RecursionError) as exc:
            raise tool_error(exc) from exc
    choice = req.tool_choice
    if choice is None:
        choice = "auto" if tools is not None else "none"
    if tools is None and choice != "none":
        raise APIError("tool_choice needs tools", param="tool_choice")

    fmt = req.response_format
    structured = _structured(req.structured_outputs)
    if structured is not None:
        output, value = structured
        if tools is not None and choice != "none":
            raise APIError(
                f"structured_outputs.{output} together with callable tools is not supported; "
                'use tool_choice "none" or leave out tools',
                param=f"structured_outputs.{output}",
            )
        if fmt is not None and fmt.type != "text":
            raise APIError(f"structured_outputs.{output} and response_format cannot both constrain the answer",
                           param=f"structured_outputs.{output}")
        return Plan("grammar", tools, None, None, False, stop, params, max_tokens, value, output)
    if fmt is not None and fmt.type != "text":
        if tools is not None and choice != "none":
            raise APIError(
                "response_format json_schema/json_object together with callable tools is not supported; "
                'use tool_choice "none" or leave out tools',
                param="response_format",
            )
        if fmt.type == "json_object":
            schema: Any = {"type": "object"}
            strict = False
        else:
            if fmt.json_schema is None or fmt.json_schema.schema_ is None:
                raise APIError("response_format json_schema needs json_schema.schema", param="response_format.json_schema")
            schema, strict = fmt.json_schema.schema_, bool(fmt.json_schema.strict)
        return Plan("json", tools, None, schema, strict, stop, params, max_tokens)

    if tools is None:
        return Plan("text", None, None, None, False, stop, params, max_tokens)
    asked: Any = choice
    if isinstance(choice, NamedToolChoice | NamedCustomChoice):
        kind, name = (("function", choice.function.name) if isinstance(choice, NamedToolChoice)
                      else ("custom", choice.custom.name))
        if name not in tools:
            raise APIError(
                f"tool_choice names an unknown tool {name!r} (tools: {', '.join(tools.names)})",
                param=f"tool_choice.{kind}.name",
            )
        if tools[name].custom != (kind == "custom"):
            raise APIError(f"tool_choice names {name!r} as a {kind} tool, which it is not",
                           param="tool_choice.type")
        asked = {kind: {"name": name}}
    try:
        calls = plan_calls(tools, asked, syntax=template.syntax, parallel=req.parallel_tool_calls)
    except ToolChoiceError as exc:
        raise APIError(str(exc), param="tool_choice") from exc
    return Plan("tools", tools, calls, None, False, stop, params, max_tokens)
