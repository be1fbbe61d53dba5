// What the two binding files (bindings.cc, cfg_bindings.cc) share, and the only place pybind11 is included: the
// rest of the core is plain C++, so that each of its files compiles in a second or two instead of parsing
// pybind11's headers (about 6 s a file).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace tooldec {

namespace py = pybind11;

// The arrays the bindings take: C-contiguous, of T (numpy converts where it can).
template <typename T>
using carray = py::array_t<T, py::array::c_style | py::array::forcecast>;

// Adds lark_tokens, the tokenizer of Lark grammar texts (lark_lexer.cc), to the module.
void register_lark(py::module_& m);

namespace cfg {

// Adds CfgGrammar, CfgMatcher and GrammarTooLarge to the module.
void register_cfg(py::module_& m);

}  // namespace cfg
}  // namespace tooldec
