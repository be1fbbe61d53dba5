// The per-step batch kernels: fill rows of a packed bitmask from many indexes at once, and apply a bitmask to
// float32 logits in place.
#include "batch.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <limits>

#include "thread_pool.h"

namespace tooldec {
namespace {

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

}  // namespace

void fill_rows(const std::vector<FillJob>& jobs, int32_t* out, int64_t words, int threads) {
  const int64_t n = static_cast<int64_t>(jobs.size());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(n / 16)));
  const int64_t chunk = (n + threads - 1) / threads;  // one contiguous run of rows per thread
  parallel_for(0, n, chunk, threads, [&](int64_t i) {
    const FillJob& j = jobs[static_cast<size_t>(i)];
    int32_t* dst = out + j.row * words;
    if (j.index != nullptr)
      j.index->fill(j.state, dst);
    else if (j.matcher != nullptr)
      j.matcher->fill(dst);
    else if (j.array != nullptr)
      std::memcpy(dst, j.array, sizeof(int32_t) * words);
    else
      std::memset(dst, 0xFF, sizeof(int32_t) * words);
  });
}

void apply_bitmask(float* logits, int64_t rows, int64_t vocab, int64_t stride, const uint32_t* mask, int64_t words,
                   const int32_t* which, int64_t n_index) {
  const float ninf = -std::numeric_limits<float>::infinity();
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

}  // namespace tooldec
