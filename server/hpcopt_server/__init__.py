"""hpcopt-server: the optimization server, and ``Study``, the same service layer embedded
in your own process on a SQLite file (``hpcopt_server.embedded``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcopt_server.embedded import Study, TrialPruned

__all__ = ["Study", "TrialPruned"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the server's own commands need none of it at start-up.
    if name in __all__:
        from hpcopt_server import embedded

        return getattr(embedded, name)
    raise AttributeError(f"module 'hpcopt_server' has no attribute {name!r}")
