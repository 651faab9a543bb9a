"""Judge a positional method of your own against RoPE and ALiBi, in one command.

    python -m scripts.study.judge --encoding mymod:MyEncoding            # a whole encoding
    python -m scripts.study.judge --method mymod:my_rescale              # a RoPE rescaling
    python -m scripts.study.judge --method mymod:my_rescale --method-params '{strength: 0.5}'
    python -m scripts.study.judge --encoding mymod:MyEncoding --preset gpu
    python -m scripts.study.judge ... --seeds 0 --set train.steps=20 --eval-set eval.tokens=2048  # a dry run

On the reference study's setup (``scripts/study/reference.py``: its presets and its seeds) it
trains, per seed, a RoPE run and an ALiBi run, and with ``--encoding`` a run of your encoding;
evaluates them at 1x-8x T (perplexity and passkey; the RoPE runs with ``none``, PI, YaRN and,
with ``--method``, your rescaling); and writes one page, ``JUDGE.md``, with a figure, a table of
mean perplexity, each comparison of your arm with each baseline at each length called by the
study's statistical rule, the passkey accuracy, and the wall time. Naming a module runs it (see
docs/own-method.md); the module must be importable (installed, or its folder on PYTHONPATH).

Runs go to ``results/judge/<name>/runs`` and the page to ``results/judge/<name>/``; a killed
judge continues where it stopped (finished tasks are kept). Bad input is one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import matplotlib
import matplotlib.ticker
import pandas as pd
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

from posx.configure import applies  # noqa: E402
from posx.configure.checks import check_train_config  # noqa: E402
from posx.configure.compose import compose  # noqa: E402
from posx.core.errors import PosxError  # noqa: E402
from posx.runs.paths import is_run  # noqa: E402
from scripts.study import REPO
from scripts.study.judge_stats import CLAIM, compare_arms, with_holm  # noqa: E402  (the one rule)
from scripts.study.log import Log, note, wall_time  # noqa: E402
from scripts.study.reference import PRESETS, Task, common, list_arg, resume, run_task, stopped  # noqa: E402

BASELINES = [("rope", "none"), ("rope", "pi"), ("rope", "yarn"), ("alibi", "none")]  # (trained arm, method)
FACTORS = [1, 2, 4, 8]


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        fail(f"{message} (python -m scripts.study.judge --help)")


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoding", metavar="IMPL", help="your encoding: module:Class (pos=custom pos.impl=IMPL)")
    parser.add_argument("--encoding-params", default=None, metavar="MAPPING", help="its pos.params, e.g. '{a: 1}'")
    parser.add_argument("--method", metavar="REF", help="your RoPE method: module:function (in eval.methods)")
    parser.add_argument("--method-params", default=None, metavar="MAPPING", help="its eval.params.<name>")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the reference study's by default")
    parser.add_argument("--name", help="default: the encoding's or method's name and the preset")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra training overrides")
    parser.add_argument("--eval-set", nargs="*", default=[], metavar="KEY=VALUE", help="extra evaluation overrides")
    parser.add_argument("--work", type=Path, help="where the runs go (default: results/judge/<name>)")
    return parser


def mapping(text: str | None, flag: str) -> dict | None:
    """A flow mapping given on the command line ('{a: 1}'), as Hydra's override would read it."""
    if text is None:
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, dict):
        fail(f"{flag} {text!r} is not a mapping; write it as '{{key: value}}'")
    return value


def flow(value: dict) -> str:
    """A mapping as a Hydra override value ({a:1,b:{c:2}})."""
    return "{" + ",".join(f"{k}:{flow(v) if isinstance(v, dict) else v}" for k, v in value.items()) + "}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if not (args.encoding or args.method):
        fail("name what to judge: --encoding module:Class and/or --method module:function")
    args.pos_params = mapping(args.encoding_params, "--encoding-params")
    args.eval_params = mapping(args.method_params, "--method-params")
    if args.pos_params is not None and not args.encoding:
        fail("--encoding-params goes with --encoding")
    if args.eval_params is not None and not args.method:
        fail("--method-params goes with --method")
    own = (args.encoding or args.method).rpartition(":")[2]
    args.name = args.name or f"{own}-{args.preset}"
    args.work = (args.work or REPO / "results" / "judge" / args.name).resolve()
    args.threads = args.threads or os.cpu_count() or 1
    args.jobs = 1
    return args


def encoding_overrides(args) -> list[str]:
    params = [f"pos.params={flow(args.pos_params)}"] if args.pos_params else []
    return ["pos=custom", f"pos.impl={args.encoding}", *params]


def method_overrides(args) -> list[str]:
    methods = ["none", "pi", "yarn", *([args.method] if args.method else [])]
    key = (args.method or "").rpartition(":")[2]
    params = [f"eval.params={flow({key: args.eval_params})}"] if args.eval_params else []
    return [f"eval.methods={list_arg(methods)}", *params]


def check_code(args) -> None:
    """Your code, loaded and checked as ``posx train`` checks it, before any work: one line, exit 2."""
    preset = [o for o in PRESETS[args.preset]["train"] if not o.startswith("experiment=")]
    try:
        if args.encoding:
            check_train_config(compose([*preset, *encoding_overrides(args), *args.set]))
        check_train_config(compose([*preset, "pos=rope", *method_overrides(args), *args.set]))
    except PosxError as exc:
        fail(str(exc))


def arms(args) -> list[tuple[str, list[str], list[str]]]:
    """(trained arm, its training overrides, its evaluation overrides)."""
    listed = [
        ("rope", ["pos=rope"], method_overrides(args)),
        ("alibi", ["pos=alibi"], ["eval.methods=[none]"]),
    ]
    if args.encoding:
        listed.append(("mine", encoding_overrides(args), ["eval.methods=[none]"]))
    return listed


def plan(args) -> list[Task]:
    models = PRESETS[args.preset]["models"]
    prepare = applies.only([*PRESETS[args.preset]["train"], *args.set], applies.PREPARE)
    tasks = [Task("data-prepare", 0, ["data", "prepare", *prepare, *common(args)])]
    for arm, train_overrides, eval_overrides in arms(args):
        for seed in args.seeds:
            name = f"{arm}-s{seed}"
            run = args.work / "runs" / name
            train = [
                "train", *PRESETS[args.preset]["train"], f"model={models['gpt2']}", *train_overrides, f"seed={seed}",
                f"name={name}", f"threads={args.threads}", "eval.after_train=false", *args.set, *common(args),
            ]  # fmt: skip
            evaluate = [
                "eval-extrapolate", str(run), "--defaults", f"eval.factors={list_arg(map(str, FACTORS))}",
                *PRESETS[args.preset]["eval"], *eval_overrides, *args.eval_set, *common(args),
            ]  # fmt: skip
            tasks.append(
                Task(f"train-{name}", 1, resume(run, args) if stopped(run) else train, lambda r=run: is_run(r))
            )
            tasks.append(Task(f"eval-{name}", 2, evaluate))
    return tasks


def collect(args) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Perplexity and passkey accuracy of every arm (trained arm + method) by seed and factor."""
    ppl, tasks = [], []
    for arm, _train, _eval in arms(args):
        for seed in args.seeds:
            run = args.work / "runs" / f"{arm}-s{seed}"
            table = pd.read_csv(run / "extrapolation.csv")
            table = table[table["status"] == "ok"].assign(seed=seed, arm=[label(arm, m) for m in table["method"]])
            ppl.append(table[["arm", "seed", "factor", "ppl"]])
            if (run / "tasks.csv").is_file():
                scored = pd.read_csv(run / "tasks.csv")
                scored = scored[scored["status"] == "ok"]
                scored = scored.assign(seed=seed, arm=[label(arm, m) for m in scored["method"]])
                tasks.append(scored[["arm", "seed", "factor", "task", "trials", "accuracy"]])
    return pd.concat(ppl), pd.concat(tasks) if tasks else pd.DataFrame()


def label(arm: str, method: str) -> str:
    """An arm's name on the page: the encoding, and the RoPE method after a '+'."""
    shown = "mine" if arm == "mine" else arm
    return shown if method == "none" else f"{shown}+{method.rpartition(':')[2] if ':' in method else method}"


def mine(args) -> list[str]:
    """The arms of your code: your encoding, and RoPE with your method."""
    return (["mine"] if args.encoding else []) + ([label("rope", args.method)] if args.method else [])


def comparisons(args, ppl: pd.DataFrame) -> pd.DataFrame:
    """Each arm of yours against each baseline at each factor: lower perplexity is better."""
    rows = []
    for yours in mine(args):
        for base in (label(a, m) for a, m in BASELINES):
            for factor in FACTORS:
                a = ppl[(ppl["arm"] == yours) & (ppl["factor"] == factor)].set_index("seed")["ppl"]
                b = ppl[(ppl["arm"] == base) & (ppl["factor"] == factor)].set_index("seed")["ppl"]
                call = compare_arms(dict(a), dict(b))
                rows.append({"yours": yours, "baseline": base, "factor": factor, **call})
    return with_holm(pd.DataFrame(rows))


def figure(ppl: pd.DataFrame, path: Path) -> None:
    """Mean perplexity against length, one line per arm, each seed a dot."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, rows in ppl.groupby("arm", sort=False):
        means = rows.groupby("factor")["ppl"].mean()
        (line,) = ax.plot(means.index, means.values, marker="o", label=arm)
        ax.scatter(rows["factor"], rows["ppl"], s=10, color=line.get_color(), alpha=0.5)
    ax.set(xscale="log", yscale="log", xlabel="evaluation length / T", ylabel="perplexity (lower is better)")
    ax.set_xticks(FACTORS, [f"{f}x" for f in FACTORS])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cells(frame: pd.DataFrame, value: str, digits: int) -> list[str]:
    """Markdown rows: arm by factor, the mean of ``value`` over seeds."""
    means = frame.groupby(["arm", "factor"], sort=False)[value].mean().unstack("factor")
    return [
        f"| {arm} | " + " | ".join(number(row.get(f), digits) for f in FACTORS) + " |" for arm, row in means.iterrows()
    ]


def number(value, digits: int) -> str:
    """A mean, or n/a where no seed scored the cell."""
    return "n/a" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def call_row(r) -> str:
    interval = f"[{r.lo:+.3f}, {r.hi:+.3f}]" if r.lo == r.lo else "—"
    detectable = f"{r.detectable:.3f}" if r.detectable == r.detectable else "—"
    p = f"{r.p:.2g}" if r.p == r.p else "—"
    cells = [
        r.yours,
        r.baseline,
        f"{r.factor}x",
        f"{r.diff:+.3f}",
        interval,
        r.test,
        r.n,
        p,
        r.call,
        r.holm,
        detectable,
    ]
    return "| " + " | ".join(map(str, cells)) + " |"


def write_page(args, ppl: pd.DataFrame, tasks: pd.DataFrame, calls: pd.DataFrame, seconds: float, runs: int) -> Path:
    head = "| arm | " + " | ".join(f"{f}x" for f in FACTORS) + " |\n|---|" + "---|" * len(FACTORS)
    lines = [
        f"# Judging {args.encoding or ''}{' and ' if args.encoding and args.method else ''}{args.method or ''}",
        "",
        f"`python -m scripts.study.judge {' '.join(sys.argv[1:])}`; preset {args.preset}, seeds "
        f"{', '.join(map(str, args.seeds))}; wall time {seconds / 60:.1f} min over {runs} invocation(s).",
        "",
        "![mean perplexity against length, each seed a dot](judge.png)",
        "",
        f"## Mean perplexity over {len(args.seeds)} seed(s) (lower is better)",
        "",
        head,
        *cells(ppl, "ppl", 3),
        "",
        f"## Your arms against the baselines (the claim called: {CLAIM})",
        "",
        "Difference of mean perplexity (yours - baseline) with its 95% interval: the paired t-test by seed when "
        "both arms have the same seeds, Welch's otherwise (scipy.stats). supported: the interval lies below 0; "
        "contradicted: above 0; inconclusive: it holds 0 (no evidence either way); not checked: an arm has fewer "
        "than two seeds (posx.report.stats, the rule of posx's own verdicts). The Holm column corrects for the "
        "number of comparisons on this page; detectable: the smallest difference an inconclusive comparison "
        "would have called with 80% power at its seeds.",
        "",
        "| yours | baseline | length | difference | 95% interval | test | seeds | p | call | Holm | detectable |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *(call_row(r) for r in calls.itertuples()),
    ]
    if len(tasks):
        for task, rows in tasks.groupby("task"):
            lines += [
                "",
                f"## {task}: exact answers (share of trials, mean over seeds)",
                "",
                head,
                *cells(rows, "accuracy", 2),
            ]
    page = args.work / "JUDGE.md"
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return page


def main() -> None:
    args = parse_args()
    check_code(args)
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    log = Log(args.work / "tasks.jsonl")
    tasks = plan(args)
    todo = [t for t in tasks if t.key not in log.done and not t.done()]
    print(f"judge {args.name}: {len(tasks)} tasks, {len(todo)} to run; runs in {args.work}", flush=True)
    note(args.work, "start")
    counter = [0]
    for task in todo:
        if run_task(task, args, log, counter, len(todo)):
            sys.exit(f"{task.key} failed; fix the cause and run the same command again (finished tasks are kept)")
    note(args.work, "end")
    ppl, scored = collect(args)
    figure(ppl, args.work / "judge.png")
    seconds, runs = wall_time(args.work)
    print(f"wrote {write_page(args, ppl, scored, comparisons(args, ppl), seconds, runs)}")


if __name__ == "__main__":
    main()
