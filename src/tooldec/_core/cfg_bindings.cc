// Python bindings of the context-free guide: CfgGrammar (a compiled grammar over one vocabulary) and CfgMatcher
// (one sequence). Every input is checked here, so that no Python value can crash the process.
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "bindings.h"
#include "cfg_matcher.h"
#include "common.h"
#include "dfa.h"

namespace tooldec::cfg {
namespace {

// `value` as a C-contiguous array of T (converted where numpy can), or TypeError naming `what`.
template <typename T>
carray<T> array_of(py::handle value, const std::string& what) {
  carray<T> got;
  try {
    got = carray<T>::ensure(value);
  } catch (const py::error_already_set&) {
  }
  if (!got) {
    PyErr_Clear();
    throw py::type_error(what + " is not an array of numbers that fit");
  }
  return got;
}

// A terminal DFA's size: 2 to MAX_LEXER_STATES states, 1 to 256 classes.
void check_size(const std::string& name, int64_t n, int64_t nc) {
  if (n < 2 || n > MAX_LEXER_STATES) throw std::invalid_argument(name + ": its DFA must have 2 to 65536 states");
  if (nc < 1 || nc > 256) throw std::invalid_argument(name + ": 1 to 256 byte classes");
}

// One terminal's DFA (n x nc targets, classes[b] the class of byte b), checked, with its live transitions by
// class and the fewest bytes from each state to acceptance.
template <typename Accepting>
TerminalDfa terminal_dfa(const std::string& name, const int32_t* tr, int64_t n, int64_t nc, const uint8_t* cl,
                           const Accepting* accepting, int64_t start, std::vector<int64_t>& dist) {
  check_size(name, n, nc);
  if (start < 1 || start >= n) throw std::invalid_argument(name + ": start state out of range (or dead)");
  for (int b = 0; b < 256; ++b)
    if (cl[b] >= nc) throw std::invalid_argument(name + ": a byte class outside the table");
  for (int64_t i = 0; i < n * nc; ++i)
    if (tr[i] < 0 || tr[i] >= n) throw std::invalid_argument(name + ": a transition outside the DFA");
  TerminalDfa d;
  d.n = static_cast<int32_t>(n);
  d.n_classes = static_cast<int32_t>(nc);
  d.start = static_cast<int32_t>(start);
  d.accepting.assign(n, 0);
  d.classes.assign(cl, cl + 256);
  d.out_ptr.assign(static_cast<size_t>(n) + 1, 0);
  for (int64_t s = 1; s < n; ++s) {
    d.accepting[s] = accepting[s] ? 1 : 0;
    for (int64_t c = 0; c < nc; ++c)
      if (tr[s * nc + c] != 0) {
        d.out_class.push_back(static_cast<int32_t>(c));
        d.out_to.push_back(tr[s * nc + c]);
      }
    d.out_ptr[s + 1] = static_cast<int32_t>(d.out_to.size());
  }
  // fewest bytes to acceptance, backwards breadth first over the live transitions (by class: a byte of a class
  // leads where the class does), predecessors as CSR arrays
  std::vector<uint8_t> has_byte(nc, 0);  // a class no byte is in leads nowhere
  for (int b = 0; b < 256; ++b) has_byte[cl[b]] = 1;
  std::vector<int32_t> rev_ptr(static_cast<size_t>(n) + 1, 0), rev(d.out_to.size());
  for (size_t k = 0; k < d.out_to.size(); ++k)
    if (has_byte[d.out_class[k]]) ++rev_ptr[d.out_to[k] + 1];
  for (int64_t s = 0; s < n; ++s) rev_ptr[s + 1] += rev_ptr[s];
  {
    std::vector<int32_t> fill(rev_ptr.begin(), rev_ptr.end() - 1);
    for (int64_t s = 1; s < n; ++s)
      for (int32_t k = d.out_ptr[s]; k < d.out_ptr[s + 1]; ++k)
        if (has_byte[d.out_class[k]]) rev[fill[d.out_to[k]]++] = static_cast<int32_t>(s);
  }
  dist.assign(n, UNREACHABLE);
  std::vector<int32_t> queue;
  queue.reserve(n);
  for (int64_t s = 1; s < n; ++s)
    if (d.accepting[s]) {
      dist[s] = 0;
      queue.push_back(static_cast<int32_t>(s));
    }
  for (size_t head = 0; head < queue.size(); ++head) {
    const int32_t s = queue[head];
    for (int32_t k = rev_ptr[s]; k < rev_ptr[s + 1]; ++k) {
      const int32_t p = rev[k];
      if (dist[p] == UNREACHABLE) {
        dist[p] = dist[s] + 1;
        queue.push_back(p);
      }
    }
  }
  if (d.accepting[d.start]) throw std::invalid_argument(name + " matches the empty string");
  if (dist[d.start] >= UNREACHABLE) throw std::invalid_argument(name + " matches nothing");
  return d;
}

// One terminal: (trans int32[n, nc], classes uint8[256], accepting bool[n], start), or bytes holding k rows of 32
// (the byte sets of a chain, bit b of row i little-endian: lexemes of k bytes, byte i from set i).
TerminalDfa read_terminal(const py::handle& h, size_t index, std::vector<int64_t>& dist) {
  const std::string name = "terminal " + std::to_string(index);
  if (py::isinstance<py::bytes>(h)) {
    const std::string rows = py::reinterpret_borrow<py::bytes>(h);
    if (rows.empty() || rows.size() % 32 != 0)
      throw std::invalid_argument(name + ": a chain of byte sets must be one or more rows of 32 bytes");
    std::vector<Mask> masks(rows.size() / 32);
    for (size_t i = 0; i < masks.size(); ++i) std::memcpy(masks[i].data(), rows.data() + 32 * i, 32);
    check_size(name, static_cast<int64_t>(std::min<size_t>(masks.size() + 2, MAX_LEXER_STATES + 1)), 1);
    const Dfa chain = chain_dfa(masks);
    return terminal_dfa(name, chain.trans.data(), chain.n, chain.nc, chain.classes.data(), chain.accepting.data(),
                          chain.start, dist);
  }
  if (!py::isinstance<py::tuple>(h) && !py::isinstance<py::list>(h))
    throw py::type_error(name + ": expected (trans, classes, accepting, start) or a chain of byte sets (bytes)");
  auto tup = py::reinterpret_borrow<py::sequence>(h);
  if (tup.size() != 4) throw std::invalid_argument(name + ": expected (trans, classes, accepting, start)");
  auto trans = array_of<int32_t>(tup[0], name + ": trans");
  auto classes = array_of<uint8_t>(tup[1], name + ": classes");
  auto accepting = array_of<bool>(tup[2], name + ": accepting");
  int64_t start = 0;
  try {
    start = tup[3].cast<int64_t>();
  } catch (const py::cast_error&) {
    throw py::type_error(name + ": start is not an integer from -2**63 to 2**63 - 1");
  }
  if (trans.ndim() != 2 || classes.ndim() != 1 || accepting.ndim() != 1)
    throw std::invalid_argument(name + ": trans must be 2-D, classes and accepting 1-D");
  const int64_t n = trans.shape(0), nc = trans.shape(1);
  check_size(name, n, nc);
  if (classes.shape(0) != 256 || accepting.shape(0) != n)
    throw std::invalid_argument(name + ": classes must have 256 entries and accepting one per state");
  return terminal_dfa(name, trans.data(), n, nc, classes.data(), accepting.data(), start, dist);
}

std::shared_ptr<Compiled> make_compiled(std::shared_ptr<Vocab> vocab, py::list terminals,
                                               carray<int32_t> priority, carray<bool> literal,
                                               carray<int32_t> ignore, int32_t n_nonterminals,
                                               carray<int32_t> rule_lhs, carray<int64_t> rule_ptr,
                                               carray<int32_t> rule_rhs, int32_t start, bool use_priorities,
                                               int64_t max_items) {
  if (!vocab) throw std::invalid_argument("a vocabulary is required");
  const size_t T = py::len(terminals);
  if (T == 0) throw std::invalid_argument("a grammar needs at least one terminal");
  std::vector<TerminalDfa> dfas;
  std::vector<std::vector<int64_t>> dist(T);
  std::vector<int64_t> minlen(T);
  for (size_t i = 0; i < T; ++i) {
    dfas.push_back(read_terminal(terminals[i], i, dist[i]));
    minlen[i] = dist[i][dfas.back().start];
  }
  if (priority.ndim() != 1 || static_cast<size_t>(priority.shape(0)) != T || literal.ndim() != 1 ||
      static_cast<size_t>(literal.shape(0)) != T)
    throw std::invalid_argument("one priority and one literal flag per terminal");
  if (ignore.ndim() != 1) throw std::invalid_argument("ignore must be 1-D");
  std::vector<int32_t> ign(ignore.data(), ignore.data() + ignore.shape(0));
  for (int32_t t : ign)
    if (t < 0 || static_cast<size_t>(t) >= T) throw std::invalid_argument("an ignored terminal out of range");
  if (n_nonterminals < 1 || n_nonterminals > (1 << 24)) throw std::invalid_argument("1 to 2^24 nonterminals");
  if (start < 0 || start >= n_nonterminals) throw std::invalid_argument("the start symbol is out of range");
  if (max_items < 1) throw std::invalid_argument("max_items must be positive");
  if (rule_lhs.ndim() != 1 || rule_ptr.ndim() != 1 || rule_rhs.ndim() != 1)
    throw std::invalid_argument("rule arrays must be 1-D");
  const int64_t R = rule_lhs.shape(0);
  if (R < 1 || rule_ptr.shape(0) != R + 1) throw std::invalid_argument("rule_ptr must have one entry per rule plus one");
  const int64_t* rp = rule_ptr.data();
  if (rp[0] != 0 || rp[R] != rule_rhs.shape(0)) throw std::invalid_argument("rule_ptr must run from 0 to len(rule_rhs)");
  for (int64_t r = 0; r < R; ++r)
    if (rp[r + 1] < rp[r]) throw std::invalid_argument("rule_ptr must not decrease");
  std::vector<int32_t> lhs(rule_lhs.data(), rule_lhs.data() + R);
  for (int32_t l : lhs)
    if (l < 0 || l >= n_nonterminals) throw std::invalid_argument("a rule's left side is out of range");
  std::vector<int32_t> rhs(rule_rhs.data(), rule_rhs.data() + rule_rhs.shape(0));
  for (int32_t s : rhs)
    if (s >= static_cast<int64_t>(T) || (s < 0 && -static_cast<int64_t>(s) - 1 >= n_nonterminals))
      throw std::invalid_argument("a rule symbol is out of range");
  std::vector<int64_t> ptr(rp, rp + R + 1);
  std::vector<int32_t> prio(priority.data(), priority.data() + T);
  std::vector<uint8_t> lit(T);
  for (size_t i = 0; i < T; ++i) lit[i] = literal.data()[i] ? 1 : 0;
  auto g = std::make_shared<Grammar>(std::move(dfas), std::move(prio), std::move(lit), std::move(ign), n_nonterminals,
                                     lhs, ptr, rhs, start, use_priorities, max_items);
  return std::make_shared<Compiled>(std::move(g), std::move(vocab), std::move(minlen), std::move(dist));
}

}  // namespace

void register_cfg(py::module_& m) {
  py::register_exception<GrammarTooLarge>(m, "GrammarTooLarge", PyExc_ValueError);
  py::class_<Compiled, std::shared_ptr<Compiled>>(m, "CfgGrammar")
      .def(py::init(&make_compiled), py::arg("vocab"), py::arg("terminals"), py::arg("priority"), py::arg("literal"),
           py::arg("ignore"), py::arg("n_nonterminals"), py::arg("rule_lhs"), py::arg("rule_ptr"), py::arg("rule_rhs"),
           py::arg("start"), py::arg("use_priorities") = true, py::arg("max_items") = 1'000'000)
      .def_property_readonly("num_lexers", [](Compiled& c) { return c.grammar().num_lexers(); })
      .def_property_readonly("num_walks", [](Compiled& c) { return c.grammar().num_walks(); })
      .def_property_readonly("num_sets", &Compiled::num_sets);
  py::class_<Matcher>(m, "CfgMatcher")
      .def(py::init<std::shared_ptr<Compiled>>(), py::arg("grammar"))
      .def("reset", &Matcher::reset)
      .def("fork", [](const Matcher& self) { return Matcher(self); }, "A copy that goes on independently.")
      .def_property_readonly("num_tokens", &Matcher::num_tokens)
      .def("is_terminated", &Matcher::is_terminated)
      .def("is_finished", &Matcher::is_finished, py::call_guard<py::gil_scoped_release>())
      .def("can_end", &Matcher::can_end, py::call_guard<py::gil_scoped_release>())
      .def("accept_token", &Matcher::accept_token, py::call_guard<py::gil_scoped_release>(), py::arg("token"))
      .def(
          "accept_bytes",
          [](Matcher& self, py::bytes data) {
            std::string s = data;
            py::gil_scoped_release r;
            return self.accept_bytes(reinterpret_cast<const uint8_t*>(s.data()), static_cast<int64_t>(s.size()));
          },
          py::arg("data"))
      .def("accepts", &Matcher::accepts, py::call_guard<py::gil_scoped_release>(), py::arg("token"))
      .def("runs_on", &Matcher::runs_on, py::call_guard<py::gil_scoped_release>(), py::arg("token"))
      .def(
          "forced_bytes",
          [](Matcher& self, int64_t limit) {
            std::string got;
            {
              py::gil_scoped_release r;
              got = self.forced_bytes(limit);
            }
            return py::bytes(got);
          },
          py::arg("limit") = 256)
      .def("rollback", &Matcher::rollback, py::arg("n") = 1)
      .def("distance", &Matcher::distance, py::call_guard<py::gil_scoped_release>())
      .def(
          "steer",
          [](Matcher& self, carray<int32_t> ids) {
            if (ids.ndim() != 1) throw std::invalid_argument("ids must be 1-D");
            std::vector<int32_t> got;
            {
              py::gil_scoped_release r;
              got = self.steer(ids.data(), ids.shape(0));
            }
            return py::array_t<int32_t>(static_cast<py::ssize_t>(got.size()), got.data());
          },
          py::arg("ids"))
      .def(
          "fill_at",
          [](Matcher& self, uintptr_t ptr) {
            if (ptr == 0) throw std::invalid_argument("a null bitmask row");
            py::gil_scoped_release r;
            self.fill(reinterpret_cast<int32_t*>(ptr));
          },
          "fill() into int32[words] at a data pointer the caller checked (CfgGuide.fill_bitmask keeps its array's)",
          py::arg("ptr"))
      .def(
          "fill",
          [](Matcher& self, py::array_t<int32_t, py::array::c_style> out, int64_t row) {
            if (out.ndim() != 2 || row < 0 || row >= out.shape(0))
              throw std::invalid_argument("out must be int32[batch, words] and row inside it");
            if (out.shape(1) != self.words()) throw std::invalid_argument("the bitmask width does not match the vocabulary");
            int32_t* dst = out.mutable_data() + row * out.shape(1);
            py::gil_scoped_release r;
            self.fill(dst);
          },
          py::arg("out"), py::arg("row") = 0);
}

}  // namespace tooldec::cfg
