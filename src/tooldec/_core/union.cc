// Union of several DFAs (one per tool) by subset construction over sets of (automaton, state) pairs.
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "dfa.h"

namespace tooldec {

// Union of several pruned DFAs (one per tool): subset construction over sets of (automaton, state) pairs. The
// sets are large only while the automata share a prefix (the call's opening, the tool names' common prefixes);
// after that they are single pairs, whose rows are the automaton's own, renumbered. Every set holds live states
// only, so the union needs no pruning; its byte classes are the automata's classes refined together. The first
// automaton keeps its state numbers, and its rows are copied whole where the joint classes are its own: adding a
// tool to a cached tool set's automaton (given first) copies that table instead of renumbering it entry by entry
// (its states on the shared prefix stay, unreachable, in the table).
Dfa union_dfas(const std::vector<DfaView>& dfas, int64_t max_states) {
  struct D {
    const int32_t* trans;
    const uint8_t* classes;
    const bool* acc;
    int32_t start, nc;
    int64_t base;  // this automaton's first slot in `single_id`
  };
  std::vector<D> ds;
  int64_t total = 0;
  for (const DfaView& v : dfas) {
    ds.push_back(D{v.trans, v.classes, v.accepting, v.start, v.nc, total});
    total += v.n;
  }
  const size_t K = ds.size();
  // joint byte classes: bytes share one when every automaton puts them in the same class
  std::vector<int32_t> cls(256, 0);
  int32_t nc = 1;
  {
    std::vector<int32_t> remap(256 * 256), stamp(256 * 256, -1);
    for (size_t i = 0; i < K; ++i) {
      int32_t next = 0;
      const int32_t stamp_i = static_cast<int32_t>(i);
      for (int b = 0; b < 256; ++b) {
        const size_t k = static_cast<size_t>(cls[b]) * 256 + ds[i].classes[b];
        if (stamp[k] != stamp_i) {
          stamp[k] = stamp_i;
          remap[k] = next++;
        }
        cls[b] = remap[k];
      }
      nc = next;
    }
  }
  // renumber joint classes by first byte, and list each automaton's classes as joint ones (flat, per automaton)
  std::vector<int32_t> order_cls(nc, -1);
  int32_t k = 0;
  for (int b = 0; b < 256; ++b)
    if (order_cls[cls[b]] < 0) order_cls[cls[b]] = k++;
  for (int b = 0; b < 256; ++b) cls[b] = order_cls[cls[b]];
  std::vector<int> rep(nc, -1);
  for (int b = 0; b < 256; ++b)
    if (rep[cls[b]] < 0) rep[cls[b]] = b;
  std::vector<int64_t> joint_at(K + 1, 0);  // automaton i's nc + 1 offsets start at joint_off[joint_at[i]]
  for (size_t i = 0; i < K; ++i) joint_at[i + 1] = joint_at[i] + ds[i].nc + 1;
  std::vector<int32_t> joint_off(static_cast<size_t>(joint_at[K]), 0), joint(K * static_cast<size_t>(nc));
  for (size_t i = 0; i < K; ++i) {
    int32_t* off = joint_off.data() + joint_at[i];
    for (int c = 0; c < nc; ++c) ++off[ds[i].classes[rep[c]] + 1];
    for (int32_t c = 0; c < ds[i].nc; ++c) off[c + 1] += off[c];
    for (int32_t c = 0; c <= ds[i].nc; ++c) off[c] += static_cast<int32_t>(i * nc);
    std::vector<int32_t> at(off, off + ds[i].nc);
    for (int c = 0; c < nc; ++c) joint[at[ds[i].classes[rep[c]]]++] = c;
  }
  // states: a single (automaton, state) pair, found through `single_id`, or a set of them (the shared prefix)
  using Key = std::vector<int64_t>;
  struct KeyHash {
    size_t operator()(const Key& v) const {
      uint64_t h = 1469598103934665603ULL;
      for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ULL;
      return static_cast<size_t>(h);
    }
  };
  std::unordered_map<Key, int32_t, KeyHash> ids;
  std::vector<Key> sets;
  std::vector<int64_t> pair_of(1, -1);   // per state: its pair, or -1 for a set (sets[set_of[state]])
  std::vector<int32_t> set_of(1, -1);
  std::vector<int32_t> single_id(static_cast<size_t>(total), -1);
  std::vector<uint8_t> accepting{0};
  auto new_id = [&]() -> int32_t {
    const int32_t id = static_cast<int32_t>(pair_of.size());
    if (id >= max_states) throw SchemaTooLarge("the automaton would exceed " + std::to_string(max_states) + " DFA states");
    return id;
  };
  auto single = [&](size_t i, int32_t s) -> int32_t {
    int32_t& got = single_id[static_cast<size_t>(ds[i].base) + s];
    if (got < 0) {
      got = new_id();
      pair_of.push_back(static_cast<int64_t>(i) << 32 | static_cast<uint32_t>(s));
      set_of.push_back(-1);
      accepting.push_back(ds[i].acc[s] ? 1 : 0);
    }
    return got;
  };
  auto intern = [&](const Key& key) -> int32_t {
    if (key.size() == 1) return single(static_cast<size_t>(key[0] >> 32), static_cast<int32_t>(key[0] & 0xFFFFFFFF));
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    const int32_t id = new_id();
    bool acc = false;
    for (int64_t x : key) acc = acc || ds[static_cast<size_t>(x >> 32)].acc[static_cast<int32_t>(x & 0xFFFFFFFF)];
    pair_of.push_back(-1);
    set_of.push_back(static_cast<int32_t>(sets.size()));
    accepting.push_back(acc);
    sets.push_back(key);
    ids.emplace(key, id);
    return id;
  };
  pair_of.reserve(static_cast<size_t>(total) + 2);
  set_of.reserve(static_cast<size_t>(total) + 2);
  accepting.reserve(static_cast<size_t>(total) + 2);
  const D& first = ds[0];
  const int32_t first_n = dfas[0].n;
  if (first_n >= max_states) throw SchemaTooLarge("the automaton would exceed " + std::to_string(max_states) + " DFA states");
  for (int32_t s = 1; s < first_n; ++s) {  // the first automaton's states keep their numbers (DEAD is 0 in both)
    single_id[static_cast<size_t>(s)] = s;
    pair_of.push_back(static_cast<uint32_t>(s));
    set_of.push_back(-1);
    accepting.push_back(first.acc[s] ? 1 : 0);
  }
  bool first_classes = first.nc == nc;  // the joint classes are the first automaton's own: rows copy whole
  for (int b = 0; b < 256 && first_classes; ++b) first_classes = first.classes[b] == cls[b];
  Key start;
  for (size_t i = 0; i < K; ++i)
    if (ds[i].start != DEAD) start.push_back(static_cast<int64_t>(i) << 32 | static_cast<uint32_t>(ds[i].start));
  const int32_t start_id = start.empty() ? DEAD : intern(start);
  std::vector<int32_t> trans((static_cast<size_t>(total) + 2) * nc, DEAD);
  auto row_of = [&](size_t n) -> int32_t* {
    if (trans.size() < (n + 1) * nc) trans.resize(std::max(trans.size() * 2, (n + 1) * nc), DEAD);
    return trans.data() + n * nc;
  };
  Key next;
  size_t tick = 0;
  for (size_t n = 1; n < pair_of.size(); ++n) {
    check_signals(tick);
    if (pair_of[n] >= 0) {  // one automaton left: its own row, renumbered
      const size_t i = static_cast<size_t>(pair_of[n] >> 32);
      const D& d = ds[i];
      const int32_t s = static_cast<int32_t>(pair_of[n] & 0xFFFFFFFF);
      if (i == 0 && first_classes) {
        std::memcpy(row_of(n), d.trans + static_cast<size_t>(s) * nc, sizeof(int32_t) * nc);
        continue;
      }
      const int32_t* off = joint_off.data() + joint_at[i];
      for (int c = 0; c < d.nc; ++c) {
        const int32_t t = d.trans[static_cast<size_t>(s) * d.nc + c];
        if (t == DEAD) continue;
        const int32_t tid = single(i, t);
        int32_t* row = row_of(n);
        for (int32_t j = off[c]; j < off[c + 1]; ++j) row[joint[j]] = tid;
      }
      continue;
    }
    for (int c = 0; c < nc; ++c) {
      next.clear();
      for (int64_t x : sets[set_of[n]]) {
        const D& d = ds[static_cast<size_t>(x >> 32)];
        const int32_t s = static_cast<int32_t>(x & 0xFFFFFFFF);
        const int32_t t = d.trans[static_cast<size_t>(s) * d.nc + d.classes[rep[c]]];
        if (t != DEAD) next.push_back((x & ~0xFFFFFFFFLL) | static_cast<uint32_t>(t));
      }
      if (next.empty()) continue;
      const int32_t tid = intern(next);
      row_of(n)[c] = tid;
    }
  }
  Dfa d;
  d.n = static_cast<int32_t>(pair_of.size());
  d.nc = nc;
  trans.resize(pair_of.size() * nc);
  d.trans = std::move(trans);
  d.classes.assign(cls.begin(), cls.end());
  d.accepting = std::move(accepting);
  d.start = start_id;
  return d;
}

}  // namespace tooldec
