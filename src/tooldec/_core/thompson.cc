// The Thompson construction of an NFA from a grammar IR node table (thompson.h), and the parallel compile of a
// table's roots.
#include "thompson.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "thread_pool.h"

namespace tooldec {
namespace {

// Every use of a node builds fresh states. Invariant of build(node, start): it may add edges out of `start`,
// never into it, so alternatives share their entry and every loop gets a fresh state.

class Thompson {
 public:
  Thompson(const IrTable& ir, int64_t max_states)
      : code_(ir.code), ptr_(ir.ptr), n_nodes_(ir.n_nodes), masks_(ir.masks), dfas_(ir.embedded),
        max_states_(max_states) {}

  int32_t new_state() {
    if (n_states_ >= max_states_)
      throw SchemaTooLarge("the automaton would exceed " + std::to_string(max_states_) + " NFA states");
    return static_cast<int32_t>(n_states_++);
  }

  int32_t build(int32_t node, int32_t start) {
    check_signals(tick_);
    if (node < 0 || node >= n_nodes_) throw std::invalid_argument("a child is not a node of the table");
    const int32_t* r = code_ + ptr_[node];
    switch (r[0]) {
      case IR_BYTES: {
        const int32_t end = new_state();
        if (r[1] >= 0) edge(start, r[1], end);
        return end;
      }
      case IR_SEQ: {
        int32_t cur = start;
        for (int32_t i = 0; i < r[1]; ++i) cur = build(r[2 + i], cur);
        if (cur == start) {
          cur = new_state();
          eps(start, cur);
        }
        return cur;
      }
      case IR_ALT: {
        const int32_t end = new_state();
        for (int32_t i = 0; i < r[1]; ++i) {
          const int32_t got = build(r[2 + i], start);
          eps(got, end);
        }
        return end;
      }
      case IR_REPEAT:
        return repeat(r[1], r[2], r[3], r[4], start);
      case IR_FIELDS:
        return fields(r, start);
      case IR_EMBED:
        if (r[1] < 0 || static_cast<size_t>(r[1]) >= dfas_.size()) throw std::invalid_argument("no such embedded DFA");
        return embed(dfas_[static_cast<size_t>(r[1])], start);
      default:
        throw std::invalid_argument("not a grammar node code: " + std::to_string(r[0]));
    }
  }

  // The NFA as CSR arrays (each state's edges in the order they were added), then subset construction.
  Dfa determinize(int32_t start, int32_t accept, int64_t max_dfa_states) {
    const size_t n = static_cast<size_t>(n_states_);
    std::vector<int64_t> ep(n + 1, 0), xp(n + 1, 0);
    for (const auto& e : edges_) ++ep[e[0] + 1];
    for (const auto& x : eps_) ++xp[x.first + 1];
    for (size_t s = 0; s < n; ++s) {
      ep[s + 1] += ep[s];
      xp[s + 1] += xp[s];
    }
    std::vector<int32_t> em(edges_.size()), et(edges_.size()), xt(eps_.size());
    std::vector<int64_t> at(ep.begin(), ep.end() - 1);
    for (const auto& e : edges_) {
      em[at[e[0]]] = e[1];
      et[at[e[0]]++] = e[2];
    }
    at.assign(xp.begin(), xp.end() - 1);
    for (const auto& x : eps_) xt[at[x.first]++] = x.second;
    return subset(static_cast<int32_t>(n), ep.data(), em.data(), et.data(), masks_, xp.data(), xt.data(), start,
                  accept, max_dfa_states);
  }

 private:
  int32_t repeat(int32_t item, int32_t lo, int32_t hi, int32_t sep, int32_t start) {
    int32_t cur = start;
    for (int32_t i = 0; i < lo; ++i) {
      if (i && sep >= 0) cur = build(sep, cur);
      cur = build(item, cur);
    }
    if (hi < 0) {
      const int32_t loop = new_state();
      eps(cur, loop);
      if (lo == 0 && sep >= 0) {  // zero items, or item (sep item)*, with one copy of item
        const int32_t end = new_state();
        eps(loop, end);
        const int32_t entry = new_state();
        eps(loop, entry);
        const int32_t after = build(item, entry);
        eps(after, end);
        const int32_t back = build(sep, after);
        eps(back, entry);
        return end;
      }
      const int32_t body = sep >= 0 ? build(sep, loop) : loop;
      const int32_t again = build(item, body);
      eps(again, loop);
      return loop;
    }
    if (hi < lo) throw std::invalid_argument("repeat bounds " + std::to_string(lo) + ".." + std::to_string(hi));
    const int32_t end = new_state();
    eps(cur, end);
    for (int32_t i = lo; i < hi; ++i) {
      if (i && sep >= 0) cur = build(sep, cur);
      cur = build(item, cur);
      eps(cur, end);
    }
    return end;
  }

  int32_t fields(const int32_t* r, int32_t start) {
    const int32_t sep = r[1], k = r[2];
    int32_t first = start;  // nothing emitted yet (-1: no longer possible)
    int32_t more = -1;      // at least one field emitted (-1: not yet possible)
    for (int32_t i = 0; i < k; ++i) {
      const int32_t item = r[3 + 2 * i];
      const bool required = r[4 + 2 * i] != 0;
      const int32_t entry = new_state();
      if (first >= 0) eps(first, entry);
      if (more >= 0) {
        const int32_t after_sep = build(sep, more);
        eps(after_sep, entry);
      }
      const int32_t after = build(item, entry);
      const int32_t next_more = new_state();
      eps(after, next_more);
      if (!required && more >= 0) eps(more, next_more);
      if (!required && first >= 0) {
        const int32_t next_first = new_state();
        eps(first, next_first);
        first = next_first;
      } else {
        first = -1;
      }
      more = next_more;
    }
    const int32_t end = new_state();
    if (first >= 0) eps(first, end);
    if (more >= 0) eps(more, end);
    return end;
  }

  int32_t mask_id(const Mask& m) {
    if (mask_ids_.empty())  // made on the first embedded DFA: most tables embed none
      for (size_t i = 0; i < masks_.size(); ++i) mask_ids_.emplace(masks_[i], static_cast<int32_t>(i));
    auto it = mask_ids_.find(m);
    if (it != mask_ids_.end()) return it->second;
    masks_.push_back(m);
    return mask_ids_.emplace(m, static_cast<int32_t>(masks_.size() - 1)).first->second;
  }

  // A DFA copied in as a fragment entered from `start`.
  int32_t embed(const DfaView& dfa, int32_t start) {
    const int32_t dstart = dfa.start;
    const int32_t end = new_state();
    if (dstart == DEAD) return end;
    const int32_t n = dfa.n, nc = dfa.nc;
    std::vector<Mask> class_mask(nc, Mask{0, 0, 0, 0});
    for (int b = 0; b < 256; ++b) class_mask[dfa.classes[b]][b >> 6] |= 1ULL << (b & 63);
    std::vector<int32_t> states(n, 0);
    for (int32_t s = 1; s < n; ++s) states[s] = new_state();
    eps(start, states[dstart]);
    std::vector<std::pair<int32_t, Mask>> by_target;
    for (int32_t s = 1; s < n; ++s) {
      by_target.clear();
      const int32_t* row = dfa.trans + static_cast<size_t>(s) * nc;
      for (int32_t c = 0; c < nc; ++c) {
        if (row[c] == DEAD) continue;
        auto it = std::find_if(by_target.begin(), by_target.end(), [&](auto& p) { return p.first == row[c]; });
        if (it == by_target.end()) {
          by_target.emplace_back(row[c], class_mask[c]);
        } else {
          for (int w = 0; w < 4; ++w) it->second[w] |= class_mask[c][w];
        }
      }
      for (auto& [t, m] : by_target) edge(states[s], mask_id(m), states[t]);
      if (dfa.accepting[s]) eps(states[s], end);
    }
    return end;
  }

  const int32_t* code_;
  const int64_t* ptr_;
  int64_t n_nodes_;
  std::vector<Mask> masks_;
  std::unordered_map<Mask, int32_t, MaskHash> mask_ids_;
  const std::vector<DfaView>& dfas_;
  int64_t max_states_;
  size_t tick_ = 0;
  int64_t n_states_ = 0;
  std::vector<std::array<int32_t, 3>> edges_;        // (from, mask id, to), in the order added
  std::vector<std::pair<int32_t, int32_t>> eps_;     // (from, to), in the order added

  void edge(int32_t from, int32_t mask, int32_t to) { edges_.push_back({from, mask, to}); }
  void eps(int32_t from, int32_t to) { eps_.emplace_back(from, to); }
};

}  // namespace

int root_threads(int threads, int64_t roots) {
  return std::max(1, std::min<int>(threads, static_cast<int>(roots / 8)));
}

std::vector<RootDfa> compile_roots(const IrTable& ir, const std::vector<int32_t>& roots, int64_t max_nfa_states,
                                   int64_t max_dfa_states, int threads) {
  std::vector<RootDfa> out(roots.size());
  auto build = [&](int64_t i) {
    try {
      Thompson t(ir, max_nfa_states);
      const int32_t start = t.new_state();
      const int32_t accept = t.build(roots[static_cast<size_t>(i)], start);
      out[static_cast<size_t>(i)].dfa = t.determinize(start, accept, max_dfa_states);
    } catch (const SchemaTooLarge& e) {
      out[static_cast<size_t>(i)].too_large = e.what();
    }
  };
  parallel_for(0, static_cast<int64_t>(roots.size()), 1, threads, build);
  return out;
}

}  // namespace tooldec
