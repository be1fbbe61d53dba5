// Shared by every part of tooldec's compiled core: the DFA state constants, the size limits, byte masks and the
// hashes of state lists, and the signal check of long builds.
//
// The core, in one paragraph: a grammar IR becomes an NFA (thompson.cc) and then a DFA (subset.cc), DFAs combine
// (product.cc, union.cc) and shrink (minimize.cc); the vocabulary's tokens form a preorder trie (vocab.h), and
// the token index (index.h) walks that trie per DFA state to get a packed bitmask of the allowed tokens; the
// batch kernels (batch.h) fill and apply those masks for many rows. bindings.cc is the only door from Python,
// and it checks every argument before any of this runs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
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
// A region state whose exits add more mask words than this is stored from a scan of every word, not a merge.
constexpr size_t SORTED_EXIT_WORDS = 64;
// Region walks a vocabulary keeps for later compiles (each holds a packed mask and its exit nodes).
constexpr size_t REGION_CACHE_SIZE = 256;

// Bounds the bindings enforce, so that no argument can overflow an index or the stack.
// Tokens in a vocabulary: ids and mask words stay far inside int32 (the largest tokenizers hold ~256k).
constexpr int64_t MAX_VOCAB_SIZE = int64_t{1} << 24;
// Nesting of a grammar IR: the Thompson construction recurses once per level, and a thread's stack must hold it
// under AddressSanitizer too (5,000 levels overflowed 8 MB there). The Python side builds the table recursively,
// within Python's recursion limit (1,000), so real grammars stay below this.
constexpr int32_t MAX_IR_DEPTH = 1500;
// Threads one call may start.
constexpr int MAX_THREADS = 256;

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

// FNV-1a over a list of int32 (state sets, region signatures and shape keys).
struct SigHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
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
