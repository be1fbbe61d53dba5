"""`tooldec serve`: OpenAI Chat Completions on FastAPI, every tool call guided by ToolDec.

Routes: `POST /v1/chat/completions` (streamed as server-sent events or not), `GET /v1/models`, `GET /health`.
A request is checked (pydantic, then `plan_request`), its prompt rendered by the chat template, its grammar
compiled in a thread (cached per tool set, response schema or `structured_outputs` entry), and it joins the
engine's running batch. Every error a client can cause is a 4xx with an OpenAI error object; the app never
answers a client's mistake with a 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tooldec.backends.loader import LoadedModel
from tooldec.chat import ChatTemplate
from tooldec.chat.policy import repeat_key
from tooldec.decoding.decoder import Decoder
from tooldec.serve import protocol
from tooldec.serve.engine import Engine, Job
from tooldec.serve.errors import APIError, param_path
from tooldec.serve.output import OutputBuilder
from tooldec.serve.plan import Plan, plan_request
from tooldec.serve.prompt import encode_prompt

log = logging.getLogger(__name__)


@dataclass
class ServeConfig:
    """Server limits and defaults."""

    model_name: str = "tooldec"
    max_batch: int = 8
    max_waiting: int = 256
    max_model_len: int | None = None
    default_max_tokens: int = 512
    compile_timeout: float = 60.0
    max_body_bytes: int = 8 << 20
    prefix_cache: int = 8
    call_layout: str = "compact"
    """How guided calls may be laid out: compact, or lines (pretty-printed too; Hermes syntax only)."""


class BodyLimit:
    """ASGI middleware: a body declared larger than `limit` bytes gets a 413 before it is read."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] == "http":
            length = dict(scope.get("headers") or []).get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.limit):
                error = APIError(f"request body larger than {self.limit} bytes", status=413, code="body_too_large")
                await JSONResponse(error.body(), status_code=413)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _validation_error(exc: RequestValidationError) -> APIError:
    """The first problem pydantic found, as an OpenAI error naming the parameter."""
    errors = exc.errors()
    first = errors[0] if errors else {"msg": "invalid request", "loc": ()}
    loc = [p for p in first.get("loc", ()) if p != "body"]
    # pydantic names union branches in the location (`str`, `list[...]`, `function-after[...]`); drop them
    loc = [p for p in loc if isinstance(p, int) or ("[" not in str(p) and p not in ("str", "int", "bool"))]
    if first.get("type") == "json_invalid":
        return APIError(f"the body is not valid JSON: {first.get('msg')}", param=None, code="invalid_json")
    param = param_path([p if isinstance(p, int) else str(p) for p in loc]) or None
    message = str(first.get("msg", "invalid value"))
    if param:
        message = f"{param}: {message}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problems)"
    return APIError(message, param=param, code="invalid_value")


def create_app(lm: LoadedModel, config: ServeConfig | None = None) -> FastAPI:
    """The FastAPI app serving `lm`; its engine starts and stops with the app's lifespan."""
    cfg = config or ServeConfig()
    template = ChatTemplate.probe(lm.tokenizer, cfg.call_layout)
    context = int(getattr(lm.model.config, "max_position_embeddings", 0) or 1 << 30)
    max_len = min(context, cfg.max_model_len or context)
    engine = Engine(
        Decoder(lm.model, lm.vocab), max_batch=cfg.max_batch, max_waiting=cfg.max_waiting,
        prefix_cache=cfg.prefix_cache,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        yield
        await engine.stop()

    app = FastAPI(title="tooldec", version="0.1.0", lifespan=lifespan)
    app.state.engine = engine
    app.state.template = template
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes)

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        error = _validation_error(exc)
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        error = APIError(str(exc.detail), status=exc.status_code, type=kind)
        return JSONResponse(error.body(), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        error = APIError(f"internal error: {type(exc).__name__}: {exc}", status=500, type="server_error")
        return JSONResponse(error.body(), status_code=500)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness and load: the model, rows running, requests waiting, steps taken."""
        return {"status": "ok", "model": cfg.model_name, **engine.stats}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The one model served."""
        return {"object": "list", "data": [
            {"id": cfg.model_name, "object": "model", "created": 0, "owned_by": "tooldec", "max_model_len": max_len}
        ]}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: protocol.ChatCompletionRequest, request: Request) -> Any:
        """OpenAI Chat Completions with tools; every tool call in the answer is valid."""
        if body.model != cfg.model_name:
            raise APIError(
                f"the model {body.model!r} does not exist (this server serves {cfg.model_name!r})",
                status=404, param="model", code="model_not_found",
            )
        plan = plan_request(body, template)
        prompt = encode_prompt(lm, template, body.messages, plan.tools)
        if len(prompt) >= max_len:
            raise APIError(
                f"the prompt has {len(prompt)} tokens; this model's context is {max_len} tokens",
                param="messages", code="context_length_exceeded",
            )
        room = max_len - len(prompt)
        if plan.max_tokens is not None and plan.max_tokens > room:
            raise APIError(
                f"the prompt has {len(prompt)} tokens and max_tokens asks for {plan.max_tokens}, "
                f"more than this model's context of {max_len} tokens",
                param="max_tokens", code="context_length_exceeded",
            )
        max_tokens = plan.max_tokens or min(cfg.default_max_tokens, room)
        try:
            grammar = await asyncio.wait_for(asyncio.to_thread(plan.compile, lm.compiler), cfg.compile_timeout)
        except TimeoutError:
            raise plan.timeout_error(cfg.compile_timeout) from None
        answered = answered_calls(body.messages) if body.tooldec_answer and plan.kind == "tools" else set()
        job = _job(plan, grammar, lm, prompt, max_tokens, stream=body.stream or bool(answered))
        engine.submit(job)
        if answered:  # a turn after tool results that only repeats answered calls is decoded again, answering
            await _wait_or_leave(engine, job, request)
            made = {_call_key(c.name, c.arguments) for c in job.builder.complete_calls}
            if job.finish_reason not in ("cancelled", "error") and made and made <= answered:
                job = _job(plan, grammar, lm, prompt, max_tokens, stream=body.stream, answer=True)
                engine.submit(job)
        builder = job.builder
        cid, created = protocol.completion_id(), protocol.now()
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                _stream(engine, job, cid, cfg.model_name, created, include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        await _wait_or_leave(engine, job, request)
        if job.finish_reason == "cancelled":
            return JSONResponse({}, status_code=499)
        if job.finish_reason == "error":
            raise APIError(f"generation failed: {job.error}", status=500, type="server_error")
        calls = [c.to_openai() for c in builder.complete_calls]
        content = builder.message_content if (builder.message_content or not calls) else None
        return protocol.completion(
            cid, cfg.model_name, created, content, calls, _finish_reason(job),
            protocol.usage(len(prompt), job.completion_tokens),
        )

    return app


def _job(plan: Plan, grammar: Any, lm: LoadedModel, prompt: list[int], max_tokens: int, *, stream: bool,
         answer: bool = False) -> Job:
    """A request's job in the engine: a fresh policy (in the "answer" mode with `answer`) and output builder."""
    policy = plan.policy(grammar, lm.vocab, answer=answer)
    builder = OutputBuilder(lm.vocab, policy, kind=plan.kind, stop=plan.stop)
    return Job(prompt, policy, plan.params, max_tokens, builder, stream=stream)


def _call_key(name: str, arguments: str) -> str:
    """A call's identity when it comes again after its result (`tooldec.chat.policy.repeat_key`)."""
    try:
        args = json.loads(arguments)
    except ValueError:
        args = arguments
    return repeat_key(name, args)


def answered_calls(messages: list[protocol.Message]) -> set[str]:
    """The calls of the conversation a `tool` message answered, when the messages end with tool results."""
    if not messages or messages[-1].role != "tool":
        return set()
    replied = {m.tool_call_id for m in messages if m.role == "tool"}
    return {_call_key(tc.custom.name, tc.custom.input) if tc.custom else
            _call_key(tc.function.name, tc.function.arguments) if tc.function else ""
            for m in messages if m.role == "assistant" for tc in m.tool_calls or [] if tc.id in replied}


def _finish_reason(job: Job) -> str:
    """OpenAI's finish_reason: tool_calls when calls were made (and none was cut), else stop or length."""
    builder = job.builder
    if job.finish_reason == "length" and (builder.in_call or not builder.complete_calls):
        return "length"
    return "tool_calls" if builder.complete_calls else str(job.finish_reason)


async def _wait_or_leave(engine: Engine, job: Job, request: Request) -> None:
    """Wait for the job; if the client disconnects first, cancel it (its row is freed)."""

    async def left() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    done = asyncio.ensure_future(job.done.wait())
    gone = asyncio.ensure_future(left())
    try:
        await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        done.cancel()
    if not job.done.is_set():
        engine.cancel(job)
        await job.done.wait()


async def _stream(
    engine: Engine, job: Job, cid: str, model: str, created: int, include_usage: bool
) -> AsyncIterator[str]:
    """Server-sent events: a role chunk, content and tool-call deltas, the finish chunk, [DONE]."""

    def event(obj: dict[str, Any]) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    try:
        yield event(protocol.chunk(cid, model, created, {"role": "assistant", "content": ""}))
        while (deltas := await job.updates.get()) is not None:
            for delta in deltas:
                yield event(protocol.chunk(cid, model, created, delta))
        if job.finish_reason == "error":
            error = APIError(f"generation failed: {job.error}", status=500, type="server_error")
            yield event(error.body())
        else:
            yield event(protocol.chunk(cid, model, created, {}, _finish_reason(job)))
            if include_usage:
                usage = protocol.usage(len(job.prompt), job.completion_tokens)
                yield event({**protocol.chunk(cid, model, created, {}), "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"
    finally:
        engine.cancel(job)
