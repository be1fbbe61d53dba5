// Pruning and layout of a DFA given as a table of targets per byte class (finish_table), shared by subset
// construction and products, and the DFA's Python form.
#include "dfa.h"

#include <cstring>

namespace tooldec {

Dfa finish_table(const std::vector<int32_t>& table, int32_t nc, const std::vector<int32_t>& cls,
                 const std::vector<uint8_t>& accepting) {
  const int32_t n = static_cast<int32_t>(accepting.size());
  std::vector<int32_t> rev_off(static_cast<size_t>(n) + 1, 0), rev;
  for (int32_t s = 0; s < n; ++s)
    for (int32_t c = 0; c < nc; ++c) {
      const int32_t t = table[static_cast<size_t>(s) * nc + c];
      if (t >= 0) ++rev_off[t + 1];
    }
  for (int32_t s = 0; s < n; ++s) rev_off[s + 1] += rev_off[s];
  rev.resize(rev_off[n]);
  {
    std::vector<int32_t> fill(rev_off.begin(), rev_off.end() - 1);
    for (int32_t s = 0; s < n; ++s)
      for (int32_t c = 0; c < nc; ++c) {
        const int32_t t = table[static_cast<size_t>(s) * nc + c];
        if (t >= 0) rev[fill[t]++] = s;
      }
  }
  std::vector<uint8_t> alive(n, 0);
  std::vector<int32_t> stack;
  for (int32_t s = 0; s < n; ++s)
    if (accepting[s]) {
      alive[s] = 1;
      stack.push_back(s);
    }
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t k = rev_off[s]; k < rev_off[s + 1]; ++k)
      if (!alive[rev[k]]) {
        alive[rev[k]] = 1;
        stack.push_back(rev[k]);
      }
  }
  if (n > 0) alive[DEAD] = 0;
  std::vector<int32_t> new_id(n, 0);
  int32_t count = 1;
  if (n > 1 && alive[1])
    for (int32_t s = 1; s < n; ++s)
      if (alive[s]) new_id[s] = count++;
  // group the classes by their column of kept targets: a hash per column, checked against the table on a match
  auto kept = [&](int32_t t) { return t >= 0 && alive[t] ? new_id[t] : 0; };
  std::vector<uint64_t> hash(nc, 1469598103934665603ULL);
  for (int32_t s = 1; s < n; ++s) {
    if (!alive[s] || new_id[s] == 0) continue;
    const int32_t* row = table.data() + static_cast<size_t>(s) * nc;
    for (int32_t c = 0; c < nc; ++c) hash[c] = (hash[c] ^ static_cast<uint32_t>(kept(row[c]))) * 1099511628211ULL;
  }
  auto same_column = [&](int32_t c1, int32_t c2) {
    for (int32_t s = 1; s < n; ++s) {
      if (!alive[s] || new_id[s] == 0) continue;
      const int32_t* row = table.data() + static_cast<size_t>(s) * nc;
      if (kept(row[c1]) != kept(row[c2])) return false;
    }
    return true;
  };
  std::vector<int32_t> group(nc, -1);
  int32_t groups = 0;
  for (int32_t c = 0; c < nc; ++c) {
    if (group[c] >= 0) continue;
    group[c] = groups;
    for (int32_t c2 = c + 1; c2 < nc; ++c2)
      if (group[c2] < 0 && hash[c2] == hash[c] && same_column(c, c2)) group[c2] = groups;
    ++groups;
  }
  std::vector<int32_t> order(groups, -1), rep(groups, -1);
  int32_t final_nc = 0;
  Dfa d;
  d.classes.resize(256);
  for (int b = 0; b < 256; ++b) {
    const int32_t g = group[cls[b]];
    if (order[g] < 0) order[g] = final_nc++;
    d.classes[b] = static_cast<uint8_t>(order[g]);
  }
  for (int32_t c = 0; c < nc; ++c)
    if (rep[order[group[c]]] < 0) rep[order[group[c]]] = c;
  d.n = count;
  d.nc = final_nc;
  d.trans.assign(static_cast<size_t>(count) * final_nc, DEAD);
  d.accepting.assign(count, 0);
  for (int32_t s = 1; s < n; ++s) {
    if (!alive[s] || new_id[s] == 0) continue;
    const int32_t ns = new_id[s];
    d.accepting[ns] = accepting[s];
    int32_t* row = d.trans.data() + static_cast<size_t>(ns) * final_nc;
    for (int32_t k = 0; k < final_nc; ++k) {
      const int32_t t = table[static_cast<size_t>(s) * nc + rep[k]];
      if (t >= 0 && alive[t]) row[k] = new_id[t];
    }
  }
  d.start = count > 1 ? 1 : DEAD;
  return d;
}

std::pair<std::vector<int32_t>, int32_t> byte_classes(const std::vector<Mask>& masks,
                                                      const std::vector<uint8_t>* keep) {
  std::vector<int32_t> cls(256, 0), split_of, split_stamp;
  int32_t nc = 1;
  for (size_t i = 0; i < masks.size(); ++i) {
    if (keep != nullptr && !(*keep)[i]) continue;
    split_of.resize(nc);
    split_stamp.resize(nc, -1);
    const auto stamp = static_cast<int32_t>(i);
    for_bits(masks[i], [&](int b) {
      const int32_t c = cls[b];
      if (split_stamp[c] != stamp) {
        split_stamp[c] = stamp;
        split_of[c] = nc++;
      }
      cls[b] = split_of[c];
    });
  }
  std::vector<int32_t> order(nc, -1);
  int32_t k = 0;
  for (int b = 0; b < 256; ++b) {
    if (order[cls[b]] < 0) order[cls[b]] = k++;
    cls[b] = order[cls[b]];
  }
  return {std::move(cls), k};
}

Dfa chain_dfa(const std::vector<Mask>& masks) {
  // byte classes: each set splits the classes of its bytes (finish_table merges what the rows do not tell apart)
  const auto [cls, nc] = byte_classes(masks);
  // state 0 dead (the empty set of the subset construction), state i + 1 before byte i, the last accepting
  const size_t n = masks.size() + 2;
  std::vector<int32_t> table(n * static_cast<size_t>(nc), -1);
  for (size_t i = 0; i < masks.size(); ++i)
    for_bits(masks[i], [&](int b) { table[(i + 1) * nc + cls[b]] = static_cast<int32_t>(i + 2); });
  std::vector<uint8_t> accepting(n, 0);
  accepting[n - 1] = 1;
  return finish_table(table, nc, cls, accepting);
}

}  // namespace tooldec
