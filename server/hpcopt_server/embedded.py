"""The embedded mode: the server's service layer in your own process, on a SQLite file,
with no server, no ports and no threads left behind.

    from hpcopt_server import Study

    with Study("quadratic.db", spec) as study:          # spec: the same spec a server takes
        study.optimize(lambda trial: (trial.params["x"] - 2) ** 2)
        print(study.best_trial.value, study.best_trial.params)

``Study.client`` is an ordinary :class:`hpcopt.Client` whose calls are answered in this
process by the same servicers a server runs (:class:`LocalChannel`): the same checks,
transactions, optimizers, pruners and typed records, only without the socket. The file
can later be served (``hpcopt-server serve --db sqlite:///quadratic.db``) to open the
dashboard or attach MPI agents to the same campaign.

Decisions, written down:

- It lives in the server distribution (``hpcopt-server``), because it is the server: the
  client distribution stays free of SQLAlchemy and never imports the server.
- ``Study(path, spec)`` reopens the newest campaign of the file with the same name and
  the same spec (a script run again continues its campaign), else creates one, in one
  transaction under a lock on the name: processes that open one file with one spec at
  the same moment share one campaign and its budget.
- Several processes may open one file. Creating or upgrading its schema runs in one
  transaction that holds the file's write lock from its start (the others wait for it,
  then find the schema at head: ``storage/migrations/env.py``).
- ``ask()`` waits while other processes hold the campaign's ``max_parallel`` trials (as
  an agent does), up to ``timeout`` seconds (``None``: as long as it takes), and then
  raises ``TimeoutError`` saying so. It raises ``RuntimeError`` at once when this
  process itself holds them all (tell one first) or the campaign is PAUSED.
- A trial held by a process that died is requeued when its lease expires, as on a
  server: a Study requeues expired leases when it opens and when it finds none free.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from hpcopt import ActiveTrial, ApiError, Campaign, CampaignSpec, Client, Trial
from hpcopt.asktell import Session
from hpcopt.core.specfile import load_spec_file
from hpcopt.errors import TrialPruned
from hpcopt_server.errors import ServiceError
from hpcopt_server.local import LocalServer
from hpcopt_server.operations import AGENT_SERVICE, CAMPAIGN_SERVICE
from hpcopt_server.rpc.auth import bearer, scope_for
from hpcopt_server.rpc.errors import CODES
from hpcopt_server.rpc.servicers import AgentServicer, CampaignServicer
from hpcopt_server.service import Service
from hpcopt_server.service.campaigns import validate_spec

log = logging.getLogger("hpcopt.study")

__all__ = ["LocalChannel", "Study", "TrialPruned"]

_HEALTH = "/grpc.health.v1.Health/Check"


class LocalRpcError(grpc.RpcError):
    """What a servicer's ``context.abort`` raises in process: read as the client reads a
    failed call off the wire (code, details, the field errors in trailing metadata)."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(details)
        self._code, self._details, self._trailing = code, details, tuple(trailing)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


class _Context:
    """The part of ``grpc.ServicerContext`` the servicers use."""

    def __init__(self, metadata: Sequence[tuple[str, str]] | None) -> None:
        self._metadata = tuple(metadata or ())
        self._trailing: tuple[tuple[str, str], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        self._trailing = tuple(metadata)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise LocalRpcError(code, details, self._trailing)


class LocalChannel:
    """A channel whose unary calls the servicers of ``service`` answer in this process.
    The generated stubs take it as they take a ``grpc.Channel``; the token check the
    server's interceptor makes is made here, per call."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._servicers: dict[str, Any] = {
            CAMPAIGN_SERVICE: CampaignServicer(service),
            AGENT_SERVICE: AgentServicer(service),
        }

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        if method == _HEALTH:
            return lambda request, **kw: health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
        prefix, name = method.rsplit("/", 1)
        servicer = self._servicers.get(prefix + "/")
        handler = getattr(servicer, name, None)
        needed = scope_for(method)
        tokens = self._service.tokens

        def call(request: Any, metadata: Sequence[tuple[str, str]] | None = None, **_: Any) -> Any:
            if handler is None:
                raise LocalRpcError(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not answered in the embedded mode")
            if needed is not None and tokens.enabled():
                try:
                    tokens.authorize(bearer(metadata), needed)
                except ServiceError as exc:
                    raise LocalRpcError(CODES[type(exc)], exc.message) from None
            return handler(request, _Context(metadata))

        return call

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        """No call of ours streams; a stub's constructor asks for one (health's Watch)."""

        def call(*_: Any, **__: Any) -> Any:
            raise LocalRpcError(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not answered in the embedded mode")

        return call

    def close(self) -> None:
        """Nothing to close: the storage is the Study's."""


class Where:
    """The database of a study: a URL (``sqlite:///f.db``, ``postgresql://...``), a file
    path, or ``None``/``":memory:"``: a SQLite file in memory (``/dev/shm`` where there is
    one, else the temporary folder) removed when the study closes. That is the same
    storage as a file (its locks, its pool, several threads), nothing kept; SQLite's own
    ``:memory:`` is one database per connection."""

    def __init__(self, storage: Any) -> None:
        self.scratch: Path | None = None
        if storage is None or storage in (":memory:", "sqlite://", "sqlite:///:memory:"):
            shm = Path("/dev/shm")
            self.scratch = Path(tempfile.mkdtemp(prefix="hpcopt-study-", dir=shm if shm.is_dir() else None))
            self.url, self.path = f"sqlite:///{self.scratch / 'study.db'}", ":memory:"
        elif isinstance(storage, str | Path):
            text = str(storage)
            self.url = text if "://" in text else f"sqlite:///{Path(text).expanduser()}"
            self.path = text
        else:
            raise TypeError(
                f"storage={type(storage).__name__}(...): give a database URL (sqlite:///f.db, postgresql://...), a "
                "file path, or None for memory (see docs/getting-started/from-optuna.md)"
            )

    def close(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def _document(spec: CampaignSpec | Mapping[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(spec, str | Path):
        spec = load_spec_file(spec)
    if isinstance(spec, CampaignSpec):
        return spec.model_dump(mode="json")
    return dict(spec)


class Study:
    """One campaign of a SQLite file, served in this process.

    ``Study(path, spec)`` opens (creating the file and its schema when missing) and
    reopens the newest campaign of that name and spec, or creates one;
    ``Study(path, campaign=ID)`` opens an existing campaign; ``Study(path)`` the file's
    only campaign. ``path`` may be a database URL, or ``":memory:"`` (:class:`Where`).
    ``token``: when the file's server has auth on, a token with the ``agent`` and
    ``submit`` scopes.
    """

    def __init__(
        self,
        path: str | Path = "hpcopt.db",
        spec: CampaignSpec | Mapping[str, Any] | str | Path | None = None,
        *,
        campaign: int | None = None,
        token: str | None = None,
    ) -> None:
        self._start(Where(path), token)
        try:
            self.campaign_id = self._open(spec, campaign)
            self.service.reaper.reap()  # a trial a dead process held goes back to the queue
        except BaseException:
            self._server.close()
            self._where.close()
            raise

    def _start(self, where: Where, token: str | None, pool_size: int = 2) -> None:
        """The storage, the service and the in-process client (no campaign yet)."""
        self._where, self.path = where, where.path
        try:
            self._server = LocalServer.open(where.url, pool_size=pool_size)
        except BaseException:
            where.close()
            raise
        self.service = self._server.service
        #: An ordinary client, answered in this process: every ``hpcopt.Client`` call works.
        self.client = Client(f"embedded:{self.path}", token, channel=LocalChannel(self.service))
        self._token = token
        self._session: Session | None = None
        self._held: dict[int, ActiveTrial] = {}

    def _open(self, spec: CampaignSpec | Mapping[str, Any] | str | Path | None, campaign: int | None) -> int:
        if campaign is not None:
            if spec is not None:
                raise ValueError("Study() takes a spec or campaign=ID, not both")
            return self.client.get_campaign(campaign).id
        listed = self.client.list_campaigns()
        if spec is None:
            if len(listed) != 1:
                names = ", ".join(f"{c.id} {c.name!r}" for c in listed[:10]) or "none"
                raise ValueError(
                    f"{self.path} holds {len(listed)} campaigns ({names}): give a spec, or campaign=ID to open one"
                )
            return listed[0].id
        document = _document(spec)
        try:
            validate_spec(document)
            token = self.service.tokens.authorize(self._token, "submit")
        except ServiceError:
            return self.client.create_campaign(document).id  # it answers with the field errors (or the token's)
        found, created = self.service.campaigns.reopen_or_create(document, token)
        if not created:
            log.info("reopening campaign %d %r of %s", found.id, found.name, self.path)
        return found.id

    # -- ask/tell ---------------------------------------------------------------------

    def ask(self, timeout: float | None = None) -> ActiveTrial | None:
        """The next trial, held under a lease until it is told; None once the campaign's
        budget is spent (or it was cancelled). While other processes hold the campaign's
        ``max_parallel`` trials it waits for one to be told, at most ``timeout`` seconds
        (None: as long as it takes), then raises ``TimeoutError``. Raises
        ``RuntimeError`` at once when this process holds them all itself, or the
        campaign is PAUSED."""
        if self._session is None:
            self._session = Session(self.client.agent(), self.campaign_id, version="hpcopt-embedded")
        deadline = None if timeout is None else time.monotonic() + timeout
        waited_since = 0.0
        while True:
            got = self._session.acquire()
            if isinstance(got, float) and self.service.reaper.reap():
                got = self._session.acquire()
            if not isinstance(got, float):
                break
            campaign = self.client.get_campaign(self.campaign_id)
            if campaign.state == "PAUSED":
                raise RuntimeError(
                    f"campaign {self.campaign_id} is PAUSED: it hands out no trial until it is resumed (hpcopt resume "
                    f"{self.campaign_id}, or Resume in the dashboard); why: {campaign.pause_reason or 'paused'}"
                )
            limit = int(((campaign.spec or {}).get("budget") or {}).get("max_parallel") or 0)
            mine = sum(not t.ended for t in self._held.values())
            if limit and mine >= limit:
                raise RuntimeError(
                    f"campaign {self.campaign_id}: this process holds all {limit} of its max_parallel trials, "
                    "asked and not told; tell() one first"
                )
            now = time.monotonic()
            if not waited_since:
                waited_since = now
                log.info(
                    "campaign %d: other processes hold %d of its %d max_parallel trials; waiting for one to be told",
                    self.campaign_id,
                    campaign.trial_counts.get("RUNNING", 0) - mine,
                    limit,
                )
            if deadline is not None and now >= deadline:
                raise TimeoutError(
                    f"campaign {self.campaign_id}: other processes held its max_parallel ({limit}) trials for "
                    f"{now - waited_since:.0f} s (ask(timeout={timeout:g})); none was told in time"
                )
            time.sleep(max(0.05, min(got, 1.0) if deadline is None else min(got, 1.0, deadline - now)))
        if got is not None:
            self._held[got.id] = got
        return got

    def tell(
        self,
        trial: ActiveTrial,
        value: float | Sequence[float] | Mapping[str, float] | None = None,
        *,
        state: str = "COMPLETED",
        reason: str = "",
        constraints: Sequence[float] | Mapping[str, float] | None = None,
    ) -> Trial | None:
        """Ends an asked trial. ``value``: a number, the K values of a K-fold campaign, or
        a mapping of metrics holding the objective's (a multi-objective campaign's
        objectives). ``state``: COMPLETED (the default), PRUNED, FAILED, or PREEMPTED
        (given back: asked again later). ``constraints``: Optuna's constraint values
        (<= 0 holds), a list or by name (:meth:`constrain`). The completed trial, or
        None for the others."""
        try:
            if trial.ended:  # the server pruned it, the campaign was cancelled, or already told
                return None
            kind = state.upper()
            if kind == "COMPLETED":
                if constraints is not None:
                    told = self.constrain(trial, constraints)
                    value = {**self._as_metrics(value), **told}
                return self._complete(trial, value)
            if kind == "PRUNED":
                trial.prune(reason or "pruned by the objective")
            elif kind == "FAILED":
                trial.fail(reason or "failed")
            elif kind == "PREEMPTED":
                trial.give_back(reason or "given back")
            else:
                raise ValueError(f"state: {state!r} is not COMPLETED, PRUNED, FAILED or PREEMPTED")
            return None
        finally:
            if trial.ended:
                self._held.pop(trial.id, None)
                trial.close()

    def constrain(self, trial: ActiveTrial, values: Sequence[float] | Mapping[str, float]) -> dict[str, float]:
        """Optuna's constraints on the campaign's model: each value (<= 0 holds; a list's
        ``i``-th is ``constraint_i``, a mapping's ``key`` is ``constraint_key``) is a
        metric the campaign bounds at ``max: 0`` (``hpcopt.core.constraints``). A bound
        the campaign lacks is added while no trial has ended, as the space grows; after
        that a new one is refused. The metrics to tell with the trial."""
        named = values.items() if isinstance(values, Mapping) else enumerate(values)
        told = {f"constraint_{k}": float(v) for k, v in named}
        for name, v in told.items():
            if not math.isfinite(v):
                raise ValueError(f"constraints: {name} is {v}; a finite number is needed (<= 0 holds)")
        have = {c["metric"] for c in self.spec.get("constraints") or ()}
        new = [name for name in told if name not in have]
        missing: list[dict[str, Any]] = [{"metric": name, "max": 0.0} for name in new]
        if missing:
            lease = trial.lease
            grown = self.service.growth.grow(trial.id, lease.agent_id, lease.lease_id, {}, {}, missing)
            if not grown:
                raise ValueError(
                    f"constraints: {', '.join(new)} is not one of the campaign's constraints, "
                    "and they are fixed once a trial has ended; give every constraint from the first trial on (or in "
                    "the spec: constraints: [{metric: constraint_0, max: 0}])"
                )
        return told

    def _as_metrics(self, value: float | Sequence[float] | Mapping[str, float] | None) -> dict[str, float]:
        """A told value as metrics (the objective's metric holding it)."""
        if isinstance(value, Mapping):
            return {str(k): float(v) for k, v in value.items()}
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"the objective returned {value!r}: with constraints, a number (or metrics) is needed")
        metric = str((self.spec.get("objective") or {}).get("metric", "value"))
        return {metric: float(value)}

    def _complete(self, trial: ActiveTrial, value: float | Sequence[float] | Mapping[str, float] | None) -> Trial:
        if isinstance(value, Mapping):
            metric = str((self.spec.get("objective") or {}).get("metric", "value"))
            if metric not in value:
                raise ValueError(f"the objective's metric {metric!r} is not among the values returned ({list(value)})")
            metrics = {k: float(v) for k, v in value.items() if k != metric}
            return trial.complete(float(value[metric]), metrics=metrics)
        if isinstance(value, list | tuple):
            return trial.complete(folds=[float(v) for v in value])
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"the objective returned {value!r}: a number (or the K fold values) is needed")
        return trial.complete(float(value))

    def optimize(
        self,
        objective: Callable[[ActiveTrial], Any],
        n_trials: int | None = None,
        *,
        catch: Iterable[type[BaseException]] = (),
        progress: bool = False,
    ) -> None:
        """Runs ``objective(trial)`` on asked trials until the campaign's budget is spent
        or ``n_trials`` were run. It returns what ``tell`` takes; it may call
        ``trial.report(step, value)`` (False: pruned, stop) or raise
        ``hpcopt.TrialPruned``. An exception of ``catch`` fails the trial and the loop
        goes on; any other fails it and is raised (Ctrl-C gives the trial back)."""
        caught = tuple(catch)
        done, t0 = 0, time.monotonic()
        while n_trials is None or done < n_trials:
            trial = self.ask()
            if trial is None:
                return
            done += 1
            try:
                result = objective(trial)
            except TrialPruned as exc:
                self.tell(trial, state="PRUNED", reason=str(exc))
                continue
            except KeyboardInterrupt:
                self.tell(trial, state="PREEMPTED", reason="interrupted (Ctrl-C)")
                raise
            except Exception as exc:
                self.tell(trial, state="FAILED", reason=f"{type(exc).__name__}: {exc}"[:1000])
                if isinstance(exc, caught):
                    log.warning("trial #%d failed: %s: %s", trial.number, type(exc).__name__, exc)
                    continue
                raise
            if not trial.ended and (result is None or (isinstance(result, float) and not math.isfinite(result))):
                self.tell(trial, state="FAILED", reason=f"the objective returned {result!r}")
                continue
            self.tell(trial, result)
            if progress:
                best = self._best_value()
                print(f"trial #{trial.number} done ({done} in {time.monotonic() - t0:.1f} s); best {best}", flush=True)

    # -- results ----------------------------------------------------------------------

    @property
    def campaign(self) -> Campaign:
        """The campaign now (state, counts, best value, spec)."""
        return self.client.get_campaign(self.campaign_id)

    @property
    def spec(self) -> dict[str, Any]:
        return self.campaign.spec or {}

    @property
    def best_trial(self) -> Trial:
        """The best completed trial (``ApiError`` NOT_FOUND before one completed)."""
        return self.client.get_best_trial(self.campaign_id)

    @property
    def best_params(self) -> dict[str, Any]:
        return dict(self.best_trial.params)

    @property
    def best_value(self) -> float | None:
        return self.best_trial.value

    @property
    def trials(self) -> list[Trial]:
        """Every trial, typed records in the order they were created."""
        return sorted(self.client.list_trials(self.campaign_id), key=lambda t: t.number)

    def trials_dataframe(self) -> Any:
        """The trials as a pandas DataFrame (``hpcopt[pandas]``)."""
        return self.client.trials_dataframe(self.campaign_id)

    def _best_value(self) -> str:
        try:
            return f"{self.best_trial.value:.6g}"
        except ApiError:
            return "none yet"

    # -- the end ----------------------------------------------------------------------

    def close(self) -> None:
        """Gives back trials asked and not told (requeued), ends the registration and
        closes the file. Nothing of the Study runs after it."""
        for trial in list(self._held.values()):
            if not trial.ended:
                try:
                    trial.give_back("the study was closed before the trial was told")
                except ApiError as exc:
                    log.warning("trial #%d: could not give it back (%s)", trial.number, exc)
            trial.close()
        self._held.clear()
        if self._session is not None:
            try:
                self._session.close("the study was closed")
            except ApiError as exc:
                log.warning("could not end the study's registration: %s", exc)
            self._session = None
        self.service.ctx.optimizers.settle()  # a GP refit in its thread ends before we do
        self._server.close()
        self._where.close()

    def __enter__(self) -> Study:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Study({self.path!r}, campaign={self.campaign_id})"
