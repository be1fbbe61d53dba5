"""tooldec: syntax-error-free tool calling."""
