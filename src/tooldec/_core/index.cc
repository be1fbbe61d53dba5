// The token index's construction, its whole-automaton warm-ups (on parallel_for) and its statistics.
#include "index.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "thread_pool.h"

namespace tooldec {

Index::Index(std::shared_ptr<Vocab> vocab, std::shared_ptr<const int32_t> trans, int32_t n, int32_t nc,
             const uint8_t* classes, const bool* accepting, bool share_regions)
    : vocab_(std::move(vocab)), share_(share_regions), n_(n), nc_(nc), trans_owner_(std::move(trans)) {
  trans_ = trans_owner_.get();
  std::memcpy(classes_, classes, 256);
  accepting_.assign(accepting, accepting + n_);
  class_size_.assign(nc_, 0);
  class_bits_.assign(nc_, Mask{0, 0, 0, 0});
  for (int b = 0; b < 256; ++b) {
    class_size_[classes_[b]] += 1;
    class_bits_[classes_[b]][b >> 6] |= 1ULL << (b & 63);
    if (b == 0 || classes_[b] != classes_[b - 1]) class_runs_.emplace_back(b, classes_[b]);
  }
  // each state's live bytes, branch-free (the compiler vectorizes it)
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

std::vector<bool> Index::finished() const {
  std::vector<bool> out(n_, false);
  for (int32_t s = 1; s < n_; ++s) out[s] = accepting_[s] && width_[s] == 0;
  return out;
}

int64_t Index::pin_regions() const {
  std::lock_guard<std::mutex> lock(regions_mutex_);
  for (const auto& [sig, r] : regions_) vocab_->pin_region(shape_key(sig), r);
  return static_cast<int64_t>(regions_.size());
}

void Index::compute_all(int threads) {
  // states handed out in blocks of 16, a thread per 64 states at most
  parallel_for(1, n_, 16, std::min(threads, n_ / 64), [&](int64_t s) { entry(static_cast<int32_t>(s)); });
}

void Index::compute_regions(int threads) {
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
  parallel_for(0, static_cast<int64_t>(todo.size()), 1, threads, [&](int64_t i) {
    region_walk(todo[static_cast<size_t>(i)].first, todo[static_cast<size_t>(i)].second);
  });
}

void Index::warm_path(int32_t s, int32_t limit) {
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

int64_t Index::mask_bytes() const {
  std::lock_guard<std::mutex> lock(owned_mutex_);
  int64_t total = 0;
  for (const auto& e : owned_)
    total += static_cast<int64_t>(e->dense.size() * sizeof(uint32_t) + e->sparse.size() * sizeof(e->sparse[0]));
  return total;
}

int64_t Index::num_masks() const {
  std::lock_guard<std::mutex> lock(owned_mutex_);
  return static_cast<int64_t>(owned_.size());
}

}  // namespace tooldec
