"""tooldec inside other serving engines.

`tooldec.integrations.batch` is the engine-neutral part: a request's tools and tool_choice as a small JSON
payload, the per-model factory of per-request policies, and the per-row bookkeeping of a persistent batch
(rows removed, added, moved; each step's new tokens fed to the row's policy; one batched mask fill and one
in-place apply). `tooldec.integrations.vllm` puts it inside vLLM; it imports vLLM, so nothing here is
imported by `import tooldec`.
"""
