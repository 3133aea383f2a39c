"""benchmarks.ddp_vs_star: paired, interleaved runs and a last-line JSON of the goal figures (fake runs, no processes)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import ddp_vs_star
from star.config import JobConfig

STEP_S = {"ddp": 0.5, "ssgd": 0.55, "auto": 0.6}  # seconds per version each fake run's curve shows
TTA_S = {("ddp", False): 10.0, ("ssgd", False): 11.0, ("ddp", True): 30.0, ("ssgd", True): 31.0, ("auto", True): 15.0}


def fake_run(calls: list[JobConfig]):
    def run(config: JobConfig) -> dict:
        calls.append(config)
        out = Path(config.out)
        out.mkdir(parents=True, exist_ok=True)
        step = STEP_S[config.plan.mode]
        rows = "".join(f"{v * step:.4f},{v},0.5\n" for v in range(1, 11))
        (out / "curve.csv").write_text("time_s,version,metric\n" + rows)
        tta = TTA_S[(config.plan.mode, config.trace.path is not None)] + config.seed
        return {"reached": True, "tta_s": tta, "final_metric": 0.5, "updates": 10}
    return run


def test_json_line_has_the_goal_figures_from_paired_interleaved_runs(tmp_path, capsys):
    calls: list[JobConfig] = []
    code = ddp_vs_star.main(["--task", "gpt", "--preset", "1m", "--workers", "2", "--ps", "1", "--repeats", "3",
                             "--out", str(tmp_path)], run=fake_run(calls))
    assert code == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["task"] == "gpt-1m" and figures["trace"] == "mid3x" and figures["workers"] == 2
    assert abs(figures["ddp_clean_s_per_iter"] - 0.5) < 1e-3 and abs(figures["star_clean_s_per_iter"] - 0.55) < 1e-3
    assert figures["ddp_tta_s"] == 31.0 and figures["star_auto_tta_s"] == 16.0  # medians over seeds 0, 1, 2
    assert figures["star_vs_ddp_clean_s_per_iter"] == 1.1 and figures["star_auto_vs_ddp_tta"] == round(16 / 31, 3)
    # Interleaved: every repeat runs all five rows before the next seed; a repeat's rows share its seed.
    assert [c.seed for c in calls] == [0] * 5 + [1] * 5 + [2] * 5
    assert [c.plan.mode for c in calls[:5]] == ["ddp", "ssgd", "ddp", "ssgd", "auto"]
    assert all(c.ps == 1 for c in calls if c.plan.mode != "ddp")
    assert [c.trace.path is not None for c in calls[:5]] == [False, False, True, True, True]
    assert (tmp_path / "summary.md").exists() and (tmp_path / "runs.csv").exists()
    # --from-runs: the same figures again from the saved runs, starting nothing.
    assert ddp_vs_star.main(["--task", "gpt", "--preset", "1m", "--workers", "2", "--ps", "1", "--repeats", "3",
                             "--out", str(tmp_path), "--from-runs"], run=fake_run(calls)) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == figures and len(calls) == 15


def test_unknown_preset_exits_2_naming_the_flag(tmp_path, capsys):
    code = ddp_vs_star.main(["--task", "gpt", "--preset", "7m", "--out", str(tmp_path)], run=fake_run([]))
    err = capsys.readouterr().err
    assert code == 2 and "--preset '7m'" in err


def test_threads_per_process_reaches_every_run_and_zero_exits_2_naming_the_flag(tmp_path, capsys):
    calls: list[JobConfig] = []
    assert ddp_vs_star.main(["--preset", "1m", "--workers", "2", "--repeats", "1", "--threads-per-process", "3",
                             "--rows", "ddp-clean,star-ssgd-clean", "--out", str(tmp_path)], run=fake_run(calls)) == 0
    assert [c.threads_per_process for c in calls] == [3, 3]
    code = ddp_vs_star.main(["--preset", "1m", "--threads-per-process", "0", "--out", str(tmp_path)], run=fake_run([]))
    assert code == 2 and "--threads-per-process 0" in capsys.readouterr().err


def test_device_reaches_every_run_and_a_missing_cuda_exits_2_naming_the_flag(tmp_path, capsys, monkeypatch):
    calls: list[JobConfig] = []
    assert ddp_vs_star.main(["--task", "gpt", "--preset", "1m", "--workers", "2", "--ps", "1", "--repeats", "1",
                             "--out", str(tmp_path)], run=fake_run(calls)) == 0
    assert {c.device for c in calls} == {"cpu"} and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["device"] == "cpu"
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    code = ddp_vs_star.main(["--task", "gpt", "--preset", "1m", "--device", "cuda", "--out", str(tmp_path / "gpu")],
                            run=fake_run(calls))
    err = capsys.readouterr().err
    assert code == 2 and "--device='cuda'" in err and len(calls) == 5  # refused before any run


def test_speed_needs_two_evaluations(tmp_path):
    path = tmp_path / "curve.csv"
    path.write_text("time_s,version,metric\n1.0,3,0.5\n")
    assert ddp_vs_star.s_per_iter(path) is None
    path.write_text("time_s,version,metric\n1.0,3,0.5\n4.0,9,0.6\n")
    assert ddp_vs_star.s_per_iter(path) == 0.5
    path.write_text("time_s,version,metric\n1.0,3,0.5\n2.0,3,0.5\n4.0,9,0.6\n9.0,9,0.6\n")  # flat tails do not count
    assert ddp_vs_star.s_per_iter(path) == 0.5


def test_rows_picks_a_subset_and_an_unknown_row_exits_2(tmp_path, capsys):
    calls: list[JobConfig] = []
    assert ddp_vs_star.main(["--task", "gpt", "--preset", "1m", "--rows", "ddp-clean,star-ssgd-clean", "--repeats", "1",
                             "--out", str(tmp_path)], run=fake_run(calls)) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [c.plan.mode for c in calls] == ["ddp", "ssgd"] and figures["star_auto_tta_s"] is None
    assert ddp_vs_star.main(["--rows", "ddp-clean,nope", "--out", str(tmp_path)], run=fake_run([])) == 2
    assert "--rows: unknown nope" in capsys.readouterr().err


def test_an_interrupt_stops_the_benchmark_with_exit_130_keeping_the_runs_measured(tmp_path, capsys):
    """Ctrl-C or SIGTERM during a job (launch_or_stop raises KeyboardInterrupt) ends the whole benchmark;
    it must not be taken as one short run with the next job started."""
    calls: list[JobConfig] = []
    measured = fake_run(calls)

    def run(config: JobConfig) -> dict:
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measured(config)

    assert ddp_vs_star.main(["--task", "gpt", "--preset", "1m", "--workers", "2", "--ps", "1", "--repeats", "3",
                             "--out", str(tmp_path)], run=run) == 130
    assert len(calls) == 2 and "interrupted" in capsys.readouterr().err
    assert len((tmp_path / "runs.csv").read_text().strip().splitlines()) == 1 + 2  # header + the two runs


def test_checkpoint_every_s_reaches_only_the_star_rows_and_a_negative_one_exits_2_naming_the_flag(tmp_path, capsys):
    calls: list[JobConfig] = []
    assert ddp_vs_star.main(["--preset", "1m", "--workers", "2", "--repeats", "1", "--checkpoint-every-s", "0",
                             "--rows", "ddp-clean,star-ssgd-clean", "--out", str(tmp_path)], run=fake_run(calls)) == 0
    assert [(c.plan.mode, c.faults.checkpoint_every_s) for c in calls] == [("ddp", 10.0), ("ssgd", 0.0)]  # DDP: unused
    code = ddp_vs_star.main(["--preset", "1m", "--checkpoint-every-s", "-1", "--out", str(tmp_path)], run=fake_run([]))
    assert code == 2 and "--checkpoint-every-s -1.0" in capsys.readouterr().err
