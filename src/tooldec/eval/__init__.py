"""Evaluation of tool calling on FuncQA, KAMEL, RestBench and BFCL, with and without ToolDec.

Modules: `data` (benchmark loaders and file hashes), `bfcl` (BFCL's AST matcher), `metrics` (accuracy rules,
syntax-error classes, fuzzy names, tokens per tool), `restbench_sim` (simulated REST responses) and `report`
(results.json, Markdown tables, plots, resuming).
"""
