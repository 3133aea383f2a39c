"""Calibration of the simulator's host contention and per-iteration noise from a real run's records."""

from __future__ import annotations

import pytest

from star.cluster import ClusterView
from star.rpc import star_pb2 as pb
from star.sim.calibrate import fit


def test_compute_noise_is_each_workers_coefficient_of_variation_median_over_workers():
    view = ClusterView(num_workers=3, window=20)
    for worker, times in ((0, (0.1, 0.3)), (1, (0.2, 0.2)), (2, (0.15, 0.25))):  # CoV 0.5, 0, 0.25
        for i, t in enumerate(times, 1):
            view.accept(pb.IterationReport(worker_id=worker, iteration=i, compute_s=t, push_s=0.01, pull_s=0.01,
                                           batch_size=32), now_s=float(i))
    assert view.compute_vs_comm()["compute_s_cv"] == pytest.approx(0.25)


def _fit(**host):
    result = {"compute_s_median": 0.24, "comm_s_median": 0.02, "target": 0.95, "updates": 70, "compute_s_cv": 0.12}
    curve = [(0.0, 0, 0.1), (1.0, 2, 0.5), (28.0, 70, 0.95)]
    return fit(result, curve, [{"kind": "target_reached", "version": 70}], model_bytes=1000.0, amp_time_factor=0.5,
               batch_size=64, **host)["cost"]


def test_fit_divides_the_shared_cores_out_of_the_compute_time_and_records_the_host():
    shared = _fit(host_cores=2.0, workers=4)
    assert shared["base_compute_s"] == pytest.approx(0.12)  # 4 workers released together on 2 cores: 2x stretched
    assert (shared["host_cores"], shared["workers_per_host"]) == (2.0, 4)
    assert shared["compute_noise_cv"] == pytest.approx(0.12)
    own = _fit()
    assert own["base_compute_s"] == pytest.approx(0.24) and "host_cores" not in own
    assert _fit(host_cores=8.0, workers=4)["base_compute_s"] == pytest.approx(0.24)  # more cores than workers
