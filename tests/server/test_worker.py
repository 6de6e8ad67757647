"""The analysis worker: a costly computation runs in a child process that is killed past
its memory or time limit, with a 4xx naming the limit, and the server process itself
does not grow."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from hpcopt_server.errors import InvalidArgument
from hpcopt_server.service.worker import rss_mb, run_limited


def total(n: int) -> float:
    return float(np.arange(n).sum())


def hog(gigabytes: float) -> int:
    block = np.ones(int(gigabytes * 2**30 / 8))  # every page touched
    return int(block.size)


def dawdle(seconds: float) -> str:
    time.sleep(seconds)
    return "late"


def test_a_computation_answers_from_its_worker() -> None:
    assert run_limited("sum", total, 1000) == 499500.0


def test_a_computation_past_the_memory_limit_is_killed_and_refused_naming_the_limit() -> None:
    before = rss_mb(os.getpid())
    with pytest.raises(InvalidArgument, match="analysis memory limit of 200 MB") as err:
        run_limited("hog", hog, 2.0, memory_mb=200)
    assert err.value.errors == [("memory", "at most 200 MB per analysis")]
    assert rss_mb(os.getpid()) - before < 100  # the 2 GB were never the server's
    assert run_limited("sum", total, 10) == 45.0  # the next one runs


def test_a_computation_past_the_time_limit_is_killed_and_refused_naming_the_limit() -> None:
    with pytest.raises(InvalidArgument, match="analysis time limit of 1 s"):
        run_limited("dawdle", dawdle, 60.0, seconds=1.0)
