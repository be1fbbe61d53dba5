// The tokens of a Lark grammar's text (tooldec.grammar.cfg.lark_reader.tokenize), cut by hand: the master regex
// this replaces spent most of a small grammar's reading in `re` (its named groups), and it stays the
// specification. Blanks `[ \t\f]*` before a token go with it; then the first of these, in this order, that matches
// (Python's `re`, so \s and \d are Unicode's):
//
//   rule      _?[a-z][_a-z0-9]*              term     _?[A-Z][_A-Z0-9]*
//   string    "(?:\\[^\n]|[^"\\\n])*"i?     punct    [()\[\]{}:,~|]
//   nl        \r?\n(?:\s|//[^\n]*|#[^\n]*)*(\|)?   (with the `|`: the token "|" at the bar, and no nl)
//   skip      [ \t\f]+ | \\[ ]*\r?\n | //[^\n]* | #[^\n]*   (dropped)
//   regexp    /(?!/)(?:\\[\s\S]|[^/\\])*/[imslux]*
//   to ->     dotdot ..    dot .    directive %[a-z]+    mod (?:![?]?|[?]!?)(?=[_a-z])    op [+*?]
//   number    [+-]?\d+
//
// and any other character is refused. Each token is (kind, value, offset), a punctuation's kind being itself,
// and the list ends with ("nl", "\n", len) and ("eof", "", len).
#include <Python.h>

#include "bindings.h"

namespace tooldec {
namespace {

enum Kind { RULE, TERM, STRING, PUNCT, NL, SKIP, REGEXP, TO, DOTDOT, DOT, DIRECTIVE, MOD, OP, NUMBER, KINDS };
const char* const KIND_NAMES[KINDS] = {"rule", "term",    "string", "punct",     "nl",  "skip", "regexp",
                                       "to",   "dotdot", "dot",    "directive", "mod", "op",   "number"};

struct Text {
  int kind;
  const void* data;
  Py_ssize_t n;
  Py_UCS4 at(Py_ssize_t i) const { return PyUnicode_READ(kind, data, i); }
  bool is(Py_ssize_t i, Py_UCS4 c) const { return i < n && at(i) == c; }
};

bool lower(Py_UCS4 c) { return c >= 'a' && c <= 'z'; }
bool upper(Py_UCS4 c) { return c >= 'A' && c <= 'Z'; }
bool digit(Py_UCS4 c) { return c >= '0' && c <= '9'; }
bool blank(Py_UCS4 c) { return c == ' ' || c == '\t' || c == '\f'; }

// The end of `_?[a-z][_a-z0-9]*` at p (with `letter` for a-z), or -1.
Py_ssize_t name_end(const Text& t, Py_ssize_t p, bool (*letter)(Py_UCS4)) {
  Py_ssize_t i = p + (t.is(p, '_') ? 1 : 0);
  if (i >= t.n || !letter(t.at(i))) return -1;
  for (++i; i < t.n; ++i) {
    const Py_UCS4 c = t.at(i);
    if (c != '_' && !letter(c) && !digit(c)) break;
  }
  return i;
}

// The end of the rest of a line from i (up to its '\n', not taken).
Py_ssize_t line_end(const Text& t, Py_ssize_t i) {
  while (i < t.n && t.at(i) != '\n') ++i;
  return i;
}

// A token matched at p: its kind and end, and for a line end, where its bar is (-1: none).
struct Match {
  Kind kind;
  Py_ssize_t end;
  Py_ssize_t bar = -1;
};

// The first alternative that matches at p (p < n), or false.
bool match_at(const Text& t, Py_ssize_t p, Match& m) {
  auto found = [&m](Kind kind, Py_ssize_t end, Py_ssize_t bar = -1) {
    m = {kind, end, bar};
    return true;
  };
  const Py_UCS4 c = t.at(p);
  Py_ssize_t i;
  if ((i = name_end(t, p, lower)) >= 0) return found(RULE, i);
  if ((i = name_end(t, p, upper)) >= 0) return found(TERM, i);
  if (c == '"') {
    for (i = p + 1; i < t.n; ++i) {
      const Py_UCS4 d = t.at(i);
      if (d == '\n') return false;
      if (d == '"') return found(STRING, i + 1 + (t.is(i + 1, 'i') ? 1 : 0));
      if (d == '\\') {
        if (i + 1 >= t.n || t.at(i + 1) == '\n') return false;
        ++i;
      }
    }
    return false;
  }
  switch (c) {
    case '(': case ')': case '[': case ']': case '{': case '}': case ':': case ',': case '~': case '|':
      return found(PUNCT, p + 1);
    default:
      break;
  }
  if (c == '\n' || (c == '\r' && t.is(p + 1, '\n'))) {
    i = p + (c == '\r' ? 2 : 1);
    while (i < t.n) {
      const Py_UCS4 d = t.at(i);
      if (Py_UNICODE_ISSPACE(d))
        ++i;
      else if ((d == '/' && t.is(i + 1, '/')) || d == '#')
        i = line_end(t, i);
      else
        break;
    }
    if (t.is(i, '|')) return found(NL, i, i);
    return found(NL, i);
  }
  if (c == '\\') {
    for (i = p + 1; t.is(i, ' ');) ++i;
    if (t.is(i, '\r') && t.is(i + 1, '\n')) return found(SKIP, i + 2);
    if (t.is(i, '\n')) return found(SKIP, i + 1);
    return false;
  }
  if ((c == '/' && t.is(p + 1, '/')) || c == '#') return found(SKIP, line_end(t, p));
  if (c == '/') {
    for (i = p + 1; i < t.n; ++i) {
      const Py_UCS4 d = t.at(i);
      if (d == '/') {
        for (++i; i < t.n; ++i) {
          const Py_UCS4 f = t.at(i);
          if (f != 'i' && f != 'm' && f != 's' && f != 'l' && f != 'u' && f != 'x') break;
        }
        return found(REGEXP, i);
      }
      if (d == '\\' && ++i >= t.n) return false;
    }
    return false;
  }
  if (c == '-' && t.is(p + 1, '>')) return found(TO, p + 2);
  if (c == '.') return found(t.is(p + 1, '.') ? DOTDOT : DOT, p + (t.is(p + 1, '.') ? 2 : 1));
  if (c == '%') {
    for (i = p + 1; i < t.n && lower(t.at(i));) ++i;
    if (i > p + 1) return found(DIRECTIVE, i);
    return false;
  }
  if (c == '!' || c == '?') {
    const Py_UCS4 other = c == '!' ? '?' : '!';
    auto starts_name = [&](Py_ssize_t k) { return k < t.n && (t.at(k) == '_' || lower(t.at(k))); };
    if (t.is(p + 1, other) && starts_name(p + 2)) return found(MOD, p + 2);
    if (starts_name(p + 1)) return found(MOD, p + 1);
  }
  if (c == '+' || c == '*' || c == '?') return found(OP, p + 1);
  i = p + (c == '-' ? 1 : 0);
  const Py_ssize_t digits = i;
  while (i < t.n && Py_UNICODE_ISDECIMAL(t.at(i))) ++i;
  if (i > digits) return found(NUMBER, i);
  return false;
}

// A new reference, or the Python error raised.
PyObject* checked(PyObject* o) {
  if (o == nullptr) throw py::error_already_set();
  return o;
}

// Appends (kind, value, offset) to `out`, taking the references to kind and value.
void append(PyObject* out, PyObject* kind, PyObject* value, Py_ssize_t offset) {
  PyObject* off = PyLong_FromSsize_t(offset);
  PyObject* tup = off == nullptr ? nullptr : PyTuple_New(3);
  if (tup == nullptr) {
    Py_XDECREF(off);
    Py_DECREF(kind);
    Py_DECREF(value);
    throw py::error_already_set();
  }
  PyTuple_SET_ITEM(tup, 0, kind);
  PyTuple_SET_ITEM(tup, 1, value);
  PyTuple_SET_ITEM(tup, 2, off);
  const int failed = PyList_Append(out, tup);
  Py_DECREF(tup);
  if (failed) throw py::error_already_set();
}

// The token list of `text`, or the offset (an int) of the first character no token starts with.
py::object lark_tokens(const py::str& text) {
  static PyObject* names[KINDS];
  static PyObject* bar;
  if (bar == nullptr) {  // made once, under the GIL, and kept for the life of the process
    for (int k = 0; k < KINDS; ++k) names[k] = checked(PyUnicode_InternFromString(KIND_NAMES[k]));
    bar = checked(PyUnicode_InternFromString("|"));
  }
  PyObject* s = text.ptr();
#if PY_VERSION_HEX < 0x030C0000
  if (PyUnicode_READY(s) < 0) throw py::error_already_set();
#endif
  const Text t{PyUnicode_KIND(s), PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s)};
  py::list out;
  Py_ssize_t pos = 0;
  while (pos < t.n) {
    Py_ssize_t p = pos;
    while (p < t.n && blank(t.at(p))) ++p;
    Match m{SKIP, p};
    if (p == t.n || !match_at(t, p, m)) {
      if (p == pos) return py::int_(p);  // no token starts here, not even after blanks
      pos = p;  // the blanks alone (the regex backs off from them to `skip`)
      continue;
    }
    pos = m.end;
    if (m.kind == SKIP) continue;
    if (m.bar >= 0) {
      Py_INCREF(bar);
      Py_INCREF(bar);
      append(out.ptr(), bar, bar, m.bar);
      pos = m.bar + 1;
      continue;
    }
    PyObject* value = checked(PyUnicode_Substring(s, p, m.end));
    PyObject* kind = m.kind == PUNCT ? value : names[m.kind];
    Py_INCREF(kind);
    append(out.ptr(), kind, value, p);
  }
  PyObject* nl = checked(PyUnicode_FromString("\n"));
  Py_INCREF(names[NL]);
  append(out.ptr(), names[NL], nl, t.n);
  PyObject* empty = checked(PyUnicode_FromString(""));
  PyObject* eof = checked(PyUnicode_InternFromString("eof"));
  append(out.ptr(), eof, empty, t.n);
  return out;
}

}  // namespace

void register_lark(py::module_& m) {
  m.def("lark_tokens", &lark_tokens, py::arg("text"),
        "The tokens of a Lark grammar's text as (kind, value, offset), or the offset of a character no token "
        "starts with (tooldec.grammar.cfg.lark_reader.tokenize).");
}

}  // namespace tooldec
