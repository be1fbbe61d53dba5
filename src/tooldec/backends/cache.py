"""Where tooldec keeps what it downloads and converts: $TOOLDEC_CACHE, else the user's cache folder."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """A folder under tooldec's cache (created): $TOOLDEC_CACHE, else $XDG_CACHE_HOME/tooldec or ~/.cache/tooldec."""
    root = os.environ.get("TOOLDEC_CACHE")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tooldec"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
