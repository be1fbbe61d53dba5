// Products of two DFAs (intersection, difference) by breadth-first search over state pairs.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dfa.h"

namespace tooldec {

// Product of two DFAs (intersection, or difference a \ b), by breadth-first search over state pairs.
Dfa product(const DfaView& a, const DfaView& b, bool difference, int64_t max_states) {
  const int32_t anc = a.nc, bnc = b.nc, a_start = a.start, b_start = b.start;
  const int32_t* at = a.trans;
  const int32_t* bt = b.trans;
  const bool* aa = a.accepting;
  const bool* ba = b.accepting;
  const uint8_t* a_classes = a.classes;
  const uint8_t* b_classes = b.classes;
  // joint classes: bytes in the same class of both automata, numbered by first byte
  std::vector<std::pair<int32_t, int32_t>> joint;
  std::vector<int32_t> cls(256);
  {
    std::vector<int32_t> seen(static_cast<size_t>(anc) * bnc, -1);
    for (int b = 0; b < 256; ++b) {
      int32_t& got = seen[static_cast<size_t>(a_classes[b]) * bnc + b_classes[b]];
      if (got < 0) {
        got = static_cast<int32_t>(joint.size());
        joint.emplace_back(a_classes[b], b_classes[b]);
      }
      cls[b] = got;
    }
  }
  const int32_t J = static_cast<int32_t>(joint.size());
  std::unordered_map<int64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> order{{DEAD, DEAD}, {a_start, b_start}};
  ids.emplace(static_cast<int64_t>(a_start) << 32 | static_cast<uint32_t>(b_start), 1);
  std::vector<int32_t> table(2 * static_cast<size_t>(J), -1);  // per state, the target per joint class (-1 none)
  std::vector<uint8_t> accepting{0};
  size_t tick = 0;
  for (size_t i = 1; i < order.size(); ++i) {
    check_signals(tick);
    auto [sa, sb] = order[i];
    accepting.push_back(aa[sa] && (difference ? !ba[sb] : ba[sb]));
    if (sa == DEAD || (sb == DEAD && !difference)) continue;
    for (int32_t j = 0; j < J; ++j) {
      const int32_t ta = at[static_cast<size_t>(sa) * anc + joint[j].first];
      const int32_t tb = bt[static_cast<size_t>(sb) * bnc + joint[j].second];
      if (ta == DEAD || (tb == DEAD && !difference)) continue;
      const int64_t key = static_cast<int64_t>(ta) << 32 | static_cast<uint32_t>(tb);
      auto it = ids.find(key);
      int32_t tid;
      if (it == ids.end()) {
        tid = static_cast<int32_t>(order.size());
        if (tid >= max_states) throw SchemaTooLarge("the automaton would exceed " + std::to_string(max_states) + " DFA states");
        ids.emplace(key, tid);
        order.emplace_back(ta, tb);
        table.resize(table.size() + J, -1);
      } else {
        tid = it->second;
      }
      table[i * J + j] = tid;
    }
  }
  return finish_table(table, J, cls, accepting);
}

}  // namespace tooldec
