// The token index's per-state entries (index.h): a narrow state's from a walk of the trie, a wide state's from
// its region, whose walk is shared by the states, indexes and compiles of the same shape.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index.h"

namespace tooldec {

bool Index::region_of(int32_t s, std::vector<int32_t>& sig, std::vector<int32_t>& exits, std::vector<int32_t>& layers) const {
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
  thread_local std::vector<int32_t> local_buffer;  // the region's states in breadth-first order
  std::vector<int32_t>& local = local_buffer;
  local.assign(1, s);
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

std::vector<int32_t> Index::shape_key(const std::vector<int32_t>& sig) const {
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

std::shared_ptr<const Region> Index::cached_region(const std::vector<int32_t>& sig, std::vector<int32_t>& key) const {
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

std::shared_ptr<const Region> Index::walked_alike(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers) const {
  std::lock_guard<std::mutex> lock(regions_mutex_);
  for (int32_t depth : depths_) {
    auto it = by_prefix_.find(rows_within(sig, layers, depth));
    if (it != by_prefix_.end()) return regions_.emplace(sig, it->second).first->second;
  }
  return nullptr;
}

std::vector<int32_t> Index::rows_within(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers, int32_t depth) const {
  const size_t rows = static_cast<size_t>(layers[std::min(static_cast<size_t>(depth), layers.size() - 1)]);
  return std::vector<int32_t>(sig.begin(), sig.begin() + static_cast<std::ptrdiff_t>(rows) * nc_);
}

std::shared_ptr<const Region> Index::region_walk(const std::vector<int32_t>& sig, const std::vector<int32_t>& layers) const {
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
  std::vector<uint8_t> path(static_cast<size_t>(v.max_len_) + 1);  // the bytes down to the node (path[d - 1]: depth d)
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
    path[d - 1] = nb[k];
    if (c < 0 && ne[k] == k + 1) {  // an exit on a leaf of the trie: its tokens, whatever state the exit leads to
      stay_all(tp[k], tp[k + 1]);
      k = ne[k];
      continue;
    }
    if (c < 0) {
      r->exit_node.push_back(k);
      r->exit_idx.push_back(-c - 1);
      r->exit_path.insert(r->exit_path.end(), path.begin(), path.begin() + d);
      r->exit_path_at.push_back(static_cast<int32_t>(r->exit_path.size()));
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
  r->stay_sparse.reserve(r->stay_words.size());
  for (int32_t w : r->stay_words) {
    r->stay_sparse.emplace_back(w, stay[w]);
    r->stay_count += popcount32(stay[w]);
  }
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

void Index::region_entry(int32_t s, const Region& r, const std::vector<int32_t>& at, Entry* e) const {
  const int32_t W = words();
  if (static_cast<int64_t>(r.stay_words.size()) * 4 < W) {
    sparse_region_entry(s, r, at, e);
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
  walk_exits(r, at, set);
  if (accepting(s))
    for (int32_t t : vocab_->eos()) set(t);
  store_counted(std::move(bits), count, nonzero, e);
}

void Index::store_scanned(std::vector<uint32_t> bits, Entry* e) const {
  int64_t nonzero = 0, count = 0;
  for (uint32_t w : bits) {
    nonzero += w != 0;
    count += popcount32(w);
  }
  store_counted(std::move(bits), count, nonzero, e);
}

void Index::store_counted(std::vector<uint32_t> bits, int64_t count, int64_t nonzero, Entry* e) const {
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

void Index::sparse_region_entry(int32_t s, const Region& r, const std::vector<int32_t>& at, Entry* e) const {
  // the thread's buffers, bound once (each use of a thread-local in a shared library looks it up)
  thread_local std::vector<uint32_t> scratch_buffer;  // all zero between calls
  thread_local std::vector<int32_t> added_buffer;
  std::vector<uint32_t>& scratch = scratch_buffer;
  std::vector<int32_t>& added = added_buffer;  // the words the exits (and EOS) set, in the order first set
  const int32_t W = words();
  if (scratch.size() != static_cast<size_t>(W)) scratch.assign(static_cast<size_t>(W), 0);
  added.clear();
  uint32_t* sc = scratch.data();
  auto set = [sc, &added](int32_t t) {
    uint32_t& word = sc[t >> 5];
    if (word == 0) added.push_back(t >> 5);
    word |= 1u << (t & 31);
  };
  walk_exits(r, at, set);
  if (accepting(s))
    for (int32_t t : vocab_->eos()) set(t);
  if (static_cast<int64_t>(added.size() + r.stay_sparse.size()) * 4 >= W) {  // too many words for a sparse entry
    std::vector<uint32_t> bits(scratch);
    for (int32_t w : added) sc[w] = 0;
    for (const auto& [w, b] : r.stay_sparse) bits[w] |= b;
    store_scanned(std::move(bits), e);
    return;
  }
  // sorted by word, not token: a number's last digit-count states leave through a thousand digit tokens that
  // lie in a few hundred words
  std::sort(added.begin(), added.end());
  e->base = &r.stay_sparse;
  e->sparse.resize(added.size());
  int64_t count = r.stay_count;
  const auto* st = r.stay_sparse.data();
  const size_t S = r.stay_sparse.size();
  size_t i = 0;
  for (size_t j = 0; j < added.size(); ++j) {
    const int32_t w = added[j];
    while (i < S && st[i].first < w) ++i;  // both ascending: one pass
    const uint32_t stay = i < S && st[i].first == w ? st[i].second : 0u;
    count += popcount32(sc[w] & ~stay);
    e->sparse[j] = {w, sc[w] & ~stay};
    sc[w] = 0;
  }
  e->count = count;
}

const Region* Index::alike_region(int32_t s) const {
  const Alike* a = alike_.load(std::memory_order_acquire);
  if (a == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(a->mutex);
  if (a->found.empty()) return nullptr;
  for (int32_t d = 1; d <= a->rounds; ++d) {
    auto it = a->found.find(Alike::key(d, a->cls[static_cast<size_t>(d - 1) * n_ + s]));
    if (it != a->found.end()) return it->second;
  }
  return nullptr;
}

void Index::remember_alike(int32_t s, const Region* r) const {
  const Alike* a = alike_.load(std::memory_order_acquire);
  if (a == nullptr) return;
  int32_t d = r->depth + 1;
  if (d > a->rounds) {  // a deeper walk: shared only through a class no round would split
    d = a->rounds;
    if (!a->settled[a->cls[static_cast<size_t>(d - 1) * n_ + s]]) return;
  }
  std::lock_guard<std::mutex> lock(a->mutex);
  a->found.emplace(Alike::key(d, a->cls[static_cast<size_t>(d - 1) * n_ + s]), r);
}

bool Index::exits_along(int32_t s, const Region& r, std::vector<int32_t>& at) const {
  at.resize(r.exit_node.size());
  const uint8_t* path = r.exit_path.data();
  for (size_t i = 0; i < r.exit_node.size(); ++i) {
    int32_t q = s;
    const int32_t from = r.exit_path_at[i], to = r.exit_path_at[i + 1];
    for (int32_t j = from; j < to; ++j) {
      if (q == DEAD || width(q) <= NARROW) return false;  // left the region before the exit's last byte
      q = step(q, path[j]);
    }
    if (q == DEAD || width(q) > NARROW) return false;  // the last byte must leave the region for a live state
    at[i] = q;
  }
  return true;
}

void Index::share_alike(int32_t rounds) {
  if (rounds < 1 || alike_.load(std::memory_order_acquire) != nullptr) return;
  auto a = std::make_unique<Alike>();
  a->rounds = rounds;
  a->cls.assign(static_cast<size_t>(rounds) * n_, -1);
  std::vector<int32_t> wide;
  for (int32_t s = 1; s < n_; ++s)
    if (width(s) > NARROW) wide.push_back(s);
  // a round's classes: rows of labels (per byte class: 0 dead, 1 narrow, 2 + the last round's class of a wide
  // state) interned in an open-addressing table of (hash, a state with that row, its class); a match is
  // confirmed by comparing the two states' rows
  size_t cap = 16;
  while (cap < 2 * wide.size()) cap *= 2;
  struct Slot {
    uint64_t hash;
    int32_t state, cls;
  };
  std::vector<Slot> table(cap);
  std::vector<uint32_t> label(n_, 1);  // this round's label of each state: 0 dead, 1 narrow, 2 + class if wide
  label[DEAD] = 0;
  for (int32_t s : wide) label[s] = 2;
  const uint32_t* lb = label.data();
  int32_t classes = 1;
  for (int32_t d = 1; d <= rounds; ++d) {
    int32_t* cls = a->cls.data() + static_cast<size_t>(d - 1) * n_;
    std::fill(table.begin(), table.end(), Slot{0, -1, -1});
    int32_t next = 0;
    for (int32_t s : wide) {
      const int32_t* tr = trans_ + static_cast<size_t>(s) * nc_;
      uint64_t h0 = 1469598103934665603ULL, h1 = h0 ^ 1;  // two chains of multiplies at once
      int32_t c = 0;
      for (; c + 1 < nc_; c += 2) {
        h0 = (h0 ^ lb[tr[c]]) * 1099511628211ULL;
        h1 = (h1 ^ lb[tr[c + 1]]) * 1099511628211ULL;
      }
      if (c < nc_) h0 = (h0 ^ lb[tr[c]]) * 1099511628211ULL;
      uint64_t h = h0 ^ (h1 << 32 | h1 >> 32);
      h ^= h >> 29;
      size_t i = static_cast<size_t>(h) & (cap - 1);
      for (;; i = (i + 1) & (cap - 1)) {
        Slot& slot = table[i];
        if (slot.state < 0) {
          slot = {h, s, next++};
          break;
        }
        if (slot.hash != h) continue;
        const int32_t* other = trans_ + static_cast<size_t>(slot.state) * nc_;
        int32_t k = 0;
        while (k < nc_ && lb[tr[k]] == lb[other[k]]) ++k;
        if (k == nc_) break;
      }
      cls[s] = table[i].cls;
    }
    for (int32_t s : wide) label[s] = 2 + static_cast<uint32_t>(cls[s]);
    if (next == classes && d < rounds) {  // no class split: none ever will (the same classes in the same order)
      for (int32_t e = d + 1; e <= rounds; ++e)
        std::memcpy(a->cls.data() + static_cast<size_t>(e - 1) * n_, cls, sizeof(int32_t) * static_cast<size_t>(n_));
      break;
    }
    classes = next;
  }
  // The last round's classes no later round would split: a class that is all of one class of the round before
  // (refinement only splits), whose states lead only to such classes, so that each round to come sees them alike
  // again. States of such a class are alike however far ahead (a string's contents and its UTF-8 and escape
  // states): they share a walk of any depth.
  const int32_t* last = a->cls.data() + static_cast<size_t>(rounds - 1) * n_;
  const int32_t* before = rounds > 1 ? last - n_ : nullptr;
  int32_t count = 0;
  for (int32_t s : wide) count = std::max(count, last[s] + 1);
  std::vector<int32_t> members(count, 0), of_before(count, 0), before_size(n_ + 1, 0);
  for (int32_t s : wide) {
    ++members[last[s]];
    of_before[last[s]] = before != nullptr ? before[s] : 0;
    ++before_size[before != nullptr ? before[s] : 0];
  }
  a->settled.assign(count, 0);
  for (int32_t c = 0; c < count; ++c) a->settled[c] = before_size[of_before[c]] == members[c];
  for (bool changed = true; changed;) {  // unsettle the classes that lead to unsettled ones (backwards: few passes)
    changed = false;
    for (auto it = wide.rbegin(); it != wide.rend(); ++it) {
      if (!a->settled[last[*it]]) continue;
      const int32_t* tr = trans_ + static_cast<size_t>(*it) * nc_;
      for (int32_t c = 0; c < nc_; ++c)
        if (tr[c] != DEAD && width(tr[c]) > NARROW && !a->settled[last[tr[c]]]) {
          a->settled[last[*it]] = 0;
          changed = true;
          break;
        }
    }
  }
  const Alike* expected = nullptr;
  if (alike_.compare_exchange_strong(expected, a.get(), std::memory_order_acq_rel)) alike_owner_ = std::move(a);
}

Entry* Index::compute(int32_t s) const {
  // the thread's buffers, bound once: allocating them afresh for each state took a fifth of an index's time
  thread_local std::vector<int32_t> sig_buffer, exits_buffer, layers_buffer, at_buffer, key_buffer, ids_buffer;
  std::vector<int32_t>& sig = sig_buffer;
  std::vector<int32_t>& exits = exits_buffer;
  std::vector<int32_t>& layers = layers_buffer;
  std::vector<int32_t>& at = at_buffer;
  sig.clear();
  exits.clear();
  const Region* r = width(s) > NARROW ? alike_region(s) : nullptr;
  if (r != nullptr && !exits_along(s, *r, at)) r = nullptr;
  if (r == nullptr && region_of(s, sig, exits, layers)) {
    r = canonical(region_walk(sig, layers));
    at.resize(r->exit_idx.size());
    for (size_t i = 0; i < at.size(); ++i) at[i] = exits[r->exit_idx[i]];
    remember_alike(s, r);
  }
  if (r != nullptr) {
    // states alike in their region's walk, its exit states and whether they accept share one entry; a state
    // found through its class leaves through states of its own, which must agree on each exit of the walk
    std::vector<int32_t>& key = key_buffer;
    key.clear();
    const auto id = reinterpret_cast<uintptr_t>(r);
    key.push_back(static_cast<int32_t>(id & 0xFFFFFFFF));
    key.push_back(static_cast<int32_t>(static_cast<uint64_t>(id) >> 32));
    key.push_back(accepting(s) ? 1 : 0);
    const size_t head = key.size();
    key.resize(head + (r->used_exits.empty() ? 0 : static_cast<size_t>(r->used_exits.back()) + 1), DEAD);
    bool agree = true;
    for (size_t i = 0; i < at.size() && agree; ++i) {
      int32_t& x = key[head + static_cast<size_t>(r->exit_idx[i])];
      agree = x == DEAD || x == at[i];
      x = at[i];
    }
    if (agree) {
      std::lock_guard<std::mutex> lock(owned_mutex_);
      auto it = same_entry_.find(key);
      if (it != same_entry_.end()) return it->second;
    }
    auto e = std::make_unique<Entry>();
    region_entry(s, *r, at, e.get());
    if (!agree) return own(std::move(e));
    std::lock_guard<std::mutex> lock(owned_mutex_);
    auto [it, fresh] = same_entry_.emplace(key, e.get());
    if (fresh) owned_.push_back(std::move(e));
    return it->second;
  }
  Entry* e = own(std::make_unique<Entry>());
  const int32_t W = words();
  std::vector<int32_t>& ids = ids_buffer;
  ids.clear();
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

Entry* Index::own(std::unique_ptr<Entry> e) const {
  std::lock_guard<std::mutex> lock(owned_mutex_);
  owned_.push_back(std::move(e));
  return owned_.back().get();
}

const Region* Index::canonical(const std::shared_ptr<const Region>& r) const {
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

}  // namespace tooldec
