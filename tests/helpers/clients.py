"""The tests' own gRPC clients, ``Client`` and ``AgentClient``, whose deadline when a
test gives none (30 s a call) the machine's load stretches, as it stretches pytest's
limits (:func:`tests.helpers.env.timeout_scale`). A timeout a test gives is written
``scaled(seconds)`` (``tests/test_house.py`` holds it)."""

from __future__ import annotations

from typing import Any

import hpcopt
from tests.helpers.env import scaled

#: A gRPC call's deadline, in seconds as written, when the test gives none.
GRPC_TIMEOUT = 30.0


class Client(hpcopt.Client):
    def __init__(
        self, target: str | None = None, token: str | None = None, timeout: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(target, token, scaled(GRPC_TIMEOUT) if timeout is None else timeout, **kwargs)


class AgentClient(hpcopt.AgentClient):
    def __init__(
        self, target: str | None = None, token: str | None = None, timeout: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(target, token, scaled(GRPC_TIMEOUT) if timeout is None else timeout, **kwargs)
