"""The reference study's committed outputs, from the runs ``scripts/study/reference.py`` made.

Writes ``results/reference/<name>/``: ``report/`` (``posx report --evaluations all`` over every
run: summary tables and PNGs), ``sweep.csv`` (every evaluation of every run, one row per cell),
``extension.md``, ``claims.csv`` and ``STUDY.md`` (the command, the commit, the machine, the
wall time, the figures with captions, the papers' claims checked, the orderings). The directory
is built beside the old one and swapped in whole; the old one is removed only if it is a study
output (it has a STUDY.md).

    python -m scripts.study.notes --work results/study/cpu-tiny --out results/reference/cpu-tiny \\
        --command "python -m scripts.study.reference" --elapsed 0

``scripts.study.reference`` runs this as its last step; run it alone to rewrite the notes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import torch

from scripts.study import REPO, seed_cells
from scripts.study import check as study_check  # made again vs committed, cell by cell
from scripts.study import figure as study_figure  # the second edition's headline figure
from scripts.study import log as study_log  # the task and invocation logs
from scripts.study import sections as study_sections  # the second edition's sections
from scripts.study import setting as study_setting  # what the study is (corpus, model, T, steps, seeds)
from scripts.study import verdicts as study_verdicts  # the claims, their reasons, the earlier rule's calls
from scripts.study.args import OneLineParser, number
from scripts.study.claims import OPTION_DEFAULTS, matches
from scripts.study.grids import GRIDS
from scripts.study.log import git  # the commit and the state of the tree
from scripts.study.text import SMOOTH, captions  # the notes' prose

EARLIER_FILE = (
    "- `earlier_calls.csv`: each comparison's call under the earlier rule (two standard deviations of one run)"
)


def machine() -> str:
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").is_file()
        else ""
    )
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{cpu or 'unknown CPU'}, {os.cpu_count()} cores, {gpu}; {platform.platform()}; Python "
        f"{platform.python_version()}, torch {torch.__version__}"
    )


def shown(path: Path) -> str:
    """A path as STUDY.md writes it: relative to the repository when inside it, else only its name, so
    the committed notes name no absolute path of the machine they were made on."""
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name


def task_times(work: Path) -> pd.DataFrame:
    done = pd.DataFrame(study_log.read_jsonl(work / "tasks.jsonl"))
    return done[done["rc"] == 0].drop_duplicates("key", keep="last")


def sweep_table(runs: Path) -> pd.DataFrame:
    """Every evaluation cell of every run (``study_check.made_again``), the run's name first."""
    df = study_check.made_again(runs)
    return df[["job", *[c for c in df.columns if c != "job"]]]


def cell(mean: float, std: float) -> str:
    return "—" if mean != mean else (f"{mean:.3f}" if std != std else f"{mean:.3f} ± {std:.3f}")


def orderings(summary: pd.DataFrame, groups: dict) -> pd.DataFrame:
    """Per protocol and factor: the encodings, and the RoPE methods, from best to worst."""
    trained = summary[(summary["parent"].fillna("") == "") & (summary["n_seeds"] > 0)]
    rows = []
    for (protocol, factor), g in trained.groupby(["protocol", "factor"]):
        enc = g[g["method"].isin(["none", "clamp", "interpolate"])]
        enc = enc[(enc["encoding"] != "rope") | (enc["group"] == groups["rope"])]
        names = [e if m == "none" else f"{e}/{m}" for e, m in zip(enc["encoding"], enc["method"])]
        rope = g[(g["encoding"] == "rope") & (g["group"] == groups["rope"])]
        llama = g[(g["encoding"] == "rope") & (g["group"] == groups.get("llama", ""))]
        rank = lambda frame, labels: " < ".join(  # noqa: E731
            f"{n} {m:.3g}" for n, m in sorted(zip(labels, frame["ppl_mean"]), key=lambda t: t[1])
        )
        rows.append(
            {
                "protocol": protocol,
                "factor": f"{factor:g}x",
                "encodings (no rescaling), best first": rank(enc, names),
                "RoPE methods, gpt2 block": rank(rope, rope["method"]),
                "RoPE methods, llama block": rank(llama, llama["method"]),
            }
        )
    return pd.DataFrame(rows)


def rope_groups(report: Path) -> dict:
    """The group labels of the RoPE runs trained from scratch: "rope" (the gpt2 block, every option
    at its default, byte tokens) and "llama" (the llama block)."""
    groups = pd.read_csv(report / "groups.csv").fillna("")
    rope = groups[(groups["encoding"] == "rope") & (groups["parent"] == "")]
    found = {}
    for label in rope["label"]:
        if "block=llama" in label:
            found["llama"] = label
        elif not study_verdicts.is_bpe(label) and matches(label, OPTION_DEFAULTS):
            found["rope"] = label
    return found


def byte_level(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's rows of runs on byte tokens (perplexities of different tokenizers do not compare)."""
    return summary[[not study_verdicts.is_bpe(str(g)) for g in summary["group"]]]


def header_lines(args, times: pd.DataFrame, seeds: str) -> list[str]:
    """The title, the command that regenerates the study, and the commit, machine and time it took."""
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    phases = times.groupby("phase")["seconds"].sum()
    total = times["seconds"].sum()
    wall, calls = study_log.wall_time(args.work)
    if calls:
        span = f"{wall / 60:.0f} min over {calls} invocation(s), summed (a killed one counts to its last finished task)"
    else:  # a study run before invocations were logged: from the first task's start to the last one's end
        ends = pd.to_datetime(times["finished"])
        seconds = (ends.max() - (ends - pd.to_timedelta(times["seconds"], unit="s")).min()).total_seconds()
        span = f"{seconds / 60:.0f} min from the first task's start to the last one's end, over every invocation"
    return [
        f"# Reference study: {args.out.name}",
        "",
        f"Every positional encoding and RoPE rescaling method of posx, {seeds}, evaluated from 1x to 8x "
        "the training length, with the papers' claims checked. Regenerate it, or continue it where it stopped, with:",
        "",
        f"```bash\n{args.command}\n```",
        "",
        f"- commit: `{git('rev-parse', 'HEAD')}`{dirty}",
        f"- machine: {machine()}",
        f"- finished: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- wall time: {span}, resumes included; {total / 60:.0f} min of task time summed over parallel jobs "
        f"({', '.join(f'phase {p}: {s / 60:.0f} min' for p, s in phases.items())}), {len(times)} tasks; "
        f"the last invocation took {float(args.elapsed) / 60:.0f} min",
        (f"- runs: `{shown(args.work)}` (not committed: weights and checkpoints); every task's log is in its `logs/`"),
        "",
    ]


def figure_lines(report: Path, texts: dict[str, str]) -> list[str]:
    """Each figure the report drew, in ``texts``' order (``scripts.study.text.captions``), with its caption."""
    lines = []
    for name, caption in texts.items():
        if (report / name).is_file():
            lines += [f"### {name}", "", f"![{name}](report/{name})", "", caption, ""]
    return lines


def study_md(args, header: list[str], report: Path, claims: pd.DataFrame, parts: dict) -> str:
    """STUDY.md: ``header`` (how the study ran), its setting, the claims checked (the second
    edition: its verdicts and headline figure first, then ``parts["sections"]``), where the rule
    changed a call, the orderings, the extension table, figures and files."""
    lines = [*header, *parts["setting"], study_verdicts.trust_line(claims), ""]
    if args.grid == "methods":
        first = REPO / "results" / "reference" / "cpu-tiny" / "claims.csv"
        lines += study_sections.glance_lines(claims, first, study_figure.CAPTION)
    lines += study_verdicts.claims_lines(claims, table=args.grid == "first") + parts["sections"]
    lines += study_verdicts.changed_lines(claims, parts["earlier"])
    lines += [
        "## Orderings",
        "",
        "Mean perplexity over seeds at each length, best first.",
        "",
        parts["order"].to_markdown(index=False),
        "",
        "## Extension",
        "",
        parts["extension"],
        "",
        "## Figures",
        "",
        *figure_lines(report, parts["captions"]),
        "## Files",
        "",
        "- `report/`: `posx report --evaluations all` over every run (summary.md/.csv, groups.csv, "
        "passkey_summary.csv, extension.csv and the PNGs)",
        "- `sweep.csv`: every evaluation table of every run stacked (`job` = run name)",
        "- `claims.csv`: every comparison behind the verdicts above, one row each: its test, df, p, 95% interval, "
        "outcome, detectable difference, Holm-corrected p and call, and its claim's verdicts",
        *([EARLIER_FILE] if parts["earlier"] is not None else []),
        "",
    ]
    return "\n".join(lines)


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A new folder beside ``out`` to build outputs in, swapped in whole (``publish``) when the
    block ends without an error; removed otherwise."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        yield staging
        publish(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def publish(staging: Path, out: Path) -> None:
    """Swap the new outputs in; the old directory goes only if it is a study's output."""
    if out.is_symlink() or (out.exists() and not (out / "STUDY.md").is_file()):
        raise SystemExit(f"{out} exists and is not a study output (no STUDY.md); move it away or pass another --out")
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        out.rename(old / out.name)
    staging.rename(out)
    if old is not None:
        shutil.rmtree(old)


def parse_args() -> argparse.Namespace:
    """The command line, with --work and --out made absolute."""
    parser = OneLineParser(prog="python -m scripts.study.notes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="the study's work directory (its runs/)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--command", help="the command that ran the study, for STUDY.md")
    parser.add_argument("--elapsed", type=number(0, 1e9), default=0.0, help="seconds the last invocation took")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="first", help="the study's grid")
    parser.add_argument(
        "--from-committed",
        action="store_true",
        help="rewrite claims.csv and STUDY.md from --out's committed tables alone (no runs needed)",
    )
    args = parser.parse_args()
    if args.from_committed and not (args.out / "STUDY.md").is_file():
        parser.error(f"--from-committed: {args.out} has no STUDY.md; give the folder of a committed study")
    if not args.from_committed and (args.work is None or args.command is None):
        parser.error("--work and --command are needed (or --from-committed to rewrite the notes alone)")
    args.out = args.out.resolve()
    args.work = args.work.resolve() if args.work else None
    return args


def run_report(work: Path, report: Path) -> None:
    """``posx report --evaluations all`` over every run of the study, written to ``report``."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "posx",
            "report",
            str(work / "runs"),
            "--evaluations",
            "all",
            "--smooth",
            str(SMOOTH),
            "--out",
            str(report),
            "--results-dir",
            str(work),
        ],
        check=True,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )


def read_summary(report: Path) -> pd.DataFrame:
    """The report's summary.csv; ``parent`` is empty for a run trained from scratch."""
    summary = pd.read_csv(
        report / "summary.csv", keep_default_na=False, na_values=[""], dtype={"parent": str, "group": str}
    )
    summary["parent"] = summary["parent"].fillna("")
    return summary


def extension_md(ext: pd.DataFrame | None) -> str:
    """The Extension section, without its heading (``study_sections.extension_lines``)."""
    return "\n".join(study_sections.extension_lines(ext))


def committed_header(args, out: Path) -> list[str]:
    """STUDY.md's header as the study wrote it (how it ran), and a line saying the notes were
    re-derived from the committed tables."""
    lines = (out / "STUDY.md").read_text().split("\n## ", 1)[0].splitlines()
    lines = [line for line in lines if not line.startswith("- notes: ")]
    while lines and not lines[-1]:
        lines.pop()
    again = f"python -m scripts.study.notes --from-committed --out {shown(args.out)} --grid {args.grid}"
    code = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results")  # the outputs aside
    dirty = " (with uncommitted changes)" if code else ""
    return [*lines, f"- notes: re-derived from the committed tables with `{again}` at commit "
            f"`{git('rev-parse', 'HEAD')}`{dirty}; no run was redone", ""]  # fmt: skip


def earlier(folder: Path, keys: list[str] = study_verdicts.CLAIM_KEYS) -> pd.DataFrame | None:
    """The earlier rule's calls: ``earlier_calls.csv``, or, the first time, read from an earlier
    claims.csv (one row per claim, ``keys`` naming it) and written there; None when neither is there."""
    kept = folder / "earlier_calls.csv"
    if kept.is_file():
        return pd.read_csv(kept)
    old = pd.read_csv(folder / "claims.csv") if (folder / "claims.csv").is_file() else None
    if old is None or "outcome" in old.columns:
        return None
    calls = study_verdicts.earlier_calls(old, keys)
    calls.to_csv(kept, index=False)
    return calls


def write_outputs(args, staging: Path) -> None:
    """Every output of the study into ``staging``: report/, sweep.csv, claims.csv, extension.md and STUDY.md."""
    report = staging / "report"
    run_report(args.work, report)
    sweep = sweep_table(args.work / "runs")
    sweep.to_csv(staging / "sweep.csv", index=False)
    if args.grid == "methods":
        study_figure.draw(sweep, staging)
        if (args.out / "tasks").is_dir():  # the committed NIAH heatmap, kept where its runs are not here
            shutil.copytree(args.out / "tasks", staging / "tasks")
    seeds = study_setting.seed_span(seed_cells.read_groups(report / "groups.csv"))
    write_notes(args, staging, sweep, header_lines(args, task_times(args.work), seeds), None)


def write_notes(args, staging: Path, sweep: pd.DataFrame, header: list[str], earlier_calls) -> None:
    """claims.csv, extension.md and STUDY.md into ``staging`` from its report/ and ``sweep``."""
    report = staging / "report"
    summary = read_summary(report)
    ext = pd.read_csv(report / "extension.csv") if (report / "extension.csv").is_file() else None
    groups = rope_groups(report)
    table = seed_cells.read_groups(report / "groups.csv")
    seeds = seed_cells.per_seed(sweep, table)
    claims = study_verdicts.claims_table(seeds, ext, groups)
    claims.to_csv(staging / "claims.csv", index=False)
    ext_md = extension_md(ext)
    (staging / "extension.md").write_text("# Extension\n\n" + ext_md + "\n")
    sections = []
    if args.grid == "methods":
        retrieval = REPO / "results" / "reference" / "cpu-retrieval"
        sections = study_sections.bpb_lines(sweep) + study_sections.bpe_lines(sweep)
        sections += study_sections.task_lines(retrieval, staging, REPO / "results" / "study" / "cpu-retrieval" / "runs")
    parts = {
        "setting": study_setting.setting_lines(args.preset, args.grid, sweep, table, header),
        "sections": sections,
        "earlier": earlier_calls,
        "order": orderings(byte_level(summary), groups),
        "extension": ext_md.strip(),
        "captions": captions(ext, float(seeds[seeds["parent"] == ""]["factor"].max())),
    }
    (staging / "STUDY.md").write_text(study_md(args, header, report, claims, parts))


def notes_only(args, staging: Path) -> None:
    """``--from-committed``: the committed study copied into ``staging``, its notes rewritten."""
    shutil.copytree(args.out, staging, dirs_exist_ok=True)
    sweep = pd.read_csv(staging / "sweep.csv", low_memory=False)
    write_notes(args, staging, sweep, committed_header(args, args.out), earlier(staging))


def main() -> None:
    """Build the outputs beside ``--out`` and swap them in whole."""
    args = parse_args()
    with staged(args.out) as staging:
        (notes_only if args.from_committed else write_outputs)(args, staging)
    print(f"wrote {args.out} (STUDY.md, report/, sweep.csv, claims.csv, extension.md)")


if __name__ == "__main__":
    main()
