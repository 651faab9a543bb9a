#!/usr/bin/env bash
# Collect, on a machine that reaches a package index, every wheel posx needs that a typical
# GPU box lacks, so scripts/gpu_check.sh can install them there with no index at all:
#
#   bash scripts/wheelhouse.sh [DIR]      # DIR defaults to .wheelhouse (git-ignored)
#
# What the box lacks is listed in scripts/offline-wheels.txt; those wheels, with what they
# depend on, are collected twice: for CPython 3.12 manylinux x86_64 (the box) and for the
# interpreter running this script (PYTHON=..., default python3), so the same folder also
# serves a box like this machine. antlr4-python3-runtime 4.9 exists on the index only as a
# source package: its (pure Python) wheel is built here first. torch is never collected.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.wheelhouse}
PY=${PYTHON:-python3}
mapfile -t WANTED < <(grep -v '^#' scripts/offline-wheels.txt | grep .)
mkdir -p "$DIR"

echo "== antlr4-python3-runtime: a wheel built from its source package" >&2
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$DIR" "$(printf '%s\n' "${WANTED[@]}" | grep '^antlr4')"

echo "== CPython 3.12, manylinux x86_64 (the GPU box)" >&2
"$PY" -m pip download --quiet --dest "$DIR" --find-links "$DIR" --only-binary=:all: \
  --platform manylinux2014_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --python-version 3.12 --implementation cp \
  --abi cp312 --abi abi3 --abi none "${WANTED[@]}"

echo "== $("$PY" -c 'import sys; print(sys.implementation.name, sys.version.split()[0])') (this interpreter)" >&2
"$PY" -m pip download --quiet --dest "$DIR" --find-links "$DIR" --only-binary=:all: "${WANTED[@]}"

if ls "$DIR" | grep -qi '^torch-'; then
  echo "wheelhouse.sh: a torch wheel landed in $DIR; the box's own torch must be used, remove it" >&2
  exit 1
fi
echo "$(ls "$DIR" | wc -l) wheels in $DIR:" >&2
ls "$DIR" >&2
