"""Session-wide checks for every test run."""

from __future__ import annotations

import os

import pytest

from star.shm import SHM_DIR


def segments_of(pid: int) -> list[str]:
    """Shared-memory files named after process `pid` (mailboxes, pull boards, doorbells, gradient segments)."""
    return sorted(p.name for p in SHM_DIR.glob(f"star-*-{pid}-*")) if SHM_DIR.is_dir() else []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A segment named after this pytest process outlives it, and no sweep takes a live process's segment: so one
    left at the end is a leak made in-process (a worker or PS built by a test and never closed). Fail the run,
    naming it, and remove it: the leak is the test's, the machine should not keep it."""
    left = segments_of(os.getpid())
    if not left:
        return
    for name in left:
        (SHM_DIR / name).unlink(missing_ok=True)
    print(f"\nshared-memory segments left by this test process (a test built a worker or PS and did not close it): "
          f"{', '.join(left)}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
