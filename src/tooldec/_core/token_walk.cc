// One JSON token's walk through a rule's DFA (the pushdown path's cut, tooldec/automaton/value_grammar.py): a
// breadth-first search over (DFA state, token mode) pairs from a boundary, recording each step and where the
// token may end.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "dfa.h"

namespace tooldec {

TokenWalk token_walk(const TokenWalkInput& in) {
  TokenWalk out;
  std::vector<int32_t> state{in.origin};
  std::vector<int32_t> mode{in.start_mode};
  std::unordered_map<int64_t, int64_t> ids;  // state * MAX_TOKEN_MODES + mode -> product state; 0 has no key
  std::unordered_map<int32_t, size_t> landing_of;
  auto stop = [&](int32_t landing, int64_t at, int64_t cls) {
    auto [it, fresh] = landing_of.emplace(landing, out.landings.size());
    if (fresh) {
      out.landings.push_back(landing);
      out.stops.emplace_back();
    }
    out.stops[it->second].emplace_back(at, cls);
  };
  size_t tick = 0;
  for (int64_t f = 0; f < static_cast<int64_t>(state.size()); ++f) {
    check_signals(tick);
    const int32_t s = state[static_cast<size_t>(f)], m = mode[static_cast<size_t>(f)];
    const int32_t* row = in.trans + static_cast<size_t>(s) * in.nc;
    const int64_t* next_mode = in.modes + static_cast<size_t>(m) * in.k;
    for (int32_t c = 0; c < in.k; ++c) {
      const int32_t t = row[in.columns[c]];
      if (t == DEAD) continue;
      if (t < 0 || t >= in.n) throw std::invalid_argument("a transition leads outside the automaton");
      const int64_t nm = next_mode[c];
      if (nm == TOKEN_CLOSES) {
        stop(t, f, c);
      } else if (nm >= 0) {
        const int64_t key = int64_t{t} * MAX_TOKEN_MODES + nm;
        auto [it, fresh] = ids.emplace(key, static_cast<int64_t>(state.size()));
        if (fresh) {
          if (static_cast<int64_t>(state.size()) >= in.max_states)
            throw SchemaTooLarge("a token's walk passes " + std::to_string(in.max_states) + " states");
          state.push_back(t);
          mode.push_back(static_cast<int32_t>(nm));
        }
        out.src.push_back(f);
        out.cls.push_back(c);
        out.dst.push_back(it->second);
      }
    }
    if (in.word_ends != nullptr && f != 0 && in.word_ends[s]) stop(s, f, -1);
  }
  out.size = static_cast<int64_t>(state.size());
  // per landing, the product states that lead to it: a search backwards over the steps from its stops
  const size_t size = state.size(), steps = out.src.size();
  std::vector<int64_t> rptr(size + 1, 0), rsrc(steps);
  for (size_t e = 0; e < steps; ++e) ++rptr[static_cast<size_t>(out.dst[e]) + 1];
  for (size_t i = 0; i < size; ++i) rptr[i + 1] += rptr[i];
  {
    std::vector<int64_t> fill(rptr.begin(), rptr.end() - 1);
    for (size_t e = 0; e < steps; ++e) rsrc[static_cast<size_t>(fill[static_cast<size_t>(out.dst[e])]++)] = out.src[e];
  }
  std::vector<int64_t> mark(size, -1), stack;
  out.members.resize(out.landings.size());
  for (size_t i = 0; i < out.landings.size(); ++i) {
    auto& members = out.members[i];
    for (const auto& [at, cls] : out.stops[i]) {
      (void)cls;
      if (mark[static_cast<size_t>(at)] != static_cast<int64_t>(i)) {
        mark[static_cast<size_t>(at)] = static_cast<int64_t>(i);
        stack.push_back(at);
      }
    }
    while (!stack.empty()) {
      const int64_t t = stack.back();
      stack.pop_back();
      members.push_back(t);
      for (int64_t j = rptr[static_cast<size_t>(t)]; j < rptr[static_cast<size_t>(t) + 1]; ++j) {
        const int64_t p = rsrc[static_cast<size_t>(j)];
        if (mark[static_cast<size_t>(p)] != static_cast<int64_t>(i)) {
          mark[static_cast<size_t>(p)] = static_cast<int64_t>(i);
          stack.push_back(p);
        }
      }
    }
    std::sort(members.begin(), members.end());
  }
  return out;
}

}  // namespace tooldec
