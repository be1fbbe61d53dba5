// DFAs as the core builds and reads them: a table of targets per byte class, state 0 dead, plus the
// constructions that make them (subset.cc, product.cc, union.cc, minimize.cc; thompson.h makes NFAs).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common.h"

namespace tooldec {

// A DFA the core built: n states x nc classes of targets, classes[b] the class of byte b.
struct Dfa {
  std::vector<int32_t> trans;  // n * nc
  std::vector<uint8_t> classes;
  std::vector<uint8_t> accepting;
  int32_t n = 0, nc = 0, start = 0;
};

// A DFA held by Python (arrays the bindings checked: every target and class in range, start < n, n >= 1), read
// in place; the arrays outlive the call that reads them.
struct DfaView {
  const int32_t* trans;
  const uint8_t* classes;
  const bool* accepting;
  int32_t start, n, nc;
};

// A DFA from rows given as a table of targets per class (-1: none), `cls[b]` the class of byte b: prunes the
// states that cannot reach acceptance, renumbers (dead 0, start 1), and merges the classes into the coarsest
// byte classes the kept rows need (bytes share one when every kept row sends them to the same kept state).
Dfa finish_table(const std::vector<int32_t>& table, int32_t nc, const std::vector<int32_t>& cls,
                 const std::vector<uint8_t>& accepting);

// Byte classes of a set of masks (partition refinement: each mask splits the classes of its bytes), numbered by
// first byte with no number left unused: (cls, nc), cls[b] the class of byte b. Masks whose `keep` entry is 0 (when
// `keep` is given) are left out.
std::pair<std::vector<int32_t>, int32_t> byte_classes(const std::vector<Mask>& masks,
                                                      const std::vector<uint8_t>* keep = nullptr);

// The DFA of a sequence of byte sets (one byte from each of `masks`, in order): the arrays subset construction
// and finish_table make of the same sequence written as IR, without the NFA (a Lark literal, a GBNF character).
Dfa chain_dfa(const std::vector<Mask>& masks);

// Subset construction of an NFA given as CSR arrays: n states, byte edges ep/em/et (mask id, target), epsilon
// edges xp/xt; throws SchemaTooLarge past max_states.
Dfa subset(int32_t n, const int64_t* ep, const int32_t* em, const int32_t* et, const std::vector<Mask>& mask_list,
           const int64_t* xp, const int32_t* xt, int32_t start, int32_t accept, int64_t max_states);

// Intersection of two DFAs, or the difference a \ b, pruned; throws SchemaTooLarge past max_states.
Dfa product(const DfaView& a, const DfaView& b, bool difference, int64_t max_states);

// Union of one or more DFAs, the first keeping its state numbers; throws SchemaTooLarge past max_states.
Dfa union_dfas(const std::vector<DfaView>& ds, int64_t max_states);

// The minimal DFA of a pruned one (Hopcroft): dead state 0, start 1, breadth-first order.
Dfa minimize(const DfaView& dfa);

// Token modes a walk may have (a string's: in, after a backslash, four \u digits), and the mode table's mark of
// a byte that closes the token.
constexpr int64_t MAX_TOKEN_MODES = 8;
constexpr int64_t TOKEN_CLOSES = -2;

// One token's walk from a boundary state of a DFA (n x nc targets): `columns[c]` is the DFA class of the walk's
// class c (k of them), `modes[m * k + c]` the mode after a byte of class c in mode m (TOKEN_CLOSES: it closes the
// token; any other negative value: not the token's byte), `word_ends` (n, or null) the states a word may end in
// after at least one byte. Checked by the bindings, except the targets, which are checked as they are read.
struct TokenWalkInput {
  const int32_t* trans;
  int32_t n, nc;
  const int32_t* columns;
  int32_t k;
  const int64_t* modes;
  int32_t n_modes;
  int32_t origin, start_mode;
  const uint8_t* word_ends;
  int64_t max_states;
};

// The walk as product states numbered breadth first from the start (0), each step (src, cls, dst), and per
// landing state (in the order first met) the (product state, class) pairs that close the token there (class -1:
// the token may stop in that product state) and the product states that lead to those, ascending. Throws
// SchemaTooLarge past max_states product states.
struct TokenWalk {
  int64_t size = 0;
  std::vector<int64_t> src, cls, dst;
  std::vector<int32_t> landings;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> stops;
  std::vector<std::vector<int64_t>> members;
};

TokenWalk token_walk(const TokenWalkInput& in);

}  // namespace tooldec
