// Shared by every part of tooldec's compiled core: the DFA state constants, the size limits, byte masks and the
// hashes of state lists, and the signal check of long builds.
//
// The core, in one paragraph: a grammar IR becomes an NFA (thompson.cc) and then a DFA (subset.cc), DFAs combine
// (product.cc, union.cc) and shrink (minimize.cc); the vocabulary's tokens form a preorder trie (vocab.h), and
// the token index (index.h) walks that trie per DFA state to get a packed bitmask of the allowed tokens; the
// batch kernels (batch.h) fill and apply those masks for many rows. bindings.cc is the only door from Python,
// and it checks every argument before any of this runs.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace tooldec {

constexpr int32_t DEAD = 0;
constexpr int32_t FINAL = -1;
// A state with more live bytes than this is wide: its tokens are found through its region (see Region).
// Below it, the plain walk prunes at the first byte and costs a few microseconds.
constexpr int32_t NARROW = 4;
// Regions with more states are not shared (their signature would cost more than it saves).
constexpr int32_t MAX_REGION_STATES = 128;
// compute_regions walks ahead only the regions entered from a state with at least this many live bytes (a
// string's contents); from narrower states (digits, escapes, inside a UTF-8 character) the walk stops at the
// first byte for most of the vocabulary and is cheap on first visit (under 200 us at 128k tokens).
constexpr int32_t EXPENSIVE_WIDTH = 128;
// Region walks a vocabulary keeps for later compiles (each holds a packed mask and its exit nodes).
constexpr size_t REGION_CACHE_SIZE = 256;
// Lexeme walks a vocabulary keeps for later context-free grammars (each a packed mask and its exit nodes), and
// the most lexer states a shared walk's shape may reach (larger shapes are walked per grammar).
constexpr size_t LEXEME_WALK_CACHE_SIZE = 256;
constexpr size_t MAX_SHARED_LEXEME_STATES = 256;

// Bounds the bindings enforce, so that no argument can overflow an index or the stack.
// Tokens in a vocabulary: ids and mask words stay far inside int32 (the largest tokenizers hold ~256k).
constexpr int64_t MAX_VOCAB_SIZE = int64_t{1} << 24;
// Nesting of a grammar IR: the Thompson construction recurses once per level, and a thread's stack must hold it
// under AddressSanitizer too (5,000 levels overflowed 8 MB there). The Python side builds the table recursively,
// within Python's recursion limit (1,000), so real grammars stay below this.
constexpr int32_t MAX_IR_DEPTH = 1500;
// Threads one call may start.
constexpr int MAX_THREADS = 256;
// Bytes ahead Index::share_alike may compare states over (its table holds a class per state and round).
constexpr int64_t MAX_ALIKE_ROUNDS = 64;

// An automaton past its bounds (states); reaches Python as AutomatonTooLarge, a ValueError.
struct SchemaTooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A set of bytes, 4 x 64 bits (bit b of word b / 64).
using Mask = std::array<uint64_t, 4>;

struct MaskHash {
  size_t operator()(const Mask& m) const {
    uint64_t h = m[0] * 0x9E3779B97F4A7C15ULL;
    h ^= m[1] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= m[2] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= m[3] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

inline bool mask_has(const Mask& m, int b) { return (m[b >> 6] >> (b & 63)) & 1; }

// Calls f(b) for each byte b in m, in increasing order.
template <class F>
inline void for_bits(const Mask& m, F&& f) {
  for (int w = 0; w < 4; ++w)
    for (uint64_t x = m[w]; x != 0; x &= x - 1) f(w * 64 + __builtin_ctzll(x));
}

// A hash of a list of int32 (state sets, region signatures and shape keys): FNV-1a steps over four interleaved
// lanes, then a final mix. One chain of multiplies waits on the last (a region's signature of 1,000 entries took
// 1.7 us to hash, twice per first visit of a number's state); four independent chains run at once.
struct SigHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    constexpr uint64_t P = 1099511628211ULL;
    uint64_t a = 1469598103934665603ULL, b = a ^ 1, c = a ^ 2, d = a ^ 3;
    const int32_t* p = v.data();
    const size_t n = v.size();
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
      a = (a ^ static_cast<uint32_t>(p[i])) * P;
      b = (b ^ static_cast<uint32_t>(p[i + 1])) * P;
      c = (c ^ static_cast<uint32_t>(p[i + 2])) * P;
      d = (d ^ static_cast<uint32_t>(p[i + 3])) * P;
    }
    for (; i < n; ++i) a = (a ^ static_cast<uint32_t>(p[i])) * P;
    uint64_t h = a ^ (b << 16 | b >> 48) ^ (c << 32 | c >> 32) ^ (d << 48 | d >> 16) ^ n;
    h ^= h >> 33;  // murmur3's finalizer: every input bit reaches the low bits a bucket index reads
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 33;
    return static_cast<size_t>(h);
  }
};

// A 64-bit key spread over its low bits (murmur3's finalizer, one round): the open-addressing tables of the
// context-free parser and matcher index by it.
inline size_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  return static_cast<size_t>(x ^ (x >> 33));
}

// An append-only sequence kept in fixed blocks of 2^SHIFT elements: an element never moves once added, and
// growing never copies what is there (a vector's doubling copy of thousands of entries showed as one slow step
// in the parser's tables).
template <class T, int SHIFT = 10>
class BlockVector {
 public:
  BlockVector() = default;
  BlockVector(BlockVector&&) noexcept = default;
  BlockVector& operator=(BlockVector&&) noexcept = default;
  BlockVector(const BlockVector& o) : n_(o.n_) {
    for (size_t b = 0; b < o.blocks_.size(); ++b) {
      blocks_.push_back(std::make_unique<T[]>(size_t{1} << SHIFT));
      std::copy(o.blocks_[b].get(), o.blocks_[b].get() + (size_t{1} << SHIFT), blocks_[b].get());
    }
  }
  BlockVector& operator=(const BlockVector& o) {
    if (this != &o) *this = BlockVector(o);
    return *this;
  }
  int64_t size() const { return n_; }
  T& operator[](int64_t i) { return blocks_[static_cast<size_t>(i >> SHIFT)][i & MASK]; }
  const T& operator[](int64_t i) const { return blocks_[static_cast<size_t>(i >> SHIFT)][i & MASK]; }
  // Adds x at the end; its index.
  int64_t push_back(const T& x) {
    if (static_cast<size_t>(n_ >> SHIFT) == blocks_.size()) blocks_.push_back(std::make_unique<T[]>(size_t{1} << SHIFT));
    (*this)[n_] = x;
    return n_++;
  }
  // Empty again; the blocks are kept for what comes next.
  void clear() { n_ = 0; }

 private:
  static constexpr int64_t MASK = (int64_t{1} << SHIFT) - 1;
  std::vector<std::unique_ptr<T[]>> blocks_;
  int64_t n_ = 0;
};

// Set bits of a word, inline: without -mpopcnt (not in baseline x86-64) __builtin_popcount is a libgcc call, and a
// dense mask counts 4,000 words.
inline int popcount32(uint32_t x) {
  x = x - ((x >> 1) & 0x55555555u);
  x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
  return static_cast<int>((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
}

// Whether this thread holds the GIL through a long build, so that a pending signal (a time limit) can stop it.
// parallel_for clears it on its threads, which run without the GIL.
inline thread_local bool t_check_signals = true;

// Python's signal check (PyErr_CheckSignals: runs pending handlers, nonzero when one raised), set by the bindings
// when the module loads; the core itself never includes Python's or pybind11's headers.
inline int (*python_signals)() = nullptr;

// A Python signal handler raised (KeyboardInterrupt, a time limit): its exception is already set in the
// interpreter, and the bindings hand it on to the caller.
struct SignalRaised {};

// Every 1024th call, run pending Python signal handlers and stop with SignalRaised if one raised.
inline void check_signals(size_t& tick) {
  if ((++tick & 1023) == 0 && t_check_signals && python_signals != nullptr && python_signals() != 0)
    throw SignalRaised{};
}

}  // namespace tooldec
