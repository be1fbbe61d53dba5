"""BFCL's AST accuracy for Python categories: model calls against `possible_answer`, by BFCL's documented rules.

Written from the rules of BFCL's AST checker, not from its code:

- the call must name the expected function, pass every required parameter, and pass no parameter that is
  neither documented nor in the possible answer;
- each value must have the documented type (`string`/`any` str, `integer` int, `float` float, `boolean` bool,
  `array`/`tuple` list, `dict` dict, compared as exact Python types, so True is not an integer); an int is
  accepted for a `float` parameter (only at the top level, as in BFCL), and a tuple for a `tuple` parameter;
- a value whose type is that of the possible answers rather than the documented one (BFCL's "variable" case)
  is compared as is;
- strings are compared after BFCL's standardisation: spaces and `,./-_*^` removed, lower case, `'` read as
  `"`; strings inside lists and as dict values too; lists are compared in order, item by item; list items
  must have the documented item type (or the type of the possible answer's items); as in BFCL, a string option
of a list parameter reads as the list of its characters, so an optional list (`""` among its options) may be `[]`;
- a dict value must match one possible dict: no unknown keys, each value in the key's list, and keys left
  out only when their list holds `""`; a list of dicts must match one possible list dict by dict, in order;
- a possible-answer parameter may be left out only when its list holds `""`.

Categories: `simple` needs exactly one call; `multiple` exactly one call, of the function the answer names;
`parallel` and `parallel_multiple` as many calls as answers, matched one to one in any order, greedily as BFCL
does (each answer in turn takes the first call left that fits it, so a call that fits several answers may be
taken by the wrong one: BFCL then fails the entry, and so do we, to score as the leaderboard does);
`irrelevance` is correct when there is no call at all (BFCL also counts undecodable output as no call).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_TYPES: dict[str, type] = {
    "string": str,
    "any": str,
    "integer": int,
    "float": float,
    "number": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "object": dict,
}
_STANDARDIZE = re.compile(r"[ ,./\-_*^]")

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class MatchResult:
    """Whether model calls match the possible answer; `error_type` names the first failed rule ("" if valid)."""

    valid: bool
    error_type: str = ""
    message: str = ""


_OK = MatchResult(True)


def standardize_string(text: str) -> str:
    """BFCL's string normalisation: drop spaces and `,./-_*^`, lower-case, and read `'` as `"`."""
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def as_calls(calls: Iterable[Any]) -> list[Call]:
    """(name, arguments) pairs from ParsedCall-like objects, (name, args) pairs or BFCL's `{name: args}` dicts."""
    out: list[Call] = []
    for call in calls:
        if hasattr(call, "name") and hasattr(call, "arguments"):
            if getattr(call, "positional", ()):
                raise ValueError(f"bind the positional arguments of {call.name!r} before matching")
            out.append((call.name, dict(call.arguments)))
        elif isinstance(call, Mapping) and len(call) == 1:
            ((name, args),) = call.items()
            out.append((name, dict(args)))
        elif isinstance(call, tuple) and len(call) == 2:
            out.append((call[0], dict(call[1])))
        else:
            raise TypeError(f"not a call: {call!r}")
    return out


def check_call(
    function: Mapping[str, Any], call: Any, answer: Mapping[str, Mapping[str, list[Any]]]
) -> MatchResult:
    """One call against one possible answer `{name: {param: [acceptable values]}}` of `function`'s documentation."""
    ((name, args),) = as_calls([call])
    expected_name, possible = next(iter(answer.items()))
    if name != expected_name:
        return MatchResult(False, "wrong_func_name", f"expected {expected_name!r}, got {name!r}")
    params = function.get("parameters", {})
    documented = params.get("properties", {})
    for required in params.get("required", []):
        if required not in args:
            return MatchResult(False, "missing_required", f"missing required parameter {required!r}")
    for param, value in args.items():
        if param not in documented or param not in possible:
            return MatchResult(False, "unexpected_param", f"unexpected parameter {param!r}")
        result = _check_value(param, value, documented[param], possible[param])
        if not result.valid:
            return result
    for param, options in possible.items():
        if param not in args and "" not in options:
            return MatchResult(False, "missing_optional", f"parameter {param!r} is not optional")
    return _OK


def check_entry(
    category: str,
    functions: Sequence[Mapping[str, Any]],
    calls: Iterable[Any],
    possible_answer: Sequence[Mapping[str, Mapping[str, list[Any]]]] | None,
) -> MatchResult:
    """The AST verdict for one BFCL entry of `category` (simple, multiple, parallel(_multiple), irrelevance)."""
    made = as_calls(calls)
    kind = category.removeprefix("bfcl-").replace("-", "_")
    if kind == "irrelevance" or possible_answer is None:
        if made:
            return MatchResult(False, "irrelevance:called", f"{len(made)} call(s) where none was expected")
        return _OK
    if len(made) != len(possible_answer):
        return MatchResult(False, "wrong_count", f"expected {len(possible_answer)} call(s), got {len(made)}")
    by_name = {f.get("name"): f for f in functions}
    docs: list[Mapping[str, Any]] = []
    for answer in possible_answer:
        doc = by_name.get(next(iter(answer)))
        if doc is None:
            raise ValueError(f"possible answer names undocumented function {next(iter(answer))!r}")
        docs.append(doc)
    if kind.startswith("parallel"):
        return _match_unordered(docs, made, possible_answer)
    return check_call(docs[0], made[0], possible_answer[0])


def _match_unordered(
    docs: Sequence[Any], made: list[Call], answers: Sequence[Mapping[str, Mapping[str, list[Any]]]]
) -> MatchResult:
    """BFCL's matching: each answer in turn takes the first call not yet taken that fits it."""
    taken: set[int] = set()
    for a, (doc, answer) in enumerate(zip(docs, answers, strict=True)):
        results = {c: check_call(doc, call, answer) for c, call in enumerate(made) if c not in taken}
        fit = next((c for c, r in results.items() if r.valid), None)
        if fit is None:
            reasons = sorted({r.error_type for r in results.values()})
            return MatchResult(
                False,
                "cannot_find_match",
                f"no call matches answer {a} ({next(iter(answer))}); per-call errors: {', '.join(reasons)}",
            )
        taken.add(fit)
    return _OK


def _check_value(param: str, value: Any, doc: Mapping[str, Any], options: list[Any]) -> MatchResult:
    """Type and value of one top-level argument."""
    type_name = doc.get("type", "any")
    expected = _TYPES.get(type_name, str)
    if type_name == "tuple" and type(value) is tuple:
        value = list(value)
    if expected is float and type(value) is int:
        value = float(value)
    answer_type = _answer_type(options)
    variable = answer_type is not None and answer_type is not expected
    typed = type(value) is expected
    if typed:
        if expected is list and not _items_typed(value, doc, options):
            return MatchResult(
                False, "type_error:nested", f"items of {param!r} have the wrong type: {value!r}"
            )
    elif variable and type(value) is answer_type:
        return _in_options(param, value, options)
    else:
        return MatchResult(
            False, "type_error", f"{param!r} should be {type_name}, got {type(value).__name__}: {value!r}"
        )
    if variable:
        return _in_options(param, value, options)
    if expected is str:
        if standardize_string(value) not in {standardize_string(o) for o in options if isinstance(o, str)}:
            return MatchResult(False, "value_error:string", f"{param!r}={value!r} not in {options!r}")
        return _OK
    if expected is dict:
        return _check_dict(param, value, options)
    if expected is list:
        item_doc = doc.get("items", {})
        if _TYPES.get(item_doc.get("type", "")) is dict:
            return _check_dict_list(param, value, options)
        lists = [_standardized(o) if isinstance(o, list) else [standardize_string(c) for c in o]
                 for o in options if isinstance(o, list | str)]
        if _standardized(value) not in lists:
            return MatchResult(False, "value_error:list", f"{param!r}={value!r} not in {options!r}")
        return _OK
    return _in_options(param, value, options)


def _answer_type(options: list[Any]) -> type | None:
    """The type of the first possible answer that is not the optional marker `""`."""
    return next((type(o) for o in options if o != ""), None)


def _items_typed(value: list[Any], doc: Mapping[str, Any], options: list[Any]) -> bool:
    """Every item has the documented item type, or the item type of some possible list."""
    item_type = _TYPES.get(doc.get("items", {}).get("type", "any"), str)
    lists = [o for o in options if isinstance(o, list)]
    if len(lists) < len(options):
        return True
    for option in lists:
        option_type = _answer_type(option)
        if all(type(v) is item_type or (option_type is not None and type(v) is option_type) for v in value):
            return True
    return False


def _in_options(param: str, value: Any, options: list[Any]) -> MatchResult:
    """Plain membership, with Python equality."""
    if value in options:
        return _OK
    return MatchResult(False, "value_error:others", f"{param!r}={value!r} not in {options!r}")


def _standardized(value: Any) -> Any:
    """A string standardised, a list with its string items standardised, anything else as is."""
    if isinstance(value, str):
        return standardize_string(value)
    if isinstance(value, list):
        return [standardize_string(v) if isinstance(v, str) else v for v in value]
    return value


def _standardized_str(value: Any) -> Any:
    """A string standardised, anything else as is (dict values are standardised only when strings)."""
    return standardize_string(value) if isinstance(value, str) else value


def _check_dict(param: str, value: dict[str, Any], options: list[Any]) -> MatchResult:
    """A dict value against each possible dict; valid when one of them matches."""
    result = MatchResult(False, "value_error:dict", f"{param!r} has no possible dict")
    for option in options:
        if isinstance(option, dict):
            result = _dict_matches(param, value, option)
            if result.valid:
                return result
    return result


def _dict_matches(param: str, value: Mapping[str, Any], option: Mapping[str, list[Any]]) -> MatchResult:
    """One dict against one possible dict of acceptable-value lists."""
    for key, item in value.items():
        if key not in option:
            return MatchResult(False, "value_error:dict_key", f"unexpected key {key!r} in {param!r}")
        if _standardized_str(item) not in [_standardized_str(o) for o in option[key]]:
            return MatchResult(
                False, "value_error:dict_value", f"{param!r}[{key!r}]={item!r} not in {option[key]!r}"
            )
    for key, acceptable in option.items():
        if key not in value and "" not in acceptable:
            return MatchResult(False, "value_error:dict_key", f"missing key {key!r} in {param!r}")
    return _OK


def _check_dict_list(param: str, value: list[Any], options: list[Any]) -> MatchResult:
    """A list of dicts against each possible list, dict by dict in order."""
    result = MatchResult(False, "value_error:list_dict_count", f"{param!r} has no possible list of dicts")
    for option in options:
        if not isinstance(option, list):
            continue
        if len(option) != len(value):
            result = MatchResult(False, "value_error:list_dict_count", f"{param!r} needs {len(option)} dicts")
            continue
        for item, expected in zip(value, option, strict=True):
            result = (
                _dict_matches(param, item, expected)
                if isinstance(item, dict)
                else MatchResult(False, "type_error:nested", f"{param!r} holds a non-dict {item!r}")
            )
            if not result.valid:
                break
        else:
            return _OK
    return result
