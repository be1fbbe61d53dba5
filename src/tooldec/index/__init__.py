"""The token index: per automaton state, the tokens allowed and where they lead, over a prepared vocabulary."""

from tooldec.index.prepared import PreparedVocab, pack_bool, pack_ids, unpack
from tooldec.index.token_index import FINAL, TokenIndex

__all__ = ["FINAL", "PreparedVocab", "TokenIndex", "pack_bool", "pack_ids", "unpack"]
