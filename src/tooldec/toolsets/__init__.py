"""Ready tool sets: the FuncQA math tools (with implementations) and the KAMEL relations."""

from tooldec.toolsets.funcqa import FUNCQA_FUNCTIONS, funcqa_tools
from tooldec.toolsets.kamel import KamelTools, kamel_tools

__all__ = ["FUNCQA_FUNCTIONS", "KamelTools", "funcqa_tools", "kamel_tools"]
