"""Every error hpcopt raises on purpose, under one base class, so that a script can
write ``except hpcopt.Error``. The shape is Optuna's ``exceptions.py``: the classes live
here, and the modules that raise them import them. Each keeps the built-in base it had
(``ValueError`` for bad input, ``RuntimeError`` for a stopped trial), so code that
caught those still catches them.

- :class:`ApiError`: the server refused or failed a call (``code`` is the gRPC status).
- :class:`SpecError`, :class:`DocumentError`, :class:`OptionError`: input that cannot
  be accepted, naming the field.
- :class:`ServerFileError`: a connection file that is missing, unreadable, untrusted
  or not one of ours.
- :class:`CheckpointRefused`: a checkpoint URI or file that is not accepted.
- :class:`PlanError`: input the planner cannot use.
- :class:`TrialStopped`: the trial is over for this script.
- :class:`TrialPruned`: raised by an objective to end its trial as PRUNED."""

from __future__ import annotations


class Error(Exception):
    """The base of every error hpcopt raises on purpose."""


class ApiError(Error):
    """A failed call: ``code`` is the gRPC status name (``"INVALID_ARGUMENT"``, ...)."""

    def __init__(self, code: str, message: str, field_errors: list[dict[str, str]] | None = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.field_errors = field_errors or []


class DocumentError(Error, ValueError):
    """A document that cannot be accepted; ``errors`` lists ``(field path, message)``."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{path}: {msg}" if path else msg for path, msg in errors))


class SpecError(Error, ValueError):
    """A spec that does not validate; ``errors`` lists ``(field path, message)``."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{path}: {msg}" if path else msg for path, msg in errors))


class OptionError(Error, ValueError):
    """A value (or a layout) that cannot work; ``field`` names where it was given."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class ServerFileError(Error, ValueError):
    """A connection file that is missing, unreadable or not one of ours."""


class CheckpointRefused(Error, ValueError):
    """A checkpoint URI (or file) that is not accepted; the message says why."""


class PlanError(Error, ValueError):
    """Input the planner cannot use; the message names the field or flag."""


class TrialStopped(Error, RuntimeError):
    """The trial is over for this script (completed, failed, pruned, cancelled or its lease
    lost); ``reason`` says which."""

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(f"trial #{number} is over for this script: {reason}")
        self.number = number
        self.reason = reason


class TrialPruned(Error):
    """Raised by an objective run by ``Study.optimize`` to end its trial as PRUNED."""
