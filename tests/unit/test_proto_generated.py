"""The committed gRPC stubs are exactly what `python -m star.rpc.generate` produces from proto/."""

from __future__ import annotations

import pytest


def test_generated_stubs_are_up_to_date():
    pytest.importorskip("grpc_tools")
    from star.rpc.generate import out_of_date

    assert out_of_date() == [], "run `python -m star.rpc.generate` and commit the result"
