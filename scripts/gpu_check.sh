#!/usr/bin/env bash
# Everything posx needs a CUDA GPU for, in one command on one GPU, with no network: about
# 9 minutes on one H200, compiles included. Writes OUT/report.md and OUT/summary.json; OUT must be new or empty.
#
#   bash scripts/gpu_check.sh OUT               # on the GPU box, from a checkout of posx
#   bash scripts/gpu_check.sh OUT --dry-run     # list the steps and write the report; run nothing
#
#   PYTHON=...      the interpreter (default python3)
#   WHEELS=DIR      the wheels of scripts/wheelhouse.sh (default .wheelhouse): installed with
#                   pip --no-index, and only when an import posx needs is missing; into the
#                   interpreter's environment, or OUT/site where that is not writable
#   ONLY=a,b        run only the steps whose names contain one of these parts (the rest are
#                   reported as skipped), e.g. ONLY="t5 flex,cuda tests" after a fix; a step
#                   that reads another's output (the Llama evaluation, the loss comparisons)
#                   needs that one selected too
#   DEADLINE_S=N    the steps' budget in seconds (default 510: with the kill grace and the report,
#                   9 minutes at most); a step whose limit does
#                   not fit in what is left is skipped and reported as such
#
# posx itself is not installed: it runs from the checkout (python -m posx). The box's torch
# is never touched: the install pins the installed torch with a constraint and installs only
# what is missing. The steps, each under `timeout -k`:
#   1. experiment=gpu_small RoPE, compiled and eager: tokens/s, MFU, loss curves;
#   2. torchrun --standalone --nproc_per_node=1 against the single (eager) process: losses;
#   3. ALiBi, T5 and KERPLE with model.attention=flex, compiled, bf16 training and 1x-8x evaluation;
#   4. posx eval-extrapolate of a transformers Llama built from a config and saved here, bf16;
#   5. evaluation peak memory at 1x and 8x for ALiBi and T5 flex (bench_encodings);
#   6. the materialised attention blocks' memory (bench_blocks);
#   7. bench_peer: posx against the transformers Llama of equal size, both eager, both compiled;
#   8. the tests marked `cuda` (flex against SDPA, inductor graph counts per length).
# Nothing is downloaded: the corpus is the interpreter's standard library.
set -u -o pipefail
if [ $# -lt 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  echo "gpu_check.sh: give the directory for the report, e.g. bash scripts/gpu_check.sh gpu-check-out" >&2
  exit 2
fi
# OUT is new or an empty directory: the script writes only into files it makes, never over a
# user's report.md or summary.json, and never through a symbolic link.
if [ -L "$1" ] || { [ -e "$1" ] && { [ ! -d "$1" ] || [ -n "$(ls -A "$1" 2>/dev/null)" ]; }; }; then
  echo "gpu_check.sh: $1 already exists and is not an empty directory (the check writes only files it makes); give a new directory" >&2
  exit 2
fi
PY=${PYTHON:-python3}
DRY=0
[ "${2:-}" = "--dry-run" ] && DRY=1
# The box's own torch is never installed here, and a dry run installs nothing: the report needs
# torch (the header) and pandas (the tables) from the interpreter as it is.
NEEDS=torch
[ "$DRY" = 1 ] && NEEDS="torch, pandas"
if ! "$PY" -c "import $NEEDS" 2>/dev/null; then
  echo "gpu_check.sh: $PY cannot import $NEEDS; set PYTHON to an interpreter that has them" >&2
  exit 2
fi
# Before OUT is made, so the same OUT can be given again on a box with a GPU.
if [ "$DRY" = 0 ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check.sh: no CUDA GPU visible to $PY (torch.cuda.is_available() is false); nothing run" >&2
  exit 2
fi
mkdir -p "$1" && OUT=$(cd "$1" && pwd)  # absolute: the steps run from the repository root
WHEELS=${WHEELS:-$(dirname "$0")/../.wheelhouse}
[ -d "$WHEELS" ] && WHEELS=$(cd "$WHEELS" && pwd)
cd "$(dirname "$0")/.."
DEADLINE_S=${DEADLINE_S:-510}
CHECKING=0  # 1 once the install is done: from there on ONLY selects the steps
# POSX_DEBUG: a failing posx command prints its whole traceback into the step's log.
export COLUMNS=200 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" POSX_DEBUG=1
mkdir -p "$OUT/logs"
: >"$OUT/steps.jsonl"
START=$(date +%s)

# record NAME STATUS RC SECONDS LIMIT LOG COMMAND...: one line of OUT/steps.jsonl
record() {
  local name=$1 status=$2 rc=$3 secs=$4 limit=$5 log=$6; shift 6
  "$PY" -c 'import json, sys; n, s, rc, t, lim, log, *cmd = sys.argv[1:]
print(json.dumps({"name": n, "status": s, "rc": int(rc), "seconds": int(t), "limit": int(lim), "log": log,
                  "command": " ".join(cmd)}))' "$name" "$status" "$rc" "$secs" "$limit" "$log" "$@" >>"$OUT/steps.jsonl"
}

# selected NAME: whether ONLY (comma-separated parts of step names) is unset or names this step
selected() {
  local part parts
  [ -z "${ONLY:-}" ] && return 0
  IFS=',' read -ra parts <<<"$ONLY"
  for part in "${parts[@]}"; do [ -n "$part" ] && [[ "$1" == *"$part"* ]] && return 0; done
  return 1
}

# step NAME LIMIT_S COMMAND...: run it under timeout -k, its output into OUT/logs/NAME.log
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE_S - ($(date +%s) - START))) log t0 rc status
  log="logs/$(printf '%s' "$name" | tr -c 'A-Za-z0-9' '-').log"
  if [ "$CHECKING" = 1 ] && ! selected "$name"; then
    record "$name" "skipped: not in ONLY" 0 0 "$limit" "" "$@"; return 0
  fi
  echo "== $name (limit ${limit}s, ${left}s left)" >&2
  if [ "$DRY" = 1 ]; then record "$name" dry-run 0 0 "$limit" "" "$@"; return 0; fi
  if [ "$limit" -gt "$left" ]; then
    record "$name" "skipped: needs ${limit}s, ${left}s left" 0 0 "$limit" "" "$@"; return 0
  fi
  t0=$(date +%s)
  timeout -k 15 "$limit" "$@" >"$OUT/$log" 2>&1; rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  record "$name" "$status" "$rc" $(($(date +%s) - t0)) "$limit" "$log" "$@"
}

RUN=(experiment=gpu_small "results_dir=$OUT" train.steps=100 train.eval_every=50 train.checkpoint_every=0
     eval.tokens=16384 eval.batch_tokens=65536 "eval.methods=[none,yarn]" eval.passkey.enabled=false "eval.tasks=[]")
PEER=(--device cuda --model small --context 512 --batch-size 32 --steps 30 --factors 1 8 --eval-tokens 16384
      --batch-tokens 65536 --cache-dir "$OUT/cache")
# A transformers Llama built from a config (nothing downloaded), saved under OUT, then evaluated.
LLAMA='import sys, torch, transformers as t
torch.manual_seed(0)
config = t.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
t.LlamaForCausalLM(config).save_pretrained(sys.argv[1])'
# What a box typically lacks (scripts/offline-wheels.txt), and a check that every one is installed.
mapfile -t WANTED < <(grep -v '^#' scripts/offline-wheels.txt | grep .)
NEEDED='import re, sys, importlib.metadata as m
for requirement in sys.argv[1:]: m.version(re.split("[<>=!~ ]", requirement)[0])'

if [ "$DRY" = 0 ]; then
  # Install from the wheelhouse only what is missing; never torch (pinned), never posx itself.
  if ! "$PY" -c "$NEEDED" "${WANTED[@]}" 2>/dev/null; then
    PIN="$OUT/installed-torch.txt"
    "$PY" -c "import torch; print('torch==' + torch.__version__)" >"$PIN" || exit 2
    step "install from the wheelhouse" 120 "$PY" -m pip install --no-index --find-links "$WHEELS" --constraint "$PIN" \
      "${WANTED[@]}"
    if ! "$PY" -c "$NEEDED" "${WANTED[@]}" 2>/dev/null; then
      # The interpreter's environment is not writable (a shared or system Python): install into
      # OUT/site instead and put it on the path; the box's own packages stay as they are.
      step "install from the wheelhouse into OUT/site" 120 "$PY" -m pip install --no-index --find-links "$WHEELS" \
        --constraint "$PIN" --target "$OUT/site" "${WANTED[@]}"
      export PYTHONPATH="$PYTHONPATH:$OUT/site"
    fi
  fi
fi
CHECKING=1
step "gpu_small rope compiled" 100 "$PY" -m posx train "${RUN[@]}" pos=rope train.compile=true name=rope-compiled
step "gpu_small rope eager" 40 "$PY" -m posx train "${RUN[@]}" pos=rope train.compile=false name=rope-eager
step "torchrun, one rank" 45 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 -m posx train \
  "${RUN[@]}" pos=rope train.compile=false name=rope-torchrun
step "alibi flex compiled" 90 "$PY" -m posx train "${RUN[@]}" pos=alibi model.attention=flex train.compile=true \
  name=alibi-flex
step "t5 flex compiled" 90 "$PY" -m posx train "${RUN[@]}" pos=t5 model.attention=flex train.compile=true name=t5-flex
step "kerple flex compiled" 90 "$PY" -m posx train "${RUN[@]}" pos=kerple model.attention=flex train.compile=true \
  name=kerple-flex
step "transformers llama saved" 20 "$PY" -c "$LLAMA" "$OUT/llama"
step "transformers llama eval-extrapolate bf16" 30 "$PY" -m posx eval-extrapolate "$OUT/llama" device=cuda \
  eval.tokens=8192 "eval.methods=[none,yarn]" eval.passkey.enabled=false "eval.tasks=[]"
step "eval memory 1x/8x, flex" 90 "$PY" -m benchmarks.bench_encodings --device cuda --model small --context 512 \
  --attention flex --encodings alibi t5 --factors 1 8 --batch-tokens 65536 --skip-train --out "$OUT/encodings-flex.json"
step "materialised attention blocks" 30 "$PY" -m benchmarks.bench_blocks --device cuda --batch 64 --sizes 256 64 16 4
step "bench_peer eager" 60 "$PY" -m benchmarks.bench_peer "${PEER[@]}" --posx-compile false --out "$OUT/peer-eager.json"
step "bench_peer compiled" 90 "$PY" -m benchmarks.bench_peer "${PEER[@]}" --compile --out "$OUT/peer-compiled.json"
# The tests last, with whatever time the measurements leave (each case compiles per length);
# -v names each test as it ends, so a timeout still says which passed.
REST=$((DEADLINE_S - ($(date +%s) - START) - 5))
step "cuda tests" $((REST > 60 ? REST : 60)) "$PY" -m pytest -v -m cuda -p no:cacheprovider tests

HEADER=$("$PY" -c 'import json, subprocess, sys, torch
def out(*cmd):
    try: return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except OSError: return None
cuda = torch.cuda.is_available()
print(json.dumps({"commit": out("git", "log", "--oneline", "-1"), "python": sys.version.split()[0],
  "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0) if cuda else None,
  "total_s": int(sys.argv[1]), "deadline_s": int(sys.argv[2])}))' $(($(date +%s) - START)) "$DEADLINE_S")
"$PY" -m benchmarks.gpu_report "$OUT" --header "$HEADER"
