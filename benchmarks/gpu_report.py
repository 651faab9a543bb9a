"""The GPU check's report: one Markdown file and one JSON summary from what
``scripts/gpu_check.sh`` left in its output directory.

    python -m benchmarks.gpu_report OUT        # reads OUT/steps.jsonl and what the steps wrote

``OUT/steps.jsonl`` has one line per step (name, status, exit code, seconds, limit, command,
log file); the runs are under ``OUT/runs/<name>/`` (``metrics.csv``), the benchmarks' JSON
beside them. Every figure is taken from those files: tokens/s and MFU as the median over the
logged steps after the first five (as ``posx train`` prints them), loss curves compared step by
step, evaluation memory from ``bench_encodings --out``. The goals are the ones posx is aimed at
on an H200 (nanochat reports 41-46% bf16 MFU on an H100 for models of this size). A missing
file leaves its figure null, and its goal unjudged; nothing here fails the check itself.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

# bf16 autocast: compiled and eager (or DDP and one process) sum in different orders, so
# their losses agree to bf16 rounding, not bit for bit; 2% of the loss bounds that drift over
# a few hundred steps.
BF16_LOSS_RTOL = 0.02
GOALS = {
    "mfu_gpu_small_compiled": ("bf16 MFU of gpu_small, compiled", ">=", 0.40),
    "peer_train_ratio_compiled": ("tokens/s of posx over the transformers Llama, both compiled", ">=", 1.3),
    "eval_memory_8x_over_1x_alibi": ("ALiBi flex: evaluation peak memory 8x / 1x", "<=", 1.2),
    "eval_memory_8x_over_1x_t5": ("T5 flex: evaluation peak memory 8x / 1x", "<=", 1.2),
}


def read_steps(out: Path) -> list[dict]:
    path = out / "steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def run_figures(run: Path) -> dict | None:
    """Steady tokens/s and MFU (median after the first five logged steps), the final
    validation loss and the train-loss curve of one run; None when it left no metrics."""
    path = run / "metrics.csv"
    if not path.exists():
        return None
    m = pd.read_csv(path)
    steady = m.iloc[min(5, len(m) - 1) :] if len(m) else m
    mfu = steady["mfu"].dropna()
    val = m["val_loss"].dropna()
    return {
        "steps": int(m["step"].max()) if len(m) else 0,
        "tokens_per_s": float(steady["tokens_per_s"].median()) if len(steady) else None,
        "mfu": float(mfu.median()) if len(mfu) else None,
        "final_val_loss": float(val.iloc[-1]) if len(val) else None,
        "train_loss": [float(x) for x in m["train_loss"]],
    }


def curves_agree(a: dict | None, b: dict | None, rtol: float = BF16_LOSS_RTOL) -> dict | None:
    """Step-by-step comparison of two runs' train-loss curves: the largest relative difference
    and whether it is within ``rtol``; None when either run is missing or they differ in length."""
    if not a or not b or len(a["train_loss"]) != len(b["train_loss"]) or not a["train_loss"]:
        return None
    worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a["train_loss"], b["train_loss"]))
    return {"max_rel_diff": worst, "within": bool(worst <= rtol), "rtol": rtol}


def memory_ratio(bench: dict | None, pos: str) -> dict | None:
    """Peak evaluation memory at 1x and 8x of ``pos`` from bench_encodings' rows, and 8x / 1x."""
    rows = {r["factor"]: r["peak_bytes"] for r in (bench or {}).get("memory", []) if r["pos"] == pos}
    if 1 not in rows or 8 not in rows:
        return None
    mib = 2**20
    return {"peak_mib_1x": rows[1] / mib, "peak_mib_8x": rows[8] / mib, "ratio": rows[8] / max(rows[1], 1)}


def figures(out: Path) -> dict:
    runs = {p.name: run_figures(p) for p in sorted((out / "runs").glob("*"))} if (out / "runs").exists() else {}
    peer = {mode: _json(out / f"peer-{mode}.json") for mode in ("eager", "compiled")}
    bench = _json(out / "encodings-flex.json")
    return {
        "runs": {name: {k: v for k, v in f.items() if k != "train_loss"} for name, f in runs.items() if f},
        "compiled_vs_eager": curves_agree(runs.get("rope-compiled"), runs.get("rope-eager")),
        "torchrun_vs_single": curves_agree(runs.get("rope-torchrun"), runs.get("rope-eager")),
        "peer": {mode: (p or {}).get("train") for mode, p in peer.items()},
        "eval_memory": {pos: memory_ratio(bench, pos) for pos in ("alibi", "t5")},
    }


def goals(fig: dict) -> dict:
    """Each goal: its figure and whether it is met (None: not measured)."""
    values = {
        "mfu_gpu_small_compiled": (fig["runs"].get("rope-compiled") or {}).get("mfu"),
        "peer_train_ratio_compiled": (fig["peer"].get("compiled") or {}).get("ratio_posx_over_transformers"),
        "eval_memory_8x_over_1x_alibi": (fig["eval_memory"].get("alibi") or {}).get("ratio"),
        "eval_memory_8x_over_1x_t5": (fig["eval_memory"].get("t5") or {}).get("ratio"),
    }
    result = {}
    for key, (what, op, target) in GOALS.items():
        value = values[key]
        met = None if value is None or math.isnan(value) else (value >= target if op == ">=" else value <= target)
        result[key] = {"what": what, "target": f"{op} {target}", "value": value, "met": met}
    return result


def summary(out: Path, header: dict | None = None) -> dict:
    steps = read_steps(out)
    fig = figures(out)
    counts = {s: sum(1 for x in steps if x["status"] == s) for s in sorted({x["status"] for x in steps})}
    return {"header": header or {}, "steps": steps, "counts": counts, "figures": fig, "goals": goals(fig)}


def markdown(s: dict, out: Path) -> str:
    lines = ["# posx GPU check", ""]
    lines += [f"- {k}: {v}" for k, v in s["header"].items()]
    lines += ["", "## Steps", "", "| step | status | exit | seconds | limit |", "|---|---|---|---|---|"]
    lines += [f"| {x['name']} | {x['status']} | {x['rc']} | {x['seconds']} | {x['limit']} |" for x in s["steps"]]
    lines += ["", "## Goals", "", "| goal | target | value | met |", "|---|---|---|---|"]
    for g in s["goals"].values():
        value = "not measured" if g["value"] is None else f"{g['value']:.3g}"
        lines.append(f"| {g['what']} | {g['target']} | {value} | {g['met']} |")
    lines += ["", "## Figures", "", "```json", json.dumps(s["figures"], indent=1), "```"]
    for x in s["steps"]:
        log = out / x.get("log", "")
        if x.get("log") and log.is_file():
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
            lines += ["", f"### {x['name']}", "", f"`{x['command']}`", "", "```", *tail, "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the GPU check's output directory")
    p.add_argument("--header", default=None, help="a JSON object of facts for the report's head (machine, torch)")
    args = p.parse_args()
    s = summary(args.out, json.loads(args.header) if args.header else None)
    (args.out / "summary.json").write_text(json.dumps(s, indent=1) + "\n", encoding="utf-8")
    (args.out / "report.md").write_text(markdown(s, args.out), encoding="utf-8")
    print(f"wrote {args.out / 'report.md'} and {args.out / 'summary.json'}")


if __name__ == "__main__":
    main()
