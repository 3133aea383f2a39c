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


def test_a_fitted_calibration_times_tta_at_the_update_that_reached_the_target():
    """The real evaluator evaluates at parameter versions, so the fitted simulator must not round TTA
    up to a wall-clock evaluation grid (which tied strategies a few updates apart)."""
    from star.sim.config import ConvergenceConfig

    result = {"compute_s_median": 0.24, "comm_s_median": 0.02, "target": 0.95, "updates": 70}
    tables = fit(result, [(0.0, 0, 0.1), (28.0, 70, 0.95)], [{"kind": "target_reached", "version": 70}],
                 model_bytes=1000.0, amp_time_factor=0.5, batch_size=64)
    assert tables["convergence"]["eval_period_s"] == 0.0
    assert ConvergenceConfig(**tables["convergence"]).eval_period_s == 0.0  # loadable as the simulator's table


def test_run_calibration_writes_the_host_the_noise_and_the_resize_cost(tmp_path, monkeypatch):
    """`star calibrate`'s path from a (faked) real run to calibration.toml: the job shares this host's cores."""
    import json
    import os

    import star.launch
    from star.config import load_toml
    from star.sim import calibrate

    def fake_launch(job, progress=None):
        out = tmp_path / "c" / "ssgd"
        out.mkdir(parents=True)
        result = {"reached": True, "tta_s": 20.0, "updates": 60, "target": 0.95, "compute_s_median": 0.2,
                  "comm_s_median": 0.02, "compute_s_cv": 0.1}
        (out / "result.json").write_text(json.dumps(result))
        (out / "curve.csv").write_text("time_s,version,metric\n0.0,0,0.1\n1.0,3,0.5\n20.0,60,0.95\n")
        (out / "events.jsonl").write_text(json.dumps({"kind": "target_reached", "version": 60}) + "\n")
        return result

    monkeypatch.setattr(star.launch, "launch", fake_launch)
    monkeypatch.setattr(calibrate, "amp_factor", lambda task: 0.5)
    monkeypatch.setattr(calibrate, "resize_cost_ratio", lambda task, batch: 0.1)
    calibrate.run_calibration("digits", str(tmp_path / "c"), workers=4, asgd=False)
    cost = load_toml(tmp_path / "c" / "calibration.toml")["cost"]
    cores = float(os.cpu_count() or 1)
    assert (cost["host_cores"], cost["workers_per_host"]) == (cores, 4)
    assert cost["base_compute_s"] == pytest.approx(0.2 / max(1.0, 4 / cores), abs=1e-6)
    assert cost["resize_s"] == pytest.approx(0.1 * cost["base_compute_s"], abs=1e-6)
    assert cost["compute_noise_cv"] == pytest.approx(0.1)
