// Grammar IR to DFAs: the Thompson construction of an NFA per root of a node table, then subset construction.
//
// The grammar IR arrives as a table of nodes, children before parents, each a record in `code` from `ptr[i]` to
// `ptr[i + 1]`:
//   0 BYTES mask            (mask: a row of `masks`, or -1 for the empty set)
//   1 SEQ k child...        2 ALT k child...
//   3 REPEAT item min max sep            (max -1: unbounded; sep -1: none)
//   4 FIELDS sep k (child required)...   (an ordered subsequence holding every required child, sep between)
//   5 EMBED d               (DFA d of the list: a product the Python layer built)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dfa.h"

namespace tooldec {

enum IrCode : int32_t { IR_BYTES = 0, IR_SEQ = 1, IR_ALT = 2, IR_REPEAT = 3, IR_FIELDS = 4, IR_EMBED = 5 };

// A node table the bindings checked: every record complete, every child an earlier node, every mask and
// embedded DFA in range, nesting at most MAX_IR_DEPTH. Its arrays outlive the compile.
struct IrTable {
  const int32_t* code;
  const int64_t* ptr;
  int64_t n_nodes;
  std::vector<Mask> masks;
  std::vector<DfaView> embedded;
};

// One root's result: its pruned DFA, or (too_large not empty) why its automaton went past the bounds.
struct RootDfa {
  Dfa dfa;
  std::string too_large;
};

// The threads compile_roots should use for `roots` roots when up to `threads` are allowed: one for 8 roots at least.
int root_threads(int threads, int64_t roots);

// The DFA of each root, on `threads` threads (root_threads'); with more than one the caller must have released the
// GIL (a signal is then seen only when all are done).
std::vector<RootDfa> compile_roots(const IrTable& ir, const std::vector<int32_t>& roots, int64_t max_nfa_states,
                                   int64_t max_dfa_states, int threads);

}  // namespace tooldec
