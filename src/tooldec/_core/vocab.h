// The vocabulary: token bytes by id, the same tokens as a preorder trie (the layout every index walk reads), the
// region walks shared by every index over it (a region: see Region) and the lexeme walks shared by every
// context-free grammar over it (see LexemeWalk).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "lru.h"

namespace tooldec {

// A region: the states reachable from a wide state through wide states. Its walk depends only on its shape (the
// byte-level transitions between its states and towards its exits), so states of the same shape, such as the
// contents of every string field of a tool set, share one walk.
struct Region {
  // tokens that end inside the region, or on a leaf of the trie whose last byte leaves it (no longer token goes
  // on from there, so the state it leaves for does not matter: a number's last digit counts leave through a
  // thousand three-digit tokens, which cost 24 us a state walked one by one)
  std::vector<uint32_t> stay;
  std::vector<int32_t> stay_words;            // the words of `stay` with a bit set, ascending
  std::vector<std::pair<int32_t, uint32_t>> stay_sparse;  // those words with their bits (a sparse copy of stay)
  std::vector<int32_t> exit_node, exit_idx;  // trie nodes (not leaves) whose byte leaves it, and which exit
  // the bytes from the region's start to each exit node (exit i: exit_path[exit_path_at[i] .. exit_path_at[i+1])),
  // so that a state whose region walks alike finds its own exit state of each without a search of its region
  std::vector<uint8_t> exit_path;
  std::vector<int32_t> exit_path_at{0};
  std::vector<int32_t> used_exits;            // the exits that appear in exit_idx, ascending
  uint64_t content = 0;                       // a hash of stay and the exits: walks alike hash alike
  int32_t depth = 0;                          // the most bytes a token read while staying inside it
  int64_t stay_count = 0;                     // the tokens in stay

  // Whether o walks the vocabulary exactly as this region does (same stay tokens, same exits).
  bool same_walk(const Region& o) const {
    return content == o.content && stay_words == o.stay_words && exit_node == o.exit_node &&
           exit_idx == o.exit_idx &&
           stay_sparse == o.stay_sparse;
  }
};

// The vocabulary walk of a context-free grammar's lexer state: the tokens that stay inside the lexeme
// (packed), and the exits. It depends only on the state's shape as bytes see it (its reachable lexer states,
// their transitions and which of them end a lexeme), so a JSON string's contents walk alike in every grammar.
// Exit classes are the shape's own class numbers (first appearance from the state, breadth first); each grammar
// maps them to its lexeme classes.
struct LexemeWalk {
  std::vector<uint32_t> inside;  // W words, or empty when no token stays inside
  // trie nodes whose byte starts the next lexeme, and the class of the lexeme ended there, sorted by (class,
  // node's byte, node)
  std::vector<int32_t> exit_node, exit_class;
  // the exits in runs of one (class, byte): run r is exit_node[run_begin[r] .. run_begin[r + 1])
  std::vector<int32_t> run_begin;
};

class Vocab {
 public:
  // The tokenizer's byte strings: token t is flat[offsets[t] .. offsets[t + 1]); ids from offsets' end up to
  // `size` (model padding) have no bytes. The arrays are checked by the bindings.
  Vocab(std::vector<uint8_t> flat, std::vector<int64_t> offsets, std::vector<int32_t> eos, int32_t size);

  int32_t size() const { return size_; }
  int32_t words() const { return words_; }

  // Region walks shared by every index over this vocabulary, keyed by the region's byte-level shape. The
  // pinned ones (the model's preparation: the value kinds every call format writes, such as a JSON string's
  // contents) serve every index; the others only indexes that share, and the least recently used beyond
  // REGION_CACHE_SIZE are dropped. Thread-safe.
  std::shared_ptr<const Region> shared_region(const std::vector<int32_t>& key, bool shared);
  void share_region(const std::vector<int32_t>& key, std::shared_ptr<const Region> r);
  void pin_region(const std::vector<int32_t>& key, std::shared_ptr<const Region> r);
  bool has_pinned() const { return has_pinned_.load(std::memory_order_acquire); }
  int64_t shared_regions() const { return static_cast<int64_t>(shared_.size()); }
  // Lexeme walks shared by every context-free grammar over this vocabulary, keyed by the lexer state's shape
  // (the least recently used beyond LEXEME_WALK_CACHE_SIZE dropped). Thread-safe.
  KeyedLru<LexemeWalk>& lexeme_walks() { return lexeme_walks_; }
  int64_t shared_lexeme_walks() const { return static_cast<int64_t>(lexeme_walks_.size()); }
  int64_t pinned_regions() const {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    return static_cast<int64_t>(pinned_.size());
  }
  int64_t num_nodes() const { return static_cast<int64_t>(node_byte_.size()); }
  const std::vector<int32_t>& eos() const { return eos_; }

  // The trie in preorder. Node k: byte node_byte_[k] at depth node_depth_[k] (1 = first byte), its subtree is
  // [k, node_end_[k]), the tokens ending at it are tok_[tok_ptr_[k] .. tok_ptr_[k + 1]).
  std::vector<uint8_t> node_byte_;
  std::vector<int32_t> node_depth_, node_end_, tok_ptr_, tok_;
  // The first token ending at node k, or sink() where none does: a walk sets its bit without a branch (whether a
  // node ends a token is a coin toss, about half of them do, and a mispredicted branch costs a node's walk).
  std::vector<int32_t> node_tok_;
  int32_t sink() const { return words_ * 32; }
  // Per node: whether every byte below it is plain text (printable ASCII but `"` and `\`), and the deepest node
  // below it (itself if none). A walk in a state that plain bytes keep in place takes such a subtree whole.
  std::vector<uint8_t> plain_below_;
  std::vector<int32_t> deepest_below_;
  // Per node: the bytes of the nodes strictly below it (32 bytes a node). A walk in a state that each of those
  // bytes keeps in place takes the subtree whole (the context-free guide's lexeme walks: a string's contents,
  // an identifier's letters).
  std::vector<Mask> bytes_below_;
  static bool plain(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }
  int32_t max_len_ = 0;
  int32_t root_[256];  // the node of each first byte, or -1
  Mask root_bits_{0, 0, 0, 0};  // the first bytes that have a node
  std::vector<uint8_t> bytes_;
  std::vector<int64_t> off_;

 private:
  void build_trie();

  int32_t size_, words_;
  std::vector<int32_t> eos_;
  mutable std::mutex shared_mutex_;  // guards pinned_
  KeyedLru<Region> shared_{REGION_CACHE_SIZE};
  KeyedLru<LexemeWalk> lexeme_walks_{LEXEME_WALK_CACHE_SIZE};
  std::unordered_map<std::vector<int32_t>, std::shared_ptr<const Region>, SigHash> pinned_;
  std::atomic<bool> has_pinned_{false};
};

}  // namespace tooldec
