"""Task generators: each one's defining property, determinism, and teacher-forced scoring."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from posx.core.errors import PosxError
from posx.eval import history, passkey, suite
from posx.eval.extrapolate import evaluate
from posx.model.gpt import GPT
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig
from posx.schema.tasks import TaskOptions
from posx.tasks import interval, mqar, registry, scoring
from posx.tasks.base import byte_encode, scrub, starts
from posx.tasks.variable_tracking import chain

from helpers.model import spec

CPU = torch.device("cpu")
OPTS = TaskOptions()  # as evaluation passes it


@pytest.fixture(scope="module")
def val() -> torch.Tensor:
    text = "".join(f"def f{i}(x):\n    return x + {i}  # comment\n" for i in range(400)).encode()
    return torch.from_numpy(np.frombuffer(text, dtype=np.uint8).copy())


def text(ids) -> str:
    return bytes(np.asarray(ids, dtype=np.uint8)).decode()


def samples(val, task, length=256, trials=8):
    made = registry.make_samples(task, val, length, trials, OPTS, seed=3)
    assert len(made) == trials
    for s in made:
        assert len(s.tokens) == length and (s.answer >= 1).all() and (np.diff(s.answer) > 0).all()
        assert s.depth_bucket / OPTS.depth_buckets <= s.depth < (s.depth_bucket + 1) / OPTS.depth_buckets
    return made


def planted(s) -> list[str]:
    """The planted needles' texts, checked to sit in the sequence where the sample says."""
    for start, ids in s.needles:
        assert (s.tokens[start : start + len(ids)] == ids).all()
    return [text(ids) for _, ids in s.needles]


@pytest.mark.parametrize("task", ["niah", "niah_multikey"])
def test_niah_answer_is_the_queried_needles_value_at_the_stated_depth(val, task):
    for s in samples(val, task):
        needles = [n.strip("\n").split("=") for n in planted(s)]
        key = text(s.tokens[s.answer[0] - OPTS.key_letters - 1 : s.answer[0] - 1])
        assert dict(needles)[key] == text(s.tokens[s.answer])
        assert len({k for k, _ in needles}) == len({v for _, v in needles}) == len(needles)  # distractors distinct
        assert len(needles) == (1 if task == "niah" else 1 + OPTS.distractors)
        haystack = 256 - sum(len(ids) for _, ids in s.needles) - (len(s.answer) + OPTS.key_letters + 2)
        start = next(st for st, ids in s.needles if text(ids).startswith(f"\n{key}="))
        before = sum(len(ids) for st, ids in s.needles if st < start)  # needle tokens ahead of it
        assert start - before == int(s.depth * haystack)  # the needle sits at the stated depth


def test_niah_multivalue_answers_every_value_in_order(val):
    for s in samples(val, "niah_multivalue"):
        needles = [n.strip("\n").split("=") for n in planted(s)]
        assert len({k for k, _ in needles}) == 1 and len({v for _, v in needles}) == OPTS.answers
        tail = text(s.tokens[s.answer[0] :])
        assert tail.split(",") == [v for _, v in needles]
        assert text(s.tokens[s.answer]) == "".join(v for _, v in needles)


def resolve(bound: dict, name: str) -> str:
    while name in bound:
        name = bound[name]
    return name


def test_variable_tracking_chains_bind_the_value(val):
    assert chain(["a", "b", "c"], "7") == [("a", "7"), ("b", "a"), ("c", "b")]
    for s in samples(val, "variable_tracking"):
        bound = dict(n.strip("\n").split("=") for n in planted(s))
        value = text(s.tokens[: s.answer[0]]).rsplit("?", 1)[1].rstrip(":")
        names = text(s.tokens[s.answer[0] :]).split(" ")
        assert len(names) == OPTS.hops + 1 and len(bound) == 2 * (OPTS.hops + 1)
        assert {n for n in bound if resolve(bound, n) == value} == set(names)  # exactly the chain, not the distractor
        assert [bound[n] for n in names] == [value, *names[:-1]]  # in assignment order


def test_mqar_queries_ask_for_the_values_the_pairs_bind(val):
    for s in samples(val, "mqar", length=512):
        pairs = dict(p.strip().split(":") for p in planted(s))
        assert len(pairs) == len(s.needles)  # keys distinct
        queries = text(s.tokens[sum(len(ids) for _, ids in s.needles) + s.needles[0][0] :]).split()
        assert len(queries) == OPTS.queries
        asked = [q.split(":") for q in queries]
        assert all(pairs[k] == v for k, v in asked)
        assert text(s.tokens[s.answer]) == "".join(v for _, v in asked)
        keys = list(pairs)
        assert keys.index(asked[0][0]) / len(keys) == s.depth


def test_mqar_without_a_separator_has_zoologys_pairs(val):
    opts = TaskOptions(key_letters=1, digits=1, queries=2, separator="")
    for s in registry.make_samples("mqar", val, 32, 8, opts, seed=0):
        pairs = [text(ids) for _, ids in s.needles]
        assert all(len(p) == 3 and p[0].isalpha() and p[1].isdigit() and p[2] == " " for p in pairs)
        assert len(pairs) == 8  # (32 - 2 queries of 3) // 3: the pairs a colon-free format fits
        bound = {p[0]: p[1] for p in pairs}
        for a in s.answer:  # each scored value follows its key, and is the value that key was given
            assert text(s.tokens[a : a + 1]) == bound[text(s.tokens[a - 1 : a])]


@pytest.mark.parametrize("task", ["copy", "selective_copy"])
def test_copy_answer_equals_the_planted_span(val, task):
    for s in samples(val, task):
        spans = planted(s)
        if task == "copy":
            (span,) = spans
            assert text(s.tokens[-len(span) :]) == span and text(s.tokens[s.answer]) == span[OPTS.cue :]
        else:
            assert [w.lstrip("@") for w in spans] == text(s.tokens[s.answer[0] :]).split(" ")


def test_passkey_task_is_the_prompt_passkey(val):
    opts = TaskOptions(trials=8)
    made = suite.samples_of("passkey", val, 128, opts, None)
    trials = passkey.make_trials(val, 128, "prompt", 8, OPTS.digits, OPTS.depth_buckets, 0)
    assert [text(s.tokens[s.answer]) for s in made] == [t.key for t in trials]
    assert all((s.tokens == t.tokens).all() for s, t in zip(made, trials))
    # the training mix's passkey is the same format, drawn like the other tasks
    for s in samples(val, "passkey"):
        (needle,) = planted(s)
        assert needle == passkey.MARK + text(s.tokens[s.answer]) + "\n"
        assert text(s.tokens[s.answer[0] - len(passkey.MARK) :]) == passkey.MARK + text(s.tokens[s.answer])


@pytest.mark.parametrize("task", registry.TASKS)
def test_samples_are_seeded_and_too_short_lengths_get_none(val, task):
    a = registry.make_samples(task, val, 200, 4, OPTS, seed=1)
    b = registry.make_samples(task, val, 200, 4, OPTS, seed=1)
    c = registry.make_samples(task, val, 200, 4, OPTS, seed=2)
    assert [s.tokens.tolist() for s in a] == [s.tokens.tolist() for s in b]
    assert [s.tokens.tolist() for s in a] != [s.tokens.tolist() for s in c]
    assert registry.make_samples(task, val, 8, 4, OPTS, seed=1) == []


def test_pieces_are_encoded_alike_by_any_encoder(val):
    """A tokenizer other than bytes: ids of two bytes per letter; the answer still reads back."""

    def wide(s: str) -> np.ndarray:
        return np.repeat(byte_encode(s), 2)

    class Wide:
        encode = staticmethod(wide)

    made = registry.make_samples("niah", np.repeat(val.numpy(), 2), 256, 4, OPTS, seed=0, tokenizer=Wide())
    for s in made:
        value = text(s.tokens[s.answer][::2])
        assert f"={value}\n" in text(s.tokens[::2]) and len(s.answer) == 2 * OPTS.digits


class Oracle(nn.Module):
    """Logit 20 on the true next token except at ``wrong`` positions (then on byte 0)."""

    def __init__(self, wrong=()):
        super().__init__()
        self.wrong = list(wrong)

    def forward(self, x):
        B, L = x.shape
        logits = torch.zeros(B, L, 256)
        nxt = torch.cat([x[:, 1:], torch.zeros(B, 1, dtype=torch.long)], dim=1)
        logits.scatter_(2, nxt[..., None], 20.0)
        for p in self.wrong:
            logits[:, p] = 0.0
            logits[:, p, 0] = 20.0
        return logits, None


def test_scoring_against_a_hand_computed_case(val):
    made = registry.make_samples("niah_multivalue", val, 128, 4, OPTS, seed=0)
    k = len(made[0].answer)
    result = scoring.score_samples(Oracle(), made, batch_tokens=256, device=CPU)
    assert result["exact"].all() and (result["token_accuracy"] == 1).all()
    # one wrong prediction: the last answer token; logits 20 on a wrong byte, 0 on the right one among 256
    wrong = int(made[0].answer[-1]) - 1
    result = scoring.score_samples(Oracle([wrong]), made, 256, CPU)
    miss = 20.0 + math.log(math.exp(0) * 255 + math.exp(20.0)) - 20.0  # -log softmax of a 0 logit
    assert result["nll"] == pytest.approx(np.full(4, miss / k), rel=1e-5)
    assert not result["exact"].any() and result["token_accuracy"] == pytest.approx(np.full(4, (k - 1) / k))
    # a separator position (the comma) is not scored
    comma = int(made[0].answer[OPTS.digits]) - 2
    assert scoring.score_samples(Oracle([comma]), made, 256, CPU)["exact"].all()


def test_summary_rows_and_wilson_interval(val):
    made = registry.make_samples("niah", val, 128, 8, OPTS, seed=0)
    result = {"nll": np.arange(8.0), "token_accuracy": np.full(8, 0.5), "exact": np.arange(8) % 8 < 4}
    rows = scoring.summarize(made, result, OPTS.depth_buckets)
    assert [r["trials"] for r in rows] == [2, 2, 2, 2] and [r["accuracy"] for r in rows] == [0.5, 0.5, 0.5, 0.5]
    assert [r["answer_nll"] for r in rows] == [2.0, 3.0, 4.0, 5.0]
    lo, hi = interval.wilson(1, 2)
    assert (lo, hi) == pytest.approx((0.0945, 0.9055), abs=1e-4)  # Wilson's interval of 1/2
    assert interval.wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert interval.wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert all(r["status"] == "out_of_range" for r in scoring.summarize(made, None, 4, "out_of_range"))


@pytest.mark.parametrize("hits,n", [(0, 8), (3, 8), (8, 8), (57, 128), (1, 1), (127, 128)])
def test_the_wilson_interval_is_scipys(hits, n):
    ci = stats.binomtest(hits, n).proportion_ci(0.95, method="wilson")  # the reference implementation
    assert interval.wilson(hits, n) == pytest.approx((ci.low, ci.high), abs=1e-8)


def test_evaluate_writes_task_rows_for_every_cell_and_history_keeps_them(val, tmp_path):
    torch.manual_seed(0)
    model = GPT(spec(n_layer=1, n_head=2, d_model=16, pos="rope")).eval()
    meta = RunMeta(model=model.config, train_context=64, data={}, step=0)
    ev = EvalConfig(factors=[1, 2], methods=["none", "pi"], tokens=256,
                                         tasks=["passkey", "niah", "mqar"])  # fmt: skip
    ev.task_options.trials = 8
    ev.passkey.trials = 8
    ev.passkey.variants = ["prompt"]
    result = evaluate(model, meta, val, ev, CPU, "r", long_tables=True)
    tasks = result.tasks_frame
    assert len(tasks) == 2 * 2 * 3 * OPTS.depth_buckets  # method x factor x task x bucket
    assert set(tasks[tasks["task"] == "mqar"].query("factor == 1")["status"]) == {"too_short"}  # 64 tokens
    ok = tasks[tasks["status"] == "ok"]
    assert ok["answer_nll"].gt(0).all() and (ok[ok["task"] != "mqar"]["trials"] == 2).all()  # stratified
    # the passkey task scores passkey.csv's prompt trials: the same accuracy and NLL per bucket
    pk = result.passkey_frame.sort_values(["method", "factor", "depth_lo"]).reset_index(drop=True)
    mine = tasks[tasks["task"] == "passkey"].sort_values(["method", "factor", "depth_lo"]).reset_index(drop=True)
    assert mine["accuracy"].tolist() == pk["accuracy"].tolist()
    assert mine["answer_nll"].tolist() == pytest.approx(pk["key_nll"].tolist(), rel=1e-5)
    # each row states its task's chance level at its length: one needle (niah), the only planted
    # number (the fixed passkey), one of the n pairs' values per query (mqar, n as the generator plants)
    assert set(tasks[tasks["task"].isin(["niah", "passkey"])]["chance"]) == {1.0}
    pairs = mqar.room(128, ev.task_options)
    assert ok[ok["task"] == "mqar"]["chance"].unique().tolist() == pytest.approx(
        [pairs ** -float(ev.task_options.queries)]
    )
    folder = tmp_path / "run"
    folder.mkdir()
    history.save(result, folder, history.settings_of(ev), "cpu", None)
    back = history.load(folder / "eval" / history.eval_id(history.settings_of(ev)))
    assert len(back.tasks) == len(tasks) and (folder / "tasks.csv").is_file()


def test_the_prompt_trials_are_scored_once_for_passkey_csv_and_tasks_csv(val):
    """The suite's passkey task reads the prompt trials' scoring: turning it on adds no forward
    pass; drawn with other settings (a different seed) its samples are its own and run again."""
    torch.manual_seed(0)
    model = GPT(spec(n_layer=1, n_head=2, d_model=16, pos="rope")).eval()
    meta = RunMeta(model=model.config, train_context=64, data={}, step=0)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))

    def passes(tasks, task_seed=0):
        calls.clear()
        ev = EvalConfig(factors=[1, 2], methods=["none", "pi"], tokens=128, tasks=tasks)
        ev.passkey.trials = ev.task_options.trials = 4
        ev.task_options.seed = task_seed
        ev.passkey.variants = ["prompt"]
        return evaluate(model, meta, val, ev, CPU, "r", long_tables=True), len(calls)

    alone, n_alone = passes([])
    both, n_both = passes(["passkey"])
    _, n_apart = passes(["passkey"], task_seed=1)
    assert n_both == n_alone and n_apart > n_alone
    assert both.passkey_frame.equals(alone.passkey_frame)  # passkey.csv unchanged by the sharing
    tasks = both.tasks_frame
    assert (tasks["status"] == "ok").all() and tasks["accuracy"].tolist() == both.passkey_frame["accuracy"].tolist()


def test_small_alphabets_are_refused_or_capped_never_a_hang(val):
    tight = TaskOptions(key_letters=1, digits=1, trials=4)
    made = registry.make_samples("mqar", val, 1024, 4, tight, seed=0)  # at most 26 one-letter keys
    assert made and all(len(s.needles) <= 26 for s in made)
    with pytest.raises(PosxError, match="raise eval.task_options.key_letters"):
        registry.make_samples("niah_multikey", val, 256, 4, dataclasses.replace(tight, distractors=30), seed=0)
    with pytest.raises(PosxError, match="raise eval.task_options.digits"):
        registry.make_samples("niah_multivalue", val, 256, 4, dataclasses.replace(tight, answers=11), seed=0)


def decorated(n: int = 400) -> torch.Tensor:
    """Python source where a decorator, a digit and short words are everywhere but not in every window."""
    body = "".join(f"@property\ndef f(self):\n    return self.value + {i % 10}  # the item\n" for i in range(n))
    plain = "class Node:\n    the value is kept here as it was given, plain and simple text\n" * 3
    text_ = "".join(body[i : i + 300] + plain for i in range(0, len(body), 300))
    return torch.from_numpy(np.frombuffer(text_.encode(), dtype=np.uint8).copy())


def outside(s, ids: np.ndarray, tail_from: int) -> int:
    """Occurrences of ``ids`` in the sequence before ``tail_from`` but not inside a planted needle."""
    inside = np.zeros(len(s.tokens), dtype=bool)
    for start, needle in s.needles:
        inside[start : start + len(needle)] = True
    k = len(ids)
    return sum((s.tokens[i : i + k] == ids).all() and not inside[i : i + k].any() for i in range(tail_from - k + 1))


def test_selective_copys_mark_never_occurs_in_its_haystack():
    made = registry.make_samples("selective_copy", decorated(), 256, 32, OPTS, seed=0)
    tail = [len(s.tokens) - len(text(s.tokens).rsplit("\n@@", 1)[1]) - 3 for s in made]
    assert [outside(s, byte_encode("@"), t) for s, t in zip(made, tail)] == [0] * 32


def test_copys_cue_never_occurs_in_its_haystack():
    opts = TaskOptions(span=4, cue=2)  # a two-letter cue: often in text
    for s in registry.make_samples("copy", decorated(), 128, 64, opts, seed=0):
        assert outside(s, s.tokens[-4:-2], len(s.tokens) - 4) == 0


def test_the_passkey_copy_cue_never_occurs_in_its_filler():
    for t in passkey.make_trials(decorated(), 256, "copy", 32, 5, 4, seed=0):
        filler = np.concatenate([t.tokens[: t.key_start], t.tokens[t.key_start + 5 : -5]])
        assert ord(t.key[0]) not in filler  # the cue digit points at the planted key alone


def test_a_haystack_full_of_the_marker_is_scrubbed_and_one_made_of_it_refused():
    full = torch.from_numpy(np.frombuffer(b"@x\n" * 500, dtype=np.uint8).copy())
    for s in registry.make_samples("selective_copy", full, 128, 4, OPTS, seed=0):
        tail = len(s.tokens) - len(text(s.tokens).rsplit("\n@@", 1)[1]) - 3
        assert outside(s, byte_encode("@"), tail) == 0
    only = torch.from_numpy(np.frombuffer(b"@" * 1500, dtype=np.uint8).copy())
    with pytest.raises(PosxError, match="made only of the marks the task plants"):
        registry.make_samples("selective_copy", only, 128, 4, OPTS, seed=0)


def test_scrubbing_breaks_every_occurrence_and_leaves_a_clean_window_as_it_is():
    filler = np.array([5, 1, 2, 5, 5, 1, 2, 7, 1, 2, 1], dtype=np.int64)
    out = scrub(filler, (np.array([1, 2]),))
    assert len(starts(out, np.array([1, 2]))) == 0 and out.tolist() == [5, 5, 2, 5, 5, 5, 2, 7, 5, 2, 1]
    clean = np.array([3, 4, 3], dtype=np.int64)
    assert scrub(clean, (np.array([1]),)) is clean


@pytest.mark.parametrize("hops", [0, 1, 4])
def test_variable_tracking_counts_hops_as_rulers_num_hops(val, hops):
    opts = TaskOptions(hops=hops)
    for s in registry.make_samples("variable_tracking", val, 256, 4, opts, seed=1):
        bound = dict(n.strip("\n").split("=") for n in planted(s))
        names = text(s.tokens[s.answer[0] :]).split(" ")
        assert len(names) == hops + 1  # RULER: num_hops + 1 variables, num_hops of them bound to a name
        assert sum(bound[n] in bound for n in names) == hops


class Knower(nn.Module):
    """Predicts the next token of whichever of ``samples`` its input is a prefix of (one-hot
    logits), except at the positions in ``wrong`` (sample index -> positions), where it predicts
    the token after the right one: a model that answers exactly, or misses where told."""

    def __init__(self, samples, wrong=None):
        super().__init__()
        self.seqs = [torch.from_numpy(s.tokens) for s in samples]
        self.starts = [int(s.answer[0]) for s in samples]  # a sample is known by its question
        self.wrong = wrong or {}

    def forward(self, x):
        logits = torch.full((*x.shape, 256), -10.0)
        for b, row in enumerate(x):
            n = [min(len(row), start) for start in self.starts]
            i = next(i for i, s in enumerate(self.seqs) if torch.equal(s[: n[i]], row[: n[i]]))
            for t in range(len(row)):
                nxt = self.seqs[i][(t + 1) % len(self.seqs[i])]
                logits[b, t, (nxt + (t + 1 in self.wrong.get(i, ()))) % 256] = 10.0
        return logits, None


@pytest.mark.parametrize("task", ["niah_multivalue", "variable_tracking", "mqar", "selective_copy"])
def test_generation_and_teacher_forcing_agree_on_a_model_that_answers_exactly(val, task):
    made = samples(val, task, length=192, trials=4)
    forced = scoring.score_samples(Knower(made), made, 4096, CPU)
    generated = scoring.generate_samples(Knower(made), made, 4096, CPU)
    assert forced["exact"].all() and generated["exact"].all()
    assert (forced["token_accuracy"] == 1).all() and (generated["token_accuracy"] == 1).all()


def test_generation_fails_where_a_separator_is_wrong_and_teacher_forcing_gives_it(val):
    made = samples(val, "niah_multivalue", length=192, trials=4)
    comma = int(next(p for p in range(made[0].answer[0], made[0].answer[-1]) if p not in set(made[0].answer)))
    wrong_answer = {1: (int(made[1].answer[0]),)}
    for model, forced_exact, generated_exact in (
        (Knower(made, {0: (comma,)}), [True] * 4, [False, True, True, True]),  # only greedy decoding meets it
        (Knower(made, wrong_answer), [True, False, True, True], [True, False, True, True]),  # both see it
    ):
        assert scoring.score_samples(model, made, 4096, CPU)["exact"].tolist() == forced_exact
        assert scoring.generate_samples(model, made, 4096, CPU)["exact"].tolist() == generated_exact


def test_generated_scoring_decodes_the_passkey_task_instead_of_sharing_passkey_csvs_pass():
    ev = EvalConfig()
    assert suite.shares_passkey(ev)
    ev.task_scoring = "generate"
    assert not suite.shares_passkey(ev)


def test_a_filler_dense_in_digits_keeps_the_passkey_copy_variant_with_its_cue_unique():
    digits = torch.from_numpy(np.frombuffer(b"0123456789 x\n" * 400, dtype=np.uint8).copy())
    trials = passkey.make_trials(digits, 128, "copy", 4, 5, 2, seed=0)  # every window holds every digit
    assert len(trials) == 4
    for t in trials:
        filler = np.concatenate([t.tokens[: t.key_start], t.tokens[t.key_start + 5 : -5]])
        assert ord(t.key[0]) not in filler


def test_generation_is_given_each_mqar_question_and_decodes_each_value(val):
    made = samples(val, "mqar", length=96, trials=4)
    assert all(len(s.asked) == OPTS.queries - 1 for s in made) and OPTS.queries > 1
    # a model that answers every value but cannot know the next question: wrong on every other token
    wrong = {
        i: tuple(p for p in range(int(s.answer[0]), len(s.tokens)) if p not in set(s.answer))
        for i, s in enumerate(made)
    }
    model = Knower(made, wrong)
    assert scoring.score_samples(model, made, 4096, CPU)["exact"].all()
    generated = scoring.generate_samples(model, made, 4096, CPU)
    assert generated["exact"].all() and (generated["token_accuracy"] == 1).all()
