"""Shared-memory mailboxes (star/shm.py) and the bf16 wire format (star/flat.py), without daemons."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch

from star.flat import BF16_WIRE, ChunkAssembler, tensor_chunks
from star.shm import (MAX_GRAD_SHARDS, SHM_DIR, GradSegment, Mailbox, PullBoard, ShmError, board_name, grad_segment_name,
                      mailbox_name, sweep, transport_in_use)

NUMEL = 1 << 20  # 4 MiB per area: copies long enough for a concurrent writer to overlap them


@pytest.fixture
def mailbox(tmp_path: Path):
    box, nonce = Mailbox.create(mailbox_name("unit", 0, 3), NUMEL, directory=tmp_path)
    peer = Mailbox.attach(box.path.name, NUMEL, nonce, directory=tmp_path)
    try:
        yield box, peer
    finally:
        peer.close()
        box.close()


def test_mailbox_moves_push_and_pull_payloads_bit_for_bit(mailbox):
    ps_side, worker_side = mailbox
    gradient = torch.randn(NUMEL, generator=torch.Generator().manual_seed(1))
    seq = worker_side.put_push(gradient)
    assert torch.equal(ps_side.push_view(seq), gradient)
    assert ps_side.push_intact(seq)
    worker_side.put_push(gradient)  # the worker writes again: the PS sees that the gradient it held changed
    assert not ps_side.push_intact(seq)
    params = torch.randn(NUMEL, generator=torch.Generator().manual_seed(2))
    out = torch.empty(NUMEL)
    worker_side.take_pull(out, ps_side.put_pull(tensor_chunks(params), version=5))
    assert torch.equal(out, params)


def test_a_push_written_by_the_ps_for_a_remote_worker_is_stamped_and_checked_like_the_workers_own(mailbox):
    ps_side, _ = mailbox
    gradient = torch.randn(NUMEL, generator=torch.Generator().manual_seed(4))
    seq = ps_side.write_push(lambda area: area.copy_(gradient))  # what the socket channel does with received bytes
    assert torch.equal(ps_side.push_view(seq), gradient) and ps_side.push_intact(seq)
    seen = []
    ps_side.write_push(lambda area: seen.append(ps_side.push_intact(seq)))  # while it is written, the old stamp is gone
    assert seen == [False] and not ps_side.push_intact(seq)
    pulled = ps_side.put_pull(tensor_chunks(gradient), version=3)
    assert torch.equal(ps_side.pull_view(pulled), gradient) and ps_side.pull_intact(pulled)
    with pytest.raises(ShmError, match="does not match"):
        ps_side.pull_view(pulled + 1)


def test_pull_board_moves_each_slots_parameters_bit_for_bit(tmp_path):
    board, nonce = PullBoard.create(board_name("unit", 0), NUMEL, 2, directory=tmp_path)
    reader = PullBoard.attach(board.path.name, NUMEL, 2, nonce, directory=tmp_path)
    try:
        versions = [torch.randn(NUMEL, generator=torch.Generator().manual_seed(v)) for v in range(2)]
        stamps = [board.publish(slot, params, version=slot + 7) for slot, params in enumerate(versions)]
        out = torch.empty(NUMEL)
        for slot, (params, seq) in enumerate(zip(versions, stamps)):
            reader.take(slot, out, seq)
            assert torch.equal(out, params)
        with pytest.raises(ShmError, match="does not match"):
            reader.take(0, out, stamps[1])  # another slot's stamp
        with pytest.raises(ShmError, match="outside"):
            reader.take(2, out, stamps[0])
    finally:
        reader.close()
        board.close()
    assert not board.path.exists()


def test_a_stamp_that_does_not_match_the_call_is_refused(mailbox):
    ps_side, worker_side = mailbox
    seq = worker_side.put_push(torch.ones(NUMEL))
    with pytest.raises(ShmError, match="does not match"):
        ps_side.push_view(seq + 1)
    with pytest.raises(ShmError, match="does not match"):
        worker_side.take_pull(torch.empty(NUMEL), 1)  # nothing was put there


def test_attach_refuses_a_mailbox_whose_nonce_differs(tmp_path):
    box, nonce = Mailbox.create(mailbox_name("unit", 0, 1), 16, directory=tmp_path)
    try:
        with pytest.raises(ShmError, match="nonce"):
            Mailbox.attach(box.path.name, 16, bytes(16), directory=tmp_path)
        with pytest.raises(ShmError, match="cannot open"):
            Mailbox.attach(mailbox_name("unit", 0, 2), 16, nonce, directory=tmp_path)
    finally:
        box.close()
    assert not box.path.exists()


_WRITER = """
import sys, time, torch
from pathlib import Path
from star.flat import tensor_chunks
from star.shm import GradSegment, Mailbox, PullBoard
kind, name, numel, nonce, directory = sys.argv[1], sys.argv[2], int(sys.argv[3]), bytes.fromhex(sys.argv[4]), Path(sys.argv[5])
if kind == "segment":  # a worker writing its gradient while the PS reads it
    box = GradSegment.attach(name, numel, 1, nonce, directory=directory)
    def write(version):
        box.begin_write()
        for start in reversed(range(0, numel, 256)):  # slowly, piece by piece, as a backward fills .grad views
            box.area[start : start + 256] = float(version % 2 + 1)  # (last first: against the reader's direction)
        box.stamp(0)
elif kind == "mailbox":
    box = Mailbox.attach(name, numel, nonce, directory=directory)
    # Small chunks: a slow writer, so that readers often copy while it is part-way through a version.
    payloads = [tensor_chunks(torch.full((numel,), float(value)), 1024) for value in (1, 2)]
    write = lambda version: box.put_pull(payloads[version % 2], version)
else:
    box = PullBoard.attach(name, numel, 1, nonce, directory=directory)
    payloads = [torch.full((numel,), float(value)) for value in (1, 2)]
    write = lambda version: box.publish(0, payloads[version % 2], version)
version = 1
print("writing", flush=True)
while True:  # out of turn on purpose: a PS that broke the ownership rule
    write(version)
    version += 1
    time.sleep(0.003)  # a stamped version stays readable for a moment
"""


def _take_gradient(reader: GradSegment, out: torch.Tensor, seq: int) -> None:
    """The PS's use of a gradient in a worker's segment: the view under its stamp, then the seqlock's check."""
    out.copy_(reader.push_view(0, seq, 0, reader.numel))
    if not reader.intact(0, seq):
        raise ShmError("written while read")


@pytest.mark.parametrize("kind", ["mailbox", "board", "segment"])
def test_a_reader_never_takes_a_mix_of_two_versions(tmp_path, kind):
    if kind == "segment":
        box, nonce = GradSegment.create(grad_segment_name("unit", 4), NUMEL, 1, directory=tmp_path)
        reader = GradSegment.attach(box.path.name, NUMEL, 1, nonce, directory=tmp_path)
        stamp_word, take = 8, lambda out, seq: _take_gradient(reader, out, seq)
    elif kind == "mailbox":
        box, nonce = Mailbox.create(mailbox_name("unit", 0, 4), NUMEL, directory=tmp_path)
        reader = Mailbox.attach(box.path.name, NUMEL, nonce, directory=tmp_path)
        stamp_word, take = 5, reader.take_pull
    else:
        box, nonce = PullBoard.create(board_name("unit", 0), NUMEL, 1, directory=tmp_path)
        reader = PullBoard.attach(box.path.name, NUMEL, 1, nonce, directory=tmp_path)
        stamp_word, take = 8, lambda out, seq: reader.take(0, out, seq)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, kind, box.path.name, str(NUMEL), nonce.hex(), str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    out = torch.empty(NUMEL)
    taken = refused = 0
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and taken < 100:
            seq = int(box._header[stamp_word])  # the stamp as the reader would get it from a reply
            if seq == 0:  # mid-write: a PS would not have replied yet
                continue
            try:
                take(out, seq)
            except ShmError:
                refused += 1
                continue
            taken += 1
            first = float(out[0])
            assert torch.all(out == first), f"mixed read: values {out.min()}..{out.max()} under one stamp"
    finally:
        writer.kill()
        writer.wait()
        reader.close()
        box.close()
    assert taken > 0, f"no read completed ({refused} refused): the test exercised nothing"


def test_a_gradient_segment_hands_each_ps_its_range_in_place_under_its_own_stamp(tmp_path):
    segment, nonce = GradSegment.create(grad_segment_name("unit", 3), NUMEL, 2, directory=tmp_path)
    ps = GradSegment.attach(segment.path.name, NUMEL, 2, nonce, directory=tmp_path)
    try:
        gradient = torch.randn(NUMEL, generator=torch.Generator().manual_seed(1))
        segment.begin_write()
        segment.area.copy_(gradient)  # what backward does to the model's .grad views
        first, second = segment.stamp(0), segment.stamp(1)
        half = NUMEL // 2
        view = ps.push_view(1, second, half, NUMEL)
        assert torch.equal(view, gradient[half:])  # bit for bit
        view.mul_(2)  # in place: the worker's memory, not a copy
        assert torch.equal(segment.area[half:], gradient[half:] * 2)
        assert ps.intact(0, first) and ps.intact(1, second)
        with pytest.raises(ShmError, match="does not match"):
            ps.push_view(0, second, 0, half)  # the other shard's stamp
        segment.begin_write()  # the worker writes its next gradient: every stamp is void
        assert not ps.intact(0, first) and not ps.intact(1, second)
        with pytest.raises(ShmError, match="does not match"):
            ps.push_view(0, first, 0, half)
        with pytest.raises(ShmError, match="outside"):
            ps.push_view(0, segment.stamp(0), 0, NUMEL + 1)
        with pytest.raises(ShmError, match="shard 2 is outside 0..1"):
            ps.intact(2, 1)
    finally:
        ps.close()
        segment.close()
    assert not segment.path.exists()


def test_a_gradient_segment_refuses_a_wrong_nonce_or_shard_count(tmp_path):
    segment, nonce = GradSegment.create(grad_segment_name("unit", 0), 16, 4, directory=tmp_path)
    try:
        with pytest.raises(ShmError, match="nonce differs"):
            GradSegment.attach(segment.path.name, 16, 4, bytes(16), directory=tmp_path)
        with pytest.raises(ShmError, match="has 4160 bytes, expected 4164"):
            GradSegment.attach(segment.path.name, 17, 4, nonce, directory=tmp_path)
        with pytest.raises(ShmError, match=f"shm_grad_shards 0 is outside 1..{MAX_GRAD_SHARDS}"):
            GradSegment.attach(segment.path.name, 16, 0, nonce, directory=tmp_path)
        with pytest.raises(ShmError, match=f"outside 1..{MAX_GRAD_SHARDS}"):
            GradSegment.create(grad_segment_name("unit", 1), 16, MAX_GRAD_SHARDS + 1, directory=tmp_path)
    finally:
        segment.close()


def test_sweep_unlinks_only_mailboxes_whose_owner_is_gone(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    dead = [tmp_path / mailbox_name("job1", 0, 0, pid=dead_pid), tmp_path / board_name("job1", 0, pid=dead_pid),
            tmp_path / grad_segment_name("worker", 2, pid=dead_pid)]  # a worker's gradient segment, after its kill -9
    alive = [tmp_path / mailbox_name("job1", 0, 1, pid=os.getpid()), tmp_path / board_name("job1", 1, pid=os.getpid()),
             tmp_path / grad_segment_name("worker", 3, pid=os.getpid())]
    unrelated = tmp_path / f"star-notamailbox-{dead_pid}"
    for path in (*dead, *alive, unrelated):
        path.write_bytes(b"x")
    assert sorted(sweep(tmp_path)) == sorted(path.name for path in dead)
    assert not any(path.exists() for path in dead) and all(path.exists() for path in alive) and unrelated.exists()


def test_sweep_unlinks_a_dead_owner_s_segment_although_its_pid_now_belongs_to_a_newer_process(tmp_path):
    """Pids wrap (32,768 here): a killed worker's pid came back as another process's within one test run, and its
    segment outlived the run. A segment last written before the process now holding its pid started is stale."""
    started = psutil.Process(os.getpid()).create_time()
    reused = tmp_path / grad_segment_name("worker", 1, pid=os.getpid())  # written by an earlier process of this pid
    current = tmp_path / grad_segment_name("worker", 2, pid=os.getpid())  # written by this process
    for path in (reused, current):
        path.write_bytes(b"x")
    os.utime(reused, (started - 60.0, started - 60.0))
    assert sweep(tmp_path) == [reused.name]
    assert current.exists() and not reused.exists()


@pytest.mark.parametrize("ending", ["closed", "with_block", "run_ended", "constructor_failed"])
def test_a_worker_built_in_a_longer_lived_process_leaves_no_gradient_segment_however_it_ends(tmp_path, ending):
    """A worker's gradient segment is named after the process that made it, so no sweep takes it while that process
    lives: workers built inside a test run and never run kept one in /dev/shm after the run had ended."""
    from star.config import TraceConfig
    from star.trace_values import TraceError
    from star.worker.config import WorkerConfig
    from star.worker.worker import Worker, WorkerExit

    segment = SHM_DIR / grad_segment_name("worker", 2)
    config = WorkerConfig(worker_id=2, workers=4, task="digits")
    if ending == "constructor_failed":  # a trace it cannot read, found after the model and data are built
        trace = tmp_path / "trace.csv"
        trace.write_text("not,a,trace\n")
        with pytest.raises(TraceError):
            Worker(dataclasses.replace(config, trace=TraceConfig(path=str(trace))))
    else:
        worker = Worker(config)
        assert worker.host.grad_segment is not None and worker.host.grad_segment.path == segment and segment.exists()
        if ending == "closed":
            worker.close()
            worker.close()  # again: nothing
        elif ending == "with_block":
            with worker:
                pass
        else:
            with pytest.raises(WorkerExit):  # neither a coordinator nor PS addresses: it cannot train
                worker.run()
    assert not segment.exists()


def test_bf16_wire_halves_the_bytes_and_rounds_within_half_a_bf16_ulp():
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(300_000, generator=generator) * torch.logspace(-20, 20, 300_000)
    chunks = tensor_chunks(values, dtype=BF16_WIRE)
    assert sum(len(data) for _, data in chunks) == 2 * values.numel()
    assembler = ChunkAssembler(values.numel(), dtype=BF16_WIRE)
    for offset, data in chunks:
        assembler.add(offset, data)
    received = assembler.finish()
    assert received.dtype == torch.float32
    # bfloat16 keeps 8 significant bits: round-to-nearest is off by at most 2^-8 of the value.
    assert torch.all((received - values).abs() <= values.abs() * 2.0**-8)
    exact = values.to(torch.bfloat16).float()  # values already on the bf16 grid travel unchanged
    assembler = ChunkAssembler(values.numel(), dtype=BF16_WIRE)
    for offset, data in tensor_chunks(exact, dtype=BF16_WIRE):
        assembler.add(offset, data)
    assert torch.equal(assembler.finish(), exact)


def _stats(pushes: int, shm: int = 0, bf16: int = 0, socket: int = 0) -> SimpleNamespace:
    return SimpleNamespace(pushes_received=pushes, counters={"shm_pushes": shm, "bf16_pushes": bf16, "socket_pushes": socket})


def test_transport_in_use_says_how_the_pushes_reached_the_parameter_servers():
    assert transport_in_use([]) == ("", "")
    assert transport_in_use([_stats(4, shm=4), _stats(4, shm=4)]) == ("shm", "float32")
    assert transport_in_use([_stats(4), _stats(4, bf16=4)]) == ("grpc", "mixed")
    assert transport_in_use([_stats(4, bf16=4)]) == ("grpc", "bfloat16")
    assert transport_in_use([_stats(4, shm=1, bf16=3)]) == ("mixed", "bfloat16")
    # socket-channel pushes land in mailboxes too (counted in shm_pushes), but crossed a wire
    assert transport_in_use([_stats(4, shm=4, socket=4), _stats(4, shm=4, socket=4)]) == ("socket", "float32")
    assert transport_in_use([_stats(4, shm=4, socket=4, bf16=4)]) == ("socket", "bfloat16")
    assert transport_in_use([_stats(4, shm=4, socket=2, bf16=2)]) == ("mixed", "bfloat16")
    assert transport_in_use([_stats(4, shm=2, socket=2)]) == ("mixed", "float32")
