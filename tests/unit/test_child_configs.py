"""Each child's config is a pure function of the job's (star.child_configs), and `star ps|worker|coordinator
--job` (how the launchers start them) gives exactly that config, with the runtime facts as the only flags."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from star.child_configs import child_security, coordinator_config, job_as_run, ps_config, ps_metrics_port, worker_config
from star.cli import build_parser, main
from star.cli_children import daemon_config
from star.config import ConfigError, JobConfig, from_dict, load_toml, to_toml
from star.processes import child_args

TASK = SimpleNamespace(default_optimizer="sgd", default_lr=0.005, default_momentum=0.9)  # what get_task("digits") says


def _job(tmp_path: Path, **overrides) -> JobConfig:
    trace = tmp_path / "trace.csv"
    trace.write_text("iteration,worker,factor\n0,0,2\n0,1,1\n")
    data = {"workers": 3, "ps": 2, "seed": 7, "batch_size": 16, "target": 0.8, "threads_per_process": 2,
            "transport": "grpc", "wire": "bfloat16", "nonfinite": "skip", "tensorboard": False, "stop_at_target": False,
            "trace": {"path": str(trace), "workers": "1,0,1", "stretch": 0.5}, "plan": {"mode": "kofn", "k": 2},
            "optimizer": {"lr": 0.02, "weight_decay": 0.1}, "faults": {"checkpoint_every_s": 3.0, "checkpoint_every_updates": 4, "checkpoint_max_write_share": 0.2},
            "control": {"amp": False, "traffic": {"guard": False}}, "evaluation": {"every_updates": 5},
            "placement": {"cpu_aware": False}, "metrics_port": 9100, "max_workers": 5}
    data.update(overrides)
    return job_as_run(from_dict(JobConfig, data), TASK)  # as a launcher writes it


def _security(tmp_path: Path) -> dict:
    for name in ("token", "cert.pem", "key.pem", "ca.pem"):
        (tmp_path / name).write_text("x\n")
    return {"token_file": str(tmp_path / "token"), "tls_cert_file": str(tmp_path / "cert.pem"),
            "tls_key_file": str(tmp_path / "key.pem"), "tls_ca_file": str(tmp_path / "ca.pem"),
            "tls_require_client_cert": True, "tls_server_name": "star.test"}


# ---- the pure functions ----------------------------------------------------------------------------------


def test_worker_config_takes_the_trace_and_transport_from_the_job(tmp_path):
    job = _job(tmp_path)
    worker = worker_config(job, worker_id=2, coordinator="10.0.0.1:5000", relay_host="10.0.0.2")
    assert worker.trace == job.trace  # one name per concept: the job's [trace] table, as it is
    assert (worker.transport, worker.wire, worker.threads) == ("grpc", "bfloat16", 2)
    assert (worker.task, worker.seed, worker.batch_size, worker.coordinator) == ("digits", 7, 16, "10.0.0.1:5000")


def test_each_worker_gets_its_index_and_the_number_of_workers():
    job = JobConfig(workers=4)
    workers = [worker_config(job, worker_id=w, coordinator="h:1", relay_host="h") for w in range(4)]
    assert [(w.worker_id, w.workers) for w in workers] == [(0, 4), (1, 4), (2, 4), (3, 4)]


@pytest.mark.parametrize("data, serves", [({}, False), ({"plan": {"tree_fanout": 2}}, True),
                                          ({"control": {"traffic": {"relief": "tree"}}}, True),
                                          ({"control": {"traffic": {"relief": "tree", "pace": False}}}, False)])
def test_a_worker_serves_a_relay_on_its_host_only_when_the_job_may_aggregate_in_trees(data, serves):
    worker = worker_config(from_dict(JobConfig, data), worker_id=0, coordinator="h:1", relay_host="10.0.0.3")
    assert worker.relay_host == ("10.0.0.3" if serves else None)


@pytest.mark.parametrize("data, measures", [({"plan": {"mode": "ssgd"}}, False), ({"plan": {"mode": "auto"}}, True),
                                            ({"plan": {"mode": "batch"}}, True), ({"plan": {"mode": "amp"}}, False),
                                            ({"plan": {"mode": "auto"}, "control": {"batch": False}}, False),
                                            ({"plan": {"mode": "kofn", "k": 3}, "control": {"batch": True}}, True)])
def test_workers_time_their_step_cost_only_when_the_job_may_size_batches(data, measures):
    worker = worker_config(from_dict(JobConfig, data), worker_id=0, coordinator="h:1", relay_host="h")
    assert worker.measure_step_cost is measures


@pytest.mark.parametrize("worker_id", [-1, 3])
def test_a_worker_index_outside_the_job_is_refused_naming_the_field(worker_id):
    with pytest.raises(ConfigError, match=rf"worker_id={worker_id}: must be in 0..workers-1 \(workers=3\)"):
        worker_config(JobConfig(workers=3), worker_id=worker_id, coordinator="h:1", relay_host="h")


def test_ps_config_takes_its_index_the_number_of_ps_and_the_jobs_checkpoint_settings(tmp_path):
    job = _job(tmp_path)
    configs = [ps_config(job, ps_index=i, host="10.0.0.1", job_id="abc", checkpoint_dir="/ck") for i in range(2)]
    assert [(c.ps_index, c.num_ps) for c in configs] == [(0, 2), (1, 2)]
    ps = configs[1]
    assert (ps.host, ps.port, ps.job_id, ps.checkpoint_dir, ps.restore_dir, ps.migrate_from) == ("10.0.0.1", 0, "abc", "/ck", None, None)
    assert (ps.checkpoint_every_s, ps.checkpoint_every_updates, ps.nonfinite, ps.threads) == (3.0, 4, "skip", 2)
    assert ps.checkpoint_max_write_share == 0.2


def test_the_job_as_run_fills_the_optimizer_it_leaves_unset_with_the_tasks_defaults_and_the_ps_runs_it(tmp_path):
    job = _job(tmp_path)
    assert (job.optimizer.name, job.optimizer.lr, job.optimizer.momentum, job.optimizer.weight_decay) == ("sgd", 0.02, 0.9, 0.1)
    assert ps_config(job, ps_index=0, host="h", job_id="j", checkpoint_dir="c").optimizer == job.optimizer
    with pytest.raises(ConfigError, match="optimizer.nesterov"):  # refused by the launcher, before any child starts
        job_as_run(from_dict(JobConfig, {"optimizer": {"nesterov": True, "momentum": 0.0}}), TASK)


@pytest.mark.parametrize("optimizer, field", [({}, "optimizer.name"), ({"name": "sgd"}, "optimizer.lr")])
def test_a_ps_of_a_job_whose_optimizer_is_not_filled_in_is_refused_naming_the_field(optimizer, field):
    """Only the task knows its default optimizer; a PS does not load the task (its data) to learn it."""
    with pytest.raises(ConfigError, match=rf"{field}=None: a PS needs it in the job"):
        ps_config(from_dict(JobConfig, {"optimizer": optimizer}), ps_index=0, host="h", job_id="j", checkpoint_dir="c")


def test_a_ps_index_outside_the_job_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"ps_index=2: must be in 0..num_ps-1 \(num_ps=2\)"):
        ps_config(job_as_run(JobConfig(ps=2), TASK), ps_index=2, host="h", job_id="j", checkpoint_dir="c")


def test_a_ps_serves_metrics_at_the_jobs_port_plus_one_plus_its_index_unless_a_restart_gives_the_one_it_had(tmp_path):
    job = _job(tmp_path)
    assert [ps_config(job, ps_index=i, host="h", job_id="j", checkpoint_dir="c").metrics_port for i in range(2)] == [9101, 9102]
    assert ps_config(job, ps_index=1, host="h", job_id="j", checkpoint_dir="c", metrics_port=45678).metrics_port == 45678
    assert ps_config(job_as_run(JobConfig(), TASK), ps_index=0, host="h", job_id="j", checkpoint_dir="c").metrics_port is None
    assert ps_metrics_port(0, 3) == 0


def test_the_security_settings_reach_every_child_without_the_token_file(tmp_path):
    """TLS is carried; the token is not: children read it from STAR_JOB_TOKEN, which their launcher sets."""
    job = _job(tmp_path, security=_security(tmp_path))
    expected = from_dict(JobConfig, {"security": {**_security(tmp_path), "token_file": None}}).security
    children = [ps_config(job, ps_index=0, host="h", job_id="j", checkpoint_dir="c"),
                worker_config(job, worker_id=0, coordinator="h:1", relay_host="h"),
                coordinator_config(job, ps_addresses=["h:1", "h:2"], host="h")]
    assert child_security(job) == expected and expected.tls_require_client_cert and expected.token_file is None
    assert all(child.security == expected for child in children)


def test_coordinator_config_takes_the_jobs_plan_policies_and_targets(tmp_path):
    job = _job(tmp_path)
    coordinator = coordinator_config(job, ps_addresses=["h:1", "h:2"], host="10.0.0.1", placement_file="p.json")
    assert (coordinator.plan, coordinator.control, coordinator.evaluation, coordinator.placement) == (
        job.plan, job.control, job.evaluation, job.placement)
    assert (coordinator.workers, coordinator.max_workers, coordinator.task, coordinator.seed, coordinator.target) == (3, 5, "digits", 7, 0.8)
    assert (coordinator.max_time_s, coordinator.eval_period_s, coordinator.stop_at_target, coordinator.tensorboard) == (
        job.max_time_s, job.eval_period_s, False, False)
    assert (coordinator.out, coordinator.batch_size, coordinator.metrics_port) == (job.out, 16, 9100)
    assert (coordinator.ps_addresses, coordinator.host, coordinator.port, coordinator.restore, coordinator.placement_file) == (
        ("h:1", "h:2"), "10.0.0.1", 0, False, "p.json")


def test_a_coordinator_needs_one_address_per_ps():
    with pytest.raises(ConfigError, match=r"ps_addresses='h:1': needs one address per PS \(ps=2\)"):
        coordinator_config(JobConfig(ps=2), ps_addresses=["h:1"], host="h")


def test_a_job_file_gives_back_the_job_it_was_written_from(tmp_path):
    """What the children rely on: the launcher's OUT/config.toml is the job, every field of it."""
    job = _job(tmp_path, security=_security(tmp_path), node={"rank": 1, "ps_ranks": "0,1"}, resume=str(tmp_path))
    path = tmp_path / "config.toml"
    path.write_text(to_toml(job))
    assert from_dict(JobConfig, load_toml(path)) == job


# ---- `--job` on the command line ---------------------------------------------------------------------------


def _from_command_line(argv: list[str]):
    return daemon_config(argv[0], build_parser().parse_args(argv))


def test_the_job_file_form_of_each_daemon_gives_the_config_of_its_pure_function(tmp_path):
    job = _job(tmp_path, security=_security(tmp_path))
    path = tmp_path / "config.toml"
    path.write_text(to_toml(job))
    cases = [
        (child_args("ps", path, ps_index=1, host="10.0.0.1", job_id="abc", checkpoint_dir=str(tmp_path / "ck"), port=5001,
                    metrics_port=45678, restore_dir=str(tmp_path / "ck")),
         ps_config(job, ps_index=1, host="10.0.0.1", job_id="abc", checkpoint_dir=str(tmp_path / "ck"), port=5001,
                   metrics_port=45678, restore_dir=str(tmp_path / "ck"))),
        (child_args("ps", path, ps_index=0, host="h", job_id="j", checkpoint_dir="c", migrate_from="10.0.0.9:5000"),
         ps_config(job, ps_index=0, host="h", job_id="j", checkpoint_dir="c", migrate_from="10.0.0.9:5000")),
        (child_args("worker", path, worker_id=2, coordinator="10.0.0.1:5000", relay_host="10.0.0.2"),
         worker_config(job, worker_id=2, coordinator="10.0.0.1:5000", relay_host="10.0.0.2")),
        (child_args("coordinator", path, ps_addresses=("h:1", "h:2"), host="h", port=5000, restore=True,
                    placement_file=str(tmp_path / "placement.json")),
         coordinator_config(job, ps_addresses=["h:1", "h:2"], host="h", port=5000, restore=True,
                            placement_file=str(tmp_path / "placement.json"))),
        (child_args("coordinator", path, ps_addresses=("h:1", "h:2"), host="h"),
         coordinator_config(job, ps_addresses=["h:1", "h:2"], host="h")),
    ]
    for argv, expected in cases:
        assert _from_command_line(argv) == expected, argv


def test_the_hand_form_of_a_daemon_still_takes_its_own_flags(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("iteration,worker,factor\n0,0,1.0\n10,0,2.0\n")
    config = _from_command_line(["worker", "--worker-id", "3", "--workers", "4", "--coordinator", "h:1",
                                 "--trace.path", str(trace), "--trace.stretch", "0.5"])
    assert (config.worker_id, config.workers, config.coordinator, config.trace.stretch) == (3, 4, "h:1", 0.5)


@pytest.mark.parametrize("argv, message", [
    (["ps", "--ps-index", "0", "--host", "h", "--job-id", "j", "--checkpoint-dir", "c", "--optimizer.lr", "0.1"],
     "optimizer.lr='0.1': comes from the job file given with --job"),
    (["worker", "--worker-id", "0", "--coordinator", "h:1", "--relay-host", "h", "--workers", "8"],
     "workers='8': comes from the job file given with --job"),
    (["coordinator", "--ps-addresses", "h:1,h:2", "--host", "h", "--no-tensorboard"], "tensorboard=False: comes from the job file"),
    (["worker", "--worker-id", "0", "--coordinator", "h:1"], "relay_host=None: --job needs --relay-host"),
    (["ps", "--host", "h", "--job-id", "j", "--checkpoint-dir", "c"], "ps_index=None: --job needs --ps-index"),
])
def test_beside_job_a_setting_of_the_job_is_refused_and_a_missing_runtime_fact_is_named(tmp_path, capsys, argv, message):
    path = tmp_path / "config.toml"
    path.write_text(to_toml(job_as_run(JobConfig(), TASK)))
    assert main([argv[0], "--job", str(path), *argv[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
