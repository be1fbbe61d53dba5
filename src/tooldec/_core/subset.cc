// Subset construction: an NFA (from thompson.cc, as CSR arrays) to a pruned DFA over the coarsest byte classes
// its masks need.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "dfa.h"

namespace tooldec {

Dfa subset(int32_t n, const int64_t* ep, const int32_t* em, const int32_t* et, const std::vector<Mask>& mask_list,
           const int64_t* xp, const int32_t* xt, int32_t start, int32_t accept, int64_t max_states) {
  const int32_t n_masks = static_cast<int32_t>(mask_list.size());
  // byte classes over every mask this NFA uses (a table shared by several roots holds masks it never uses); then
  // each mask as its sorted list of classes
  std::vector<uint8_t> used_mask(n_masks, 0);
  for (int64_t k = 0; k < ep[n]; ++k) used_mask[em[k]] = 1;
  const auto classes = byte_classes(mask_list, &used_mask);
  const std::vector<int32_t>& cls = classes.first;  // a reference, not a structured binding: lambdas capture it
  const int32_t nc = classes.second;
  std::vector<std::vector<int32_t>> mask_classes(n_masks);
  std::vector<int32_t> seen_stamp(nc, -1);
  for (int32_t i = 0; i < n_masks; ++i) {
    if (!used_mask[i]) continue;
    for_bits(mask_list[i], [&](int b) {
      if (seen_stamp[cls[b]] != i) {
        seen_stamp[cls[b]] = i;
        mask_classes[i].push_back(cls[b]);
      }
    });
    std::sort(mask_classes[i].begin(), mask_classes[i].end());
  }
  // epsilon closures, kept to the states that matter (byte edges or the accept state), memoised
  std::vector<std::vector<int32_t>> closure(n);
  std::vector<uint8_t> have(n, 0);
  std::vector<int32_t> mark(n, -1);
  int32_t stamp = 0;
  std::vector<int32_t> stack;
  auto closure_of = [&](int32_t s) -> const std::vector<int32_t>& {
    if (have[s]) return closure[s];
    ++stamp;
    std::vector<int32_t> out;
    stack.assign(1, s);
    mark[s] = stamp;
    while (!stack.empty()) {
      int32_t u = stack.back();
      stack.pop_back();
      if (ep[u + 1] > ep[u] || u == accept) out.push_back(u);
      for (int64_t k = xp[u]; k < xp[u + 1]; ++k) {
        int32_t v = xt[k];
        if (mark[v] != stamp) {
          mark[v] = stamp;
          stack.push_back(v);
        }
      }
    }
    std::sort(out.begin(), out.end());
    closure[s] = std::move(out);
    have[s] = 1;
    return closure[s];
  };
  std::unordered_map<std::vector<int32_t>, int32_t, SigHash> ids;
  std::vector<const std::vector<int32_t>*> order;
  std::vector<int32_t> table;  // per DFA state, nc targets (-1 none)
  std::vector<uint8_t> accepting;
  static const std::vector<int32_t> empty;
  order.push_back(&empty);
  table.assign(nc, -1);
  accepting.push_back(0);
  auto intern = [&](std::vector<int32_t>&& key) -> int32_t {
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    int32_t id = static_cast<int32_t>(order.size());
    if (id >= max_states) throw SchemaTooLarge("the automaton would exceed " + std::to_string(max_states) + " DFA states");
    auto ins = ids.emplace(std::move(key), id).first;
    order.push_back(&ins->first);
    accepting.push_back(std::binary_search(ins->first.begin(), ins->first.end(), accept) ? 1 : 0);
    return id;
  };
  intern(std::vector<int32_t>(closure_of(start)));
  std::vector<std::vector<int32_t>> bucket(nc);
  std::vector<int32_t> used;
  std::vector<int32_t> union_mark(n, -1);
  std::vector<int32_t> single_id(n, -1);  // NFA state t -> the DFA state of closure(t)
  int32_t union_stamp = 0;
  // classes with the same target list share the same successor: memo per row, for lists of two or more
  std::unordered_map<std::vector<int32_t>, int32_t, SigHash> memo;
  size_t tick = 0;
  for (size_t i = 1; i < order.size(); ++i) {
    check_signals(tick);
    const std::vector<int32_t>& cur = *order[i];
    used.clear();
    for (int32_t s : cur)
      for (int64_t k = ep[s]; k < ep[s + 1]; ++k)
        for (int32_t c : mask_classes[em[k]]) {
          if (bucket[c].empty()) used.push_back(c);
          bucket[c].push_back(et[k]);
        }
    table.resize(table.size() + nc, -1);
    memo.clear();
    for (int32_t c : used) {
      std::vector<int32_t>& targets = bucket[c];
      int32_t tid;
      if (targets.size() == 1 || std::all_of(targets.begin(), targets.end(), [&](int32_t t) { return t == targets[0]; })) {
        int32_t& known = single_id[targets[0]];
        if (known < 0) known = intern(std::vector<int32_t>(closure_of(targets[0])));
        tid = known;
      } else {
        std::sort(targets.begin(), targets.end());
        targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
        auto mit = memo.find(targets);
        if (mit != memo.end()) {
          tid = mit->second;
        } else {
          std::vector<int32_t> key;
          ++union_stamp;
          for (int32_t t : targets)
            for (int32_t u : closure_of(t))
              if (union_mark[u] != union_stamp) {
                union_mark[u] = union_stamp;
                key.push_back(u);
              }
          std::sort(key.begin(), key.end());
          tid = intern(std::move(key));
          memo.emplace(targets, tid);
        }
      }
      table[i * nc + c] = tid;
      targets.clear();
    }
  }
  return finish_table(table, nc, cls, accepting);
}

}  // namespace tooldec
