"""Context-free grammars from Lark or GBNF text, normalized to the BNF model the CFG engine consumes."""
