"""DASO's compressed global sync (``schemes/daso_powersgd.py``) in one process (gloo,
world size 1, so the channel's mean move is this rank's): exact at full rank, what a
low rank leaves out sent at the next exchange (and not twice), and its state a
checkpoint keeps as plain tensors that give the same next exchange."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from hpcopt_agent.checkpoint import plain
from hpcopt_agent.schemes.daso_powersgd import WeightsPowerSGD

SHAPES = [torch.Size([32, 48]), torch.Size([32]), torch.Size([10, 32])]


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path = Path(tmp_path_factory.mktemp("pg")) / "store"
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    yield None
    dist.destroy_process_group()


def _exchange(c: WeightsPowerSGD, weights: torch.Tensor) -> torch.Tensor:
    buffer, work = c.start(weights, None)
    work.wait()
    return c.finish(buffer, None, 1).clone()


def _weights(seed: int) -> torch.Tensor:
    return torch.randn(sum(s.numel() for s in SHAPES), generator=torch.Generator().manual_seed(seed))


def test_at_full_rank_the_mean_is_exact_and_at_a_low_rank_the_rest_is_carried(group: None) -> None:
    start, moved = _weights(0), _weights(1)
    full = WeightsPowerSGD(SHAPES, rank=64)
    full.agree(start)
    assert torch.allclose(_exchange(full, moved), moved, atol=1e-5)
    low = WeightsPowerSGD(SHAPES, rank=2)
    low.agree(start)
    first = _exchange(low, moved)
    assert not torch.allclose(first, moved, atol=1e-3)  # rank 2 of a 32 x 48 move: lossy
    assert low.ref is not None and torch.equal(low.ref, first)  # the reference moved by what was sent
    # The bias (a vector) went in full.
    at = SHAPES[0].numel()
    assert torch.allclose(first[at : at + 32], moved[at : at + 32], atol=1e-6)
    # Repeated exchanges of the same weights converge on them (error feedback).
    for _ in range(30):
        last = _exchange(low, moved)
    assert float((last - moved).abs().max()) < float((first - moved).abs().max()) / 10


def test_the_state_a_checkpoint_keeps_gives_the_same_next_exchange(group: None) -> None:
    a = WeightsPowerSGD(SHAPES, rank=3)
    a.agree(_weights(0))
    for seed in (1, 2):
        _exchange(a, _weights(seed))
    blob = io.BytesIO()
    torch.save(plain(a.state()), blob)
    blob.seek(0)
    b = WeightsPowerSGD(SHAPES, rank=3)
    b.load_state(torch.load(blob, weights_only=True))  # plain data: nothing unpickled
    fresh = WeightsPowerSGD(SHAPES, rank=3)
    assert a.ref is not None
    fresh.agree(a.ref)
    nxt = _weights(3)
    want = _exchange(a, nxt)
    assert torch.equal(_exchange(b, nxt), want)
    assert not torch.equal(_exchange(fresh, nxt), want)  # without the saved factors: another result
