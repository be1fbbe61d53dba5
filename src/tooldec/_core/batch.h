// The per-step batch kernels over raw buffers (the bindings check shapes, rows, states and pointers).
#pragma once

#include <cstdint>
#include <vector>

#include "cfg_matcher.h"
#include "index.h"

namespace tooldec {

// One row of a batch fill: the mask of (index, state), of a context-free matcher, a copy of an int32[words]
// array, or (all null) every token allowed.
struct FillJob {
  Index* index;
  int32_t state;
  const int32_t* array;
  cfg::Matcher* matcher;
  int64_t row;
};

// Fill rows of an int32[rows, words] bitmask at `out`, on up to `threads` threads (a thread per 16 rows at most).
// Runs without the GIL.
void fill_rows(const std::vector<FillJob>& jobs, int32_t* out, int64_t words, int threads);

// logits[r, t] = -inf for every t < vocab whose bit is 0 in mask row r (float32 rows `stride` floats apart, mask
// rows `words` words apart), for the rows `which` lists (n_index of them) or, when which is null, rows 0..rows-1;
// columns at and past the bitmask's reach are masked too. Runs without the GIL.
void apply_bitmask(float* logits, int64_t rows, int64_t vocab, int64_t stride, const uint32_t* mask, int64_t words,
                   const int32_t* which, int64_t n_index);

}  // namespace tooldec
