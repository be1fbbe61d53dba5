// The context-free guide's Python bindings (cfg_bindings.cc), registered into the one module by bindings.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace tooldec::cfg {

// Adds CfgGrammar, CfgMatcher and GrammarTooLarge to the module.
void register_cfg(pybind11::module_& m);

}  // namespace tooldec::cfg
