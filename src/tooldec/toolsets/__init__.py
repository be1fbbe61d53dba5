"""Ready tool sets with real implementations: the FuncQA math tools."""

from tooldec.toolsets.funcqa import FUNCQA_FUNCTIONS, funcqa_tools

__all__ = ["FUNCQA_FUNCTIONS", "funcqa_tools"]
