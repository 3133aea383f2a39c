#!/usr/bin/env bash
# Create .venv (if missing) and install STAR with its pinned dependencies.
# torch is pinned (constraints.txt) to the CPU build; an open range would pull CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)" >&2
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
echo "setup: ready ($(.venv/bin/python -c 'import torch, grpc; print("torch", torch.__version__, "grpcio", grpc.__version__)'))" >&2
