// The core's one way to run work on several threads: parallel_for. Every caller (building the automata of a
// tool set, walking regions, indexing every state, filling a batch of bitmasks) goes through it, so that an
// exception on any thread reaches the caller instead of terminating the process.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "common.h"

namespace tooldec {

// f(i) for every i in [begin, end), handed out in blocks of `block` to up to `threads` threads, the calling thread
// among them. With one thread (or one block) it runs inline on the caller; otherwise the caller must not hold
// the GIL, and the threads skip signal checks. After an exception no further blocks are handed out; once every
// thread has stopped, the first exception is rethrown here.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t block, int threads, F&& f) {
  if (end <= begin) return;
  block = std::max<int64_t>(block, 1);
  const int64_t blocks = (end - begin + block - 1) / block;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({threads, blocks, MAX_THREADS})));
  if (threads == 1) {
    for (int64_t i = begin; i < end; ++i) f(i);
    return;
  }
  std::atomic<int64_t> next{begin};
  std::vector<std::exception_ptr> failed(static_cast<size_t>(threads));
  auto work = [&](int w) {
    const bool checked = t_check_signals;
    t_check_signals = false;
    try {
      for (int64_t lo = next.fetch_add(block); lo < end; lo = next.fetch_add(block))
        for (int64_t i = lo, hi = std::min(end, lo + block); i < hi; ++i) f(i);
    } catch (...) {
      failed[static_cast<size_t>(w)] = std::current_exception();
      next.store(end);
    }
    t_check_signals = checked;
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  try {
    for (int w = 1; w < threads; ++w) pool.emplace_back(work, w);
  } catch (const std::system_error&) {  // no more threads to be had: the ones started and this one do the work
  }
  work(0);
  for (auto& th : pool) th.join();
  for (auto& e : failed)
    if (e) std::rethrow_exception(e);
}

}  // namespace tooldec
