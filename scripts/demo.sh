#!/usr/bin/env bash
# Set up, then train `digits` with 2 parameter servers x 4 workers (SSGD) and print the result.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/star launch --task digits --workers 4 --ps 2 --mode ssgd --out runs/demo --overwrite "$@"
