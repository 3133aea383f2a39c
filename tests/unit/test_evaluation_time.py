"""star.evaluator.made_s: an evaluation is timed when the parameters it read existed, not when it read them."""

from __future__ import annotations

import pytest

from star.evaluator import made_s
from star.flat import ShardRange
from star.rpc.ps_client import ShardView


def _view(since_s: float, applied_s: float | None) -> ShardView:
    return ShardView(range=ShardRange(0, 0, 10), version=7, since_first_update_s=since_s, version_applied_s=applied_s)


@pytest.mark.parametrize("views, expected", [
    ([(9.0, 4.0), (9.1, 4.2)], 4.2),  # read 5 s late: timed at the later shard's apply
    ([(9.0, None), (9.1, 4.2)], 9.0),  # a shard that does not know its version's time counts at its read
    ([(9.0, None), (9.1, None)], 9.1),  # an older PS: the read time, as before
])
def test_an_evaluation_is_timed_at_the_newest_shards_apply_time_or_at_the_read_where_unknown(views, expected):
    assert made_s([_view(s, a) for s, a in views]) == pytest.approx(expected)
