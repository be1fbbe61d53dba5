// The one bounded cache type of the core: int32 lists (shape keys) to shared immutable values, the least
// recently used dropped past a capacity, safe across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"

namespace tooldec {

template <class V>
class KeyedLru {
 public:
  explicit KeyedLru(size_t capacity) : capacity_(capacity) {}

  // The value of `key`, now the most recently used; null when absent.
  std::shared_ptr<const V> get(const std::vector<int32_t>& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.second);
    return it->second.first;
  }

  // Keep `value` for `key` (a key already present keeps its first value).
  void put(const std::vector<int32_t>& key, std::shared_ptr<const V> value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (map_.count(key)) return;
    order_.push_front(key);
    map_.emplace(key, std::make_pair(std::move(value), order_.begin()));
    while (map_.size() > capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.size();
  }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::vector<int32_t>> order_;
  std::unordered_map<std::vector<int32_t>, std::pair<std::shared_ptr<const V>, std::list<std::vector<int32_t>>::iterator>,
                     SigHash>
      map_;
};

}  // namespace tooldec
