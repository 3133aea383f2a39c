"""The launcher's progress line: what a job waits for before its first update, and what its figures count."""

from __future__ import annotations

from star.launch import format_status
from star.rpc import star_pb2 as pb


def test_before_the_first_update_the_line_says_how_many_workers_report_of_how_many():
    line = format_status(pb.JobStatusReply(state="starting", elapsed_s=3.2, workers_reporting=1, metric_name="accuracy"), 4)
    assert "starting: 1/4 workers reporting" in line and "it/s" not in line


def test_a_running_line_says_its_rate_is_all_workers_together():
    status = pb.JobStatusReply(state="running", elapsed_s=9.0, max_iteration=12, iterations_per_s=7.9, version=11,
                               metric=0.8, has_metric=True, metric_name="accuracy", mode="ssgd")
    line = format_status(status, 4)
    assert "iter=12" in line and "7.9 it/s (all workers)" in line and "accuracy=0.8000" in line
