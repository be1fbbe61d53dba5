"""The vocabulary as bytes by token id, with EOS and special token ids."""

from tooldec.vocab.vocabulary import COMMON_EOS_TOKENS, Vocabulary

__all__ = ["COMMON_EOS_TOKENS", "Vocabulary"]
