// The token index of one DFA over one vocabulary, in one algorithm: the vocabulary's token byte strings, sorted,
// form a trie laid out in preorder (each node: its byte, its depth, the end of its subtree, the token ids that
// end there; vocab.h). A state's allowed tokens come from one walk of that array with a stack of DFA states by
// depth: a node whose byte is dead from its parent's state skips its whole subtree (a jump to its subtree end),
// every live node that ends a token allows that token. The result is kept per state as a packed bitmask (dense
// words, or (word, bits) pairs when that is smaller), computed on first visit (or all at once for a small
// automaton, tooldec/index/token_index.py) and then read by any thread without a lock. Wide states (a string's
// contents, a number's digits) get theirs through their region's walk (region.cc), found from each state or,
// after share_alike, taken from a state alike as far as that walk reads.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "vocab.h"

namespace tooldec {

// The mask of one state.
struct Entry {
  std::vector<uint32_t> dense;                        // W words, or empty when sparse
  std::vector<std::pair<int32_t, uint32_t>> sparse;  // (word, bits) when that is smaller (with a base: added to it)
  // A sparse region state's mask is its region's stay tokens, shared by every state of that region (the walk's
  // stay_sparse, kept alive by the index), plus the few its exits add (`sparse`): building one costs its exits.
  const std::vector<std::pair<int32_t, uint32_t>>* base = nullptr;
  int64_t count = 0;                                  // allowed tokens, EOS included
};

class Index {
 public:
  // The index of a DFA (checked by the bindings: every target and class in range, n >= 1) over a vocabulary:
  // `trans` holds n rows of nc targets, read in place (the pointer keeps their owner alive), `classes` 256 byte
  // classes and `accepting` n flags, both copied.
  Index(std::shared_ptr<Vocab> vocab, std::shared_ptr<const int32_t> trans, int32_t n, int32_t nc,
        const uint8_t* classes, const bool* accepting, bool share_regions);
  ~Index() = default;
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  int32_t num_states() const { return n_; }
  // Per state: accepting with no way on, so only EOS may follow.
  std::vector<bool> finished() const;
  int32_t words() const { return vocab_->words(); }
  bool accepting(int32_t s) const { return s > DEAD && s < n_ && accepting_[s]; }
  const std::shared_ptr<Vocab>& vocab() const { return vocab_; }

  int32_t step(int32_t s, uint8_t b) const { return trans_[static_cast<size_t>(s) * nc_ + classes_[b]]; }

  // The state after token t from s: FINAL after EOS in an accepting state, DEAD when not allowed.
  int32_t next_state(int32_t s, int32_t t) const {
    if (s <= DEAD || s >= n_ || t < 0 || t >= vocab_->size()) return DEAD;
    for (int32_t e : vocab_->eos())
      if (e == t) return accepting_[s] ? FINAL : DEAD;
    const uint8_t* b = vocab_->bytes_.data();
    int64_t lo = vocab_->off_[t], hi = vocab_->off_[t + 1];
    if (lo == hi) return DEAD;
    for (int64_t k = lo; k < hi && s != DEAD; ++k) s = step(s, b[k]);
    return s;
  }

  // emit(token) for the tokens ending at trie node k and every token below it that stays alive, when reading
  // k's byte led to state `at` (a dead byte skips its whole subtree, so an exit costs its live tokens only).
  // `stack` holds a state per depth (vocabulary's longest token + 1): a region has thousands of exit nodes, and
  // the caller's one buffer spares each a thread-local lookup.
  template <typename Emit>
  void walk_below(int32_t k, int32_t at, int32_t* stack, Emit emit) const {
    const Vocab& v = *vocab_;
    const int32_t* nd = v.node_depth_.data();
    const int32_t* tp = v.tok_ptr_.data();
    const int32_t* tk = v.tok_.data();
    stack[nd[k]] = at;
    for (int32_t j = tp[k]; j < tp[k + 1]; ++j) emit(tk[j]);
    const int32_t end = v.node_end_[k];
    for (int32_t q = k + 1; q < end;) {
      const int32_t d = nd[q];
      const int32_t t = step(stack[d - 1], v.node_byte_[q]);
      if (t == DEAD) {
        q = v.node_end_[q];
        continue;
      }
      stack[d] = t;
      for (int32_t j = tp[q]; j < tp[q + 1]; ++j) emit(tk[j]);
      ++q;
    }
  }

  // emit(token) for every token that leaves region r through one of its exits (at: the concrete state each exit
  // node leads to).
  template <typename Emit>
  void walk_exits(const Region& r, const std::vector<int32_t>& at, Emit emit) const {
    thread_local std::vector<int32_t> stack;
    stack.resize(static_cast<size_t>(vocab_->max_len_) + 1);
    for (size_t i = 0; i < r.exit_node.size(); ++i) walk_below(r.exit_node[i], at[i], stack.data(), emit);
  }

  // The cached entry of state s, computed on first use (thread-safe: the first published entry wins; a racing
  // thread's duplicate stays owned by the index, unused).
  const Entry& entry(int32_t s) {
    if (s < 0 || s >= n_) throw std::out_of_range("state " + std::to_string(s) + " is not in the automaton");
    Entry* got = entries_[s].load(std::memory_order_acquire);
    if (got != nullptr) return *got;
    Entry* fresh = compute(s);
    Entry* expected = nullptr;
    if (!entries_[s].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *expected;
    computed_.fetch_add(1, std::memory_order_relaxed);
    return *fresh;
  }

  int64_t num_regions() const {
    std::lock_guard<std::mutex> lock(regions_mutex_);
    return static_cast<int64_t>(regions_.size());
  }
  // The trie walks this index made for its regions (the others came from a cache or a region that walks alike).
  int64_t num_walks() const { return walks_.load(); }

  // Keep every region walk of this index in the vocabulary for good, for every later index over it (sharing or
  // not): a model's preparation, like llguidance's slices. Returns how many regions this index holds.
  int64_t pin_regions() const;

  // Every state's entry now (all up front, Outlines-style), on up to `threads` threads (entries are published
  // lock-free, regions under a lock).
  void compute_all(int threads);

  // Walk every region of the automaton now (the expensive part of a wide state's first visit), so that a
  // decoding step that reaches a string or a number for the first time costs its exits only.
  // The regions are found in one pass (most wide states share a few); only the walks that neither this index
  // nor the vocabulary's cache holds go to the threads, so a tool set whose kinds of values were seen before
  // starts none (threads waiting for a core had made this 4x slower in wall time on a loaded machine).
  void compute_regions(int threads);

  // Index the states of the single path from s: each state's entry, on while it does not accept and all its
  // live bytes lead to one state, at most `limit` states (a call's opening text up to its first choice).
  void warm_path(int32_t s, int32_t limit);

  // Sort the wide states into classes alike up to `rounds` bytes ahead (each byte class leading to no state, a
  // narrow state, or a wide state of which class), so that a wide state's first visit can take the region walk of
  // an alike state indexed before it and skip finding its own region (the search of its states, the signature's
  // hashing and the lookups in this index's and the vocabulary's caches: most of a number state's first visit).
  // A walk that reads at most d bytes inside its region is the same from every state alike d + 1 bytes ahead, and
  // a walk of any depth from every state of a last-round class no further round would split (a string's contents
  // and its UTF-8 and escape states); such a state finds its own exit states along the walk's recorded paths.
  // O(rounds x wide states x byte classes): for the small automata that are indexed whole (FuncQA: 257 wide
  // states in 52 classes four bytes ahead).
  // Once per index; a no-op after the first call.
  void share_alike(int32_t rounds);

  bool cached(int32_t s) const { return s >= 0 && s < n_ && entries_[s].load(std::memory_order_acquire) != nullptr; }

  int64_t computed() const { return computed_.load(); }

  // The bytes the masks of this index hold (an entry shared by several states counted once).
  int64_t mask_bytes() const;
  int64_t num_masks() const;

  // Write state s's mask (int32[words]) to out; FINAL gets an empty one.
  void fill(int32_t s, int32_t* out) {
    const int32_t W = words();
    if (s == FINAL) {  // after EOS nothing more (callers keep EOS allowed themselves if they need to)
      std::memset(out, 0, sizeof(int32_t) * W);
      return;
    }
    const Entry& e = entry(s);
    if (!e.dense.empty()) {
      std::memcpy(out, e.dense.data(), sizeof(int32_t) * W);
    } else {
      std::memset(out, 0, sizeof(int32_t) * W);
      if (e.base != nullptr)
        for (auto& [w, bits] : *e.base) out[w] = static_cast<int32_t>(bits);
      for (auto& [w, bits] : e.sparse) out[w] |= static_cast<int32_t>(bits);
    }
  }

  // Walk the trie from s: emit(token, next_state) for every allowed non-EOS token, in byte order.
  template <typename Emit>
  void walk(int32_t s, Emit emit) const {
    if (s <= DEAD) return;
    const Vocab& v = *vocab_;
    const int32_t N = static_cast<int32_t>(v.node_byte_.size());
    thread_local std::vector<int32_t> stack_buffer;
    stack_buffer.resize(static_cast<size_t>(v.max_len_) + 1);
    int32_t* const stack = stack_buffer.data();  // not the thread-local itself: emit() would make each use look it up
    stack[0] = s;
    const uint8_t* nb = v.node_byte_.data();
    const int32_t* nd = v.node_depth_.data();
    const int32_t* ne = v.node_end_.data();
    const int32_t* tp = v.tok_ptr_.data();
    const int32_t* tk = v.tok_.data();
    const int32_t* tr = trans_;
    const uint8_t* cl = classes_;
    const size_t nc = static_cast<size_t>(nc_);
    // the live first bytes from the state's row (a class at a time), then each one's subtree
    Mask live{0, 0, 0, 0};
    const int32_t* row = tr + static_cast<size_t>(s) * nc;
    for (size_t c = 0; c < nc; ++c)
      if (row[c] != DEAD)
        for (int w = 0; w < 4; ++w) live[w] |= class_bits_[c][w];
    for (int w = 0; w < 4; ++w) live[w] &= v.root_bits_[w];
    for_bits(live, [&](int b) {
      int32_t k = v.root_[b];
      const int32_t end = k < N ? ne[k] : k;
      while (k < end) {
        const int32_t d = nd[k];
        const int32_t t = tr[static_cast<size_t>(stack[d - 1]) * nc + cl[nb[k]]];
        if (t == DEAD) {
          k = ne[k];
          continue;
        }
        stack[d] = t;
        for (int32_t j = tp[k]; j < tp[k + 1]; ++j) emit(tk[j], t);
        ++k;
      }
    });
  }

 private:
  int32_t width(int32_t s) const { return width_[s]; }

  // share_alike's classes and the region walks found for them (read by any thread, `found` under its mutex).
  struct Alike {
    int32_t rounds = 0;
    std::vector<int32_t> cls;  // rounds x n: the class of wide state s after d rounds at (d - 1) * n + s (-1: narrow)
    std::vector<uint8_t> settled;  // per class of the last round: no later round would split it
    mutable std::mutex mutex;
    mutable std::unordered_map<int64_t, const Region*> found;  // key(d, class) -> the canonical walk
    static int64_t key(int32_t d, int32_t c) { return (int64_t{d} << 32) | static_cast<uint32_t>(c); }
  };

  // The walk of a state indexed before s that is alike s as far as that walk reads, or null.
  const Region* alike_region(int32_t s) const;
  // Record r (the walk of s's region) for the states alike s as far as r reads.
  void remember_alike(int32_t s, const Region* r) const;
  // The state each exit node of r leads to from s, following the walk's paths: false unless each path stays in
  // wide states up to its last byte, which leads to a live narrow state (what the classes promise).
  bool exits_along(int32_t s, const Region& r, std::vector<int32_t>& at) const;

  // The region of s: (signature, exit states), or false when s is narrow or its region too large to share.
  // The signature is the region's transitions over this automaton's byte classes, its states numbered in
  // breadth-first order from s (code > 0), its exits by order of discovery (code < 0), dead 0. layers[d] is the
  // number of its states at most d bytes from s: the first layers[d] rows of the signature are all a walk that
  // reads at most d bytes inside the region depends on.
  bool region_of(int32_t s, std::vector<int32_t>& sig, std::vector<int32_t>& exits, std::vector<int32_t>& layers) const;

  // The region's shape over bytes (comparable across automata): the vocabulary's cache key. Per region state,
  // its row as runs of bytes with one target (first byte, target code), then 256: the same function of bytes
  // as 256 entries a state, in a tenth of the size, so that a number's region (dozens of digit-count states,
  // ten runs each) is keyed, hashed and compared in a few microseconds.
  std::vector<int32_t> shape_key(const std::vector<int32_t>& sig) const;

  // The walk of a region this index or the vocabulary's cache already holds (now this index's too), or null;
  // `key` gets the region's shape key when the vocabulary's cache was asked (a walk made next is shared by it).
  std::shared_ptr<const Region> cached_region(const std::vector<int32_t>& sig, std::vector<int32_t>& key) const;

  // A walk of this index that reads no byte past the rows sig shares with it: a walk depends on a state's row
  // only once a token has reached that state, so regions that differ only further from their start than the
  // walk went walk alike (the digit-count states of a bounded number, short of the longest digit token).
  std::shared_ptr<const Region> walked_alike(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers) const;

  // The rows of sig a walk reading at most `depth` bytes inside the region depends on (see region_of's layers).
  std::vector<int32_t> rows_within(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers, int32_t depth) const;

  std::shared_ptr<const Region> region_walk(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers) const;

  // A region state's entry: the region's stay tokens, then what its exits add. A region that sets few enough words
  // for its entry to be stored sparse (a number's digit tokens: 529 of llama3's 4,008 words) is built from those
  // words only, so its cost follows its tokens (copying and scanning all 4,008 words took 5 us of a number's first
  // visit); otherwise (a string's contents) copying and scanning every word is faster.
  void region_entry(int32_t s, const Region& r, const std::vector<int32_t>& at, Entry* e) const;

  // Store a mask given as all its words: dense, or (word, bits) pairs when clearly smaller (a pair takes 8 bytes
  // against 4 for a dense word).
  void store_scanned(std::vector<uint32_t> bits, Entry* e) const;

  // store_scanned() for a mask whose tokens and non-zero words are counted already.
  void store_counted(std::vector<uint32_t> bits, int64_t count, int64_t nonzero, Entry* e) const;

  // region_entry() for a region that sets few words: the entry takes the region's stay words as its base, and
  // holds only the words its exits (and EOS) add.
  void sparse_region_entry(int32_t s, const Region& r, const std::vector<int32_t>& at, Entry* e) const;

  // The entry of state s. A region state's follows from its region's walk, the exit states that walk leads to and
  // whether s accepts: states alike in all three share one entry. The digit-count states of a bounded number
  // differ only past the longest digit token, so they mostly do: FuncQA's 885 region states need 422 entries
  // (llama3), which took about 30% off the index time of its compile.
  Entry* compute(int32_t s) const;

  Entry* own(std::unique_ptr<Entry> e) const;

  // The one region of this index with the same walk (stay tokens and exits) as r: regions of different shapes
  // can walk alike over a vocabulary (a digit count longer than every digit token), and their states then share
  // entries through it.
  const Region* canonical(const std::shared_ptr<const Region>& r) const;

  mutable std::mutex owned_mutex_;  // guards the four below
  mutable std::vector<std::unique_ptr<Entry>> owned_;  // every entry computed; entries_ points into them
  mutable std::unordered_map<std::vector<int32_t>, Entry*, SigHash> same_entry_;
  mutable std::unordered_multimap<uint64_t, std::shared_ptr<const Region>> by_content_;
  mutable std::unordered_map<const Region*, const Region*> canonical_of_;
  mutable std::vector<std::shared_ptr<const Region>> kept_;
  mutable std::mutex regions_mutex_;
  mutable std::unordered_map<std::vector<int32_t>, std::shared_ptr<const Region>, SigHash> regions_;
  // walks by the signature rows they depend on (see walked_alike), and the depths those walks reached
  mutable std::unordered_map<std::vector<int32_t>, std::shared_ptr<const Region>, SigHash> by_prefix_;
  mutable std::vector<int32_t> depths_;
  std::vector<int32_t> class_size_, width_;
  std::vector<Mask> class_bits_;  // the bytes of each class

  std::shared_ptr<Vocab> vocab_;
  bool share_ = true;
  int32_t n_ = 0, nc_ = 0;
  std::shared_ptr<const int32_t> trans_owner_;
  const int32_t* trans_ = nullptr;  // trans_owner_'s rows, n_ x nc_
  uint8_t classes_[256];
  std::vector<std::pair<int32_t, int32_t>> class_runs_;  // (first byte, class) of each run of bytes in one class
  std::vector<uint8_t> accepting_;
  std::unique_ptr<std::atomic<Entry*>[]> entries_;
  std::atomic<const Alike*> alike_{nullptr};
  std::unique_ptr<const Alike> alike_owner_;
  std::atomic<int64_t> computed_{0};
  mutable std::atomic<int64_t> walks_{0};
};

}  // namespace tooldec
