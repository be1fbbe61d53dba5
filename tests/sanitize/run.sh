#!/usr/bin/env bash
# The sanitizer tier: build the compiled core with AddressSanitizer and UndefinedBehaviorSanitizer
# (-fsanitize=address,undefined -fno-omit-frame-pointer, CMake option TOOLDEC_SANITIZE=ON) in its own build
# folder, then run the tests that exercise the core against that build (tests/conftest.py loads it in place of
# the installed module when TOOLDEC_CORE names it; pytest captures sys.stderr only, so that a sanitizer report
# reaches the terminal). Any out-of-bounds access, use after free or undefined behaviour aborts the run. Usage: tests/sanitize/run.sh [extra pytest args]; PYTHON picks the interpreter.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="${PYTHON:-python}"
build="$root/build/sanitize"
pybind11_dir="$("$python" -c 'import pybind11; print(pybind11.get_cmake_dir())')"
cmake -S "$root" -B "$build" -G Ninja -DTOOLDEC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython_EXECUTABLE="$(command -v "$python")" -Dpybind11_DIR="$pybind11_dir" >/dev/null
cmake --build "$build" -j "${JOBS:-2}"
core="$(ls "$build"/_core*.so)"
# Python itself is not instrumented: the ASan runtime must be loaded first, and libstdc++ with it (else ASan
# finds no __cxa_throw to intercept and aborts at the first C++ exception); leaks are Python's, not checked
asan="$("${CXX:-g++}" -print-file-name=libasan.so)"
stdcxx="$("${CXX:-g++}" -print-file-name=libstdc++.so)"
export TOOLDEC_CORE="$core"
export LD_PRELOAD="$asan:$stdcxx${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
cd "$root"
HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}" "$python" -m pytest -x -q -p no:cacheprovider --capture=sys \
  tests/test_core_fuzz.py tests/test_cfg_core_fuzz.py tests/test_automaton.py tests/test_index.py tests/test_vocab.py \
  tests/test_compiler.py tests/test_decoding.py tests/test_cfg_guide.py tests/test_cfg_properties.py "$@"
