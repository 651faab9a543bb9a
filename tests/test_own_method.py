"""Methods and encodings from outside posx: named by import path or entry point, checked before
any work in one line, computed as posx's own (the examples re-implement PI and ALiBi and give
their numbers), and recorded so a result is not reused with other code."""

from __future__ import annotations

import math
import re
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

from posx import rope
from posx.configure.checks import check_train_config
from posx.configure.compose import compose
from posx.core import imports
from posx.core.errors import PosxError
from posx.eval import history
from posx.model.encodings import ALiBi
from posx.model.gpt import GPT
from posx.model.rescale import method_frequencies, method_window
from posx.runs import code
from posx.schema.config import EvalConfig

from conftest import run_posx
from helpers.model import spec

REPO = Path(__file__).resolve().parents[1]
PARTIAL_PI = "examples.partial_pi:partial_pi"
MY_ALIBI = "examples.alibi_encoding:ALiBi"


@pytest.fixture
def repo_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))


def module(tmp_path: Path, monkeypatch, name: str, source: str) -> Path:
    """A user's module ``name`` in ``tmp_path``, importable (each test its own name: imports are cached)."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return path


def ev(**over):
    return EvalConfig(**over)


@pytest.mark.parametrize("scale", [1.0, 1.5, 4.0, 8.0])
def test_the_partial_pi_example_at_strength_one_is_pi(repo_on_path, scale):
    args = dict(head_dim=32, base=10000.0, train_context=64, scale=scale, length=round(64 * scale))
    ours, ours_attention = method_frequencies("pi", ev(), **args)
    theirs, theirs_attention = method_frequencies(PARTIAL_PI, ev(), **args)
    torch.testing.assert_close(theirs, ours, rtol=1e-6, atol=0)
    assert theirs_attention == ours_attention == 1.0


def test_the_partial_pi_example_takes_its_parameter_from_eval_params(repo_on_path):
    args = dict(head_dim=32, base=10000.0, train_context=64, scale=4.0, length=256)
    half, _ = method_frequencies(PARTIAL_PI, ev(params={"partial_pi": {"strength": 0.5}}), **args)
    theta = rope.base_inv_freq(32, 10000.0)
    torch.testing.assert_close(half, theta / 2.0, rtol=1e-6, atol=0)  # 4 ** 0.5


def test_the_alibi_example_gives_the_mask_of_posx_alibi(repo_on_path):
    for n_head in (1, 2, 4, 8):
        built = GPT(spec(pos="custom", n_head=n_head, d_model=8 * n_head, impl=MY_ALIBI)).pos
        masks = built.attn_masks(16, 2, torch.float32, torch.device("cpu"))
        expected = ALiBi(n_head).attn_masks(16, 2, torch.float32, torch.device("cpu"))
        torch.testing.assert_close(masks[0], expected[0], rtol=1e-6, atol=0)


def test_an_attention_side_method_from_outside_is_windowed_as_posx_own(tmp_path, monkeypatch):
    module(
        tmp_path,
        monkeypatch,
        "my_grouping",
        """
        from dataclasses import dataclass
        from posx.schema.fields import positive
        from posx.model.windowed import Grouping
        from posx.rope import attention_method

        @dataclass
        class Params:
            group: int = positive(16)

        @attention_method(Params)
        def grouped(params, original_context):
            return Grouping.resolve(params.group, None, original_context)
        """,
    )
    cfg = ev(methods=["none", "my_grouping:grouped"], params={"grouped": {"group": 4}})
    mine = method_window("my_grouping:grouped", cfg, 64)
    cfg.self_extend.group = 4
    assert mine == method_window("self_extend", cfg, 64)
    inv, _ = method_frequencies(
        "my_grouping:grouped", cfg, head_dim=8, base=10000.0, train_context=64, scale=4.0, length=256
    )
    torch.testing.assert_close(inv, rope.base_inv_freq(8, 10000.0))  # the frequencies stay theta


def test_an_entry_point_names_a_method_and_an_encoding(tmp_path, monkeypatch, repo_on_path):
    info = tmp_path / "mymethods-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mymethods\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[posx.methods]\nhalf_pi = {PARTIAL_PI}\n\n[posx.encodings]\nmy_alibi = {MY_ALIBI}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    theta = rope.base_inv_freq(8, 10000.0)
    inv, _ = rope.frequencies("half_pi", 8, factor=2.0, original_context=32)
    torch.testing.assert_close(inv, theta / 2.0)
    assert type(GPT(spec(pos="custom", impl="my_alibi")).pos).__name__ == "ALiBi"
    with pytest.raises(PosxError, match="installed in posx.methods: half_pi"):
        rope.frequencies("no_such", 8)


BAD = {
    "raises on import": ("raise RuntimeError('broken on purpose')\n", "importing '{n}' failed: RuntimeError"),
    "imports what is missing": ("import no_such_package_here\n", "No module named 'no_such_package_here'"),
    "no hook": (
        "from posx.model.positional import PositionalEncoding\nclass Thing(PositionalEncoding):\n    pass\n",
        "overrides none of the hooks",
    ),
    "not an encoding": ("class Thing:\n    def embed(self, x, p):\n        return x\n", "not a subclass of"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_encoding_is_one_line_before_any_work(tmp_path, monkeypatch, case):
    source, needle = BAD[case]
    name = f"bad_{abs(hash(case)) % 10**8}"
    module(tmp_path, monkeypatch, name, source)
    with pytest.raises(PosxError, match=re.escape(needle.format(n=name))) as info:
        compose(["pos=custom", f"pos.impl={name}:Thing"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "source,needle",
    [
        ("def f(inv_freq):\n    return inv_freq, 1.0\n", "is a function, not a declared method"),
        (
            "from posx.rope import rope_method\n@rope_method()\ndef f(inv_freq):\n    return inv_freq, 1.0\n",
            r"f must take \(inv_freq, original_context, length, params\)",
        ),
        (
            "from posx.rope import rope_method\n@rope_method(dict)\ndef f(a, b, c, d):\n    return a, 1.0\n",
            "its params must be a dataclass",
        ),
    ],
)
def test_a_bad_method_is_one_line_before_any_work(tmp_path, monkeypatch, source, needle):
    name = f"badm_{abs(hash(source)) % 10**8}"
    module(tmp_path, monkeypatch, name, source)
    with pytest.raises(PosxError, match=needle):
        compose([f"eval.methods=[none,{name}:f]"])


def test_a_method_returning_the_wrong_shape_is_named(tmp_path, monkeypatch):
    module(
        tmp_path,
        monkeypatch,
        "short_freqs",
        "from posx.rope import rope_method\n@rope_method()\ndef f(a, b, c, d):\n    return a[:2], 1.0\n",
    )
    cfg = compose(["eval.methods=[none,short_freqs:f]"])  # the method loads and declares itself well
    with pytest.raises(PosxError, match="short_freqs:f returned inverse frequencies of shape \\(2,\\)"):
        check_train_config(cfg)  # every row computed before any work


def test_parameters_are_walked_with_their_bounds_and_names(repo_on_path):
    with pytest.raises(PosxError, match=r"eval.params.partial_pi.strength=2 must be in \[0.0, 1.0\]"):
        compose([f"eval.methods=[{PARTIAL_PI}]", "eval.params={partial_pi:{strength:2}}"])
    with pytest.raises(PosxError, match="eval.params.partial_pi.x is not a parameter"):
        compose([f"eval.methods=[{PARTIAL_PI}]", "eval.params={partial_pi:{x:1}}"])
    with pytest.raises(PosxError, match="eval.params.other names no method"):
        compose([f"eval.methods=[{PARTIAL_PI}]", "eval.params={other:{strength:1}}"])
    with pytest.raises(PosxError, match="pos.params.max_bias must be positive, got -1"):
        compose(["pos=custom", f"pos.impl={MY_ALIBI}", "pos.params={max_bias:-1}"])


def test_changed_code_is_named_and_refused_unless_allowed(tmp_path, monkeypatch):
    path = module(tmp_path, monkeypatch, "traced_enc", "X = 1\n")
    run = tmp_path / "run"
    run.mkdir()
    code.record(run, {"pos.impl": imports.load("traced_enc:X", imports.ENCODING_GROUP, "pos.impl")[1]})
    assert code.check(run, allow=False, doing="evaluate it") == []
    path.write_text("X = 2\n", encoding="utf-8")
    with pytest.raises(PosxError, match="the source of traced_enc:X .* has changed since .*--allow-changed-code"):
        code.check(run, allow=False, doing="evaluate it")
    assert len(code.check(run, allow=True, doing="evaluate it")) == 1


@pytest.mark.slow
def test_the_examples_match_the_built_ins_through_train_eval_and_report(tmp_path, tiny_args, repo_on_path):
    """ALiBi from outside posx trains and scores as pos=alibi; partial PI scores as pi; the
    report reads both; report, runs and compare never import the examples."""
    evaluated = ["eval.after_train=true", "eval.factors=[1,2]", "eval.passkey.enabled=false"]
    run_posx("train", "pos=alibi", "name=theirs", *evaluated, *tiny_args, cwd=tmp_path)
    run_posx("train", "pos=custom", f"pos.impl={MY_ALIBI}", "name=mine", *evaluated, *tiny_args, cwd=tmp_path)
    runs = tmp_path / "results" / "runs"
    theirs = pd.read_csv(runs / "theirs" / "extrapolation.csv").set_index(["method", "factor"])
    mine = pd.read_csv(runs / "mine" / "extrapolation.csv").set_index(["method", "factor"])
    ok = theirs["status"] == "ok"
    assert ok.sum() == 2 and (mine.loc[ok.index[ok], "status"] == "ok").all()
    assert mine.loc[ok, "ppl"].tolist() == pytest.approx(theirs.loc[ok, "ppl"].tolist(), rel=1e-6)
    assert (runs / "mine" / code.CODE).is_file() and not (runs / "theirs" / code.CODE).is_file()

    methods = f"eval.methods=[none,pi,{PARTIAL_PI}]"
    run_posx("train", "pos=rope", "name=rope", *evaluated, methods, *tiny_args, cwd=tmp_path)
    table = pd.read_csv(runs / "rope" / "extrapolation.csv").set_index(["method", "factor"])["ppl"]
    assert math.isfinite(table[("pi", 2.0)]) and table[("pi", 2.0)] != table[("none", 2.0)]
    assert table[(PARTIAL_PI, 2.0)] == pytest.approx(table[("pi", 2.0)], rel=1e-6)

    # report, runs and compare read tables: they never import the examples again
    for name in ("examples.alibi_encoding", "examples.partial_pi"):
        sys.modules.pop(name, None)
    for command in (["report"], ["runs"], ["compare", "mine", "theirs"]):
        result = run_posx(*command, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    assert "examples.alibi_encoding" not in sys.modules and "examples.partial_pi" not in sys.modules


def test_the_command_line_refuses_a_missing_module_in_one_line_and_writes_nothing(tmp_path):
    result = run_posx("train", "pos=custom", "pos.impl=no_such_module_here:Enc", cwd=tmp_path, check=False)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no module 'no_such_module_here' on the Python path" in lines[0]
    assert not (tmp_path / "results").exists()


def test_a_config_folder_on_the_search_path_names_the_code(tmp_path, repo_on_path):
    (tmp_path / "pos").mkdir()
    (tmp_path / "pos" / "my_alibi.yaml").write_text(f"name: custom\nimpl: {MY_ALIBI}\nparams: {{max_bias: 4}}\n")
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "mine.yaml").write_text(
        f"methods: [none, {PARTIAL_PI}]\nparams: {{partial_pi: {{strength: 0.5}}}}\n"
    )
    cfg = compose(["pos=my_alibi", "eval=mine", f"hydra.searchpath=[file://{tmp_path}]"])
    assert (cfg.pos.name, cfg.pos.impl, cfg.pos.params.max_bias) == ("custom", MY_ALIBI, 4)
    assert list(cfg.eval.methods) == ["none", PARTIAL_PI] and cfg.eval.params.partial_pi.strength == 0.5


def test_the_tutorial_shows_each_example_as_it_is_and_each_fits_in_40_lines():
    page = (REPO / "docs" / "own-method.md").read_text(encoding="utf-8")
    for name in ("alibi_encoding.py", "partial_pi.py"):
        text = (REPO / "examples" / name).read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 40, name
        assert text.rstrip() in page, name


def test_eval_params_joins_an_evaluations_identity_only_when_set():
    default = history.settings_of(ev())
    assert "params" not in default  # evaluations made before the key existed keep their ids
    given = history.settings_of(ev(params={"partial_pi": {"strength": 0.5}}))
    assert given["params"] == {"partial_pi": {"strength": 0.5}}
    assert history.eval_id(given) != history.eval_id(default)


@pytest.mark.slow
def test_a_resume_or_evaluation_whose_code_changed_is_refused_in_one_line(tmp_path, monkeypatch, tiny_args):
    path = module(
        tmp_path,
        monkeypatch,
        "decay_bias",
        """
        import torch
        from posx.model.positional import PositionalEncoding

        class Decay(PositionalEncoding):
            def __init__(self, spec, params):
                super().__init__()
                self.n_head = spec.model.n_head

            def distance_bias(self, layer, length):
                return -0.1 * torch.arange(length, dtype=torch.float32).expand(self.n_head, length)
        """,
    )
    run_posx("train", "pos=custom", "pos.impl=decay_bias:Decay", "name=decay", *tiny_args, cwd=tmp_path)
    run = tmp_path / "results" / "runs" / "decay"
    assert code.read(run)["pos.impl"].sha256 == imports.load("decay_bias:Decay", "", "pos.impl")[1].sha256
    path.write_text(path.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    for command in (["train", "--resume", str(run)], ["eval-extrapolate", str(run)]):
        refused = run_posx(*command, cwd=tmp_path, check=False)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "the source of decay_bias:Decay" in refused.stderr and "--allow-changed-code" in refused.stderr
    allowed = run_posx("eval-extrapolate", str(run), "--allow-changed-code", "eval.factors=[1]", cwd=tmp_path)
    assert "warning: pos.impl: the source of decay_bias:Decay" in allowed.stdout
    assert (run / "extrapolation.csv").is_file()
