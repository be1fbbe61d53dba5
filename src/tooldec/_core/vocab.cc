// The vocabulary's trie construction and its cache of region walks.
#include "vocab.h"

#include <cstring>

namespace tooldec {

Vocab::Vocab(std::vector<uint8_t> flat, std::vector<int64_t> offsets, std::vector<int32_t> eos, int32_t size)
    : bytes_(std::move(flat)), off_(std::move(offsets)), size_(size), eos_(std::move(eos)) {
  words_ = (size + 31) / 32;
  off_.resize(size + 1, off_.back());  // ids past the tokenizer (model padding) have no bytes
  build_trie();
}

std::shared_ptr<const Region> Vocab::shared_region(const std::vector<int32_t>& key, bool shared) {
  {
    std::lock_guard<std::mutex> lock(shared_mutex_);
    auto pin = pinned_.find(key);
    if (pin != pinned_.end()) return pin->second;
  }
  return shared ? shared_.get(key) : nullptr;
}

void Vocab::share_region(const std::vector<int32_t>& key, std::shared_ptr<const Region> r) {
  shared_.put(key, std::move(r));
}

void Vocab::pin_region(const std::vector<int32_t>& key, std::shared_ptr<const Region> r) {
  std::lock_guard<std::mutex> lock(shared_mutex_);
  pinned_.emplace(key, std::move(r));
  has_pinned_.store(true, std::memory_order_release);
}
void Vocab::build_trie() {
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
  bytes_below_.assign(count, Mask{0, 0, 0, 0});
  for (int32_t k = count - 1; k >= 0; --k) {
    Mask& below = bytes_below_[k];
    for (int32_t q = k + 1; q < node_end_[k]; q = node_end_[q]) {
      plain_below_[k] &= plain_below_[q] & static_cast<uint8_t>(plain(node_byte_[q]));
      deepest_below_[k] = std::max(deepest_below_[k], deepest_below_[q]);
      for (int w = 0; w < 4; ++w) below[w] |= bytes_below_[q][w];
      below[node_byte_[q] >> 6] |= 1ULL << (node_byte_[q] & 63);
    }
  }
  // a leaf has nothing to skip: leaving it out keeps the walk's branch on skips rare and predictable
  for (int32_t k = 0; k < count; ++k)
    if (node_end_[k] == k + 1) plain_below_[k] = 0;
}

}  // namespace tooldec
