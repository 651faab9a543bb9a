"""What each ``posx`` command does with its parsed arguments (``train`` and ``extend`` through Hydra,
``posx.cli.jobs``). Imports torch and pandas, so it is loaded only when a command runs."""

from __future__ import annotations

import re
from pathlib import Path

from posx.cli import jobs
from posx.cli.exits import EVAL_INTERRUPTED, user_errors
from posx.configure import applies, command_line
from posx.configure.checks import check_train_config
from posx.configure.compose import compose, refuse_additions, to_yaml, typed
from posx.configure.evalsettings import eval_config, kept_from_run
from posx.core import launcher
from posx.core.console import new_console
from posx.core.errors import PosxError
from posx.data import store
from posx.data import tokenizer as tok_mod
from posx.eval.run import evaluate_run
from posx.hf.checkpoint import evaluate_hf_dir
from posx.hf.export import export_run
from posx.report.store import digest
from posx.runs.paths import resolve_run
from posx.train.extend import check as check_extension
from posx.train.extend import forbid_unused_overrides
from posx.train.extend import prepare as prepare_extension

EVAL_TAKES = "RUN or --latest, --force, --defaults, --allow-changed-code, and key=value overrides"
# Why a sweep's value does not go to a command that runs once.
ONCE = "it runs once: give one value and run it again for the next, or write a list in brackets, e.g. key=[a,b]"


def train(args: list[str], resume: str | None, allow_changed_code: bool = False) -> None:
    """``posx train``: a Hydra job (or sweep), or ``--resume RUN`` from its last checkpoint."""
    if resume is not None:
        with user_errors():
            jobs.resume(resume, args, allow_changed_code)
        return
    if allow_changed_code:
        with user_errors():
            raise PosxError("--allow-changed-code goes with --resume RUN (a new run records the code it trains with)")
    # a sweep's jobs are checked as each job checks itself (check_train_config) before the first trains
    jobs.run_hydra(jobs.train_job, "config", args, check_job=lambda cfg, _overrides: check_train_config(cfg))


def extend(run: str | None, overrides: list[str]) -> None:
    """``posx extend [RUN] overrides``: RUN becomes the ``parent=`` override."""
    if run is not None and ("=" in run or run.startswith("-")):  # no RUN: it was an override
        overrides.insert(0, run)
        run = None
    with user_errors():
        given = [o for o in overrides if not o.startswith("-") and applies.key_of(o) == "parent"]
        if run is not None and given:  # refused whether or not they agree
            raise PosxError(
                f"the run to extend is given twice, as RUN ({run}) and as {given[0]}; give it once: "
                "`posx extend RUN ...` or `posx extend parent=RUN ...`"
            )
        forbid_unused_overrides([o for o in overrides if not o.startswith("-")])
    if run is not None:
        quoted = run.replace("\\", "\\\\").replace("'", "\\'")
        # Next to the other overrides: Hydra's parser takes one contiguous run of them.
        first = next((i for i, a in enumerate(overrides) if "=" in a and not a.startswith("-")), len(overrides))
        overrides.insert(first, f"parent='{quoted}'")
    jobs.run_hydra(
        jobs.extend_job,
        "extend",
        overrides,
        check_job=lambda cfg, o: check_extension(typed(cfg), o),
        show_job=_show_job,
    )


def _show_job(overrides: list[str]) -> None:
    """``posx extend RUN --cfg job``: the config the extension will run, not the composed one."""
    cfg = typed(compose(overrides, config_name="extend"))
    ext = prepare_extension(cfg, overrides)
    print(
        f"# the config this extension will run: {ext.parent_dir} -> {Path(cfg.results_dir) / 'runs' / ext.name}\n"
        + to_yaml(ext.config),
        end="",
    )


def export(run: str, out: Path, results_dir: str) -> None:
    with user_errors():
        written = export_run(resolve_run(run, results_dir), out)
        new_console().print(
            f"wrote {written} (load it with transformers.AutoModelForCausalLM.from_pretrained)", markup=False
        )


def eval_extrapolate(
    run: str | None, overrides: list[str], latest: bool, force: bool, defaults: bool, allow_changed_code: bool = False
) -> None:
    """``posx eval-extrapolate``: a run with its own settings (or the defaults), or a transformers
    checkpoint with the composed ones."""
    # `--latest key=value` or `--latest ~key`: the first override landed in RUN
    if run is not None and ("=" in run or re.match(r"~[A-Za-z_]", run)):
        overrides.insert(0, run)
        run = None
    with user_errors(EVAL_INTERRUPTED):
        applies.refuse_flags([run or "", *overrides], "posx eval-extrapolate", EVAL_TAKES)
        applies.refuse_words(overrides, "posx eval-extrapolate", "one RUN (or --latest), then key=value overrides")
        command_line.refuse_sweep_values(overrides, "posx eval-extrapolate", ONCE)
        # before composing, which would check a model key against the default model's
        refuse_additions(overrides)
        reads = f"{applies.shown(applies.EVAL_RUN)} (and data.* for a transformers checkpoint)"
        applies.refuse_others(overrides, applies.EVAL_ANY, "evaluating a run", " (its model is its own)", reads)
        if run is not None and latest:
            raise PosxError(f"give RUN ({run}) or --latest, not both: --latest evaluates the most recent run")
        launcher.single_process("posx eval-extrapolate")
        cfg = compose(overrides)
        run_dir = resolve_run(run, cfg.results_dir, latest=latest)
        console = new_console()
        if (run_dir / "config.json").is_file() and not (run_dir / "model.json").is_file():
            applies.refuse_others(overrides, applies.EVAL_CHECKPOINT, "evaluating a transformers checkpoint")
            evaluate_hf_dir(run_dir, typed(cfg), console)  # a transformers checkpoint: the composed settings
            return
        applies.refuse_others(overrides, applies.EVAL_RUN, "evaluating a run", " (its model and corpus are its own)")
        if not defaults:
            composed = cfg
            cfg, source = eval_config(run_dir, composed, overrides)
            kept = kept_from_run(cfg, composed)
            console.print(
                f"evaluation settings: from {source}"
                + (", with the overrides on top" if overrides else "")
                + (f"; it sets {kept} (--defaults starts from the defaults)" if kept else ""),
                highlight=False,
                markup=False,
            )
        evaluate_run(run_dir, typed(cfg), console, force=force, allow_changed_code=allow_changed_code)
        digest.refresh(run_dir)  # what posx report and posx runs read of the run


def data_prepare(overrides: list[str]) -> None:
    """``posx data prepare``: build (or find) the token store and say what it holds."""
    with user_errors():
        applies.refuse_flags(overrides, "posx data prepare", "key=value overrides only")
        applies.refuse_words(overrides, "posx data prepare", "key=value overrides only")
        command_line.refuse_sweep_values(overrides, "posx data prepare", ONCE)
        applies.refuse_others(overrides, applies.PREPARE, "posx data prepare")
        cfg = compose(overrides)
        found = store.load(typed(cfg).data, cfg.data.cache_dir, console=new_console())
        fp = found.fingerprint
        new_console().print(
            f"token store {found.path}: {fp['train_tokens']:,} train + {fp['val_tokens']:,} val tokens, "
            f"{fp['documents']['train']} + {fp['documents']['val']} documents, "
            f"{tok_mod.kind_label(fp['tokenizer']['kind'])} vocab {fp['tokenizer']['vocab_size']} ({fp['dtype']})",
            markup=False,
            highlight=False,
        )
