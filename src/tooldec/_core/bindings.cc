// The Python module `tooldec._core`: the one door into the compiled core. Every argument is checked here (array
// shapes and dtypes, ids, states, rows, sizes, node tables) before any construction or kernel runs, so that no
// Python value can crash the process: a bad one raises ValueError (std::invalid_argument), IndexError
// (std::out_of_range) or TypeError. The code behind this file trusts what it is given.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "batch.h"
#include "bindings.h"
#include "common.h"
#include "dfa.h"
#include "index.h"
#include "thompson.h"
#include "vocab.h"

namespace tooldec {
namespace {

constexpr int64_t INT32_LIMIT = std::numeric_limits<int32_t>::max();

[[noreturn]] void invalid(const std::string& what) { throw std::invalid_argument(what); }

// `value` as a C-contiguous array of T (converted if it is another dtype or layout), or TypeError.
template <typename T>
carray<T> as_array(py::handle value, const char* what) {
  auto got = carray<T>::ensure(value);
  if (!got) throw py::type_error(std::string(what) + " is not an array of numbers");
  return got;
}

// `value` as an int64 (a Python int or anything with __index__ in range), or TypeError.
int64_t as_int64(py::handle value, const char* what) {
  try {
    return value.cast<int64_t>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(what) + " is not an integer from -2**63 to 2**63 - 1");
  }
}

// A bound on a size or state count, as Python gives it: from 1 to int32's largest.
void check_limit(int64_t value, const char* what) {
  if (value < 1 || value > INT32_LIMIT) invalid(std::string(what) + " must be from 1 to 2**31 - 1");
}

// A DFA as (trans int32[n, nc], classes uint8[256], accepting bool[n], start), checked: 1 <= n < 2**31,
// 1 <= nc <= 256, every target in [0, n), every class below nc, start in [0, n).
DfaView check_dfa(const carray<int32_t>& trans, const carray<uint8_t>& classes, const carray<bool>& accepting,
                  int64_t start) {
  const char* form = "a DFA is int32[states, classes], uint8[256], bool[states], start, with state 0 dead";
  if (trans.ndim() != 2 || classes.ndim() != 1 || classes.shape(0) != 256 || accepting.ndim() != 1) invalid(form);
  const int64_t n = trans.shape(0), nc = trans.shape(1);
  if (n < 1 || n > INT32_LIMIT || nc < 1 || nc > 256 || accepting.shape(0) != n) invalid(form);
  const uint8_t* cls = classes.data();
  if (*std::max_element(cls, cls + 256) >= nc) invalid("a byte class is outside the transition table");
  // branch-free (the compiler vectorizes it): a check per cell costs 0.8 ms over tools200's 17,147 x 62 table
  const int32_t* t = trans.data();
  uint32_t top = 0;
  for (int64_t i = 0, cells = n * nc; i < cells; ++i) top = std::max(top, static_cast<uint32_t>(t[i]));
  if (top >= static_cast<uint64_t>(n)) invalid("a transition leads outside the automaton");
  if (start < 0 || start >= n) throw std::out_of_range("the start state is outside the automaton");
  return DfaView{t, cls, accepting.data(), static_cast<int32_t>(start), static_cast<int32_t>(n),
                 static_cast<int32_t>(nc)};
}

// The arrays of DFAs given as Python tuples, kept alive while their views are read.
struct HeldDfas {
  std::vector<carray<int32_t>> trans;
  std::vector<carray<uint8_t>> classes;
  std::vector<carray<bool>> accepting;
  std::vector<DfaView> views;

  explicit HeldDfas(const py::list& dfas) {
    for (py::handle h : dfas) {
      if (!py::isinstance<py::tuple>(h) || py::len(h) != 4)
        invalid("a DFA is a tuple (trans, classes, accepting, start)");
      auto d = h.cast<py::tuple>();
      trans.push_back(as_array<int32_t>(d[0], "a DFA's trans"));
      classes.push_back(as_array<uint8_t>(d[1], "a DFA's classes"));
      accepting.push_back(as_array<bool>(d[2], "a DFA's accepting"));
      views.push_back(check_dfa(trans.back(), classes.back(), accepting.back(), as_int64(d[3], "a DFA's start")));
    }
  }
};

// A grammar IR node table (see thompson.h) checked record by record: a known code, a complete record, children
// that are earlier nodes, masks and embedded DFAs in range, repeat bounds in order, nesting at most MAX_IR_DEPTH.
void check_ir(const carray<int32_t>& code, const carray<int64_t>& ptr, int64_t n_masks, int64_t n_dfas) {
  if (code.ndim() != 1 || ptr.ndim() != 1 || ptr.shape(0) < 1) invalid("the node table is int32 code[], int64 ptr[n + 1]");
  const int64_t n = ptr.shape(0) - 1, size = code.shape(0);
  if (n > INT32_LIMIT) invalid("too many nodes");
  const int64_t* p = ptr.data();
  const int32_t* c = code.data();
  std::vector<int32_t> height(static_cast<size_t>(n), 1);
  if (p[0] < 0) invalid("ptr[0] is negative");
  for (int64_t i = 0; i < n; ++i) {
    if (p[i + 1] < p[i] || p[i + 1] > size) invalid("node " + std::to_string(i) + "'s record is outside code");
    const int32_t* r = c + p[i];
    const int64_t len = p[i + 1] - p[i];
    const std::string node = "node " + std::to_string(i);
    auto child = [&](int64_t at, bool optional) {
      const int32_t x = r[at];
      if (optional && x == -1) return;
      if (x < 0 || x >= i) invalid(node + ": a child is not an earlier node of the table");
      height[static_cast<size_t>(i)] = std::max(height[static_cast<size_t>(i)], height[static_cast<size_t>(x)] + 1);
    };
    if (len < 2) invalid(node + ": a record is a code and its fields");
    switch (r[0]) {
      case IR_BYTES:
        if (r[1] < -1 || r[1] >= n_masks) throw std::out_of_range(node + ": no such mask");
        break;
      case IR_SEQ:
      case IR_ALT:
        if (r[1] < 0 || len < 2 + int64_t{r[1]}) invalid(node + ": fewer children than its count");
        for (int64_t k = 0; k < r[1]; ++k) child(2 + k, false);
        break;
      case IR_REPEAT:
        if (len < 5) invalid(node + ": a repeat is item, min, max, sep");
        child(1, false);
        child(4, true);
        if (r[2] < 0 || r[3] < -1 || (r[3] >= 0 && r[3] < r[2]))
          invalid("repeat bounds " + std::to_string(r[2]) + ".." + std::to_string(r[3]));
        break;
      case IR_FIELDS:
        if (len < 3 || r[2] < 0 || len < 3 + 2 * int64_t{r[2]}) invalid(node + ": fewer fields than its count");
        child(1, true);
        for (int64_t k = 0; k < r[2]; ++k) child(3 + 2 * k, false);
        break;
      case IR_EMBED:
        if (r[1] < 0 || r[1] >= n_dfas) throw std::out_of_range(node + ": no such embedded DFA");
        break;
      default:
        invalid("not a grammar node code: " + std::to_string(r[0]));
    }
    if (height[static_cast<size_t>(i)] > MAX_IR_DEPTH)
      invalid("the grammar nests deeper than " + std::to_string(MAX_IR_DEPTH) + " nodes");
  }
}

// The DFA as Python's (trans int32[n, nc], classes uint8[256], accepting bool[n], start).
py::tuple to_python(const Dfa& d) {
  py::array_t<int32_t> trans({static_cast<py::ssize_t>(d.n), static_cast<py::ssize_t>(d.nc)});
  std::memcpy(trans.mutable_data(), d.trans.data(), d.trans.size() * sizeof(int32_t));
  py::array_t<uint8_t> classes(256);
  std::memcpy(classes.mutable_data(), d.classes.data(), 256);
  py::array_t<bool> acc(d.n);
  for (int32_t i = 0; i < d.n; ++i) acc.mutable_data()[i] = d.accepting[i] != 0;
  return py::make_tuple(trans, classes, acc, d.start);
}

// One IR node table -> for each root, NFA (Thompson) -> pruned DFA, as (trans, classes, accepting, start), or the
// message of an automaton past its bounds (a str). The table is (code, ptr, masks, embedded dfas); the roots share
// its nodes (a tool set's tools share most of theirs).
py::list compile_irs(carray<int32_t> code, carray<int64_t> ptr, carray<uint8_t> masks, py::list dfas,
                     std::vector<int32_t> roots, int64_t max_nfa_states, int64_t max_dfa_states, int threads) {
  if (masks.ndim() != 2 || masks.shape(1) != 32) invalid("the masks are uint8[n, 32]");
  check_limit(max_nfa_states, "max_nfa_states");
  check_limit(max_dfa_states, "max_dfa_states");
  HeldDfas held(dfas);
  check_ir(code, ptr, masks.shape(0), static_cast<int64_t>(held.views.size()));
  const int64_t n_nodes = ptr.shape(0) - 1;
  for (int32_t r : roots)
    if (r < 0 || r >= n_nodes) throw std::out_of_range("a root is not a node of the table");
  IrTable ir{code.data(), ptr.data(), n_nodes, std::vector<Mask>(static_cast<size_t>(masks.shape(0))), held.views};
  for (size_t i = 0; i < ir.masks.size(); ++i) std::memcpy(ir.masks[i].data(), masks.data() + 32 * i, 32);
  threads = root_threads(threads, static_cast<int64_t>(roots.size()));
  std::vector<RootDfa> dfas_out;
  if (threads == 1) {
    dfas_out = compile_roots(ir, roots, max_nfa_states, max_dfa_states, 1);
  } else {
    py::gil_scoped_release release;
    dfas_out = compile_roots(ir, roots, max_nfa_states, max_dfa_states, threads);
  }
  py::list out;
  for (RootDfa& got : dfas_out) {
    if (got.too_large.empty())
      out.append(to_python(got.dfa));
    else
      out.append(py::str(got.too_large));
  }
  return out;
}

// The DFA of a chain of byte sets given as k rows of 32 bytes (chain_dfa), as Python's arrays.
py::tuple chain_dfa_py(py::bytes rows) {
  const std::string data = rows;
  if (data.empty() || data.size() % 32 != 0) invalid("a chain of byte sets is one or more rows of 32 bytes");
  std::vector<Mask> masks(data.size() / 32);
  for (size_t i = 0; i < masks.size(); ++i) std::memcpy(masks[i].data(), data.data() + 32 * i, 32);
  return to_python(chain_dfa(masks));
}

py::tuple product_py(carray<int32_t> a_trans, carray<uint8_t> a_classes, carray<bool> a_acc, int64_t a_start,
                  carray<int32_t> b_trans, carray<uint8_t> b_classes, carray<bool> b_acc, int64_t b_start,
                  bool difference, int64_t max_states) {
  check_limit(max_states, "max_states");
  const DfaView a = check_dfa(a_trans, a_classes, a_acc, a_start);
  const DfaView b = check_dfa(b_trans, b_classes, b_acc, b_start);
  return to_python(tooldec::product(a, b, difference, max_states));
}

py::tuple union_py(py::list dfas, int64_t max_states) {
  check_limit(max_states, "max_states");
  if (py::len(dfas) == 0) invalid("the union of no DFAs: give at least one");
  HeldDfas held(dfas);
  return to_python(tooldec::union_dfas(held.views, max_states));
}

py::tuple minimize_dfa(carray<int32_t> trans, carray<uint8_t> classes, carray<bool> accepting, int64_t start) {
  const DfaView view = check_dfa(trans, classes, accepting, start);
  Dfa d;
  {
    py::gil_scoped_release release;
    d = minimize(view);
  }
  return to_python(d);
}

std::shared_ptr<Vocab> make_vocab(carray<uint8_t> flat, carray<int64_t> offsets, carray<int32_t> eos, int64_t size) {
  if (flat.ndim() != 1 || offsets.ndim() != 1 || eos.ndim() != 1 || offsets.shape(0) < 1)
    invalid("a vocabulary is uint8 flat[], int64 offsets[tokens + 1], int32 eos[]");
  if (size < 0 || size > MAX_VOCAB_SIZE) invalid("the vocabulary size must be from 0 to " + std::to_string(MAX_VOCAB_SIZE));
  if (flat.shape(0) > INT32_LIMIT) invalid("the token bytes exceed 2**31 - 1");
  if (offsets.shape(0) - 1 > size) invalid("more token byte strings than the vocabulary size");
  const int64_t* o = offsets.data();
  if (o[0] < 0) invalid("a token offset is negative");
  for (int64_t i = 0; i + 1 < offsets.shape(0); ++i)
    if (o[i + 1] < o[i]) invalid("the token offsets decrease");
  if (o[offsets.shape(0) - 1] > flat.shape(0)) invalid("a token offset is past the token bytes");
  for (int64_t i = 0; i < eos.shape(0); ++i)
    if (eos.data()[i] < 0 || eos.data()[i] >= size) throw std::out_of_range("EOS id outside the vocabulary");
  return std::make_shared<Vocab>(std::vector<uint8_t>(flat.data(), flat.data() + flat.shape(0)),
                                 std::vector<int64_t>(o, o + offsets.shape(0)),
                                 std::vector<int32_t>(eos.data(), eos.data() + eos.shape(0)),
                                 static_cast<int32_t>(size));
}

std::unique_ptr<Index> make_index(std::shared_ptr<Vocab> vocab, carray<int32_t> trans, carray<uint8_t> classes,
                                  carray<bool> accepting, bool share_regions) {
  if (!vocab) throw py::type_error("an index needs a Vocab");
  const DfaView view = check_dfa(trans, classes, accepting, 0);
  // the table is read in place: the pointer owns the array (released under the GIL, as the index is)
  auto owner = std::make_shared<carray<int32_t>>(trans);
  std::shared_ptr<const int32_t> rows(owner, view.trans);
  return std::make_unique<Index>(std::move(vocab), std::move(rows), view.n, view.nc, view.classes, view.accepting,
                                 share_regions);
}

// A state an index holds: in [0, num_states), or FINAL where `final_ok`.
void check_state(const Index& index, int64_t s, bool final_ok) {
  if ((s >= 0 && s < index.num_states()) || (final_ok && s == FINAL)) return;
  throw std::out_of_range("state " + std::to_string(s) + " is not in the automaton");
}

// Fill rows of an int32[B, W] bitmask. Each row's source is (index, state) for a guided row, a CfgMatcher (a
// context-free guide), an int32[W] array to copy (a cached mask: text mode, EOS only), or None (every token
// allowed). The copying runs without the GIL, on `threads` threads for large batches (one thread where a matcher
// fills two rows: a matcher's own memo is not shared between threads).
void fill_bitmasks(py::array_t<int32_t, py::array::c_style> out, py::list sources, carray<int32_t> rows,
                   int threads) {
  if (out.ndim() != 2) invalid("the bitmask must be int32[batch, words]");
  const int64_t B = out.shape(0), W = out.shape(1);
  const int64_t n = static_cast<int64_t>(py::len(sources));
  if (rows.ndim() != 1 || rows.shape(0) != n) invalid("one row number per source");
  std::vector<FillJob> jobs(static_cast<size_t>(n));
  std::vector<py::object> keep;  // arrays stay alive while we copy from them
  std::unordered_set<const cfg::Matcher*> matchers;
  for (int64_t i = 0; i < n; ++i) {
    py::handle src = sources[static_cast<size_t>(i)];
    const int64_t row = rows.data()[i];
    if (row < 0 || row >= B) throw std::out_of_range("row " + std::to_string(row) + " outside the bitmask");
    FillJob j{nullptr, 0, nullptr, nullptr, row};
    if (src.is_none()) {
    } else if (py::isinstance<cfg::Matcher>(src)) {
      j.matcher = src.cast<cfg::Matcher*>();
      if (j.matcher->words() != W) invalid("the bitmask width does not match the vocabulary");
      if (!matchers.insert(j.matcher).second) threads = 1;
    } else if (py::isinstance<py::tuple>(src)) {
      auto tup = src.cast<py::tuple>();
      if (tup.size() != 2) invalid("a guided row's mask source is (index, state)");
      try {  // the cast checks the type (an isinstance first would cost a type lookup per row)
        j.index = tup[0].cast<Index*>();
      } catch (const py::cast_error&) {
        invalid("a guided row's mask source is (index, state)");
      }
      if (j.index == nullptr) invalid("a guided row's mask source is (index, state), not (None, state)");
      const int64_t state = as_int64(tup[1], "a state");
      if (j.index->words() != W) invalid("the bitmask width does not match the vocabulary");
      check_state(*j.index, state, true);  // here: a worker may not throw
      j.state = static_cast<int32_t>(state);
    } else {
      auto arr = py::array_t<int32_t, py::array::c_style>::ensure(src);
      if (!arr || arr.ndim() != 1 || arr.shape(0) != W)
        invalid("a mask source must be (index, state), a CfgMatcher, an int32[words] array or None");
      j.array = arr.data();
      keep.push_back(arr);
    }
    jobs[static_cast<size_t>(i)] = j;
  }
  int32_t* base = out.mutable_data();  // raises for a read-only array
  py::gil_scoped_release release;
  fill_rows(jobs, base, W, threads);
}

// Checks what can be checked of a call on raw pointers: sizes, null pointers, and the listed rows.
void apply_bitmask_f32(uintptr_t logits_ptr, int64_t rows, int64_t vocab, int64_t stride, uintptr_t mask_ptr,
                       int64_t words, uintptr_t index_ptr, int64_t n_index) {
  if (rows < 0 || vocab < 0 || stride < 0 || words < 0 || n_index < 0) invalid("a size is negative");
  if (rows > 1 && stride < vocab) invalid("the logits' rows overlap (stride < vocab)");
  const auto* which = reinterpret_cast<const int32_t*>(index_ptr);
  const int64_t n = which != nullptr ? n_index : rows;
  if (n > 0 && (logits_ptr == 0 || mask_ptr == 0)) invalid("a null logits or bitmask pointer");
  if (which != nullptr)
    for (int64_t i = 0; i < n_index; ++i)
      if (which[i] < 0 || which[i] >= rows) throw std::out_of_range("a row index is outside the logits");
  py::gil_scoped_release release;
  apply_bitmask(reinterpret_cast<float*>(logits_ptr), rows, vocab, stride, reinterpret_cast<const uint32_t*>(mask_ptr),
                words, which, n_index);
}

// Index methods that take states, tokens and buffers.
py::tuple index_advance_many(const Index& self, int32_t s, carray<int32_t> tokens) {
  // the state after each token in turn; stops at the first DEAD. Returns (states walked, last state)
  if (tokens.ndim() != 1) invalid("the tokens are int32[n]");
  const int32_t* t = tokens.data();
  int64_t k = 0;
  for (; k < tokens.shape(0); ++k) {
    int32_t nx = self.next_state(s, t[k]);
    if (nx == DEAD) break;
    s = nx;
  }
  return py::make_tuple(k, s);
}

int64_t index_count(Index& self, int64_t s) {
  check_state(self, s, false);
  py::gil_scoped_release r;
  return self.entry(static_cast<int32_t>(s)).count;
}

void index_share_alike(Index& self, int64_t rounds) {
  if (rounds < 1 || rounds > MAX_ALIKE_ROUNDS)
    invalid("rounds must be from 1 to " + std::to_string(MAX_ALIKE_ROUNDS));
  py::gil_scoped_release r;
  self.share_alike(static_cast<int32_t>(rounds));
}

void index_fill(Index& self, int64_t s, py::array_t<int32_t, py::array::c_style> out) {
  if (out.ndim() != 1 || out.shape(0) != self.words()) invalid("the row must be int32[words]");
  check_state(self, s, true);
  // the GIL stays held: a cached mask is a 16 KB copy (~0.3 us at 128k tokens), less than releasing and taking
  // it back costs; a first visit's walk is the exception (fill_bitmasks releases it)
  self.fill(static_cast<int32_t>(s), out.mutable_data());
}

void index_fill_at(Index& self, int64_t s, uintptr_t ptr) {
  if (ptr == 0) invalid("a null row pointer");
  check_state(self, s, true);
  self.fill(static_cast<int32_t>(s), reinterpret_cast<int32_t*>(ptr));
}

py::tuple index_transitions(const Index& self, int64_t s) {
  // sorted allowed ids (EOS included when accepting) and the state each leads to; walks afresh
  if (s >= self.num_states()) check_state(self, s, false);
  std::vector<std::pair<int32_t, int32_t>> got;
  {
    py::gil_scoped_release r;
    const auto state = static_cast<int32_t>(std::max<int64_t>(s, FINAL));
    self.walk(state, [&](int32_t t, int32_t nx) { got.emplace_back(t, nx); });
    if (self.accepting(state))
      for (int32_t e : self.vocab()->eos()) got.emplace_back(e, FINAL);
    std::sort(got.begin(), got.end());
    got.erase(std::unique(got.begin(), got.end(), [](auto& x, auto& y) { return x.first == y.first; }), got.end());
  }
  py::array_t<int32_t> ids(static_cast<py::ssize_t>(got.size())), nxt(static_cast<py::ssize_t>(got.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    ids.mutable_data()[i] = got[i].first;
    nxt.mutable_data()[i] = got[i].second;
  }
  return py::make_tuple(ids, nxt);
}

// token_walk's arguments checked (trans int32[n, nc]; columns int32[k] below nc; modes int64[n_modes, k] with
// n_modes <= MAX_TOKEN_MODES and every next mode below n_modes; origin in [0, n); word_ends bool[n] or None) and
// its result as (size, src, cls, dst, [(landing, int64[m, 2] stops, int64[] states leading to them)]).
py::tuple token_walk_py(carray<int32_t> trans, carray<int32_t> columns, carray<int64_t> modes, int64_t origin,
                        int64_t start_mode, py::object word_ends, int64_t max_states) {
  if (trans.ndim() != 2 || trans.shape(0) < 1 || trans.shape(0) > INT32_LIMIT || trans.shape(1) < 1 ||
      trans.shape(1) > 256)
    invalid("the transitions are int32[n, classes] with 1 <= n < 2**31 and 1 to 256 classes");
  const int64_t n = trans.shape(0), nc = trans.shape(1);
  if (columns.ndim() != 1 || columns.shape(0) < 1 || columns.shape(0) > 256) invalid("the columns are int32[1..256]");
  const int64_t k = columns.shape(0);
  for (int64_t c = 0; c < k; ++c)
    if (columns.data()[c] < 0 || columns.data()[c] >= nc) invalid("a column is outside the transition table");
  if (modes.ndim() != 2 || modes.shape(1) != k || modes.shape(0) < 1 || modes.shape(0) > MAX_TOKEN_MODES)
    invalid("the modes are int64[1.." + std::to_string(MAX_TOKEN_MODES) + ", columns]");
  const int64_t n_modes = modes.shape(0);
  for (int64_t i = 0; i < n_modes * k; ++i)
    if (modes.data()[i] >= n_modes) invalid("a next mode is outside the mode table");
  if (origin < 0 || origin >= n) invalid("the origin is not a state of the automaton");
  if (start_mode < 0 || start_mode >= n_modes) invalid("the start mode is outside the mode table");
  check_limit(max_states, "max_states");
  const bool has_ends = !word_ends.is_none();
  carray<uint8_t> ends;
  if (has_ends) {
    ends = as_array<uint8_t>(word_ends, "word_ends");
    if (ends.ndim() != 1 || ends.shape(0) != n) invalid("word_ends is bool[n], one per state");
  }
  TokenWalkInput in{trans.data(), static_cast<int32_t>(n), static_cast<int32_t>(nc), columns.data(),
                    static_cast<int32_t>(k), modes.data(), static_cast<int32_t>(n_modes),
                    static_cast<int32_t>(origin), static_cast<int32_t>(start_mode),
                    has_ends ? ends.data() : nullptr, max_states};
  TokenWalk w = token_walk(in);
  auto vec = [](const std::vector<int64_t>& v) {
    return py::array_t<int64_t>(static_cast<py::ssize_t>(v.size()), v.data());
  };
  py::list landings;
  for (size_t i = 0; i < w.landings.size(); ++i) {
    const auto& st = w.stops[i];
    py::array_t<int64_t> pairs({static_cast<py::ssize_t>(st.size()), py::ssize_t{2}});
    auto p = pairs.mutable_unchecked<2>();
    for (size_t j = 0; j < st.size(); ++j) {
      p(static_cast<py::ssize_t>(j), 0) = st[j].first;
      p(static_cast<py::ssize_t>(j), 1) = st[j].second;
    }
    landings.append(py::make_tuple(w.landings[i], pairs, vec(w.members[i])));
  }
  return py::make_tuple(w.size, vec(w.src), vec(w.cls), vec(w.dst), landings);
}

}  // namespace
}  // namespace tooldec

PYBIND11_MODULE(_core, m) {
  using namespace tooldec;
  m.doc() = "tooldec's compiled core: grammar IR to DFA, products, the token index and batch mask operations.";
  py::register_exception<SchemaTooLarge>(m, "AutomatonTooLarge", PyExc_ValueError);
  python_signals = &PyErr_CheckSignals;
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const SignalRaised&) {  // the handler's exception is already set in the interpreter
    }
  });
  m.def("compile_irs", &compile_irs,
        "A grammar IR node table to one pruned DFA per root (Thompson NFA, subset construction), on up to "
        "`threads` threads.",
        py::arg("code"), py::arg("ptr"), py::arg("masks"), py::arg("dfas"), py::arg("roots"),
        py::arg("max_nfa_states"), py::arg("max_dfa_states"), py::arg("threads") = 1);
  m.def("chain_dfa", &chain_dfa_py,
        "The pruned DFA of a chain of byte sets (rows of 32 bytes, one byte from each set in turn), as "
        "compile_irs builds it from the same chain written as IR.",
        py::arg("rows"));
  m.def("product", &product_py, "Intersection or difference of two DFAs, pruned.", py::arg("a_trans"),
        py::arg("a_classes"), py::arg("a_accepting"), py::arg("a_start"), py::arg("b_trans"), py::arg("b_classes"),
        py::arg("b_accepting"), py::arg("b_start"), py::arg("difference"), py::arg("max_states"));
  m.def("union_dfas", &union_py, "Union of DFAs given as (trans, classes, accepting, start) tuples, pruned.",
        py::arg("dfas"), py::arg("max_states"));
  m.def("token_walk", &token_walk_py,
        "One JSON token's walk through a DFA from a boundary state: (size, src, cls, dst, [(landing, stops, "
        "members)]).",
        py::arg("trans"), py::arg("columns"), py::arg("modes"), py::arg("origin"), py::arg("start_mode"),
        py::arg("word_ends"), py::arg("max_states"));
  m.def("minimize_dfa", &minimize_dfa, "The minimal DFA of a pruned one: dead state 0, start 1, breadth-first order.",
        py::arg("trans"), py::arg("classes"), py::arg("accepting"), py::arg("start"));
  py::class_<Vocab, std::shared_ptr<Vocab>>(m, "Vocab")
      .def(py::init(&make_vocab), py::arg("flat"), py::arg("offsets"), py::arg("eos"), py::arg("size"))
      .def_property_readonly("size", &Vocab::size)
      .def_property_readonly("words", &Vocab::words)
      .def_property_readonly("num_nodes", &Vocab::num_nodes)
      .def_property_readonly("shared_regions", &Vocab::shared_regions)
      .def_property_readonly("shared_lexeme_walks", &Vocab::shared_lexeme_walks)
      .def_property_readonly("pinned_regions", &Vocab::pinned_regions);
  py::class_<Index>(m, "Index")
      .def(py::init(&make_index), py::arg("vocab"), py::arg("trans"), py::arg("classes"), py::arg("accepting"),
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
      .def("share_alike", &index_share_alike, py::arg("rounds"))
      .def("next_state", &Index::next_state, py::arg("state"), py::arg("token"))
      .def("advance_many", &index_advance_many, py::arg("state"), py::arg("tokens"))
      .def("count", &index_count, py::arg("state"))
      .def("fill", &index_fill, py::arg("state"), py::arg("out"))
      .def("fill_at", &index_fill_at,
           "fill() into int32[words] at a data pointer the caller checked (Guide.fill_bitmask keeps its array's)",
           py::arg("state"), py::arg("ptr"))
      .def("transitions", &index_transitions, py::arg("state"));
  m.def("fill_bitmasks", &fill_bitmasks, "Fill rows of an int32[B, W] bitmask from per-row sources.",
        py::arg("out"), py::arg("sources"), py::arg("rows"), py::arg("threads") = 1);
  m.def("apply_bitmask_f32", &apply_bitmask_f32, "Set disallowed float32 logits to -inf in place.",
        py::arg("logits_ptr"), py::arg("rows"), py::arg("vocab"), py::arg("stride"), py::arg("mask_ptr"),
        py::arg("words"), py::arg("index_ptr") = 0, py::arg("n_index") = 0);
  m.attr("DEAD") = DEAD;
  m.attr("FINAL") = FINAL;
  cfg::register_cfg(m);  // the context-free guide (cfg_bindings.cc)
  register_lark(m);  // the tokenizer of Lark grammar texts (lark_lexer.cc)
}
