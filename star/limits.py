"""Bounds that a job's config and every daemon's request checks share, so that a value refused deep in a
worker or a PS is refused first, by name, when the job is configured."""

from __future__ import annotations

MAX_BATCH_SIZE = 1 << 24  # samples in one worker's batch
MAX_WORKER_IDS = 65536  # worker ids a PS accepts by default: 0..MAX_WORKER_IDS-1 (bounds its per-worker state)
