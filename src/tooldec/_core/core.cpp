// tooldec's compiled core: subset construction and DFA products, the vocabulary trie, the token index, and the
// per-step batch operations (fill packed bitmasks for many rows, apply a bitmask to logits in place).
//
// Everything here works on raw buffers (numpy arrays, data pointers). The Python layer above owns the grammar,
// the call formats and the decoding policy; this file owns what runs per byte or per token.
//
// The token index, in one algorithm: the vocabulary's token byte strings, sorted, form a trie laid out in
// preorder (each node: its byte, its depth, the end of its subtree, the token ids that end there). A state's
// allowed tokens come from one walk of that array with a stack of DFA states by depth: a node whose byte is
// dead from its parent's state skips its whole subtree (a jump to its subtree end), every live node that ends a
// token allows that token. The result is kept per state as a packed bitmask (dense words, or (word, bits) pairs
// when that is smaller), computed on first visit and then read by any thread without a lock.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <deque>
#include <map>
#include <tuple>
#include <cstdint>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int32_t DEAD = 0;
constexpr int32_t FINAL = -1;
// A state with more live bytes than this is wide: its tokens are found through its region (see Index::Region).
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

template <typename T>
using carray = py::array_t<T, py::array::c_style | py::array::forcecast>;

struct SchemaTooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------------------------------------------
// Pruning and layout of a DFA given as a table of targets per byte class, shared by subset construction and products.

struct Dfa {
  std::vector<int32_t> trans;  // n * nc
  std::vector<uint8_t> classes;
  std::vector<uint8_t> accepting;
  int32_t n = 0, nc = 0, start = 0;
};

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

// Set bits of a word, inline: without -mpopcnt (not in baseline x86-64) __builtin_popcount is a libgcc call, and a
// dense mask counts 4,000 words.
inline int popcount32(uint32_t x) {
  x = x - ((x >> 1) & 0x55555555u);
  x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
  return static_cast<int>((((x + (x >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24);
}

// A DFA from rows given as a table of targets per class (-1: none), `cls[b]` the class of byte b: prunes the
// states that cannot reach acceptance, renumbers (dead 0, start 1), and merges the classes into the coarsest
// byte classes the kept rows need (bytes share one when every kept row sends them to the same kept state).
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

py::tuple to_python(const Dfa& d) {
  py::array_t<int32_t> trans({static_cast<py::ssize_t>(d.n), static_cast<py::ssize_t>(d.nc)});
  std::memcpy(trans.mutable_data(), d.trans.data(), d.trans.size() * sizeof(int32_t));
  py::array_t<uint8_t> classes(256);
  std::memcpy(classes.mutable_data(), d.classes.data(), 256);
  py::array_t<bool> acc(d.n);
  for (int32_t i = 0; i < d.n; ++i) acc.mutable_data()[i] = d.accepting[i] != 0;
  return py::make_tuple(trans, classes, acc, d.start);
}

// Whether this thread holds the GIL through a long build, so that a pending signal (a time limit) can stop it.
thread_local bool t_check_signals = true;

void check_signals(size_t& tick) {
  if ((++tick & 1023) == 0 && t_check_signals && PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// ---------------------------------------------------------------------------------------------------------------
// Subset construction of an NFA given as CSR arrays: n states, byte edges ep/em/et (mask id, target), epsilon
// edges xp/xt. Built by Thompson below.
Dfa subset(int32_t n, const int64_t* ep, const int32_t* em, const int32_t* et, const std::vector<Mask>& mask_list,
           const int64_t* xp, const int32_t* xt, int32_t start, int32_t accept, int64_t max_states) {
  const int32_t n_masks = static_cast<int32_t>(mask_list.size());
  // byte classes over every mask (partition refinement: each mask splits the classes of its bytes, at a cost
  // in its set bits), numbered by first byte; then each mask as its sorted list of classes
  std::vector<int32_t> cls(256, 0), split_of, split_stamp;
  int32_t nc = 1;
  auto for_bits = [](const Mask& m, auto&& f) {
    for (int w = 0; w < 4; ++w)
      for (uint64_t x = m[w]; x != 0; x &= x - 1) f(w * 64 + __builtin_ctzll(x));
  };
  std::vector<uint8_t> used_mask(n_masks, 0);  // a table shared by several roots holds masks this NFA never uses
  for (int64_t k = 0; k < ep[n]; ++k) used_mask[em[k]] = 1;
  for (int32_t i = 0; i < n_masks; ++i) {
    if (!used_mask[i]) continue;
    split_of.resize(nc);
    split_stamp.resize(nc, -1);
    for_bits(mask_list[i], [&](int b) {
      const int32_t c = cls[b];
      if (split_stamp[c] != i) {
        split_stamp[c] = i;
        split_of[c] = nc++;
      }
      cls[b] = split_of[c];
    });
  }
  {
    std::vector<int32_t> order(nc, -1);
    int32_t k = 0;
    for (int b = 0; b < 256; ++b) {
      if (order[cls[b]] < 0) order[cls[b]] = k++;
      cls[b] = order[cls[b]];
    }
    nc = k;
  }
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
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 1469598103934665603ULL;
      for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ULL;
      return static_cast<size_t>(h);
    }
  };
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
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
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> memo;
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

std::vector<Mask> read_masks(const carray<uint8_t>& masks) {
  const int32_t n = static_cast<int32_t>(masks.shape(0));
  std::vector<Mask> out(n);
  for (int32_t i = 0; i < n; ++i) std::memcpy(out[i].data(), masks.data() + 32 * i, 32);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Thompson construction. The grammar IR arrives as a table of nodes, children before parents, each a record in
// `code` from `ptr[i]` to `ptr[i + 1]`:
//   0 BYTES mask            (mask: a row of `masks`, or -1 for the empty set)
//   1 SEQ k child...        2 ALT k child...
//   3 REPEAT item min max sep            (max -1: unbounded; sep -1: none)
//   4 FIELDS sep k (child required)...   (an ordered subsequence holding every required child, sep between)
//   5 EMBED d               (DFA d of the list: a product the Python layer built)
// Every use of a node builds fresh states. Invariant of build(node, start): it may add edges out of `start`,
// never into it, so alternatives share their entry and every loop gets a fresh state.

// A DFA the Python layer built (a product), read in place by the Thompson construction that embeds it.
struct Embedded {
  const int32_t* trans;
  const uint8_t* classes;
  const bool* accepting;
  int32_t start, n, nc;
};

class Thompson {
 public:
  Thompson(const int32_t* code, const int64_t* ptr, int64_t n_nodes, std::vector<Mask> masks,
           const std::vector<Embedded>& dfas, int64_t max_states)
      : code_(code), ptr_(ptr), n_nodes_(n_nodes), masks_(std::move(masks)), dfas_(dfas), max_states_(max_states) {}

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
      case 0: {
        const int32_t end = new_state();
        if (r[1] >= 0) edge(start, r[1], end);
        return end;
      }
      case 1: {
        int32_t cur = start;
        for (int32_t i = 0; i < r[1]; ++i) cur = build(r[2 + i], cur);
        if (cur == start) {
          cur = new_state();
          eps(start, cur);
        }
        return cur;
      }
      case 2: {
        const int32_t end = new_state();
        for (int32_t i = 0; i < r[1]; ++i) {
          const int32_t got = build(r[2 + i], start);
          eps(got, end);
        }
        return end;
      }
      case 3:
        return repeat(r[1], r[2], r[3], r[4], start);
      case 4:
        return fields(r, start);
      case 5:
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
  int32_t embed(const Embedded& dfa, int32_t start) {
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
  const std::vector<Embedded>& dfas_;
  int64_t max_states_;
  size_t tick_ = 0;
  int64_t n_states_ = 0;
  std::vector<std::array<int32_t, 3>> edges_;        // (from, mask id, to), in the order added
  std::vector<std::pair<int32_t, int32_t>> eps_;     // (from, to), in the order added

  void edge(int32_t from, int32_t mask, int32_t to) { edges_.push_back({from, mask, to}); }
  void eps(int32_t from, int32_t to) { eps_.emplace_back(from, to); }
};

// One IR node table -> for each root, NFA (Thompson) -> pruned DFA, as (trans, classes, accepting, start), or the
// message of an automaton past its bounds (a str). The table is (code, ptr, masks, embedded dfas); the roots share
// its nodes (a tool set's tools share most of theirs). With more than one thread the roots are built in parallel
// without the GIL (a signal is then seen only when all are done).
py::list compile_irs(carray<int32_t> code, carray<int64_t> ptr, carray<uint8_t> masks_in, py::list dfas,
                     std::vector<int32_t> roots, int64_t max_nfa_states, int64_t max_dfa_states, int threads) {
  const int64_t n_nodes = ptr.shape(0) - 1;
  const std::vector<Mask> masks = read_masks(masks_in);
  std::vector<carray<int32_t>> keep_trans;  // the embedded DFAs' arrays, alive for the call
  std::vector<carray<uint8_t>> keep_classes;
  std::vector<carray<bool>> keep_accepting;
  std::vector<Embedded> embedded;
  for (py::handle e : dfas) {
    auto d = e.cast<py::tuple>();
    keep_trans.push_back(d[0].cast<carray<int32_t>>());
    keep_classes.push_back(d[1].cast<carray<uint8_t>>());
    keep_accepting.push_back(d[2].cast<carray<bool>>());
    const auto& tr = keep_trans.back();
    if (tr.ndim() != 2 || keep_classes.back().size() != 256 || keep_accepting.back().size() != tr.shape(0))
      throw std::invalid_argument("an embedded DFA is not (trans[n, classes], classes[256], accepting[n], start)");
    embedded.push_back(Embedded{tr.data(), keep_classes.back().data(), keep_accepting.back().data(),
                                d[3].cast<int32_t>(), static_cast<int32_t>(tr.shape(0)), static_cast<int32_t>(tr.shape(1))});
  }
  for (int32_t r : roots)
    if (r < 0 || r >= n_nodes) throw std::invalid_argument("a root is not a node of the table");
  struct Job {
    Dfa out;
    std::string too_large;
  };
  std::vector<Job> jobs(roots.size());
  auto build = [&](size_t i) {
    try {
      Thompson t(code.data(), ptr.data(), n_nodes, masks, embedded, max_nfa_states);
      const int32_t start = t.new_state();
      const int32_t accept = t.build(roots[i], start);
      jobs[i].out = t.determinize(start, accept, max_dfa_states);
    } catch (const SchemaTooLarge& e) {
      jobs[i].too_large = e.what();
    }
  };
  threads = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size() / 8)));  // a thread for 8 roots at least
  if (threads == 1) {
    for (size_t i = 0; i < jobs.size(); ++i) build(i);
  } else {
    std::atomic<size_t> next{0};
    std::vector<std::exception_ptr> failed(threads);
    {
      py::gil_scoped_release release;
      auto work = [&](int w) {
        t_check_signals = false;
        try {
          for (size_t i = next++; i < jobs.size(); i = next++) build(i);
        } catch (...) {
          failed[w] = std::current_exception();
          next = jobs.size();
        }
        t_check_signals = true;
      };
      std::vector<std::thread> pool;
      for (int w = 1; w < threads; ++w) pool.emplace_back(work, w);
      work(0);
      for (auto& th : pool) th.join();
    }
    for (auto& f : failed)
      if (f) std::rethrow_exception(f);
  }
  py::list out;
  for (Job& j : jobs) {
    if (j.too_large.empty())
      out.append(to_python(j.out));
    else
      out.append(py::str(j.too_large));
  }
  return out;
}

// Product of two DFAs (intersection, or difference a \ b), by breadth-first search over state pairs.
py::tuple product(carray<int32_t> a_trans, carray<uint8_t> a_classes, carray<bool> a_acc, int32_t a_start,
                  carray<int32_t> b_trans, carray<uint8_t> b_classes, carray<bool> b_acc, int32_t b_start,
                  bool difference, int64_t max_states) {
  const int32_t anc = static_cast<int32_t>(a_trans.shape(1)), bnc = static_cast<int32_t>(b_trans.shape(1));
  const int32_t* at = a_trans.data();
  const int32_t* bt = b_trans.data();
  const bool* aa = a_acc.data();
  const bool* ba = b_acc.data();
  // joint classes: bytes in the same class of both automata, numbered by first byte
  std::vector<std::pair<int32_t, int32_t>> joint;
  std::vector<int32_t> cls(256);
  {
    std::vector<int32_t> seen(static_cast<size_t>(anc) * bnc, -1);
    for (int b = 0; b < 256; ++b) {
      int32_t& got = seen[static_cast<size_t>(a_classes.data()[b]) * bnc + b_classes.data()[b]];
      if (got < 0) {
        got = static_cast<int32_t>(joint.size());
        joint.emplace_back(a_classes.data()[b], b_classes.data()[b]);
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
  return to_python(finish_table(table, J, cls, accepting));
}

// Union of several pruned DFAs (one per tool): subset construction over sets of (automaton, state) pairs. The
// sets are large only while the automata share a prefix (the call's opening, the tool names' common prefixes);
// after that they are single pairs, whose rows are the automaton's own, renumbered. Every set holds live states
// only, so the union needs no pruning; its byte classes are the automata's classes refined together. The first
// automaton keeps its state numbers, and its rows are copied whole where the joint classes are its own: adding a
// tool to a cached tool set's automaton (given first) copies that table instead of renumbering it entry by entry
// (its states on the shared prefix stay, unreachable, in the table).
py::tuple union_dfas(py::list dfas, int64_t max_states) {
  struct D {
    carray<int32_t> trans;
    carray<uint8_t> classes;
    carray<bool> acc;
    int32_t start, nc;
    int64_t base;  // this automaton's first slot in `single_id`
  };
  std::vector<D> ds;
  int64_t total = 0;
  for (py::handle h : dfas) {
    auto t = h.cast<py::tuple>();
    D d{t[0].cast<carray<int32_t>>(), t[1].cast<carray<uint8_t>>(), t[2].cast<carray<bool>>(), t[3].cast<int32_t>(),
        0, total};
    d.nc = static_cast<int32_t>(d.trans.shape(1));
    total += d.trans.shape(0);
    ds.push_back(std::move(d));
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
        const size_t k = static_cast<size_t>(cls[b]) * 256 + ds[i].classes.data()[b];
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
    for (int c = 0; c < nc; ++c) ++off[ds[i].classes.data()[rep[c]] + 1];
    for (int32_t c = 0; c < ds[i].nc; ++c) off[c + 1] += off[c];
    for (int32_t c = 0; c <= ds[i].nc; ++c) off[c] += static_cast<int32_t>(i * nc);
    std::vector<int32_t> at(off, off + ds[i].nc);
    for (int c = 0; c < nc; ++c) joint[at[ds[i].classes.data()[rep[c]]]++] = c;
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
      accepting.push_back(ds[i].acc.data()[s] ? 1 : 0);
    }
    return got;
  };
  auto intern = [&](const Key& key) -> int32_t {
    if (key.size() == 1) return single(static_cast<size_t>(key[0] >> 32), static_cast<int32_t>(key[0] & 0xFFFFFFFF));
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    const int32_t id = new_id();
    bool acc = false;
    for (int64_t x : key) acc = acc || ds[static_cast<size_t>(x >> 32)].acc.data()[static_cast<int32_t>(x & 0xFFFFFFFF)];
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
  const int32_t first_n = static_cast<int32_t>(first.trans.shape(0));
  if (first_n >= max_states) throw SchemaTooLarge("the automaton would exceed " + std::to_string(max_states) + " DFA states");
  for (int32_t s = 1; s < first_n; ++s) {  // the first automaton's states keep their numbers (DEAD is 0 in both)
    single_id[static_cast<size_t>(s)] = s;
    pair_of.push_back(static_cast<uint32_t>(s));
    set_of.push_back(-1);
    accepting.push_back(first.acc.data()[s] ? 1 : 0);
  }
  bool first_classes = first.nc == nc;  // the joint classes are the first automaton's own: rows copy whole
  for (int b = 0; b < 256 && first_classes; ++b) first_classes = first.classes.data()[b] == cls[b];
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
        std::memcpy(row_of(n), d.trans.data() + static_cast<size_t>(s) * nc, sizeof(int32_t) * nc);
        continue;
      }
      const int32_t* off = joint_off.data() + joint_at[i];
      for (int c = 0; c < d.nc; ++c) {
        const int32_t t = d.trans.data()[static_cast<size_t>(s) * d.nc + c];
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
        const int32_t t = d.trans.data()[static_cast<size_t>(s) * d.nc + d.classes.data()[rep[c]]];
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
  return to_python(d);
}

// ---------------------------------------------------------------------------------------------------------------
// Minimization (Hopcroft's partition refinement). The union of per-tool automata keeps every tool's tail apart
// even where the tails are the same language (`", "arguments": {"a": <number>, "b": <number>}}` in every FuncQA
// tool); merging equivalent states shrinks what the token index walks and stores (FuncQA 1,487 -> 368 states).

Dfa minimize(const int32_t* trans, int32_t n, int32_t nc, const uint8_t* classes, const bool* accepting,
             int32_t start) {
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

py::tuple minimize_dfa(carray<int32_t> trans, carray<uint8_t> classes, carray<bool> accepting, int32_t start) {
  if (trans.ndim() != 2 || classes.shape(0) != 256 || accepting.shape(0) != trans.shape(0) || trans.shape(0) < 1)
    throw std::invalid_argument("a DFA is int32[states, classes], uint8[256], bool[states], with state 0 dead");
  const int32_t n = static_cast<int32_t>(trans.shape(0)), nc = static_cast<int32_t>(trans.shape(1));
  const int32_t* t = trans.data();
  for (size_t i = 0; i < static_cast<size_t>(n) * nc; ++i)
    if (t[i] < 0 || t[i] >= n) throw std::invalid_argument("a transition leads outside the automaton");
  if (start < 0 || start >= n) throw std::invalid_argument("the start state is outside the automaton");
  Dfa d;
  {
    py::gil_scoped_release release;
    d = minimize(t, n, nc, classes.data(), accepting.data(), start);
  }
  return to_python(d);
}

// ---------------------------------------------------------------------------------------------------------------
// The vocabulary: token bytes by id, and the same tokens as a preorder trie.

// A region: the states reachable from a wide state through wide states. Its walk depends only on its shape (the
// byte-level transitions between its states and towards its exits), so states of the same shape, such as the
// contents of every string field of a tool set, share one walk.
struct Region {
  std::vector<uint32_t> stay;                 // tokens that end inside the region
  std::vector<int32_t> stay_words;            // the words of `stay` with a bit set, ascending
  std::vector<int32_t> exit_node, exit_idx;  // trie nodes whose byte leaves it, and which exit it leads to
  std::vector<int32_t> used_exits;            // the exits that appear in exit_idx, ascending
  uint64_t content = 0;                       // a hash of stay and the exits: walks alike hash alike
  int32_t depth = 0;                          // the most bytes a token read while staying inside it
  int64_t stay_count = 0;                     // the tokens in stay

  // Whether o walks the vocabulary exactly as this region does (same stay tokens, same exits).
  bool same_walk(const Region& o) const {
    return content == o.content && stay_words == o.stay_words && exit_node == o.exit_node &&
           exit_idx == o.exit_idx &&
           std::all_of(stay_words.begin(), stay_words.end(), [&](int32_t w) { return stay[w] == o.stay[w]; });
  }
};

struct SigHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
};

class Vocab {
 public:
  Vocab(carray<uint8_t> flat, carray<int64_t> offsets, carray<int32_t> eos, int32_t size) : size_(size) {
    const int64_t n = offsets.shape(0) - 1;
    if (n > size) throw std::invalid_argument("more token byte strings than the vocabulary size");
    words_ = (size + 31) / 32;
    bytes_.assign(flat.data(), flat.data() + flat.shape(0));
    off_.assign(offsets.data(), offsets.data() + offsets.shape(0));
    off_.resize(size + 1, off_.back());  // ids past the tokenizer (model padding) have no bytes
    eos_.assign(eos.data(), eos.data() + eos.shape(0));
    for (int32_t e : eos_)
      if (e < 0 || e >= size) throw std::invalid_argument("EOS id outside the vocabulary");
    build_trie();
  }

  int32_t size() const { return size_; }
  int32_t words() const { return words_; }

  // Region walks shared by every index over this vocabulary, keyed by the region's byte-level shape. The
  // pinned ones (the model's preparation: the value kinds every call format writes, such as a JSON string's
  // contents) serve every index; the others only indexes that share, and the least recently used beyond
  // REGION_CACHE_SIZE are dropped. Thread-safe.
  std::shared_ptr<const Region> shared_region(const std::vector<int32_t>& key, bool shared) {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    auto pin = pinned_.find(key);
    if (pin != pinned_.end()) return pin->second;
    if (!shared) return nullptr;
    auto it = shared_.find(key);
    if (it == shared_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  void share_region(const std::vector<int32_t>& key, std::shared_ptr<const Region> r) {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    if (shared_.count(key)) return;
    lru_.push_front(key);
    shared_.emplace(key, std::make_pair(std::move(r), lru_.begin()));
    while (shared_.size() > REGION_CACHE_SIZE) {
      shared_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  void pin_region(const std::vector<int32_t>& key, std::shared_ptr<const Region> r) {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    pinned_.emplace(key, std::move(r));
    has_pinned_.store(true, std::memory_order_release);
  }
  bool has_pinned() const { return has_pinned_.load(std::memory_order_acquire); }
  int64_t shared_regions() const {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    return static_cast<int64_t>(shared_.size());
  }
  int64_t pinned_regions() const {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    return static_cast<int64_t>(pinned_.size());
  }
  int64_t num_nodes() const { return static_cast<int64_t>(node_byte_.size()); }
  const std::vector<int32_t>& eos() const { return eos_; }

  // The trie in preorder. Node k: byte node_byte_[k] at depth node_depth_[k] (1 = first byte), its subtree is
  // [k, node_end_[k]), the tokens ending at it are tok_[tok_ptr_[k] .. tok_ptr_[k + 1]).
  std::vector<uint8_t> node_byte_;
  std::vector<int32_t> node_depth_, node_end_, tok_ptr_, tok_;
  // The first token ending at node k, or sink() where none does: a walk sets its bit without a branch (whether a
  // node ends a token is a coin toss, about half of them do, and a mispredicted branch costs a node's walk).
  std::vector<int32_t> node_tok_;
  int32_t sink() const { return words_ * 32; }
  // Per node: whether every byte below it is plain text (printable ASCII but `"` and `\`), and the deepest node
  // below it (itself if none). A walk in a state that plain bytes keep in place takes such a subtree whole.
  std::vector<uint8_t> plain_below_;
  std::vector<int32_t> deepest_below_;
  static bool plain(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }
  int32_t max_len_ = 0;
  int32_t root_[256];  // the node of each first byte, or -1
  Mask root_bits_{0, 0, 0, 0};  // the first bytes that have a node
  std::vector<uint8_t> bytes_;
  std::vector<int64_t> off_;

 private:
  void build_trie() {
    std::vector<int32_t> ids;
    for (int32_t t = 0; t < size_; ++t)
      if (off_[t + 1] > off_[t]) ids.push_back(t);
    const uint8_t* b = bytes_.data();
    auto less = [&](int32_t x, int32_t y) {
      int64_t lx = off_[x + 1] - off_[x], ly = off_[y + 1] - off_[y];
      int c = std::memcmp(b + off_[x], b + off_[y], static_cast<size_t>(std::min(lx, ly)));
      return c != 0 ? c < 0 : lx < ly;
    };
    std::stable_sort(ids.begin(), ids.end(), less);
    std::vector<int32_t> path;  // node index per depth - 1
    std::vector<std::vector<int32_t>> node_tokens;
    int64_t prev_off = 0, prev_len = 0;
    for (int32_t t : ids) {
      const int64_t o = off_[t], len = off_[t + 1] - off_[t];
      max_len_ = std::max<int32_t>(max_len_, static_cast<int32_t>(len));
      int64_t lcp = 0;
      const int64_t lim = std::min<int64_t>(len, prev_len);
      while (lcp < lim && b[o + lcp] == b[prev_off + lcp]) ++lcp;
      lcp = std::min<int64_t>(lcp, static_cast<int64_t>(path.size()));
      while (static_cast<int64_t>(path.size()) > lcp) {
        node_end_[path.back()] = static_cast<int32_t>(node_byte_.size());
        path.pop_back();
      }
      for (int64_t d = lcp; d < len; ++d) {
        path.push_back(static_cast<int32_t>(node_byte_.size()));
        node_byte_.push_back(b[o + d]);
        node_depth_.push_back(static_cast<int32_t>(d + 1));
        node_end_.push_back(0);
        node_tokens.emplace_back();
      }
      node_tokens[path.back()].push_back(t);
      prev_off = o;
      prev_len = len;
    }
    while (!path.empty()) {
      node_end_[path.back()] = static_cast<int32_t>(node_byte_.size());
      path.pop_back();
    }
    for (int b = 0; b < 256; ++b) root_[b] = -1;
    for (size_t k = 0; k < node_byte_.size(); ++k)
      if (node_depth_[k] == 1) {
        root_[node_byte_[k]] = static_cast<int32_t>(k);
        root_bits_[node_byte_[k] >> 6] |= 1ULL << (node_byte_[k] & 63);
      }
    tok_ptr_.assign(1, 0);
    node_tok_.reserve(node_tokens.size());
    for (auto& v : node_tokens) {
      tok_.insert(tok_.end(), v.begin(), v.end());
      tok_ptr_.push_back(static_cast<int32_t>(tok_.size()));
      node_tok_.push_back(v.empty() ? sink() : v.front());
    }
    // children before parents: a node's children are k + 1 and then each one's subtree end
    const int32_t count = static_cast<int32_t>(node_byte_.size());
    plain_below_.assign(count, 1);
    deepest_below_.assign(node_depth_.begin(), node_depth_.end());
    for (int32_t k = count - 1; k >= 0; --k) {
      for (int32_t q = k + 1; q < node_end_[k]; q = node_end_[q]) {
        plain_below_[k] &= plain_below_[q] & static_cast<uint8_t>(plain(node_byte_[q]));
        deepest_below_[k] = std::max(deepest_below_[k], deepest_below_[q]);
      }
    }
    // a leaf has nothing to skip: leaving it out keeps the walk's branch on skips rare and predictable
    for (int32_t k = 0; k < count; ++k)
      if (node_end_[k] == k + 1) plain_below_[k] = 0;
  }

  int32_t size_, words_;
  std::vector<int32_t> eos_;
  mutable std::mutex shared_mutex_;
  std::list<std::vector<int32_t>> lru_;
  std::unordered_map<std::vector<int32_t>,
                     std::pair<std::shared_ptr<const Region>, std::list<std::vector<int32_t>>::iterator>, SigHash>
      shared_;
  std::unordered_map<std::vector<int32_t>, std::shared_ptr<const Region>, SigHash> pinned_;
  std::atomic<bool> has_pinned_{false};
};

// ---------------------------------------------------------------------------------------------------------------
// The token index of one DFA over one vocabulary.

struct Entry {
  std::vector<uint32_t> dense;                        // W words, or empty when sparse
  std::vector<std::pair<int32_t, uint32_t>> sparse;  // (word, bits) when that is smaller
  int64_t count = 0;                                  // allowed tokens, EOS included
};

class Index {
 public:
  Index(std::shared_ptr<Vocab> vocab, carray<int32_t> trans, carray<uint8_t> classes, carray<bool> accepting,
        bool share_regions)
      : vocab_(std::move(vocab)), share_(share_regions) {
    n_ = static_cast<int32_t>(trans.shape(0));
    nc_ = static_cast<int32_t>(trans.shape(1));
    trans_array_ = trans;  // read in place: the array is kept alive with the index
    trans_ = trans_array_.data();
    std::memcpy(classes_, classes.data(), 256);
    accepting_.assign(accepting.data(), accepting.data() + n_);
    class_size_.assign(nc_, 0);
    class_bits_.assign(nc_, Mask{0, 0, 0, 0});
    for (int b = 0; b < 256; ++b) {
      class_size_[classes_[b]] += 1;
      class_bits_[classes_[b]][b >> 6] |= 1ULL << (b & 63);
      if (b == 0 || classes_[b] != classes_[b - 1]) class_runs_.emplace_back(b, classes_[b]);
    }
    // two branch-free passes (the compiler vectorizes both): every transition inside the automaton, then each
    // state's live bytes; one pass with the check inside cost 0.8 ms over the 17,147 x 62 table of tools200
    const size_t cells = static_cast<size_t>(n_) * nc_;
    uint32_t top = 0;
    for (size_t i = 0; i < cells; ++i) top = std::max(top, static_cast<uint32_t>(trans_[i]));
    if (cells > 0 && top >= static_cast<uint32_t>(n_)) throw std::invalid_argument("a transition leads outside the automaton");
    width_.assign(n_, 0);
    for (int32_t s = 0; s < n_; ++s) {
      const int32_t* row = trans_ + static_cast<size_t>(s) * nc_;
      int32_t w = 0;
      for (int c = 0; c < nc_; ++c) w += static_cast<int32_t>(row[c] != DEAD) * class_size_[c];
      width_[s] = w;
    }
    entries_ = std::make_unique<std::atomic<Entry*>[]>(n_);
    for (int32_t i = 0; i < n_; ++i) entries_[i].store(nullptr, std::memory_order_relaxed);
  }
  ~Index() = default;
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  int32_t num_states() const { return n_; }
  // Per state: accepting with no way on, so only EOS may follow.
  std::vector<bool> finished() const {
    std::vector<bool> out(n_, false);
    for (int32_t s = 1; s < n_; ++s) out[s] = accepting_[s] && width_[s] == 0;
    return out;
  }
  int32_t words() const { return vocab_->words(); }
  bool accepting(int32_t s) const { return s > DEAD && s < n_ && accepting_[s]; }
  const std::shared_ptr<Vocab>& vocab() const { return vocab_; }

  int32_t step(int32_t s, uint8_t b) const { return trans_[static_cast<size_t>(s) * nc_ + classes_[b]]; }

  // The state after token t from s: FINAL after EOS in an accepting state, DEAD when not allowed.
  int32_t next_state(int32_t s, int32_t t) const {
    if (s <= DEAD || s >= n_ || t < 0 || t >= vocab_->size()) return DEAD;
    for (int32_t e : vocab_->eos())
      if (e == t) return accepting_[s] ? FINAL : DEAD;
    const uint8_t* b = vocab_->bytes_.data();
    int64_t lo = vocab_->off_[t], hi = vocab_->off_[t + 1];
    if (lo == hi) return DEAD;
    for (int64_t k = lo; k < hi && s != DEAD; ++k) s = step(s, b[k]);
    return s;
  }

  // emit(token) for the tokens ending at trie node k and every token below it that stays alive, when reading
  // k's byte led to state `at` (a dead byte skips its whole subtree, so an exit costs its live tokens only).
  // `stack` holds a state per depth (vocabulary's longest token + 1): a region has thousands of exit nodes, and
  // the caller's one buffer spares each a thread-local lookup.
  template <typename Emit>
  void walk_below(int32_t k, int32_t at, int32_t* stack, Emit emit) const {
    const Vocab& v = *vocab_;
    const int32_t* nd = v.node_depth_.data();
    const int32_t* tp = v.tok_ptr_.data();
    const int32_t* tk = v.tok_.data();
    stack[nd[k]] = at;
    for (int32_t j = tp[k]; j < tp[k + 1]; ++j) emit(tk[j]);
    const int32_t end = v.node_end_[k];
    for (int32_t q = k + 1; q < end;) {
      const int32_t d = nd[q];
      const int32_t t = step(stack[d - 1], v.node_byte_[q]);
      if (t == DEAD) {
        q = v.node_end_[q];
        continue;
      }
      stack[d] = t;
      for (int32_t j = tp[q]; j < tp[q + 1]; ++j) emit(tk[j]);
      ++q;
    }
  }

  // emit(token) for every token that leaves region r through one of its exits (exits: the concrete states).
  template <typename Emit>
  void walk_exits(const Region& r, const std::vector<int32_t>& exits, Emit emit) const {
    thread_local std::vector<int32_t> stack;
    stack.resize(static_cast<size_t>(vocab_->max_len_) + 1);
    for (size_t i = 0; i < r.exit_node.size(); ++i) walk_below(r.exit_node[i], exits[r.exit_idx[i]], stack.data(), emit);
  }

  // The cached entry of state s, computed on first use (thread-safe: the first published entry wins; a racing
  // thread's duplicate stays owned by the index, unused).
  const Entry& entry(int32_t s) {
    if (s < 0 || s >= n_) throw std::out_of_range("state " + std::to_string(s) + " is not in the automaton");
    Entry* got = entries_[s].load(std::memory_order_acquire);
    if (got != nullptr) return *got;
    Entry* fresh = compute(s);
    Entry* expected = nullptr;
    if (!entries_[s].compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *expected;
    computed_.fetch_add(1, std::memory_order_relaxed);
    return *fresh;
  }

  int64_t num_regions() const {
    std::lock_guard<std::mutex> lock(regions_mutex_);
    return static_cast<int64_t>(regions_.size());
  }
  // The trie walks this index made for its regions (the others came from a cache or a region that walks alike).
  int64_t num_walks() const { return walks_.load(); }

  // Keep every region walk of this index in the vocabulary for good, for every later index over it (sharing or
  // not): a model's preparation, like llguidance's slices. Returns how many regions this index holds.
  int64_t pin_regions() const {
    std::lock_guard<std::mutex> lock(regions_mutex_);
    for (const auto& [sig, r] : regions_) vocab_->pin_region(shape_key(sig), r);
    return static_cast<int64_t>(regions_.size());
  }

  // Every state's entry now (all up front, Outlines-style), on up to `threads` threads (entries are published
  // lock-free, regions under a lock).
  void compute_all(int threads) {
    over_states(threads, [&](int32_t s) { entry(s); });
  }

  // Walk every region of the automaton now (the expensive part of a wide state's first visit), so that a
  // decoding step that reaches a string or a number for the first time costs its exits only.
  // The regions are found in one pass (most wide states share a few); only the walks that neither this index
  // nor the vocabulary's cache holds go to the threads, so a tool set whose kinds of values were seen before
  // starts none (threads waiting for a core had made this 4x slower in wall time on a loaded machine).
  void compute_regions(int threads) {
    std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> todo;  // (signature, layers)
    std::unordered_set<std::vector<int32_t>, SigHash> seen;
    std::vector<int32_t> sig, exits, layers, key;
    for (int32_t s = 1; s < n_; ++s) {
      if (width_[s] < EXPENSIVE_WIDTH) continue;
      sig.clear();
      exits.clear();
      if (region_of(s, sig, exits, layers) && seen.insert(sig).second && !cached_region(sig, key))
        todo.emplace_back(sig, layers);
    }
    std::atomic<size_t> next{0};
    on_threads(std::min(threads, static_cast<int>(todo.size())), [&]() {
      for (size_t i = next.fetch_add(1); i < todo.size(); i = next.fetch_add(1)) region_walk(todo[i].first, todo[i].second);
    });
  }

  // Index the states of the single path from s: each state's entry, on while it does not accept and all its
  // live bytes lead to one state, at most `limit` states (a call's opening text up to its first choice).
  void warm_path(int32_t s, int32_t limit) {
    for (int32_t i = 0; i < limit && s > DEAD && s < n_; ++i) {
      entry(s);
      if (accepting(s)) return;
      const int32_t* row = trans_ + static_cast<size_t>(s) * nc_;
      int32_t next = DEAD;
      for (int32_t c = 0; c < nc_; ++c) {
        if (row[c] == DEAD || row[c] == next) continue;
        if (next != DEAD) return;
        next = row[c];
      }
      s = next;
    }
  }

  // work() on `threads` threads at once, the calling one among them (at least one).
  template <typename F>
  static void on_threads(int threads, F work) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
  }

  bool cached(int32_t s) const { return s >= 0 && s < n_ && entries_[s].load(std::memory_order_acquire) != nullptr; }

  // f(s) for every live state, states handed out in blocks to up to `threads` threads.
  template <typename F>
  void over_states(int threads, F f) {
    std::atomic<int32_t> next{1};
    on_threads(std::min(threads, n_ / 64), [&]() {
      for (int32_t lo = next.fetch_add(16); lo < n_; lo = next.fetch_add(16))
        for (int32_t s = lo; s < std::min(n_, lo + 16); ++s) f(s);
    });
  }
  int64_t computed() const { return computed_.load(); }

  // The bytes the masks of this index hold (an entry shared by several states counted once).
  int64_t mask_bytes() const {
    std::lock_guard<std::mutex> lock(owned_mutex_);
    int64_t total = 0;
    for (const auto& e : owned_)
      total += static_cast<int64_t>(e->dense.size() * sizeof(uint32_t) + e->sparse.size() * sizeof(e->sparse[0]));
    return total;
  }
  int64_t num_masks() const {
    std::lock_guard<std::mutex> lock(owned_mutex_);
    return static_cast<int64_t>(owned_.size());
  }

  void fill(int32_t s, int32_t* out) {
    const int32_t W = words();
    if (s == FINAL) {  // after EOS nothing more (callers keep EOS allowed themselves if they need to)
      std::memset(out, 0, sizeof(int32_t) * W);
      return;
    }
    const Entry& e = entry(s);
    if (!e.dense.empty()) {
      std::memcpy(out, e.dense.data(), sizeof(int32_t) * W);
    } else {
      std::memset(out, 0, sizeof(int32_t) * W);
      for (auto& [w, bits] : e.sparse) out[w] = static_cast<int32_t>(bits);
    }
  }

  // Walk the trie from s: emit(token, next_state) for every allowed non-EOS token, in byte order.
  template <typename Emit>
  void walk(int32_t s, Emit emit) const {
    if (s <= DEAD) return;
    const Vocab& v = *vocab_;
    const int32_t N = static_cast<int32_t>(v.node_byte_.size());
    thread_local std::vector<int32_t> stack_buffer;
    stack_buffer.resize(static_cast<size_t>(v.max_len_) + 1);
    int32_t* const stack = stack_buffer.data();  // not the thread-local itself: emit() would make each use look it up
    stack[0] = s;
    const uint8_t* nb = v.node_byte_.data();
    const int32_t* nd = v.node_depth_.data();
    const int32_t* ne = v.node_end_.data();
    const int32_t* tp = v.tok_ptr_.data();
    const int32_t* tk = v.tok_.data();
    const int32_t* tr = trans_;
    const uint8_t* cl = classes_;
    const size_t nc = static_cast<size_t>(nc_);
    // the live first bytes from the state's row (a class at a time), then each one's subtree
    Mask live{0, 0, 0, 0};
    const int32_t* row = tr + static_cast<size_t>(s) * nc;
    for (size_t c = 0; c < nc; ++c)
      if (row[c] != DEAD)
        for (int w = 0; w < 4; ++w) live[w] |= class_bits_[c][w];
    for (int w = 0; w < 4; ++w)
      for (uint64_t x = live[w] & v.root_bits_[w]; x != 0; x &= x - 1) {
        int32_t k = v.root_[w * 64 + __builtin_ctzll(x)];
        const int32_t end = k < N ? ne[k] : k;
        while (k < end) {
          const int32_t d = nd[k];
          const int32_t t = tr[static_cast<size_t>(stack[d - 1]) * nc + cl[nb[k]]];
          if (t == DEAD) {
            k = ne[k];
            continue;
          }
          stack[d] = t;
          for (int32_t j = tp[k]; j < tp[k + 1]; ++j) emit(tk[j], t);
          ++k;
        }
      }
  }

 private:
  int32_t width(int32_t s) const { return width_[s]; }

  // The region of s: (signature, exit states), or false when s is narrow or its region too large to share.
  // The signature is the region's transitions over this automaton's byte classes, its states numbered in
  // breadth-first order from s (code > 0), its exits by order of discovery (code < 0), dead 0. layers[d] is the
  // number of its states at most d bytes from s: the first layers[d] rows of the signature are all a walk that
  // reads at most d bytes inside the region depends on.
  bool region_of(int32_t s, std::vector<int32_t>& sig, std::vector<int32_t>& exits, std::vector<int32_t>& layers) const {
    if (width(s) <= NARROW) return false;
    thread_local std::vector<int32_t> code, stamp;
    thread_local int32_t epoch = 0;
    if (static_cast<int32_t>(code.size()) < n_) {
      code.assign(n_, 0);
      stamp.assign(n_, 0);
      epoch = 0;
    }
    // the thread-local tables through plain pointers: each access would otherwise ask for the thread's copy again
    int32_t* const cd = code.data();
    int32_t* const sp = stamp.data();
    const int32_t ep = ++epoch;
    std::vector<int32_t> local{s};
    sp[s] = ep;
    cd[s] = 1;
    layers.assign(1, 1);
    for (size_t i = 0; i < local.size(); ++i) {
      if (static_cast<int32_t>(i) == layers.back()) layers.push_back(static_cast<int32_t>(local.size()));
      const int32_t* row = trans_ + static_cast<size_t>(local[i]) * nc_;
      for (int c = 0; c < nc_; ++c) {
        int32_t t = row[c];
        if (t == DEAD || sp[t] == ep) continue;
        sp[t] = ep;
        if (width(t) > NARROW) {
          if (static_cast<int32_t>(local.size()) >= MAX_REGION_STATES) return false;
          local.push_back(t);
          cd[t] = static_cast<int32_t>(local.size());
        } else {
          exits.push_back(t);
          cd[t] = -static_cast<int32_t>(exits.size());
        }
      }
    }
    // a lone state without a loop is not shared: every token would leave it at once and be an exit
    const size_t L = local.size();
    if (L == 1) {
      const int32_t* row = trans_ + static_cast<size_t>(s) * nc_;
      if (std::find(row, row + nc_, s) == row + nc_) return false;
    }
    sig.assign(L * nc_, 0);
    for (size_t i = 0; i < L; ++i) {
      const int32_t* row = trans_ + static_cast<size_t>(local[i]) * nc_;
      for (int c = 0; c < nc_; ++c) sig[i * nc_ + c] = row[c] == DEAD ? 0 : cd[row[c]];
    }
    return true;
  }

  // The region's shape over bytes (comparable across automata): the vocabulary's cache key. Per region state,
  // its row as runs of bytes with one target (first byte, target code), then 256: the same function of bytes
  // as 256 entries a state, in a tenth of the size, so that a number's region (dozens of digit-count states,
  // ten runs each) is keyed, hashed and compared in a few microseconds.
  std::vector<int32_t> shape_key(const std::vector<int32_t>& sig) const {
    const size_t L = sig.size() / nc_;
    std::vector<int32_t> key;
    key.reserve(L * 12);
    for (size_t i = 0; i < L; ++i) {
      const int32_t* row = sig.data() + i * nc_;
      int32_t last = std::numeric_limits<int32_t>::min();  // no code: a state's first run always opens
      for (const auto& [start, c] : class_runs_) {
        if (row[c] == last) continue;
        last = row[c];
        key.push_back(start);
        key.push_back(last);
      }
      key.push_back(256);
    }
    return key;
  }

  // The walk of a region this index or the vocabulary's cache already holds (now this index's too), or null;
  // `key` gets the region's shape key when the vocabulary's cache was asked (a walk made next is shared by it).
  std::shared_ptr<const Region> cached_region(const std::vector<int32_t>& sig, std::vector<int32_t>& key) const {
    {
      std::lock_guard<std::mutex> lock(regions_mutex_);
      auto it = regions_.find(sig);
      if (it != regions_.end()) return it->second;
    }
    if (!share_ && !vocab_->has_pinned()) return nullptr;
    key = shape_key(sig);
    auto got = vocab_->shared_region(key, share_);
    if (!got) return nullptr;
    std::lock_guard<std::mutex> lock(regions_mutex_);
    return regions_.emplace(sig, std::move(got)).first->second;
  }

  // A walk of this index that reads no byte past the rows sig shares with it: a walk depends on a state's row
  // only once a token has reached that state, so regions that differ only further from their start than the
  // walk went walk alike (the digit-count states of a bounded number, short of the longest digit token).
  std::shared_ptr<const Region> walked_alike(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers) const {
    std::lock_guard<std::mutex> lock(regions_mutex_);
    for (int32_t depth : depths_) {
      auto it = by_prefix_.find(rows_within(sig, layers, depth));
      if (it != by_prefix_.end()) return regions_.emplace(sig, it->second).first->second;
    }
    return nullptr;
  }

  // The rows of sig a walk reading at most `depth` bytes inside the region depends on (see region_of's layers).
  std::vector<int32_t> rows_within(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers, int32_t depth) const {
    const size_t rows = static_cast<size_t>(layers[std::min(static_cast<size_t>(depth), layers.size() - 1)]);
    return std::vector<int32_t>(sig.begin(), sig.begin() + static_cast<std::ptrdiff_t>(rows) * nc_);
  }

  std::shared_ptr<const Region> region_walk(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers) const {
    std::vector<int32_t> key;
    if (auto got = cached_region(sig, key)) return got;
    if (auto got = walked_alike(sig, layers)) return got;
    walks_.fetch_add(1, std::memory_order_relaxed);
    auto r = std::make_shared<Region>();
    const Vocab& v = *vocab_;
    std::vector<uint32_t> bits(static_cast<size_t>(words()) + 1, 0);  // the last word takes the sink's bit
    // the loop reads through local pointers: writes to stay and the exits would otherwise make the compiler
    // reload every vector's data each node
    const int32_t N = static_cast<int32_t>(v.node_byte_.size());
    const int32_t* nd = v.node_depth_.data();
    const int32_t* ne = v.node_end_.data();
    const uint8_t* nb = v.node_byte_.data();
    const int32_t* tp = v.tok_ptr_.data();
    const int32_t* tk = v.tok_.data();
    const int32_t* ft = v.node_tok_.data();
    const uint8_t* pb = v.plain_below_.data();
    const int32_t* db = v.deepest_below_.data();
    const int32_t* shape = sig.data();
    const uint8_t* cl = classes_;
    const size_t nc = static_cast<size_t>(nc_);
    // the region's states that every plain byte leads back to (a string's contents): below them a plain subtree
    // stays put, so its tokens are set without walking it
    const size_t rows = sig.size() / nc;
    std::vector<uint8_t> keeps(rows + 1, 1);
    keeps[0] = 0;
    for (size_t q = 1; q <= rows; ++q)
      for (int b = 0x20; b < 0x7F && keeps[q]; ++b)
        if (Vocab::plain(static_cast<uint8_t>(b)) && shape[(q - 1) * nc + cl[b]] != static_cast<int32_t>(q)) keeps[q] = 0;
    uint32_t* stay = bits.data();
    auto stay_all = [stay, tk](int32_t from, int32_t to) {  // the tokens tok_[from .. to)
      for (int32_t j = from; j < to; ++j) stay[tk[j] >> 5] |= 1u << (tk[j] & 31);
    };
    std::vector<int32_t> stack(static_cast<size_t>(v.max_len_) + 1);
    stack[0] = 1;
    int32_t deepest = 0;
    int32_t k = 0;
    while (k < N) {
      const int32_t d = nd[k];
      const int32_t c = shape[static_cast<size_t>(stack[d - 1] - 1) * nc + cl[nb[k]]];
      if (c == 0) {
        k = ne[k];
        continue;
      }
      if (c < 0) {
        r->exit_node.push_back(k);
        r->exit_idx.push_back(-c - 1);
        k = ne[k];
        continue;
      }
      stack[d] = c;
      deepest = std::max(deepest, d);
      stay[ft[k] >> 5] |= 1u << (ft[k] & 31);
      if (tp[k + 1] - tp[k] > 1) stay_all(tp[k] + 1, tp[k + 1]);  // tokens with the same bytes (rare)
      if (pb[k] && keeps[c]) {  // every token below stays in c
        stay_all(tp[k + 1], tp[ne[k]]);
        deepest = std::max(deepest, db[k]);
        k = ne[k];
        continue;
      }
      ++k;
    }
    bits.pop_back();
    r->stay = std::move(bits);
    stay = r->stay.data();
    r->depth = deepest;
    size_t nz = 0;
    for (int32_t w = 0; w < words(); ++w) nz += stay[w] != 0;
    r->stay_words.resize(nz + 1);
    int32_t* at = r->stay_words.data();
    for (int32_t w = 0, i = 0; w < words(); ++w) {  // branch-free: each word is written, a set one keeps its place
      at[i] = w;
      i += stay[w] != 0;
    }
    r->stay_words.pop_back();
    for (int32_t w : r->stay_words) r->stay_count += popcount32(stay[w]);
    std::vector<char> used;
    for (int32_t x : r->exit_idx) {
      if (x >= static_cast<int32_t>(used.size())) used.resize(static_cast<size_t>(x) + 1, 0);
      used[x] = 1;
    }
    for (int32_t x = 0; x < static_cast<int32_t>(used.size()); ++x)
      if (used[x]) r->used_exits.push_back(x);
    uint64_t h = 1469598103934665603ULL;
    auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ULL; };
    for (int32_t w : r->stay_words) mix((static_cast<uint64_t>(w) << 32) | r->stay[w]);
    for (size_t i = 0; i < r->exit_node.size(); ++i)
      mix((static_cast<uint64_t>(r->exit_node[i]) << 32) | static_cast<uint32_t>(r->exit_idx[i]));
    r->content = h;
    if (share_) vocab_->share_region(key, r);
    std::lock_guard<std::mutex> lock(regions_mutex_);
    by_prefix_.emplace(rows_within(sig, layers, r->depth), r);
    if (std::find(depths_.begin(), depths_.end(), r->depth) == depths_.end()) depths_.push_back(r->depth);
    return regions_.emplace(sig, std::move(r)).first->second;
  }

  // A region state's entry: the region's stay tokens, then what its exits add. A region that sets few words (a
  // number's digit tokens) is built from those words only, so its cost follows its tokens; otherwise (a string's
  // contents) copying and scanning every word is faster.
  void region_entry(int32_t s, const Region& r, const std::vector<int32_t>& exits, Entry* e) const {
    const int32_t W = words();
    if (static_cast<int64_t>(r.stay_words.size()) * 16 < W) {
      sparse_region_entry(s, r, exits, e);
      return;
    }
    // the region's counts plus what the exits add: no scan of the words afterwards
    std::vector<uint32_t> bits(r.stay);
    int64_t count = r.stay_count, nonzero = static_cast<int64_t>(r.stay_words.size());
    auto set = [&](int32_t t) {
      uint32_t& word = bits[t >> 5];
      const uint32_t bit = 1u << (t & 31);
      nonzero += word == 0;
      count += (word & bit) == 0;
      word |= bit;
    };
    walk_exits(r, exits, set);
    if (accepting(s))
      for (int32_t t : vocab_->eos()) set(t);
    store_counted(std::move(bits), count, nonzero, e);
  }

  // Store a mask given as all its words: dense, or (word, bits) pairs when clearly smaller (a pair takes 8 bytes
  // against 4 for a dense word).
  void store_scanned(std::vector<uint32_t> bits, Entry* e) const {
    int64_t nonzero = 0, count = 0;
    for (uint32_t w : bits) {
      nonzero += w != 0;
      count += popcount32(w);
    }
    store_counted(std::move(bits), count, nonzero, e);
  }

  // store_scanned() for a mask whose tokens and non-zero words are counted already.
  void store_counted(std::vector<uint32_t> bits, int64_t count, int64_t nonzero, Entry* e) const {
    const int32_t W = words();
    e->count = count;
    if (nonzero * 4 >= W) {
      e->dense = std::move(bits);
      return;
    }
    e->sparse.reserve(static_cast<size_t>(nonzero));
    for (int32_t w = 0; w < W; ++w)
      if (bits[w]) e->sparse.emplace_back(w, bits[w]);
  }

  // region_entry() for a region that sets few words: only those words and the ones its exits add are touched
  // (a merge of two ascending lists).
  void sparse_region_entry(int32_t s, const Region& r, const std::vector<int32_t>& exits, Entry* e) const {
    // the thread's buffers, bound once (each use of a thread-local in a shared library looks it up)
    thread_local std::vector<uint32_t> scratch_buffer;  // all zero between calls
    thread_local std::vector<int32_t> added_buffer, merged_buffer;
    std::vector<uint32_t>& scratch = scratch_buffer;
    std::vector<int32_t>& added = added_buffer;
    std::vector<int32_t>& merged = merged_buffer;
    const int32_t W = words();
    if (scratch.size() != static_cast<size_t>(W)) scratch.assign(static_cast<size_t>(W), 0);
    added.clear();
    for (int32_t w : r.stay_words) scratch[w] = r.stay[w];
    auto set = [&](int32_t t) {
      uint32_t& word = scratch[t >> 5];
      if (word == 0) added.push_back(t >> 5);
      word |= 1u << (t & 31);
    };
    walk_exits(r, exits, set);
    if (accepting(s))
      for (int32_t t : vocab_->eos()) set(t);
    if (added.size() > SORTED_EXIT_WORDS) {  // exits scattered over many words: one scan beats sorting them
      std::vector<uint32_t> bits(scratch);
      std::memset(scratch.data(), 0, sizeof(uint32_t) * scratch.size());
      store_scanned(std::move(bits), e);
      return;
    }
    std::sort(added.begin(), added.end());
    merged.resize(r.stay_words.size() + added.size());
    std::merge(r.stay_words.begin(), r.stay_words.end(), added.begin(), added.end(), merged.begin());
    int64_t count = 0;
    for (int32_t w : merged) count += popcount32(scratch[w]);
    e->count = count;
    if (static_cast<int64_t>(merged.size()) * 4 < W) {
      e->sparse.resize(merged.size());
      for (size_t i = 0; i < merged.size(); ++i) e->sparse[i] = {merged[i], scratch[merged[i]]};
    } else {
      e->dense = scratch;
    }
    for (int32_t w : merged) scratch[w] = 0;
  }

  // The entry of state s. A region state's follows from its region's walk, the exit states that walk leads to and
  // whether s accepts: states alike in all three share one entry. The digit-count states of a bounded number
  // differ only past the longest digit token, so they mostly do: FuncQA's 885 region states need 422 entries
  // (llama3), which took about 30% off the index time of its compile.
  Entry* compute(int32_t s) const {
    std::vector<int32_t> sig, exits, layers;
    if (region_of(s, sig, exits, layers)) {
      const Region* r = canonical(region_walk(sig, layers));
      std::vector<int32_t> key;
      key.reserve(r->used_exits.size() + 3);
      const auto id = reinterpret_cast<uintptr_t>(r);
      key.push_back(static_cast<int32_t>(id & 0xFFFFFFFF));
      key.push_back(static_cast<int32_t>(static_cast<uint64_t>(id) >> 32));
      key.push_back(accepting(s) ? 1 : 0);
      for (int32_t u : r->used_exits) key.push_back(exits[u]);
      {
        std::lock_guard<std::mutex> lock(owned_mutex_);
        auto it = same_entry_.find(key);
        if (it != same_entry_.end()) return it->second;
      }
      auto e = std::make_unique<Entry>();
      region_entry(s, *r, exits, e.get());
      std::lock_guard<std::mutex> lock(owned_mutex_);
      auto [it, fresh] = same_entry_.emplace(std::move(key), e.get());
      if (fresh) owned_.push_back(std::move(e));
      return it->second;
    }
    Entry* e = own(std::make_unique<Entry>());
    const int32_t W = words();
    std::vector<int32_t> ids;
    walk(s, [&](int32_t t, int32_t) { ids.push_back(t); });
    if (accepting(s)) ids.insert(ids.end(), vocab_->eos().begin(), vocab_->eos().end());
    if (static_cast<int64_t>(ids.size()) * 8 < W) {  // few tokens: straight to sparse words
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (int32_t t : ids) {
        if (e->sparse.empty() || e->sparse.back().first != (t >> 5)) e->sparse.emplace_back(t >> 5, 0u);
        e->sparse.back().second |= 1u << (t & 31);
      }
      e->count = static_cast<int64_t>(ids.size());
      return e;
    }
    std::vector<uint32_t> bits(static_cast<size_t>(W), 0);
    for (int32_t t : ids) bits[t >> 5] |= 1u << (t & 31);
    store_scanned(std::move(bits), e);
    return e;
  }

  Entry* own(std::unique_ptr<Entry> e) const {
    std::lock_guard<std::mutex> lock(owned_mutex_);
    owned_.push_back(std::move(e));
    return owned_.back().get();
  }

  // The one region of this index with the same walk (stay tokens and exits) as r: regions of different shapes
  // can walk alike over a vocabulary (a digit count longer than every digit token), and their states then share
  // entries through it.
  const Region* canonical(const std::shared_ptr<const Region>& r) const {
    std::lock_guard<std::mutex> lock(owned_mutex_);
    auto known = canonical_of_.find(r.get());
    if (known != canonical_of_.end()) return known->second;
    const Region* found = r.get();
    auto [lo, hi] = by_content_.equal_range(r->content);
    for (auto it = lo; it != hi; ++it)
      if (it->second->same_walk(*r)) {
        found = it->second.get();
        break;
      }
    if (found == r.get()) by_content_.emplace(r->content, r);
    canonical_of_.emplace(r.get(), found);
    kept_.push_back(r);  // canonical_of_ is keyed by address: keep every region it names alive
    return found;
  }

  mutable std::mutex owned_mutex_;  // guards the four below
  mutable std::vector<std::unique_ptr<Entry>> owned_;  // every entry computed; entries_ points into them
  mutable std::unordered_map<std::vector<int32_t>, Entry*, SigHash> same_entry_;
  mutable std::unordered_multimap<uint64_t, std::shared_ptr<const Region>> by_content_;
  mutable std::unordered_map<const Region*, const Region*> canonical_of_;
  mutable std::vector<std::shared_ptr<const Region>> kept_;
  mutable std::mutex regions_mutex_;
  mutable std::unordered_map<std::vector<int32_t>, std::shared_ptr<const Region>, SigHash> regions_;
  // walks by the signature rows they depend on (see walked_alike), and the depths those walks reached
  mutable std::unordered_map<std::vector<int32_t>, std::shared_ptr<const Region>, SigHash> by_prefix_;
  mutable std::vector<int32_t> depths_;
  std::vector<int32_t> class_size_, width_;
  std::vector<Mask> class_bits_;  // the bytes of each class

  std::shared_ptr<Vocab> vocab_;
  bool share_ = true;
  int32_t n_ = 0, nc_ = 0;
  carray<int32_t> trans_array_;
  const int32_t* trans_ = nullptr;  // trans_array_'s rows, n_ x nc_
  uint8_t classes_[256];
  std::vector<std::pair<int32_t, int32_t>> class_runs_;  // (first byte, class) of each run of bytes in one class
  std::vector<uint8_t> accepting_;
  std::unique_ptr<std::atomic<Entry*>[]> entries_;
  std::atomic<int64_t> computed_{0};
  mutable std::atomic<int64_t> walks_{0};
};

// ---------------------------------------------------------------------------------------------------------------
// Batch operations.

// Fill rows of an int32[B, W] bitmask. Each row's source is (index, state) for a guided row, an int32[W] array to
// copy (a cached mask: text mode, EOS only), or None (every token allowed). The copying runs without the GIL,
// on `threads` threads for large batches.
void fill_bitmasks(py::array_t<int32_t, py::array::c_style> out, py::list sources, py::array_t<int32_t> rows,
                   int threads) {
  if (out.ndim() != 2) throw std::invalid_argument("the bitmask must be int32[batch, words]");
  const int64_t B = out.shape(0), W = out.shape(1);
  const int64_t n = static_cast<int64_t>(py::len(sources));
  auto rows_v = rows.unchecked<1>();
  if (rows_v.shape(0) != n) throw std::invalid_argument("one row number per source");
  struct Job {
    Index* index;
    int32_t state;
    const int32_t* array;
    int64_t row;
  };
  std::vector<Job> jobs(n);
  std::vector<py::object> keep;  // arrays stay alive while we copy from them
  for (int64_t i = 0; i < n; ++i) {
    py::handle src = sources[i];
    int64_t row = rows_v(i);
    if (row < 0 || row >= B) throw std::out_of_range("row " + std::to_string(row) + " outside the bitmask");
    Job j{nullptr, 0, nullptr, row};
    if (src.is_none()) {
    } else if (py::isinstance<py::tuple>(src)) {
      auto tup = src.cast<py::tuple>();
      j.index = tup[0].cast<Index*>();
      j.state = tup[1].cast<int32_t>();
      if (j.index->words() != W) throw std::invalid_argument("the bitmask width does not match the vocabulary");
      if (j.state != FINAL && (j.state < 0 || j.state >= j.index->num_states()))  // checked here: a worker
        throw std::out_of_range("state " + std::to_string(j.state) + " is not in the automaton");  // may not throw
    } else {
      auto arr = py::array_t<int32_t, py::array::c_style>::ensure(src);
      if (!arr || arr.ndim() != 1 || arr.shape(0) != W)
        throw std::invalid_argument("a mask source must be (index, state), an int32[words] array or None");
      j.array = arr.data();
      keep.push_back(arr);
    }
    jobs[i] = j;
  }
  int32_t* base = out.mutable_data();
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const Job& j = jobs[i];
      int32_t* dst = base + j.row * W;
      if (j.index != nullptr)
        j.index->fill(j.state, dst);
      else if (j.array != nullptr)
        std::memcpy(dst, j.array, sizeof(int32_t) * W);
      else
        std::memset(dst, 0xFF, sizeof(int32_t) * W);
    }
  };
  py::gil_scoped_release release;
  threads = std::max(1, std::min<int>(threads, static_cast<int>(n / 16)));
  if (threads <= 1) {
    run(0, n);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    int64_t lo = t * chunk, hi = std::min(n, lo + chunk);
    if (lo < hi) pool.emplace_back(run, lo, hi);
  }
  for (auto& th : pool) th.join();
}

// logits[r, t] = -inf for every t < vocab whose bit is 0 in bitmask[r] (float32, rows `stride` floats apart);
// columns at and past the bitmask's reach are masked too. Takes data pointers; no torch here.
// Keeps the 32 logits at `lane` whose bit is set in `bits` and sets the others to -inf, without a branch per
// token: on string states most words are mixed, and a branch per bit mispredicted there (2x slower than
// xgrammar's kernel on such masks). SSE2 is in every x86-64; elsewhere the scalar select.
inline void select_word(float* lane, uint32_t bits) {
#if defined(__SSE2__)
  const __m128i ninf = _mm_set1_epi32(static_cast<int>(0xFF800000u));
  const __m128i word = _mm_set1_epi32(static_cast<int>(bits));
  for (int g = 0; g < 8; ++g) {
    const __m128i lanes = _mm_set_epi32(static_cast<int>(1u << (4 * g + 3)), static_cast<int>(1u << (4 * g + 2)),
                                        static_cast<int>(1u << (4 * g + 1)), static_cast<int>(1u << (4 * g)));
    const __m128i keep = _mm_cmpeq_epi32(_mm_and_si128(word, lanes), lanes);
    auto* at = reinterpret_cast<__m128i*>(lane + 4 * g);
    const __m128i v = _mm_loadu_si128(at);
    _mm_storeu_si128(at, _mm_or_si128(_mm_and_si128(keep, v), _mm_andnot_si128(keep, ninf)));
  }
#else
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int k = 0; k < 32; ++k) lane[k] = (bits >> k) & 1u ? lane[k] : ninf;
#endif
}

void apply_bitmask_f32(uintptr_t logits_ptr, int64_t rows, int64_t vocab, int64_t stride, uintptr_t mask_ptr,
                       int64_t words, uintptr_t index_ptr, int64_t n_index) {
  auto* logits = reinterpret_cast<float*>(logits_ptr);
  const auto* mask = reinterpret_cast<const uint32_t*>(mask_ptr);
  const auto* which = reinterpret_cast<const int32_t*>(index_ptr);
  const float ninf = -std::numeric_limits<float>::infinity();
  py::gil_scoped_release release;
  const int64_t n = which != nullptr ? n_index : rows;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = which != nullptr ? which[i] : i;
    float* row = logits + r * stride;
    const uint32_t* m = mask + r * words;
    const int64_t covered = std::min<int64_t>(vocab, words * 32);
    int64_t t = 0;
    for (int64_t w = 0; t < covered; ++w, t += 32) {
      uint32_t bits = m[w];
      if (bits == 0xFFFFFFFFu) continue;
      const int64_t end = std::min<int64_t>(t + 32, covered);
      if (bits == 0) {
        for (int64_t u = t; u < end; ++u) row[u] = ninf;
        continue;
      }
      if (end - t == 32) {
        select_word(row + t, bits);
        continue;
      }
      for (int64_t u = t; u < end; ++u)
        if (!((bits >> (u - t)) & 1)) row[u] = ninf;
    }
    for (int64_t u = covered; u < vocab; ++u) row[u] = ninf;
  }
}

// The context-free guide (temporarily included here: it reads the Vocab above).
#include "cfg_bindings.h"

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "tooldec's compiled core: grammar IR to DFA, products, the token index and batch mask operations.";
  py::register_exception<SchemaTooLarge>(m, "AutomatonTooLarge", PyExc_ValueError);
  m.def("compile_irs", &compile_irs,
        "A grammar IR node table to one pruned DFA per root (Thompson NFA, subset construction), on up to "
        "`threads` threads.",
        py::arg("code"), py::arg("ptr"), py::arg("masks"), py::arg("dfas"), py::arg("roots"),
        py::arg("max_nfa_states"), py::arg("max_dfa_states"), py::arg("threads") = 1);
  m.def("product", &product, "Intersection or difference of two DFAs, pruned.", py::arg("a_trans"),
        py::arg("a_classes"), py::arg("a_accepting"), py::arg("a_start"), py::arg("b_trans"), py::arg("b_classes"),
        py::arg("b_accepting"), py::arg("b_start"), py::arg("difference"), py::arg("max_states"));
  m.def("union_dfas", &union_dfas, "Union of DFAs given as (trans, classes, accepting, start) tuples, pruned.",
        py::arg("dfas"), py::arg("max_states"));
  m.def("minimize_dfa", &minimize_dfa, "The minimal DFA of a pruned one: dead state 0, start 1, breadth-first order.",
        py::arg("trans"), py::arg("classes"), py::arg("accepting"), py::arg("start"));
  py::class_<Vocab, std::shared_ptr<Vocab>>(m, "Vocab")
      .def(py::init<carray<uint8_t>, carray<int64_t>, carray<int32_t>, int32_t>(), py::arg("flat"),
           py::arg("offsets"), py::arg("eos"), py::arg("size"))
      .def_property_readonly("size", &Vocab::size)
      .def_property_readonly("words", &Vocab::words)
      .def_property_readonly("num_nodes", &Vocab::num_nodes)
      .def_property_readonly("shared_regions", &Vocab::shared_regions)
      .def_property_readonly("pinned_regions", &Vocab::pinned_regions);
  py::class_<Index>(m, "Index")
      .def(py::init<std::shared_ptr<Vocab>, carray<int32_t>, carray<uint8_t>, carray<bool>, bool>(),
           py::arg("vocab"), py::arg("trans"), py::arg("classes"), py::arg("accepting"),
           py::arg("share_regions") = true)
      .def_property_readonly("num_states", &Index::num_states)
      .def("finished", &Index::finished, "Per state: accepting with no way on (only EOS may follow), as a list.")
      .def_property_readonly("words", &Index::words)
      .def_property_readonly("computed", &Index::computed)
      .def_property_readonly("mask_bytes", &Index::mask_bytes)
      .def_property_readonly("num_masks", &Index::num_masks)
      .def("cached", &Index::cached, py::arg("state"))
      .def_property_readonly("num_regions", &Index::num_regions)
      .def_property_readonly("num_walks", &Index::num_walks)
      .def("pin_regions", &Index::pin_regions,
           "Keep this index's region walks in its vocabulary for every later index; returns how many.")
      .def("compute_all", &Index::compute_all, py::call_guard<py::gil_scoped_release>(), py::arg("threads") = 1)
      .def("compute_regions", &Index::compute_regions, py::call_guard<py::gil_scoped_release>(),
           py::arg("threads") = 1)
      .def("warm_path", &Index::warm_path, py::call_guard<py::gil_scoped_release>(), py::arg("state"),
           py::arg("limit"))
      .def("next_state", &Index::next_state, py::arg("state"), py::arg("token"))
      .def(
          "advance_many",
          [](const Index& self, int32_t s, carray<int32_t> tokens) {
            // the state after each token in turn; stops at the first DEAD. Returns (states walked, last state)
            const int32_t* t = tokens.data();
            int64_t k = 0;
            for (; k < tokens.shape(0); ++k) {
              int32_t nx = self.next_state(s, t[k]);
              if (nx == DEAD) break;
              s = nx;
            }
            return py::make_tuple(k, s);
          },
          py::arg("state"), py::arg("tokens"))
      .def(
          "count",
          [](Index& self, int32_t s) {
            py::gil_scoped_release r;
            return self.entry(s).count;
          },
          py::arg("state"))
      .def(
          "fill",
          [](Index& self, int32_t s, py::array_t<int32_t, py::array::c_style> out) {
            if (out.ndim() != 1 || out.shape(0) != self.words())
              throw std::invalid_argument("the row must be int32[words]");
            // the GIL stays held: a cached mask is a 16 KB copy (~0.3 us at 128k tokens), less than releasing
            // and taking it back costs; a first visit's walk is the exception (fill_bitmasks releases it)
            self.fill(s, out.mutable_data());
          },
          py::arg("state"), py::arg("out"))
      .def(
          "fill_at",
          [](Index& self, int32_t s, uintptr_t ptr) { self.fill(s, reinterpret_cast<int32_t*>(ptr)); },
          "fill() into int32[words] at a data pointer the caller checked (Guide.fill_bitmask keeps its array's)",
          py::arg("state"), py::arg("ptr"))
      .def(
          "transitions",
          [](const Index& self, int32_t s) {
            // sorted allowed ids (EOS included when accepting) and the state each leads to; walks afresh
            std::vector<std::pair<int32_t, int32_t>> got;
            {
              py::gil_scoped_release r;
              self.walk(s, [&](int32_t t, int32_t nx) { got.emplace_back(t, nx); });
              if (self.accepting(s))
                for (int32_t e : self.vocab()->eos()) got.emplace_back(e, FINAL);
              std::sort(got.begin(), got.end());
              got.erase(std::unique(got.begin(), got.end(),
                                    [](auto& x, auto& y) { return x.first == y.first; }),
                        got.end());
            }
            py::array_t<int32_t> ids(static_cast<py::ssize_t>(got.size())), nxt(static_cast<py::ssize_t>(got.size()));
            for (size_t i = 0; i < got.size(); ++i) {
              ids.mutable_data()[i] = got[i].first;
              nxt.mutable_data()[i] = got[i].second;
            }
            return py::make_tuple(ids, nxt);
          },
          py::arg("state"));
  m.def("fill_bitmasks", &fill_bitmasks, "Fill rows of an int32[B, W] bitmask from per-row sources.",
        py::arg("out"), py::arg("sources"), py::arg("rows"), py::arg("threads") = 1);
  m.def("apply_bitmask_f32", &apply_bitmask_f32, "Set disallowed float32 logits to -inf in place.",
        py::arg("logits_ptr"), py::arg("rows"), py::arg("vocab"), py::arg("stride"), py::arg("mask_ptr"),
        py::arg("words"), py::arg("index_ptr") = 0, py::arg("n_index") = 0);
  cfg::register_cfg(m);
  m.attr("DEAD") = DEAD;
  m.attr("FINAL") = FINAL;
}
