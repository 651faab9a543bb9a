#!/usr/bin/env bash
# Run the fast test set against one torch version, CPU, in a virtual environment of its own:
#
#   bash scripts/compat.sh VERSION [VENV]     # e.g. bash scripts/compat.sh 2.11.0
#   PINS="duckdb==1.4.4 pandas==2.2.3" TESTS="tests/test_report.py" bash scripts/compat.sh 2.13.0 .compat/low
#
# PINS holds further requirements held at a version the same way (the table libraries' oldest
# allowed versions, say); TESTS the test paths to run, slow tests included, instead of the fast set.
# VENV defaults to .compat/torch-VERSION (git-ignored) and is reused when it already holds that
# torch. PYTHON=... picks the interpreter the venv is made from (default python3). torch is
# installed first, with nothing else, at exactly VERSION; posx and its dev extras then install
# under a constraint that pins it, so no other requirement can move it. The index's Linux wheel
# of a version may be a CUDA build (its nvidia-* libraries come with it, several GB); it runs on
# the CPU all the same. The exit status is pytest's; the last lines name the torch that ran.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "compat.sh: give the torch version to test, e.g. bash scripts/compat.sh 2.11.0" >&2
  exit 2
fi
VERSION=$1
VENV=${2:-.compat/torch-$VERSION}
PY=${PYTHON:-python3}
PIN=$(mktemp)
trap 'rm -f "$PIN"' EXIT
echo "torch==$VERSION" >"$PIN"
for pin in ${PINS:-}; do echo "$pin" >>"$PIN"; done

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$VERSION')" 2>/dev/null; then
  "$VENV/bin/python" -m pip install --quiet "torch==$VERSION"
fi
"$VENV/bin/python" -m pip install --quiet -c "$PIN" -e ".[dev]"
"$VENV/bin/python" -c "import duckdb, pandas, sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__,
  'duckdb', duckdb.__version__, 'pandas', pandas.__version__)"
# The fast set, whatever CI says: -m "not slow" on one process; or the TESTS named, slow ones included.
if [ -n "${TESTS:-}" ]; then
  # shellcheck disable=SC2086
  env -u CI OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$VENV/bin/python" -m pytest -q -p no:cacheprovider $TESTS
else
  env -u CI OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$VENV/bin/python" -m pytest -q -m "not slow" -p no:cacheprovider tests
fi
