#!/usr/bin/env bash
# Set up, then run the whole test suite (unit + integration on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
