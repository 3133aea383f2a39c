"""Unit tests for star.plan: SyncPlan values, constructors, validation, parsing."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from star.plan import (
    MODES,
    LatePolicy,
    PlanError,
    Scale,
    SyncPlan,
    asgd,
    exclude,
    grouped,
    halves,
    kofn,
    parse_groups,
    plan_for_mode,
    ssgd,
    with_epoch,
)

WORKER_SETS = [(0,), (0, 1), (0, 1, 2, 3), (3, 7, 9), (5, 2, 8, 1, 0)]


# ---- constructors ---------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKER_SETS)
@pytest.mark.parametrize("epoch", [0, 7])
def test_ssgd_is_one_group_of_all_workers_with_quorum_n(workers, epoch):
    plan = ssgd(workers, epoch)
    assert plan.epoch == epoch
    assert plan.groups == (tuple(workers),)
    assert plan.quorum == (len(workers),)
    assert plan.staleness_bound is None
    assert plan.scale is Scale.PER_TOTAL_WORKERS
    assert plan.late_policy is LatePolicy.APPLY
    assert plan.label == "ssgd"
    assert plan.workers == tuple(sorted(workers))
    assert plan.total_workers == len(workers)


@pytest.mark.parametrize("workers", WORKER_SETS)
def test_asgd_is_singleton_groups_with_quorum_one(workers):
    plan = asgd(workers, epoch=3)
    assert plan.epoch == 3
    assert plan.groups == tuple((w,) for w in workers)
    assert plan.quorum == (1,) * len(workers)
    assert plan.staleness_bound is None
    assert plan.label == "asgd"
    assert plan.total_workers == len(workers)


@pytest.mark.parametrize("bound", [0, 1, 2, 10])
def test_asgd_with_staleness_bound_is_labelled_ssp(bound):
    plan = asgd((0, 1, 2), staleness_bound=bound)
    assert plan.staleness_bound == bound
    assert plan.label == "ssp"
    assert plan.groups == ((0,), (1,), (2,))


@pytest.mark.parametrize("workers", [(0, 1, 2, 3), (4, 2, 6)])
@pytest.mark.parametrize("late_policy", list(LatePolicy))
def test_kofn_is_one_group_with_quorum_k(workers, late_policy):
    for k in range(1, len(workers) + 1):
        plan = kofn(workers, k, epoch=2, late_policy=late_policy)
        assert plan.groups == (tuple(workers),)
        assert plan.quorum == (k,)
        assert plan.late_policy is late_policy
        assert plan.epoch == 2
        assert plan.label == "kofn"


def test_kofn_late_policy_defaults_to_apply():
    assert kofn((0, 1, 2), 2).late_policy is LatePolicy.APPLY


@pytest.mark.parametrize("k", [0, -1, 5, 100])
def test_kofn_rejects_k_outside_1_to_n_naming_k(k):
    with pytest.raises(PlanError, match=r"\bk="):
        kofn((0, 1, 2, 3), k)


@pytest.mark.parametrize(
    "groups",
    [[[0, 1], [2, 3]], [[0], [1], [2]], [[3, 1, 2]], [(0, 4), (1,), (2, 3)]],
)
def test_grouped_quorum_is_each_group_size(groups):
    plan = grouped(groups, epoch=1)
    assert plan.groups == tuple(tuple(g) for g in groups)
    assert plan.quorum == tuple(len(g) for g in groups)
    assert plan.epoch == 1
    assert plan.label == "grouped"
    assert plan.staleness_bound is None


def test_grouped_accepts_any_iterable_of_sequences():
    plan = grouped(iter([range(0, 2), range(2, 5)]))
    assert plan.groups == ((0, 1), (2, 3, 4))


@pytest.mark.parametrize(
    "workers, excluded, expected_groups",
    [
        ((0, 1, 2, 3), [3], ((0, 1, 2), (3,))),
        ((0, 1, 2, 3), [1], ((0, 2, 3), (1,))),
        ((0, 1, 2, 3), [3, 0], ((1, 2), (0,), (3,))),  # excluded singletons follow worker order
        ((0, 1, 2, 3), [], ((0, 1, 2, 3),)),
        ((5, 9, 7), {9}, ((5, 7), (9,))),
    ],
)
def test_exclude_puts_healthy_workers_in_one_group_and_each_excluded_alone(workers, excluded, expected_groups):
    plan = exclude(workers, excluded, epoch=4)
    assert plan.groups == expected_groups
    assert plan.quorum == tuple(len(g) for g in expected_groups)
    assert plan.epoch == 4
    assert plan.label == "exclude"
    assert plan.total_workers == len(workers)


def test_exclude_of_every_worker_is_asgd():
    plan = exclude((0, 1, 2), (0, 1, 2), epoch=5)
    assert plan == asgd((0, 1, 2), epoch=5)
    assert plan.staleness_bound is None


def test_exclude_rejects_unknown_workers_naming_excluded():
    with pytest.raises(PlanError, match="excluded") as info:
        exclude((0, 1, 2), (2, 7, 9))
    assert "[7, 9]" in str(info.value)


@pytest.mark.parametrize("ctor", [ssgd, asgd, lambda w: kofn(w, 1), lambda w: exclude(w, ())])
def test_constructors_reject_empty_workers_naming_workers(ctor):
    with pytest.raises(PlanError, match="workers"):
        ctor(())


@pytest.mark.parametrize("ctor", [ssgd, asgd, lambda w: kofn(w, 1), lambda w: exclude(w, ())])
def test_constructors_reject_duplicate_workers_naming_workers(ctor):
    with pytest.raises(PlanError, match="workers.*duplicates"):
        ctor((0, 1, 1))


# ---- plan_for_mode --------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_plan_for_mode_ssgd_and_asgd(n):
    assert plan_for_mode("ssgd", n) == ssgd(range(n))
    assert plan_for_mode("asgd", n) == asgd(range(n))
    assert plan_for_mode("ssgd", n).label == "ssgd"
    assert plan_for_mode("asgd", n).label == "asgd"


@pytest.mark.parametrize("n, expected_k", [(1, 1), (2, 1), (3, 2), (4, 3), (8, 7)])
def test_plan_for_mode_kofn_defaults_to_n_minus_one(n, expected_k):
    plan = plan_for_mode("kofn", n)
    assert plan.groups == (tuple(range(n)),)
    assert plan.quorum == (expected_k,)
    assert plan.late_policy is LatePolicy.APPLY


def test_plan_for_mode_kofn_uses_explicit_k_and_validates_it():
    assert plan_for_mode("kofn", 5, k=2).quorum == (2,)
    with pytest.raises(PlanError, match=r"\bk="):
        plan_for_mode("kofn", 5, k=6)


@pytest.mark.parametrize(
    "n, expected",
    [(1, ((0,),)), (2, ((0,), (1,))), (4, ((0, 1), (2, 3))), (5, ((0, 1, 2), (3, 4))), (6, ((0, 1, 2), (3, 4, 5)))],
)
def test_plan_for_mode_grouped_defaults_to_two_halves(n, expected):
    plan = plan_for_mode("grouped", n)
    assert plan.groups == expected
    assert plan.quorum == tuple(len(g) for g in expected)
    assert halves(range(n)) == expected


@pytest.mark.parametrize("groups", ["0,3;1,2", [[0, 3], [1, 2]], ((0, 3), (1, 2))])
def test_plan_for_mode_grouped_takes_groups_as_text_or_sequences(groups):
    assert plan_for_mode("grouped", 4, groups=groups).groups == ((0, 3), (1, 2))


@pytest.mark.parametrize("groups", ["0,1;2", "0,1;2,3,4", "0,1;1,2,3", [[0, 1], [2, 2, 3]], [[0, 1, 2, 3, 3]]])
def test_plan_for_mode_grouped_requires_every_worker_exactly_once_naming_groups(groups):
    with pytest.raises(PlanError, match="groups"):
        plan_for_mode("grouped", 4, groups=groups)


@pytest.mark.parametrize("n", [1, 3, 5])
def test_plan_for_mode_ssp_defaults_to_staleness_two(n):
    plan = plan_for_mode("ssp", n)
    assert plan == asgd(range(n), staleness_bound=2)
    assert plan.staleness_bound == 2
    assert plan.label == "ssp"


def test_plan_for_mode_ssp_uses_explicit_staleness():
    assert plan_for_mode("ssp", 3, staleness=0).staleness_bound == 0
    with pytest.raises(PlanError, match="staleness"):
        plan_for_mode("ssp", 3, staleness=-1)


def test_plan_for_mode_exclude():
    assert plan_for_mode("exclude", 4, excluded=[2]).groups == ((0, 1, 3), (2,))
    assert plan_for_mode("exclude", 3).groups == ((0, 1, 2),)  # nothing excluded: one healthy group
    with pytest.raises(PlanError, match="excluded"):
        plan_for_mode("exclude", 3, excluded=[3])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("epoch", [0, 9])
def test_plan_for_mode_builds_every_mode_with_the_given_epoch_over_all_workers(mode, epoch):
    plan = plan_for_mode(mode, 4, epoch=epoch)
    assert plan.epoch == epoch
    assert plan.workers == (0, 1, 2, 3)
    assert plan.total_workers == 4


@pytest.mark.parametrize("mode", ["", "SSGD", "bsp", "k-of-n", "sync"])
def test_plan_for_mode_rejects_unknown_mode_naming_mode(mode):
    with pytest.raises(PlanError, match="mode=") as info:
        plan_for_mode(mode, 4)
    for known in MODES:
        assert known in str(info.value)


@pytest.mark.parametrize("mode", MODES)
def test_plan_for_mode_rejects_zero_workers(mode):
    with pytest.raises(PlanError):
        plan_for_mode(mode, 0)


# ---- SyncPlan validation ----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field_name",
    [
        (dict(epoch=-1, groups=((0,),), quorum=(1,)), "epoch"),
        (dict(epoch=0, groups=(), quorum=()), "groups"),
        (dict(epoch=0, groups=((0, 1),), quorum=(2, 1)), "quorum"),
        (dict(epoch=0, groups=((0, 1), (2,)), quorum=(2,)), "quorum"),
        (dict(epoch=0, groups=((0, 1), ()), quorum=(2, 1)), "groups[1]"),
        (dict(epoch=0, groups=((0, -1),), quorum=(2,)), "groups[0]"),
        (dict(epoch=0, groups=((0, 1), (1, 2)), quorum=(2, 2)), "in groups (in groups[0] and groups[1])"),
        (dict(epoch=0, groups=((0, 1, 1),), quorum=(3,)), "in groups (in groups[0])"),
        (dict(epoch=0, groups=((0, 1),), quorum=(0,)), "quorum[0]"),
        (dict(epoch=0, groups=((0,), (1, 2)), quorum=(1, 3)), "quorum[1]"),
        (dict(epoch=0, groups=((0, 1),), quorum=(2,), staleness_bound=-1), "staleness_bound"),
    ],
)
def test_sync_plan_validation_error_names_the_field(kwargs, field_name):
    with pytest.raises(PlanError) as info:
        SyncPlan(**kwargs)
    assert field_name in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("bound", [None, 0, 1, 5])
def test_sync_plan_accepts_any_groups_with_a_staleness_bound(bound):
    plan = SyncPlan(3, ((0, 1), (2,)), (1, 1), staleness_bound=bound, scale=Scale.PER_ARRIVALS)
    assert plan.staleness_bound == bound
    assert plan.scale is Scale.PER_ARRIVALS


def test_sync_plan_is_frozen():
    plan = ssgd((0, 1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.epoch = 5  # type: ignore[misc]


def test_sync_plan_equality_ignores_label():
    a = SyncPlan(0, ((0, 1),), (2,), label="a")
    b = SyncPlan(0, ((0, 1),), (2,), label="b")
    assert a == b
    assert hash(a) == hash(b)
    assert a != with_epoch(a, 1)


def test_sync_plan_workers_total_and_group_of():
    plan = SyncPlan(0, ((4, 1), (0,), (3, 2)), (1, 1, 2))
    assert plan.workers == (0, 1, 2, 3, 4)
    assert plan.total_workers == 5
    assert plan.group_of() == {4: 0, 1: 0, 0: 1, 3: 2, 2: 2}


def test_describe_mentions_label_epoch_groups_quorum_bound_and_late_policy():
    text = SyncPlan(
        6, ((0, 1), (2,)), (1, 1), staleness_bound=3, late_policy=LatePolicy.DROP, label="mine"
    ).describe()
    assert text.startswith("mine ")
    for part in ("epoch=6", "groups=[0,1;2]", "quorum=[1,1]", "ssp=3", "late=drop"):
        assert part in text
    assert "ssp=" not in ssgd((0, 1)).describe()


@pytest.mark.parametrize(
    "plan",
    [
        ssgd((0, 1, 2)),
        asgd((0, 1), staleness_bound=1),
        kofn((0, 1, 2), 2, late_policy=LatePolicy.DROP),
        grouped([[0], [1, 2]]),
        dataclasses.replace(exclude((0, 1, 2), [1]), scale=Scale.PER_ARRIVALS),
    ],
)
@pytest.mark.parametrize("epoch", [0, 1, 42])
def test_with_epoch_changes_only_the_epoch(plan, epoch):
    moved = with_epoch(plan, epoch)
    assert moved.epoch == epoch
    assert dataclasses.replace(moved, epoch=plan.epoch) == plan
    assert moved.label == plan.label
    assert (moved.groups, moved.quorum, moved.staleness_bound, moved.scale, moved.late_policy) == (
        plan.groups,
        plan.quorum,
        plan.staleness_bound,
        plan.scale,
        plan.late_policy,
    )


def test_with_epoch_validates():
    with pytest.raises(PlanError, match="epoch"):
        with_epoch(ssgd((0,)), -1)


def test_enums_are_strings_matching_their_wire_values():
    assert Scale("per_total_workers") is Scale.PER_TOTAL_WORKERS
    assert Scale("per_arrivals") is Scale.PER_ARRIVALS
    assert LatePolicy("apply") is LatePolicy.APPLY
    assert LatePolicy("drop") is LatePolicy.DROP
    assert set(MODES) == {"ssgd", "asgd", "kofn", "grouped", "ssp", "exclude"}


# ---- parse_groups / halves ----------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0,1;2,3", ((0, 1), (2, 3))),
        ("0", ((0,),)),
        ("0,1,2", ((0, 1, 2),)),
        ("3;1;2", ((3,), (1,), (2,))),
        (" 0 , 1 ; 2 ", ((0, 1), (2,))),
        ("0,1,;2", ((0, 1), (2,))),  # a trailing comma inside a group is tolerated
        ("10,200", ((10, 200),)),
    ],
)
def test_parse_groups_accepts_semicolon_separated_comma_lists(text, expected):
    assert parse_groups(text) == expected


@pytest.mark.parametrize("text", ["", ";", "0,1;", ";0,1", "0;;1", " , "])
def test_parse_groups_rejects_empty_groups_naming_groups(text):
    with pytest.raises(PlanError, match="groups=") as info:
        parse_groups(text)
    assert "empty group" in str(info.value)


@pytest.mark.parametrize("text", ["a", "0,b;2", "0.5", "0-1", "0:1"])
def test_parse_groups_rejects_non_integers_naming_groups(text):
    with pytest.raises(PlanError, match="groups=") as info:
        parse_groups(text)
    assert "0,1;2,3" in str(info.value)


@given(st.lists(st.lists(st.integers(0, 10_000), min_size=1, max_size=5), min_size=1, max_size=5))
@settings(max_examples=100, deadline=None)
def test_parse_groups_round_trips_the_text_form(groups):
    text = ";".join(",".join(map(str, g)) for g in groups)
    assert parse_groups(text) == tuple(tuple(g) for g in groups)


@given(st.lists(st.integers(0, 1000), unique=True, min_size=0, max_size=12))
@settings(max_examples=100, deadline=None)
def test_halves_splits_in_order_with_the_larger_half_first(workers):
    parts = halves(workers)
    assert tuple(w for part in parts for w in part) == tuple(workers)
    if len(workers) >= 2:
        assert len(parts) == 2
        assert len(parts[0]) - len(parts[1]) in (0, 1)
    else:
        assert parts == (tuple(workers),)
