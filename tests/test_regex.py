"""String content, pattern and format IR, checked with a small reference matcher and sampler over the IR."""

from __future__ import annotations

import ast
import base64
import bisect
import calendar
import datetime
import ipaddress
import json
import random
import re
import urllib.parse
import uuid

import jsonpointer
import jsonschema
import pytest
import rfc3987  # type: ignore[import-untyped]
import uri_template  # type: ignore[import-untyped]
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tooldec.errors import UnsupportedSchemaError
from tooldec.grammar.ir import Alt, Bytes, Fields, Node, Repeat, Seq
from tooldec.grammar.regex import _python_class, format_ir, pattern_ir
from tooldec.grammar.strings import MAX_CODEPOINT, codepoints_ir, json_char, string_content

# ---------------------------------------------------------------------------------------------------------
# Reference matcher and sampler over the IR (test-only; the real automaton lives elsewhere).


def ir_matches(node: Node, data: bytes) -> bool:
    """Whether `node` matches all of `data`, by memoised recursion on (node, start) -> set of end positions."""
    memo: dict[tuple[int, int], frozenset[int]] = {}

    def after(nodes: set[int], n: Node) -> set[int]:
        return {e for p in nodes for e in ends(n, p)}

    def repeat_ends(n: Repeat, i: int) -> set[int]:
        result = {i} if n.min == 0 else set()
        stable: set[int] = set()  # ends after k >= max(min, 1) items: every later step is the same map
        cur, k = {i}, 0
        while cur and (n.max is None or k < n.max):
            k += 1
            cur = after(cur if k == 1 or n.sep is None else after(cur, n.sep), n.item)
            if k >= max(n.min, 1):
                if k > max(n.min, 1) and cur <= stable:
                    break
                stable |= cur
            if k >= n.min:
                result |= cur
        return result

    def fields_ends(n: Fields, i: int) -> set[int]:
        states = {(i, False)}
        for item, required in n.items:
            nxt = set() if required else set(states)
            for p, started in states:
                nxt |= {(e, True) for e in after(after({p}, n.sep) if started else {p}, item)}
            states = nxt
        return {p for p, _ in states}

    def ends(n: Node, i: int) -> frozenset[int]:
        key = (id(n), i)
        if key not in memo:
            if isinstance(n, Bytes):
                r: set[int] = {i + 1} if i < len(data) and n.mask >> data[i] & 1 else set()
            elif isinstance(n, Seq):
                r = {i}
                for it in n.items:
                    r = after(r, it)
            elif isinstance(n, Alt):
                r = {e for it in n.items for e in ends(it, i)}
            elif isinstance(n, Repeat):
                r = repeat_ends(n, i)
            elif isinstance(n, Fields):
                r = fields_ends(n, i)
            else:
                raise TypeError(f"unexpected node {type(n).__name__}")
            memo[key] = frozenset(r)
        return memo[key]

    return len(data) in ends(node, 0)


def ir_sample(node: Node, rng: random.Random) -> bytes:
    """A random member of `node`'s language (unbounded repeats take 0-5 extra items)."""
    out = bytearray()

    def walk(n: Node) -> None:
        if isinstance(n, Bytes):
            out.append(rng.choice([b for b in range(256) if n.mask >> b & 1]))
        elif isinstance(n, Seq):
            for it in n.items:
                walk(it)
        elif isinstance(n, Alt):
            walk(rng.choice(n.items))
        elif isinstance(n, Repeat):
            hi = n.min + 5 if n.max is None else min(n.max, n.min + 12)
            for k in range(rng.randint(n.min, hi)):
                if k and n.sep is not None:
                    walk(n.sep)
                walk(n.item)
        elif isinstance(n, Fields):
            chosen = [it for it, required in n.items if required or rng.random() < 0.5]
            for k, it in enumerate(chosen):
                if k:
                    walk(n.sep)
                walk(it)
        else:
            raise TypeError(f"unexpected node {type(n).__name__}")

    walk(node)
    return bytes(out)


def canonical(text: str) -> bytes:
    """The canonical JSON string body of `text`."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode()


def decode(body: bytes) -> str:
    """The string a JSON string body denotes."""
    return json.loads(b'"' + body + b'"')


def test_reference_matcher_on_hand_built_ir() -> None:
    a, b, comma = Bytes(1 << ord("a")), Bytes(1 << ord("b")), Bytes(1 << ord(","))
    rep = Repeat(a, 1, 3, comma)
    assert [ir_matches(rep, s) for s in (b"", b"a", b"a,a", b"a,a,a", b"a,a,a,a", b"aa")] == [
        False, True, True, True, False, False]
    assert ir_matches(Repeat(Repeat(a, 0, None), 0, None), b"aaa")
    fields = Fields(((a, True), (b, False), (a, True)), comma)
    assert [ir_matches(fields, s) for s in (b"a,a", b"a,b,a", b"a,b", b"a", b"b,a")] == [
        True, True, False, False, False]


# ---------------------------------------------------------------------------------------------------------
# codepoints_ir

_codepoint = st.one_of(st.integers(0, 0x7F), st.integers(0x80, 0xFFFF), st.integers(0, 0x10FFFF))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_codepoint, _codepoint).map(sorted), max_size=4), st.lists(_codepoint, max_size=20))
def test_codepoints_ir_membership_is_range_membership(ranges: list[list[int]], probes: list[int]) -> None:
    node = codepoints_ir([(lo, hi) for lo, hi in ranges])
    for lo, hi in ranges:
        probes += [lo, hi, lo - 1, hi + 1]
    for cp in probes:
        if 0 <= cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF:
            assert ir_matches(node, canonical(chr(cp))) == any(lo <= cp <= hi for lo, hi in ranges), hex(cp)


def test_codepoints_ir_only_canonical_spelling() -> None:
    node = codepoints_ir([(0, 0x10FFFF)])
    for cp in list(range(0x80)) + [0xE9, 0x7FF, 0x800, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF]:
        assert ir_matches(node, canonical(chr(cp)))
    for spelling in (b"\\u0041", b"\\/", b"\\u000a", b"\\u001F", b"\\u00e9", b'"', b"\\", b"\n", b"\x1f"):
        assert not ir_matches(node, spelling), spelling
    for bad_utf8 in (b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xe2\x82", b"\xff"):
        assert not ir_matches(node, bad_utf8), bad_utf8
    assert not ir_matches(codepoints_ir([(0xD800, 0xDFFF)]), "\ud800".encode("utf-8", "surrogatepass"))


def _leaf_count(node: Node) -> int:
    if isinstance(node, Bytes):
        return 1
    if isinstance(node, Repeat):
        return _leaf_count(node.item)
    return sum(_leaf_count(it) for it in node.items)  # type: ignore[union-attr]


def test_codepoints_ir_is_compact() -> None:
    assert _leaf_count(codepoints_ir([(0, 0x10FFFF)])) < 60
    assert _leaf_count(codepoints_ir([(0x41, 0x5A), (0x3041, 0x30FF), (0x4E00, 0x9FFF), (0x1F600, 0x1F64F)])) < 40


# ---------------------------------------------------------------------------------------------------------
# json_char / string_content


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_json_spelling_of_text_is_string_content(text: str) -> None:
    assert ir_matches(string_content(), canonical(text))
    assert ir_matches(string_content(), json.dumps(text)[1:-1].encode())
    assert ir_matches(string_content(python=True), canonical(text))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=8), st.integers(0, 6), st.integers(0, 6))
def test_string_content_counts_characters(text: str, lo: int, span: int) -> None:
    node = string_content(min_length=lo, max_length=lo + span)
    assert ir_matches(node, canonical(text)) == (lo <= len(text) <= lo + span)
    assert ir_matches(node, json.dumps(text)[1:-1].encode()) == (lo <= len(text) <= lo + span)
    assert ir_matches(string_content(min_length=lo), canonical(text)) == (len(text) >= lo)


def test_string_content_rejects_invalid_bodies() -> None:
    node = string_content()
    for body in (b'"', b'a"b', b"\n", b"\x00", b"\x1f", b"\\", b"\\x41", b"\\u12", b"\\uzzzz", b"\\a",
                 b"\xff", b"\xc0\x80", b"\xed\xa0\x80"):
        assert not ir_matches(node, body), body
    for body in (b"\\/", b"\\u00E9", b"\\uD83D\\uDE00", b"\\b\\f\\n\\r\\t\\\"\\\\"):
        assert ir_matches(node, body), body
    for lone_surrogate in (b"\\ud800", b"\\uDE00\\uD83D", b"\\ud83dx", b"\\udfff"):
        assert not ir_matches(node, lone_surrogate), lone_surrogate
    assert ir_matches(string_content(max_length=1), b"\\ud83d\\ude00")
    assert not ir_matches(string_content(min_length=2), b"\\ud83d\\ude00")
    assert not ir_matches(json_char(), b"ab")
    assert ir_matches(string_content(max_length=1), b"\\u0041")
    assert not ir_matches(string_content(max_length=1), b"AB")
    assert not ir_matches(string_content(min_length=3, max_length=2), b"abc")


def test_python_variant_excludes_non_python_escapes() -> None:
    for body in (b"\\/", b"\\ud800", b"\\uDFFF", b"\\uDbff", b"\\ud83d\\ude00"):
        assert not ir_matches(string_content(python=True), body), body
    for body in (b"\\uD7FF", b"\\ue000", b"\\u00e9", b"\\t"):
        assert ir_matches(string_content(python=True), body), body


def test_python_variant_reads_the_same_in_python() -> None:
    rng = random.Random(7)
    node = string_content(python=True)
    for _ in range(2000):
        body = ir_sample(node, rng).decode()
        assert ast.literal_eval('"' + body + '"') == json.loads('"' + body + '"'), body


def test_string_length_limits() -> None:
    assert ir_matches(string_content(min_length=10_000, max_length=10_000), b"a" * 10_000)
    with pytest.raises(UnsupportedSchemaError, match="maxLength"):
        string_content(max_length=10_001)
    with pytest.raises(UnsupportedSchemaError, match="minLength"):
        string_content(min_length=10_001)


# ---------------------------------------------------------------------------------------------------------
# pattern_ir

PATTERNS = [
    r"^[a-z]+$",
    r"^\d{3}-\d{4}$",
    r"[A-Z]{2,3}",
    r"^(\+|-)?\d+(\.\d+)?$",
    r"^[^@]+@[^@]+$",
    r"^[À-ÿ]+$",
    r"^.{1,5}$",
    r"\.",
    r"^(foo|bar|baz)$",
    r"^[a-zA-Z0-9_]+$",
    r"^\w+$",
    r"^\s*\S+\s*$",
    r"^[A-Z][a-z]*( [A-Z][a-z]*)*$",
    r"^#[0-9a-fA-F]{6}$",
    r"^v\d+\.\d+\.\d+$",
    r"^https?://",
    r"\.json$",
    r"^\D*$",
    r"^\W+$",
    r"^[^\d\s]+$",
    r"^[^abc]*$",
    r"^(?:[a-z]+_)*[a-z]+$",
    r"^a{2}b{0,3}c?$",
    r"^[\u4e00-\u9fff]+$",
    r"^[😀-😂]$",
    r'^"[^"]*"$',
    r"\\",
    r"^[\x00-\x1f]+$",
    r"^\t\n$",
    r"^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$",
    r"^[a-z]{2}(-[A-Z]{2})?$",
    r"^(\d{1,3}\.){3}\d{1,3}$",
    r"^[^/]+/[^/]+$",
    r"(?:ab)+",
    r"^$",
    r"",
    r"a|^b",
    r"^(a|b$)",
    r"^.*$",
    r"^x.y$",
    r"^\$\d+(\.\d{2})?$",
    r"^[\w.-]+@[\w-]+\.\w+$",
    r"^(?<year>\d{4})-(?<month>\d{2})$",
    r"colou?r",
    r"^\u00e9t\u00e9$",
    r"^[^\n]*$",
    r"^https?:\/\/[^\s/$.?#].[^\s]*$",
    r"^[a-z]+?x*?$",
    r"\Aab\Z",
]

_ECMA_SPACE = "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"


def python_reading(pattern: str) -> str:
    """The pattern as Python's `re` (and so Python's jsonschema) reads it."""
    return pattern.replace("(?<year>", "(?P<year>").replace("(?<month>", "(?P<month>")


def ecma_reading(pattern: str) -> re.Pattern[str]:
    """A Python regex with the ECMA-262 meaning of `pattern` (ASCII \\d\\w, ECMA \\s, `.` and `$`)."""
    out, i, in_class = [], 0, False
    pattern = python_reading(pattern)
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            esc = pattern[i : i + 2]
            if esc == r"\s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif esc == r"\S":
                assert not in_class
                out.append(f"[^{_ECMA_SPACE}]")
            else:
                out.append(esc)
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
        elif c == ".":
            out.append("[^\n\r\u2028\u2029]")
        elif c == "$":
            out.append(r"\Z")
        else:
            out.append(c)
        i += 1
    return re.compile("".join(out), re.ASCII)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_pattern_samples_match_in_python_and_ecma(pattern: str) -> None:
    node = pattern_ir(pattern)
    ecma = ecma_reading(pattern)
    rng = random.Random(pattern)
    for _ in range(300):
        body = ir_sample(node, rng)
        value = decode(body)
        assert canonical(value) == body, body
        assert ast.literal_eval('"' + body.decode() + '"') == value, body  # canonical bodies suit Python too
        assert re.search(python_reading(pattern), value), value
        assert ecma.search(value), value


_CATEGORY = re.compile(r"\\[dDwWsS]")


def _readings_agree(ch: str) -> bool:
    """Whether \\d, \\w and \\s classify `ch` alike in ECMA-262 and Python."""
    ascii_word = ch.isascii() and (ch.isalnum() or ch == "_")
    return (ch.isdecimal() == ("0" <= ch <= "9") and (ch.isalnum() or ch == "_") == ascii_word
            and ch.isspace() == (ch in "\t\n\x0b\x0c\r \xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                                 or "\u2000" <= ch <= "\u200a"))


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                    HealthCheck.too_slow])
@given(data=st.data())
def test_strings_matching_pattern_are_in_ir(pattern: str, data: st.DataObject) -> None:
    fullmatch = data.draw(st.booleans())
    value = data.draw(st.from_regex(python_reading(pattern), fullmatch=fullmatch))
    assume(not any("\ud800" <= ch <= "\udfff" for ch in value))
    assume(re.search(python_reading(pattern), value) and ecma_reading(pattern).search(value))
    if _CATEGORY.search(pattern):
        assume(all(_readings_agree(ch) for ch in value))
    assert ir_matches(pattern_ir(pattern), canonical(value)), value


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("abc", ["abc", "xabcx", "abcabc"], ["ab", "", "aXbc"]),
        ("^abc$", ["abc"], ["xabc", "abcx", "abc\n"]),
        ("^abc", ["abc", "abcd"], ["xabc"]),
        ("abc$", ["abc", "xabc"], ["abcx", "abc\n"]),
        ("a|^b", ["xa", "bx", "b"], ["xb", ""]),
        ("^$", [""], [" ", "\n"]),
        ("", ["", "anything"], []),
        ("^.$", ["a", "é", "😀", "\t", '"', "\\"], ["\n", "\r", "\u2028", "\u2029", "ab", ""]),
        (r"^\d$", ["0", "9"], ["٣", "a"]),
        (r"^\D$", ["a", "é"], ["0", "٣"]),
        (r"^\w$", ["a", "Z", "_", "5"], ["é", "-"]),
        (r"^\W$", ["-", " "], ["a", "é", "_"]),
        (r"^\s$", [" ", "\t", "\n", "\u3000"], ["a", "\ufeff", "\x1c"]),
        (r"^\S$", ["a"], [" ", "\ufeff", "\x1c", "\x85"]),
        (r"^[^\d]$", ["a"], ["0", "٣"]),
        (r"^x{0}y$", ["y"], ["xy"]),
    ],
)
def test_pattern_semantics(pattern: str, yes: list[str], no: list[str]) -> None:
    node = pattern_ir(pattern)
    for value in yes:
        assert ir_matches(node, canonical(value)), value
    for value in no:
        assert not ir_matches(node, canonical(value)), value


def test_pattern_matches_canonical_spelling_only() -> None:
    node = pattern_ir("^A/$")
    assert ir_matches(node, b"A/")
    assert not ir_matches(node, b"\\u0041/")
    assert not ir_matches(node, b"A\\/")


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", r"(?=a)a", r"(?!a)b", r"(?<=a)b", r"(?<!a)b", r"\bfoo\b", r"a\Bb", r"\p{L}+", r"\P{Lu}",
     r"(?i)abc", r"a(?i:b)", r"a^b", r"a$b", r"[]a]", r"[^]", r"\cA", r"a{,3}", r"(?>a)b", r"a*+", r"\a",
     r"(?P<x>a)(?P=x)", r"(a)?(?(1)b|c)", r"^a{30000}$", r"(?:a{200}){200}", r"(", r"\k<x>"],
)
def test_unsupported_patterns_raise(pattern: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match="pattern") as info:
        pattern_ir(pattern, path="#/properties/x")
    assert info.value.keyword == "pattern"
    assert info.value.path == "#/properties/x"


def test_large_but_affordable_repeat_is_allowed() -> None:
    node = pattern_ir("^[a-z]{1,10000}$")
    assert ir_matches(node, b"a" * 10_000)
    assert not ir_matches(node, b"a" * 10_001)


# ---------------------------------------------------------------------------------------------------------
# format_ir

FORMATS = ["date", "time", "date-time", "email", "uri", "uuid", "ipv4", "ipv6", "hostname", "byte", "uri-reference",
           "uri-template", "json-pointer", "relative-json-pointer", "host-name"]
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")


def _check_uri(value: str) -> None:
    assert urllib.parse.urlsplit(value).scheme
    assert rfc3987.match(value, rule="URI"), value


def _check_hostname(value: str) -> None:
    assert len(value) <= 253 and all(_LABEL.fullmatch(label) and len(label) <= 63
                                     for label in value.split("."))
    try:
        from fqdn import FQDN  # type: ignore[import-not-found]
    except ImportError:
        return
    assert FQDN(value, min_labels=1).is_valid, value


def _check_relative_json_pointer(value: str) -> None:
    rest = re.fullmatch(r"(?:0|[1-9][0-9]*)(.*)", value, re.DOTALL).group(1)  # type: ignore[union-attr]
    if rest != "#":
        jsonpointer.JsonPointer(rest)


EXTRA_CHECKS = {
    "date": datetime.date.fromisoformat,
    "time": datetime.time.fromisoformat,
    "date-time": datetime.datetime.fromisoformat,
    "email": lambda v: re.fullmatch(r"[^@]+@[^@]+\.[^@]+", v) or pytest.fail(v),
    "uri": _check_uri,
    "uuid": uuid.UUID,
    "ipv4": ipaddress.IPv4Address,
    "ipv6": ipaddress.IPv6Address,
    "hostname": _check_hostname,
    "byte": lambda v: base64.b64decode(v, validate=True),
    "uri-reference": lambda v: rfc3987.match(v, rule="URI_reference") or pytest.fail(v),
    "uri-template": lambda v: uri_template.validate(v) or pytest.fail(v),
    "json-pointer": jsonpointer.JsonPointer,
    "relative-json-pointer": _check_relative_json_pointer,
    "host-name": _check_hostname,
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_format_samples_are_valid(fmt: str) -> None:
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER  # a bare FormatChecker() has draft 3's "time"
    node = format_ir(fmt)
    rng = random.Random(fmt)
    for _ in range(300):
        body = ir_sample(node, rng)
        value = decode(body)
        assert canonical(value) == body
        if fmt in checker.checkers:
            assert checker.conforms(value, fmt), value
        EXTRA_CHECKS[fmt](value)


@pytest.mark.parametrize(
    ("fmt", "yes", "no"),
    [
        ("date", ["2024-05-01", "2024-02-29", "2000-02-29", "0001-01-01", "9999-12-31", "2023-04-30"],
         ["2023-02-29", "1900-02-29", "2024-04-31", "2024-13-01", "0000-01-01", "2024-5-1", "20240501"]),
        ("time", ["12:30:00Z", "23:59:59.123+02:00", "00:00:00-05:30"],
         ["24:00:00Z", "12:30:00", "12:60:00Z", "12:30:60Z", "12:30Z"]),
        ("date-time", ["2024-05-01T12:30:00Z", "2024-05-01T12:30:00.5+01:00"],
         ["2024-05-01 12:30:00Z", "2024-05-01T12:30:00"]),
        ("email", ["user@example.com", "first.last+tag@sub.example.co.uk"],
         ["user@localhost", "@example.com", "user.@example.com", "user@-example.com"]),
        ("uri", ["https://example.com/path?q=1&r=a%20b#frag", "mailto:someone@example.com", "urn:isbn:0451450523",
                 "http://user:pw@host:8080/", "file:///etc/hosts"],
         ["example.com/path", "http://exa mple.com", "http://host:port/", "http://x/%zz", "1http://x"]),
        ("uuid", [str(uuid.UUID(int=0)), "123E4567-E89B-12D3-A456-426614174000"],
         ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400"]),
        ("ipv4", ["0.0.0.0", "192.168.1.1", "255.255.255.255"], ["256.0.0.1", "01.2.3.4", "1.2.3"]),
        ("ipv6", ["::", "::1", "2001:db8::8a2e:370:7334", "fe80::1:2:3:4:5:6", "1:2:3:4:5:6:7::"],
         ["1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1"]),
        ("hostname", ["localhost", "example.com", "a-b.c-d.example", "x" * 63 + ".com"],
         ["-a.com", "a-.com", "a..b", "a_b.com", "x" * 64 + ".com", ""]),
        ("byte", ["", "SGVsbG8=", "SGVsbG8h", "SGk="], ["SGVsbG8", "SGk", "S===", "SG=k"]),
        ("uri-reference", ["", "a/b?c#d", "/x/y", "//host:80/p", "https://example.com/construction/123", "invalid_uri",
                           "../up", "?q", "#f", "x%20y"],
         ["a:b:c d", "a b", "%zz", "x#y#z", "[x]"]),
        ("uri-template", ["", "http://example.com/{id}", "/search{?q,lang}", "{+path}/here", "{/list*}", "{var:3}",
                          "x{.a,b.c}y"],
         ["http://example.com/resource/{", "{}", "{a b}", "}", "{=x}", "{var:0}", "a<b", "{%41}", "{x:1000}"]),
        ("json-pointer", ["", "/", "/a/b", "/a~0b/~1c", "/ü"], ["a", "/a~2", "/~"]),
        ("relative-json-pointer", ["0", "1#", "2/a/b", "10/~0", "99"], ["", "01", "-1/a", "0a", "1##", "100"]),
        ("host-name", ["localhost", "example.com"], ["-a.com", "a_b.com"]),
    ],
)
def test_format_examples(fmt: str, yes: list[str], no: list[str]) -> None:
    node = format_ir(fmt)
    for value in yes:
        assert ir_matches(node, canonical(value)), value
    for value in no:
        assert not ir_matches(node, canonical(value)), value


def test_date_leap_days_and_month_lengths() -> None:
    node = format_ir("date")
    for year in range(1, 10_000):
        assert ir_matches(node, f"{year:04d}-02-29".encode()) == calendar.isleap(year), year
    for year in (1900, 2000, 2023, 2024):
        for month in range(1, 13):
            for day in range(32):
                try:
                    valid = bool(datetime.date(year, month, day))
                except ValueError:
                    valid = False
                assert ir_matches(node, f"{year}-{month:02d}-{day:02d}".encode()) == valid


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**128 - 1), st.integers(0, 8), st.integers(0, 8))
def test_ip_addresses_python_prints_are_accepted(v4: int, v6: int, zero_from: int, zero_len: int) -> None:
    assert ir_matches(format_ir("ipv4"), str(ipaddress.IPv4Address(v4)).encode())
    groups = [(v6 >> (16 * k)) & 0xFFFF for k in range(8)]
    for k in range(zero_from, min(zero_from + zero_len, 8)):
        groups[k] = 0
    address = ipaddress.IPv6Address(sum(g << (16 * k) for k, g in enumerate(groups)))
    if address.ipv4_mapped is None:
        assert ir_matches(format_ir("ipv6"), str(address).encode()), str(address)
    assert ir_matches(format_ir("ipv6"), address.exploded.encode())


def test_unknown_format_raises() -> None:
    with pytest.raises(UnsupportedSchemaError, match="format") as info:
        format_ir("color", path="#/x")
    assert info.value.keyword == "format"
    assert info.value.path == "#/x"


@settings(max_examples=500)
@given(st.one_of(st.integers(0, MAX_CODEPOINT), st.sampled_from([0x5F, 0x663, 0x3000, 0xD800, 0x1D7CE, 0x10FFFF])))
def test_python_classes_hold_exactly_where_the_str_predicates_do(cp: int) -> None:
    """`\\d`, `\\w` and `\\s` under Python's reading are the code points `str.isdecimal`, `isalnum` (`_` apart) and
    `isspace` hold for: the ranges read off `re` in one pass agree with the predicates everywhere."""
    for test in ("isdecimal", "isalnum", "isspace"):
        ranges = _python_class(test)
        at = bisect.bisect_right(ranges, (cp, MAX_CODEPOINT + 1)) - 1
        assert (at >= 0 and ranges[at][0] <= cp <= ranges[at][1]) == getattr(chr(cp), test)(), (test, hex(cp))
