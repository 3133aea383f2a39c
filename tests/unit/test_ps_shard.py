"""The PS shard's update: a synchronous round sums its gradients in worker order, whatever order they arrived in;
Adam runs torch's fused kernel."""

from __future__ import annotations

import itertools

import pytest
import torch

from star.config import OptimizerConfig
from star.flat import ShardRange
from star.optim import build_optimizer, matched_momentum
from star.ps_server.shard import ShardState, squared_norm_if_finite, summation_order


def test_a_rounds_gradients_are_summed_in_their_senders_order_not_in_arrival_order():
    senders = {10: 3, 11: 0, 12: 2, 13: 1}  # gradient id -> worker, ids in arrival order
    assert summation_order([10, 11, 12, 13], senders) == [11, 13, 12, 10]
    assert summation_order([13, 12, 11, 10], senders) == [11, 13, 12, 10]


def test_every_arrival_order_gives_bit_identical_parameters():
    """Float sums depend on their order: these four gradients sum to different bits in different orders,
    so only a fixed order makes two runs of one seed the same arithmetic."""
    generator = torch.Generator().manual_seed(0)
    grads = {w: torch.randn(4096, generator=generator) * 10 ** w for w in range(4)}  # magnitudes 1 .. 1000
    def summed(order):
        total = grads[order[0]].clone()
        for w in order[1:]:
            total.add_(grads[w])
        return total.numpy().tobytes()

    arrival_sums = {summed(order) for order in itertools.permutations(range(4))}
    assert len(arrival_sums) > 1  # the premise: arrival order would matter
    results = set()
    for order in itertools.permutations(range(4)):
        shard = ShardState(ShardRange(0, 0, 4096), torch.zeros(4096), OptimizerConfig(name="sgd", lr=0.1, momentum=0.0))
        ids = [100 + w for w in order]  # gradient ids in this arrival order
        senders = {100 + w: w for w in range(4)}
        shard.apply([grads[senders[gid]].clone() for gid in summation_order(ids, senders)], 0.25)
        results.add(shard.param.data.numpy().tobytes())
    assert len(results) == 1


def _shard(numel: int = 4096) -> ShardState:
    return ShardState(ShardRange(0, 0, numel), torch.zeros(numel), OptimizerConfig(name="sgd", lr=0.1, momentum=0.9))


def _grads(count: int, numel: int = 4096) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(numel, generator=generator) * 10 ** w for w in range(count)]


def test_gradients_summed_out_of_mailboxes_give_the_same_bits_as_owned_buffers():
    owned, held = _shard(), _shard()
    for step in range(3):
        grads = _grads(3 + step)
        originals = [g.clone() for g in grads]
        owned.apply([g.clone() for g in grads], 0.5)
        assert held.apply(grads, 0.5, [lambda: True] * len(grads)) == 0
        assert all(torch.equal(g, o) for g, o in zip(grads, originals))  # a mailbox is only read, never summed into
        assert torch.equal(owned.param.data, held.param.data)


def test_a_gradient_written_over_while_held_is_left_out_and_the_rest_applied():
    grads = _grads(3)
    reference = _shard()
    reference.apply([grads[0].clone(), grads[2].clone()], 0.5)
    shard = _shard()
    intact = [None, lambda: False, lambda: True]  # an owned buffer, a mailbox written over, an intact mailbox
    assert shard.apply([g.clone() for g in grads], 0.5, intact) == 1
    assert torch.equal(shard.param.data, reference.param.data)
    untouched = _shard()
    assert untouched.apply(_grads(2), 1.0, [lambda: False, lambda: False]) == 2
    assert torch.equal(untouched.param.data, torch.zeros(4096))  # nothing left to apply: no step at all


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_runs_torchs_fused_kernel_and_steps_as_the_per_op_loop_does(name):
    config = OptimizerConfig(name=name, lr=1e-2, weight_decay=0.01)
    fused_param = torch.nn.Parameter(torch.randn(1000, generator=torch.Generator().manual_seed(0)))
    loop_param = torch.nn.Parameter(fused_param.detach().clone())
    fused = build_optimizer(config, fused_param)
    loop = (torch.optim.Adam if name == "adam" else torch.optim.AdamW)([loop_param], lr=1e-2, weight_decay=0.01)
    assert fused.defaults["fused"] is True
    for step in range(5):
        grad = torch.randn(1000, generator=torch.Generator().manual_seed(step + 1))
        fused_param.grad, loop_param.grad = grad.clone(), grad.clone()
        fused.step()
        loop.step()
    assert torch.allclose(fused_param, loop_param, rtol=0, atol=1e-6)
    assert not torch.equal(fused_param, torch.randn(1000, generator=torch.Generator().manual_seed(0)))  # it moved


def test_the_update_shows_its_unscaled_sum_to_the_noise_estimate_before_stepping():
    grads = [torch.full((6,), float(i + 1)) for i in range(3)]
    state = ShardState(ShardRange(0, 0, 6), torch.zeros(6), OptimizerConfig(name="sgd", lr=1.0))
    seen = []
    state.apply([g.clone() for g in grads], 1 / 3, on_sum=lambda total: seen.append(total.clone()))
    assert len(seen) == 1 and torch.equal(seen[0], torch.full((6,), 6.0))
    assert torch.allclose(state.param.data, torch.full((6,), -2.0))  # the step used the scaled sum


def test_the_push_check_gives_a_finite_gradients_squared_norm():
    gradient = torch.tensor([3.0, -4.0, 0.0, 12.0])
    assert squared_norm_if_finite(gradient) == pytest.approx(169.0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_the_push_check_refuses_a_nan_or_an_inf_anywhere(bad):
    gradient = torch.randn(10_000)
    gradient[7_777] = bad
    assert squared_norm_if_finite(gradient) is None


def test_finite_values_whose_squares_overflow_float32_are_not_taken_for_inf():
    """1e20 squared overflows float32: the check must look at the elements, not at the overflowed dot."""
    gradient = torch.tensor([1e20, -1e20, 1.0])
    assert squared_norm_if_finite(gradient) == pytest.approx(2e40)


@pytest.mark.parametrize("momentum, groups, expected", [(0.9, 1, 0.9), (0.9, 2, 0.8), (0.9, 4, 0.6), (0.9, 10, 0.0),
                                                       (0.9, 64, 0.0), (0.5, 2, 0.0), (0.0, 4, 0.0)])
def test_matched_momentum_keeps_the_configured_horizon_across_independent_groups(momentum, groups, expected):
    assert matched_momentum(momentum, groups) == pytest.approx(expected)


def test_matched_momentum_refuses_a_plan_without_groups():
    with pytest.raises(ValueError, match="independent_groups"):
        matched_momentum(0.9, 0)


@pytest.mark.parametrize("config, groups, expected", [
    (OptimizerConfig(name="sgd", lr=0.1, momentum=0.9), 4, 0.6),
    (OptimizerConfig(name="sgd", lr=0.1, momentum=0.9), 1, 0.9),
    (OptimizerConfig(name="sgd", lr=0.1, momentum=0.9, async_momentum="fixed"), 4, 0.9),
    (OptimizerConfig(name="sgd", lr=0.1, momentum=0.9, nesterov=True), 20, 0.0),
])
def test_the_shard_steps_with_the_momentum_of_the_plan_in_force(config, groups, expected):
    shard = ShardState(ShardRange(0, 0, 8), torch.zeros(8), config)
    shard.follow_plan(groups)
    assert [g["momentum"] for g in shard.optimizer.param_groups] == [pytest.approx(expected)]
    shard.apply([torch.ones(8)], 1.0)  # a step at the lowered momentum (0 under Nesterov too) runs
    shard.follow_plan(1)  # back to one synchronous group: the configured momentum again
    assert shard.optimizer.param_groups[0]["momentum"] == pytest.approx(0.9)


def test_adams_first_moment_is_left_as_configured_under_an_asynchronous_plan():
    shard = ShardState(ShardRange(0, 0, 8), torch.zeros(8), OptimizerConfig(name="adam", lr=0.1, beta1=0.9))
    shard.follow_plan(8)
    assert shard.optimizer.param_groups[0]["betas"][0] == 0.9 and "momentum" not in shard.optimizer.param_groups[0]
