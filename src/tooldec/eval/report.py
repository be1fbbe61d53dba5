"""Evaluation reports: results.json, a Markdown table and plots, from per-item records; resuming partial runs.

A record is a JSON object per benchmark item. The fields the summary reads are all optional:
`id`, `decoding` (else the run's), `correct` (bool), `syntax_error` (None, "format", "name" or "argument"),
`seconds`, `generated_tokens`, `tokens_per_tool` and `guidance` (ToolDec's diagnostics: the probability mass its
masks removed, summed and at most, and its overrides of the model). A run writes `results.json` with its config, model,
the sha256 of every data file, the records and a summary per decoding mode; `results.md` with the table;
and `accuracy_errors.png`, plus `kamel_tools.png` when KAMEL runs at several tool counts are summarised.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from tooldec.errors import ToolDecError
from tooldec.eval.metrics import SYNTAX_ERROR_KINDS, accuracy, syntax_error_rates

RESULTS_FILE = "results.json"
TABLE_FILE = "results.md"
MODES_PLOT = "accuracy_errors.png"
KAMEL_PLOT = "kamel_tools.png"
RESUME_KEYS = ("benchmark", "model", "decoding", "tools", "format", "compressed", "seed", "tool_choice")
"""Config entries that must agree for a partial run to be resumed (`limit` may grow)."""
ENVIRONMENT_PACKAGES = ("tooldec", "torch", "transformers", "tokenizers", "numpy")
"""The packages whose versions a results document records: those that decide a generation."""


class ResumeError(ToolDecError, ValueError):
    """A partial results file that belongs to a different run configuration."""


def summarize(records: Iterable[Mapping[str, Any]], decoding: str | None = None) -> dict[str, dict[str, Any]]:
    """Per decoding mode: items, accuracy, syntax-error rates, seconds and generated tokens per item, tokens/tool."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault(str(record.get("decoding", decoding)), []).append(record)
    return {mode: _summary(items) for mode, items in groups.items()}


def _summary(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The summary of one group of records."""
    return {
        "n": len(records),
        "accuracy": accuracy(bool(r.get("correct")) for r in records),
        "syntax_errors": syntax_error_rates(r.get("syntax_error") for r in records),
        "seconds_per_item": _mean(r.get("seconds") for r in records),
        "generated_tokens_per_item": _mean(r.get("generated_tokens") for r in records),
        "tokens_per_tool": _mean(r.get("tokens_per_tool") for r in records),
        **({"guidance": _guidance(records)} if any("guidance" in r for r in records) else {}),
    }


def _guidance(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean mass removed per item (sum over its guided steps, and its largest step) on correct and on wrong
    items, and overrides per item: does guidance that fights the model harder go with wrong answers?"""
    out: dict[str, Any] = {}
    for label, flag in (("correct", True), ("wrong", False)):
        group = [r["guidance"] for r in records if "guidance" in r and bool(r.get("correct")) is flag]
        out[f"items_{label}"] = len(group)
        out[f"removed_sum_{label}"] = _mean(g.get("removed_sum") for g in group)
        out[f"removed_max_{label}"] = _mean(g.get("removed_max") for g in group)
    out["overrides_per_item"] = _mean(r["guidance"].get("overrides") for r in records if "guidance" in r)
    return out


def _mean(values: Iterable[Any]) -> float | None:
    """Mean of the numeric values (None when there are none)."""
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return sum(numbers) / len(numbers) if numbers else None


def write_results(
    out_dir: str | os.PathLike[str],
    config: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    data_files: Mapping[str, str],
    *,
    model: str | Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
    partial: bool = False,
    environments: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """Write results.json (atomically) and, for a finished run, results.md and the plots; return the document.
    `environments`: what wrote the records, one entry per environment a resumed run went through."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(records, config.get("decoding"))
    doc = {
        "tooldec_version": _version(),
        "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "complete": not partial,
        "config": dict(config),
        "model": model if model is not None else config.get("model"),
        "data": dict(data_files),
        "notes": list(notes),
        "environments": [dict(e) for e in environments],
        "summary": summary,
        "records": [dict(r) for r in records],
    }
    tmp = out / (RESULTS_FILE + ".tmp")
    tmp.write_text(json.dumps(_jsonable(doc), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out / RESULTS_FILE)
    if not partial:
        rows = result_rows([doc])
        (out / TABLE_FILE).write_text(markdown_table(rows, notes=notes), encoding="utf-8")
        plot_modes(rows, out / MODES_PLOT)
    return doc


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A results.json document (a folder holding one may be given)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ToolDecError(f"cannot read results {str(path)!r}: {err}") from err


def resume_records(out_dir: str | os.PathLike[str], config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Records of an earlier run in `out_dir` with the same config (none if there is no results.json)."""
    path = Path(out_dir) / RESULTS_FILE
    if not path.exists():
        return []
    doc = load_results(path)
    earlier = doc.get("config", {})
    clashes = [k for k in RESUME_KEYS if earlier.get(k) != config.get(k)]
    if clashes:
        detail = ", ".join(f"{k}: {earlier.get(k)!r} != {config.get(k)!r}" for k in clashes)
        raise ResumeError(f"{str(path)!r} is from another configuration ({detail}); use another --out")
    return list(doc.get("records", []))


def pending(items: Iterable[Any], records: Iterable[Mapping[str, Any]]) -> list[Any]:
    """The items (objects with an `id`, or ids) that have no record yet, in order."""
    done = {r.get("id") for r in records}
    return [item for item in items if getattr(item, "id", item) not in done]


def result_rows(docs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One table row per run and decoding mode, from results documents."""
    rows = []
    for doc in docs:
        config = doc.get("config", {})
        model = doc.get("model")
        model_name = model.get("name", "") if isinstance(model, Mapping) else model
        for mode, summary in doc.get("summary", {}).items():
            rows.append(
                {
                    "benchmark": _variant(config),
                    "model": model_name or "",
                    "decoding": mode,
                    "tools": config.get("tools"),
                    "complete": bool(doc.get("complete", True)),
                    **summary,
                }
            )
    return rows


def _variant(config: Mapping[str, Any]) -> str:
    """The benchmark's name, marked when the run forced calls, compiled BFCL calls in another format than
    `hermes` (`hermes-lines`) or used compressed tool descriptions."""
    name = str(config.get("benchmark", ""))
    if config.get("tool_choice") == "required":
        name += " (required)"
    if name.startswith("bfcl-") and config.get("format") not in (None, "hermes"):
        name += f" ({config['format']})"
    if config.get("compressed"):
        name += " (compressed)"
    return name


def markdown_table(rows: Sequence[Mapping[str, Any]], *, notes: Sequence[str] = ()) -> str:
    """A Markdown table of result rows, with notes (e.g. simulated responses) below it."""
    header = [
        "benchmark",
        "model",
        "decoding",
        "tools",
        "n",
        "accuracy",
        "syntax errors",
        "format",
        "name",
        "argument",
        "tokens/tool",
        "s/item",
        "gen. tokens/item",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        errors = row.get("syntax_errors", {})
        cells = [
            row.get("benchmark", ""),
            row.get("model", ""),
            row.get("decoding", ""),
            "" if row.get("tools") is None else row["tools"],
            row.get("n", 0),
            _pct(row.get("accuracy")),
            _pct(errors.get("any")),
            *(_pct(errors.get(kind)) for kind in SYNTAX_ERROR_KINDS),
            _num(row.get("tokens_per_tool"), 1),
            _num(row.get("seconds_per_item"), 2),
            _num(row.get("generated_tokens_per_item"), 1),
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    text = "\n".join(lines) + "\n"
    guided = [row for row in rows if row.get("guidance")]
    if guided:
        text += "\n" + guidance_table(guided)
    if notes:
        text += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    return text


def guidance_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """ToolDec's diagnostics per run: probability mass removed per item on correct vs wrong items, overrides."""
    header = ["benchmark", "model", "tools", "n correct / wrong", "mass removed/item, correct", "wrong",
              "largest step, correct", "wrong", "overrides/item"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        g = row["guidance"]
        cells = [row.get("benchmark", ""), row.get("model", ""), "" if row.get("tools") is None else row["tools"],
                 f"{g['items_correct']} / {g['items_wrong']}", _num(g["removed_sum_correct"], 3),
                 _num(g["removed_sum_wrong"], 3), _num(g["removed_max_correct"], 3), _num(g["removed_max_wrong"], 3),
                 _num(g["overrides_per_item"], 2)]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def write_comparison(
    results: Iterable[str | os.PathLike[str]], out_dir: str | os.PathLike[str]
) -> list[dict[str, Any]]:
    """A table and plots over several runs (e.g. the three decoding modes, KAMEL at several K); returns rows."""
    docs = [load_results(path) for path in results]
    rows = sorted(
        result_rows(docs),
        key=lambda r: (str(r["benchmark"]), str(r["model"]), r.get("tools") or 0, str(r["decoding"])),
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    notes = list(dict.fromkeys(note for doc in docs for note in doc.get("notes", [])))
    (out / TABLE_FILE).write_text(markdown_table(rows, notes=notes), encoding="utf-8")
    models = list(dict.fromkeys(str(row["model"]) for row in rows))
    if len(models) > 1:
        for model in models:
            plot_modes([row for row in rows if row["model"] == model], out / modes_plot_name(model))
    else:
        plot_modes(rows, out / MODES_PLOT)
    kamel = kamel_curve(rows)
    if len({row["tools"] for row in kamel}) > 1:
        plot_kamel(kamel, out / KAMEL_PLOT)
    return rows


def kamel_curve(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The KAMEL rows that are points of the accuracy-against-tools curve: finished runs only (a run part of the
    way through is a row of the table, not a point)."""
    return [row for row in rows
            if str(row.get("benchmark", "")).startswith("kamel") and row.get("tools") and row.get("complete", True)]


def modes_plot_name(model: str) -> str:
    """The accuracy/error plot's file name for one model of a comparison over several models."""
    stem = "".join(c if c.isalnum() or c in "-._" else "-" for c in Path(model).name)
    return MODES_PLOT.replace(".png", f"-{stem}.png")


def plot_modes(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Bars of accuracy, and stacked format / name / argument error rates, per benchmark and decoding mode."""
    plt = _pyplot()
    labels = list(dict.fromkeys(_label(row) for row in rows))
    order = ("tooldec", "free", "fuzzy")  # the same colour for a mode in every plot
    modes = sorted(
        dict.fromkeys(str(row.get("decoding")) for row in rows),
        key=lambda mode: order.index(mode) if mode in order else len(order),
    )
    width = 0.8 / max(len(modes), 1)
    if len(labels) > 4:  # many benchmarks: accuracy above errors, each panel the full width
        fig, (left, right) = plt.subplots(2, 1, figsize=(max(8, 1.4 * len(labels) + 2), 8))
    else:
        fig, (left, right) = plt.subplots(1, 2, figsize=(max(8, 2.5 * len(labels) + 4), 4))
    hatches = {"format": "", "name": "//", "argument": ".."}
    labelled: set[str] = set()
    for m, mode in enumerate(modes):
        for b, label in enumerate(labels):
            row = next((r for r in rows if _label(r) == label and str(r.get("decoding")) == mode), None)
            if row is None:
                continue
            x = b + (m - (len(modes) - 1) / 2) * width
            label = None if mode in labelled else mode
            labelled.add(mode)
            bars = left.bar(x, 100 * row.get("accuracy", 0.0), width, color=f"C{m}", label=label)
            left.bar_label(bars, fmt="%.0f", fontsize=6)
            bottom = 0.0
            for kind in SYNTAX_ERROR_KINDS:
                value = 100 * row.get("syntax_errors", {}).get(kind, 0.0)
                right.bar(
                    x, value, width, bottom=bottom, color=f"C{m}", hatch=hatches[kind], edgecolor="white"
                )
                bottom += value
    for axis, title in ((left, "accuracy (%)"), (right, "syntax errors (%): format / name / argument")):
        axis.set_xticks(range(len(labels)), labels, fontsize=8)
        axis.set_title(title, fontsize=10)
        axis.set_ylim(0, 100)
    left.legend(title="decoding", fontsize=8)
    handles = [
        plt.Rectangle((0, 0), 1, 1, facecolor="grey", edgecolor="white", hatch=h) for h in hatches.values()
    ]
    right.legend(handles, list(hatches), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_kamel(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """KAMEL accuracy against the number of tools, one line per decoding mode (the ToolDec paper's Figure 5)."""
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(5, 4))
    for series in sorted({(str(r.get("model", "")), str(r.get("decoding"))) for r in rows}):
        points = sorted(
            (int(r["tools"]), 100 * r.get("accuracy", 0.0))
            for r in rows
            if (str(r.get("model", "")), str(r.get("decoding"))) == series
        )
        label = series[1] if len({r.get("model") for r in rows}) == 1 else " / ".join(series)
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    axis.set_xlabel("number of tools")
    axis.set_ylabel("accuracy (%)")
    axis.set_ylim(0, 100)
    axis.set_title("KAMEL: accuracy vs number of tools", fontsize=10)
    axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _label(row: Mapping[str, Any]) -> str:
    """A row's benchmark (with its tool count) and model, for the x axis."""
    bench = str(row.get("benchmark", ""))
    if row.get("tools"):
        bench += f" ({row['tools']} tools)"
    return f"{bench}\n{row['model']}" if row.get("model") else bench


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _pct(value: Any) -> str:
    """A rate as a percentage with one decimal, blank when unknown."""
    return "" if value is None else f"{100 * value:.1f}%"


def _num(value: Any, digits: int) -> str:
    """A number rounded to `digits`, blank when unknown."""
    return "" if value is None else f"{value:.{digits}f}"


def environment() -> dict[str, str]:
    """What writes records now: Python, the versions of the packages that decide a generation, and the commit of
    tooldec's code (a frozen install's REVISION file, docs/results/frozen_env.sh; else the checkout's HEAD,
    "+dirty" when it has changes)."""
    env = {"python": platform.python_version()}
    for package in ENVIRONMENT_PACKAGES:
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = "none"
    env["revision"] = _revision()
    return env


def _revision() -> str:
    """The commit tooldec's code comes from, or "unknown"."""
    package = Path(__file__).resolve().parents[1]
    stamp = package / "REVISION"
    if stamp.is_file():
        return stamp.read_text(encoding="utf-8").strip()
    try:
        head = subprocess.run(["git", "-C", str(package), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def environments_with(out_dir: str | os.PathLike[str], current: Mapping[str, str]) -> list[dict[str, str]]:
    """The environments recorded in `out_dir`'s results (a run being resumed), with `current` added when it
    differs from the last one."""
    path = Path(out_dir) / RESULTS_FILE
    earlier = list(load_results(path).get("environments", [])) if path.exists() else []
    return earlier if earlier and earlier[-1] == dict(current) else [*earlier, dict(current)]


def _version() -> str:
    """The installed tooldec version."""
    try:
        return metadata.version("tooldec")
    except metadata.PackageNotFoundError:
        return "unknown"


def _jsonable(value: Any) -> Any:
    """`value` with dataclasses, tuples, sets and paths turned into JSON types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value
