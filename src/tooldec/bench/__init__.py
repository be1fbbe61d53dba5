"""Side-by-side benchmark of tooldec and its peers (xgrammar, llguidance, outlines-core) on tool-call grammars.

workloads (tool sets by name) → calls (forced texts) and schema (the peers' grammar) → engines (adapters) →
runner (check, then time) → report (JSON and Markdown with ratios to tooldec); scaling for the plots.
"""
