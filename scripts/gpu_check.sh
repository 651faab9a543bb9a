#!/usr/bin/env bash
# Everything posx needs a CUDA GPU for, in one command on one GPU, under 8 minutes, with what
# it measured written to one file (default results/gpu_check-<UTC time>.md):
#
#   bash scripts/gpu_check.sh [OUT]          # PYTHON=... to pick the interpreter
#
#   1. the tests marked `cuda` (flex vs sdpa on CUDA, inductor compiles once per length)
#   2. experiment=gpu_small, short: RoPE with train.compile=true and =false, ALiBi with
#      model.attention=flex compiled; each followed by eval-extrapolate (1x-8x)
#   3. benchmarks/bench_peer.py on CUDA (small preset, T=512, both models compiled)
#   4. benchmarks/bench_encodings.py on CUDA, attention flex (throughput and eval memory 1x/8x)
#   5. the fast test set (-m "not slow") with the CUDA tests enabled
#   6. torchrun, one rank: gpu_small RoPE under DistributedDataParallel
#
# Every step has its own time limit and the whole run a deadline (DEADLINE_S, 460 s by
# default): a step that would not fit is skipped and says so in the file. Needs posx installed
# with the dev and bench extras (pip install -e ".[dev,bench]": pytest, transformers). Nothing
# is downloaded: the corpus is the interpreter's own standard library, the Llama is built from
# a config.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${1:-results/gpu_check-$(date -u +%Y%m%dT%H%M%SZ).md}
DEADLINE_S=${DEADLINE_S:-460}
WORK=$(mktemp -d)
export COLUMNS=200 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
mkdir -p "$(dirname "$OUT")"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check.sh: no CUDA GPU visible to $PY (torch.cuda.is_available() is false); nothing run" >&2
  exit 2
fi
START=$(date +%s)

# step NAME LIMIT_S COMMAND...: run it with a limit, its output (last 150 lines) into $OUT
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE_S - ($(date +%s) - START)))
  echo "== $name" >&2
  {
    echo; echo "## $name"; echo
    if [ "$left" -lt 20 ]; then echo "SKIPPED: ${left}s left of the ${DEADLINE_S}s deadline"; return 0; fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo '```'; echo "\$ $*"
  } >>"$OUT"
  local t0=$(date +%s) rc
  timeout "$limit" "$@" >"$WORK/step.log" 2>&1; rc=$?
  { tail -n 150 "$WORK/step.log"; echo '```'
    echo "exit $rc$([ $rc -eq 124 ] && echo ' (TIMED OUT)') after $(( $(date +%s) - t0 ))s (limit ${limit}s)"; } >>"$OUT"
}

{
  echo "# posx GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo; echo '```'
  git log --oneline -1 2>/dev/null
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))" 2>&1
  "$PY" -c "import torch; from posx.core.device import bf16_peak_flops as p; print('bf16 peak (posx table):', p(torch.device('cuda')))" 2>&1
  echo '```'
} >"$OUT"

step "cuda tests" 120 "$PY" -m pytest -q -m cuda -p no:cacheprovider tests

TRAIN=(experiment=gpu_small "results_dir=$WORK/results" train.steps=200 train.eval_every=100
       train.checkpoint_every=0 eval.tokens=16384 "eval.methods=[none,pi,yarn]" eval.passkey.enabled=false)
step "gpu_small rope, compile on" 90 "$PY" -m posx train "${TRAIN[@]}" pos=rope train.compile=true name=rope-compiled
step "gpu_small rope, compile off" 45 "$PY" -m posx train "${TRAIN[@]}" pos=rope train.compile=false name=rope-eager
step "gpu_small alibi, flex, compile on" 75 "$PY" -m posx train "${TRAIN[@]}" pos=alibi model.attention=flex \
  train.compile=true name=alibi-flex

step "bench_peer (small, T=512, compiled)" 150 "$PY" -m benchmarks.bench_peer --device cuda --model small --context 512 \
  --batch-size 32 --steps 40 --compile --eval-tokens 16384 --batch-tokens 65536 --out "$WORK/peer.json"
[ -f "$WORK/peer.json" ] && { echo; echo "### bench_peer.json"; echo '```json'; cat "$WORK/peer.json"; echo '```'; } >>"$OUT"

step "bench_encodings (small, T=512, flex)" 60 "$PY" -m benchmarks.bench_encodings --device cuda --model small \
  --context 512 --attention flex --rounds 3 --batch-size 32 --factors 1 8 --batch-tokens 65536

step "fast test set with CUDA tests enabled" 90 "$PY" -m pytest -q -m "not slow" -p no:cacheprovider tests

step "torchrun, one rank" 60 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 -m posx train \
  "${TRAIN[@]}" pos=rope train.compile=false name=rope-torchrun

{ echo; echo "## summary"; echo; echo '```'
  grep -h -E "^done |tokens/s, mfu" "$OUT" | sed 's/\x1b\[[0-9;]*m//g'
  grep -h -E "^exit " "$OUT" | sort | uniq -c
  echo "total $(( $(date +%s) - START ))s"; echo '```'; } >>"$OUT"
rm -rf "$WORK"
echo "wrote $OUT"
