"""`tooldec serve`: an OpenAI-compatible Chat Completions server whose tool calls are guided by ToolDec.

`create_app(lm, ServeConfig(...))` builds the FastAPI app for a loaded model; `tooldec serve` runs it with
uvicorn on 127.0.0.1. Needs the `serve` extra (fastapi, uvicorn).
"""

from tooldec.serve.app import ServeConfig, create_app

__all__ = ["ServeConfig", "create_app"]
