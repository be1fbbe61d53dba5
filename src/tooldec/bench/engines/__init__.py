"""Engine adapters by name: tooldec and the peers (xgrammar, llguidance, outlines-core) behind one interface."""

from tooldec.bench.engines.base import BatchDriver, Engine, Session, bit_set, mask_words
from tooldec.bench.engines.llguidance_engine import LLGuidanceEngine
from tooldec.bench.engines.outlines_engine import OutlinesEngine
from tooldec.bench.engines.tooldec_engine import TooldecEngine, TooldecPrecomputeEngine
from tooldec.bench.engines.xgrammar_engine import XGrammarEngine

ENGINES: dict[str, type[Engine]] = {
    e.name: e for e in (TooldecEngine, TooldecPrecomputeEngine, XGrammarEngine, LLGuidanceEngine, OutlinesEngine)
}

__all__ = ["ENGINES", "BatchDriver", "Engine", "Session", "bit_set", "mask_words"]
