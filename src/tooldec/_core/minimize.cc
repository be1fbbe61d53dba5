// Minimization (Hopcroft's partition refinement). The union of per-tool automata keeps every tool's tail apart
// even where the tails are the same language (`", "arguments": {"a": <number>, "b": <number>}}` in every FuncQA
// tool); merging equivalent states shrinks what the token index walks and stores (FuncQA 1,487 -> 368 states).
#include <utility>
#include <vector>

#include "dfa.h"

namespace tooldec {

Dfa minimize(const DfaView& dfa) {
  const int32_t* trans = dfa.trans;
  const int32_t n = dfa.n, nc = dfa.nc, start = dfa.start;
  const uint8_t* classes = dfa.classes;
  const bool* accepting = dfa.accepting;
  // predecessors by (class, target), as CSR
  std::vector<int32_t> off(static_cast<size_t>(nc) * n + 1, 0), pred(static_cast<size_t>(n) * nc);
  for (int32_t s = 0; s < n; ++s)
    for (int32_t c = 0; c < nc; ++c) ++off[static_cast<size_t>(c) * n + trans[static_cast<size_t>(s) * nc + c] + 1];
  for (size_t i = 1; i < off.size(); ++i) off[i] += off[i - 1];
  {
    std::vector<int32_t> at(off.begin(), off.end() - 1);
    for (int32_t s = 0; s < n; ++s)
      for (int32_t c = 0; c < nc; ++c) pred[at[static_cast<size_t>(c) * n + trans[static_cast<size_t>(s) * nc + c]]++] = s;
  }
  // blocks: elems[first[b] .. end[b]); marked elements are moved to [first[b], mid[b])
  std::vector<int32_t> elems(n), loc(n), blk(n), first, end, mid;
  {
    int32_t k = 0;
    auto add_block = [&](auto keep) {
      const int32_t b = static_cast<int32_t>(first.size()), lo = k;
      for (int32_t s = 0; s < n; ++s)
        if (keep(s)) {
          elems[k] = s;
          loc[s] = k++;
          blk[s] = b;
        }
      if (k == lo) return;
      first.push_back(lo);
      end.push_back(k);
      mid.push_back(lo);
    };
    add_block([&](int32_t s) { return s == DEAD; });
    add_block([&](int32_t s) { return s != DEAD && accepting[s]; });
    add_block([&](int32_t s) { return s != DEAD && !accepting[s]; });
  }
  // splitters: every initial block but the largest (splitting by all blocks but one splits by that one too)
  std::vector<uint8_t> waiting(first.size() * nc, 0);
  std::vector<std::pair<int32_t, int32_t>> work;
  int32_t largest = 0;
  for (int32_t b = 1; b < static_cast<int32_t>(first.size()); ++b)
    if (end[b] - first[b] > end[largest] - first[largest]) largest = b;
  for (int32_t b = 0; b < static_cast<int32_t>(first.size()); ++b)
    if (b != largest)
      for (int32_t c = 0; c < nc; ++c) {
        work.emplace_back(b, c);
        waiting[static_cast<size_t>(b) * nc + c] = 1;
      }
  std::vector<int32_t> splitter, touched;
  while (!work.empty()) {
    const auto [b, c] = work.back();
    work.pop_back();
    waiting[static_cast<size_t>(b) * nc + c] = 0;
    splitter.assign(elems.begin() + first[b], elems.begin() + end[b]);
    touched.clear();
    for (int32_t t : splitter)
      for (int32_t j = off[static_cast<size_t>(c) * n + t]; j < off[static_cast<size_t>(c) * n + t + 1]; ++j) {
        const int32_t s = pred[j], x = blk[s];
        if (loc[s] < mid[x]) continue;  // marked already
        if (mid[x] == first[x]) touched.push_back(x);
        const int32_t other = elems[mid[x]];  // swap s into the marked part
        std::swap(elems[loc[s]], elems[mid[x]]);
        loc[other] = loc[s];
        loc[s] = mid[x]++;
      }
    for (int32_t x : touched) {
      if (mid[x] == end[x]) {  // every state of x was marked: no split
        mid[x] = first[x];
        continue;
      }
      const int32_t y = static_cast<int32_t>(first.size());  // the marked part becomes block y
      first.push_back(first[x]);
      end.push_back(mid[x]);
      mid.push_back(first[x]);
      first[x] = mid[x];
      for (int32_t i = first[y]; i < end[y]; ++i) blk[elems[i]] = y;
      waiting.resize(first.size() * nc, 0);
      for (int32_t d = 0; d < nc; ++d) {
        if (waiting[static_cast<size_t>(x) * nc + d]) {
          work.emplace_back(y, d);
          waiting[static_cast<size_t>(y) * nc + d] = 1;
        } else {
          const int32_t smaller = end[y] - first[y] <= end[x] - first[x] ? y : x;
          work.emplace_back(smaller, d);
          waiting[static_cast<size_t>(smaller) * nc + d] = 1;
        }
      }
    }
  }
  // number the blocks: DEAD's 0, the start's 1, then breadth first (every state is reachable from the start)
  std::vector<int32_t> id(first.size(), -1), order;
  id[blk[DEAD]] = 0;
  order.push_back(DEAD);
  if (start != DEAD) {
    id[blk[start]] = 1;
    order.push_back(start);
  }
  for (size_t i = 1; i < order.size(); ++i)
    for (int32_t c = 0; c < nc; ++c) {
      const int32_t t = trans[static_cast<size_t>(order[i]) * nc + c];
      if (id[blk[t]] < 0) {
        id[blk[t]] = static_cast<int32_t>(order.size());
        order.push_back(t);
      }
    }
  Dfa d;
  d.n = static_cast<int32_t>(order.size());
  d.nc = nc;
  d.trans.resize(static_cast<size_t>(d.n) * nc);
  d.accepting.resize(d.n);
  for (int32_t i = 0; i < d.n; ++i) {
    for (int32_t c = 0; c < nc; ++c) d.trans[static_cast<size_t>(i) * nc + c] = id[blk[trans[static_cast<size_t>(order[i]) * nc + c]]];
    d.accepting[i] = i != DEAD && accepting[order[i]];
  }
  d.classes.assign(classes, classes + 256);
  d.start = start == DEAD ? DEAD : 1;
  return d;
}

}  // namespace tooldec
