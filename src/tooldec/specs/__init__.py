"""Tool specifications in: Python functions, OpenAI/MCP/BFCL tool lists and OpenAPI documents to ToolSpecs."""

from tooldec.specs.from_function import from_function
from tooldec.specs.from_openai import from_openai_tools, load_tools_file
from tooldec.specs.from_openapi import from_openapi, openapi_operations
from tooldec.specs.normalize import normalize_schema
from tooldec.specs.toolspec import ToolSet, ToolSpec

__all__ = [
    "ToolSet",
    "ToolSpec",
    "from_function",
    "from_openai_tools",
    "from_openapi",
    "load_tools_file",
    "normalize_schema",
    "openapi_operations",
]
