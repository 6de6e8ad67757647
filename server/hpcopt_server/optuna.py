"""Optuna's API on the embedded mode: an objective that defines its space as it runs.

Optuna's quick start runs with one line changed, its import::

    from hpcopt_server import optuna

    def objective(trial):
        x = trial.suggest_float("x", -10, 10)
        return (x - 2) ** 2

    study = optuna.create_study()
    study.optimize(objective, n_trials=100)
    print(study.best_params)

Underneath is an hpcopt campaign in a SQLite file (``storage="sqlite:///f.db"``) or in
memory (the default, as Optuna's): every trial is in SQL before ``optimize`` moves on,
and the file can be served to the dashboard or to agents later.

Decisions, written down (the docs page "Tune in one process (from Optuna)" says them
to users):

- **The space grows while the first trial runs.** hpcopt's optimizers model a declared
  space, so the campaign is created at the objective's first ``suggest_*`` call, and
  each new name is added to its space until any trial has ended
  (``service/growing.py``). From then on the space is fixed: a name first seen later,
  or a name suggested with another distribution than the space's, is sampled
  independently (uniformly, seeded by the study's seed, the trial's number and the
  name) and kept with the trial as a ``params_outside_space`` event, which
  ``trial.params``, ``best_params`` and ``trials`` show. This is Optuna's rule for
  parameters outside its intersection search space; the intersection is here the space
  the first trial defined.
- **The algorithm is a name, not an object**: ``create_study(algorithm="bo")`` (default
  ``random``, also ``sobol``, ``ea``, ``skopt``); an Optuna sampler object is refused
  with a ``TypeError`` that says so. ``pruner="median"`` (or ``asha``) likewise.
- ``trial.report(value, step)`` and ``trial.should_prune()`` keep Optuna's order and
  meaning (the native ``Study`` hands objectives an ``hpcopt.ActiveTrial`` whose
  ``report(step, value)`` answers instead).
- ``n_jobs=N`` runs N threads, each asking, running and telling its own trial; the
  study's calls into SQL are serialized (objectives run in parallel).
- ``suggest_int(step=...)`` and ``suggest_float(step=...)`` with a step other than 1
  (None for floats) are refused: hpcopt's integer parameters step by 1.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import secrets
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from hpcopt import ActiveTrial, ApiError
from hpcopt import Trial as Record
from hpcopt.errors import TrialPruned
from hpcopt_server.embedded import Study as _Embedded
from hpcopt_server.embedded import Where

log = logging.getLogger("hpcopt.study")

__all__ = ["Study", "Trial", "TrialPruned", "create_study", "delete_study", "load_study"]

#: The budget of a define-by-run study: ``optimize(n_trials=...)`` says how many to run now.
BUDGET = 1_000_000
DOCS = "docs/getting-started/from-optuna.md"
OUTSIDE = "params_outside_space"


def _refuse(what: str, value: Any, names: str) -> None:
    if value is not None and not isinstance(value, str):
        raise TypeError(
            f"{what}={type(value).__name__}(...): hpcopt's {what}s run inside its service, so they are chosen by "
            f"name ({names}), not passed as objects (see {DOCS})"
        )


def _direction(direction: Any, directions: Any) -> str:
    if directions is not None:
        raise ValueError(
            "directions=: a define-by-run study has one objective; for several give a spec with `objectives` to "
            f"hpcopt_server.Study (see {DOCS})"
        )
    text = getattr(direction, "name", direction) or "minimize"  # optuna.study.StudyDirection too
    text = str(text).lower()
    if text not in ("minimize", "maximize"):
        raise ValueError(f"direction: must be 'minimize' or 'maximize', got {direction!r}")
    return text


class Trial:
    """One trial as an Optuna objective sees it: ``suggest_*``, ``report``,
    ``should_prune``, ``params``, ``number``, ``user_attrs``."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self.active: ActiveTrial | None = None
        #: Values suggested so far, in the order asked.
        self.values: dict[str, Any] = {}
        #: Of them, those outside the campaign's space (kept as an event at the end).
        self.outside: dict[str, Any] = {}
        self.user_attrs: dict[str, Any] = {}
        #: Optuna 5's ``trial.set_constraint``: told with the result (<= 0 holds).
        self.constraints: dict[str, float] = {}
        self._pruned = False

    @property
    def number(self) -> int:
        if self.active is None and self.study.campaign_id is None:
            return 0  # the trial that defines a new study's space is its campaign's first
        return self.study._held_by(self).number

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.values)

    # -- the space, as the objective runs ----------------------------------------------

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        if step is not None:
            raise ValueError(
                f"suggest_float({name!r}, step={step}): hpcopt's real parameters have no step; suggest an int and "
                f"scale it, or a categorical (see {DOCS})"
            )
        spec = {"type": "real", "low": float(low), "high": float(high), "scale": "log" if log else "linear"}
        return float(self._suggest(name, spec))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        if step != 1:
            raise ValueError(
                f"suggest_int({name!r}, step={step}): hpcopt's integer parameters step by 1; suggest "
                f"k in [0, {(int(high) - int(low)) // max(1, step)}] and use {low} + {step} * k (see {DOCS})"
            )
        spec = {"type": "int", "low": int(low), "high": int(high), "scale": "log" if log else "linear"}
        return int(self._suggest(name, spec))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._suggest(name, {"type": "categorical", "choices": list(choices)})

    # Optuna's older names.
    def suggest_uniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high)

    def suggest_loguniform(self, name: str, low: float, high: float) -> float:
        return self.suggest_float(name, low, high, log=True)

    def _suggest(self, name: str, spec: dict[str, Any]) -> Any:
        if name in self.values:
            return self.values[name]
        value = self.study._suggest(self, name, spec)
        self.values[name] = value
        return value

    # -- reports ---------------------------------------------------------------------------

    def report(self, value: float, step: int) -> None:
        """Optuna's order: the intermediate value, then the step (an epoch)."""
        active = self.study._held_by(self)
        with self.study._lock:
            if not active.ended and not active.report(int(step), float(value)):
                self._pruned = True

    def should_prune(self) -> bool:
        """True once the campaign's pruner stopped the trial (raise ``TrialPruned``)."""
        return self._pruned or bool(self.study._held_by(self).ended)

    def set_constraint(self, key: str, value: float) -> None:
        """Optuna 5's constraint: ``value`` <= 0 holds. Told with the result as the
        campaign's ``constraint_<key>``, bounded at 0 (``Study.constrain``)."""
        self.constraints[str(key)] = float(value)

    def set_user_attr(self, key: str, value: Any) -> None:
        """Kept in this process (``trial.user_attrs``); hpcopt keeps metrics with the
        trial when the objective returns a dict of them."""
        self.user_attrs[key] = value


class Study(_Embedded):
    """A define-by-run study over one campaign, made by :func:`create_study` or
    :func:`load_study`. The native ``hpcopt_server.Study`` methods work on it too."""

    def __init__(
        self,
        storage: Any,
        name: str,
        *,
        direction: str,
        algorithm: str,
        pruner: str | None,
        seed: int | None,
        campaign: int | None,
        constraints_func: Callable[[Trial], Sequence[float]] | None = None,
    ) -> None:
        self._start(Where(storage), None)
        self.constraints_func = constraints_func
        self.study_name = name
        self.direction_name = direction
        self.algorithm, self.pruner_name = algorithm, pruner
        self.seed = secrets.randbelow(2**31) if seed is None else int(seed)
        self.campaign_id: int | None = campaign  # type: ignore[assignment]
        self._lock = threading.RLock()
        self._space: dict[str, Any] = {}
        self._warned: set[str] = set()
        self._defining = threading.Condition()
        self._closed = False
        self._definer: int | None = None
        if campaign is not None:
            self.service.reaper.reap()
        # Optuna's scripts never close a study: at the interpreter's exit, trials asked and
        # not told go back, and a study in memory leaves no file.
        me = weakref.ref(self)

        def at_exit() -> None:
            study = me()
            if study is not None:
                study.close()

        self._at_exit = at_exit
        atexit.register(at_exit)

    # -- the campaign ----------------------------------------------------------------------

    def _spec(self, name: str, param: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "name": self.study_name,
            "objective": {"metric": "value", "direction": self.direction_name},
            "space": {name: param},
            "algorithm": {"name": self.algorithm, "seed": self.seed},
            "budget": {"max_trials": BUDGET, "max_parallel": 64},
        }
        if self.pruner_name:
            spec["pruner"] = {"name": self.pruner_name}
        return spec

    def _ensure(self, name: str, param: dict[str, Any]) -> int:
        if self.campaign_id is None:
            self.campaign_id = self._open(self._spec(name, param), None)
            self.service.reaper.reap()
        return self.campaign_id

    def _held_by(self, trial: Trial) -> ActiveTrial:
        with self._lock:
            if trial.active is None:
                if self.campaign_id is None:
                    raise RuntimeError(
                        "the trial has no number yet: the study's campaign is made at the objective's first suggest_*"
                    )
                trial.active = self._take()
            return trial.active

    def _take(self) -> ActiveTrial:
        got = self.ask()
        if got is None:
            raise RuntimeError(f"study {self.study_name!r}: its campaign hands out no more trials (budget spent)")
        return got

    def _known(self, name: str) -> dict[str, Any] | None:
        """The space's distribution of ``name``, read again from the campaign only when this
        process has not seen it (another process's study may have grown the space)."""
        if name not in self._space and self.campaign_id is not None:
            self._space = dict((self.client.get_campaign(self.campaign_id).spec or {})["space"])
        return self._space.get(name)

    def _suggest(self, trial: Trial, name: str, param: dict[str, Any]) -> Any:
        with self._lock:
            self._ensure(name, param)
            active = self._held_by(trial)
            known = self._known(name)
            if known == param and name in active.params:
                return active.params[name]
            value = self._sample(active.number, name, param)
            if known is None or known == param:
                lease = active.lease
                if self.service.growth.grow(active.id, lease.agent_id, lease.lease_id, {name: param}, {name: value}):
                    self._space[name] = param
                    active.params[name] = value
                    return value
            elif name not in self._warned:
                self._warned.add(name)
                log.warning(
                    "trial #%d: %s is suggested as %s, but the study's space has it as %s: sampled independently "
                    "(outside the optimizer's model)",
                    active.number,
                    name,
                    param,
                    known,
                )
            trial.outside[name] = value
            return value

    def _sample(self, number: int, name: str, param: dict[str, Any]) -> Any:
        """An independent uniform draw, the same for the same seed, trial and name."""
        import numpy as np

        rng = np.random.default_rng([self.seed, number, zlib.crc32(name.encode())])
        if param["type"] == "categorical":
            return param["choices"][int(rng.integers(len(param["choices"])))]
        low, high, log_scale = param["low"], param["high"], param["scale"] == "log"
        if param["type"] == "int":
            if log_scale:
                return int(min(high, max(low, round(math.exp(rng.uniform(math.log(low), math.log(high + 1)) - 0.5)))))
            return int(rng.integers(low, high + 1))
        if log_scale:
            return float(math.exp(rng.uniform(math.log(low), math.log(high))))
        return float(rng.uniform(low, high))

    # -- optimize ------------------------------------------------------------------------

    def optimize(  # type: ignore[override]
        self,
        func: Callable[[Trial], Any],
        n_trials: int | None = None,
        timeout: float | None = None,
        n_jobs: int = 1,
        catch: Iterable[type[Exception]] | type[Exception] = (),
        callbacks: Iterable[Callable[[Study, Record], None]] | None = None,
        gc_after_trial: bool = False,
        show_progress_bar: bool = False,
    ) -> None:
        """Runs ``func`` on new trials, ``n_trials`` of them (None: until ``timeout``
        seconds, or forever), in ``n_jobs`` threads (-1: one per core)."""
        del gc_after_trial, show_progress_bar
        caught = (catch,) if isinstance(catch, type) else tuple(catch)
        jobs = (os.cpu_count() or 1) if n_jobs == -1 else int(n_jobs)
        if jobs < 1:
            raise ValueError(f"n_jobs: must be >= 1 or -1, got {n_jobs}")
        deadline = None if timeout is None else time.monotonic() + timeout
        left = [n_trials]
        errors: list[BaseException] = []

        def take() -> bool:
            with self._lock:
                if errors or (deadline is not None and time.monotonic() >= deadline):
                    return False
                if left[0] is None:
                    return True
                if left[0] <= 0:
                    return False
                left[0] -= 1
                return True

        def work() -> None:
            while take():
                with self._defining:  # a new study's first trial defines its space alone
                    while self.campaign_id is None and self._definer not in (None, threading.get_ident()):
                        self._defining.wait()
                    if self.campaign_id is None:
                        self._definer = threading.get_ident()
                try:
                    record = self._run(func, caught)
                except BaseException as exc:
                    with self._lock:
                        errors.append(exc)
                    return
                finally:
                    with self._defining:
                        if self._definer == threading.get_ident():
                            self._definer = None
                        self._defining.notify_all()
                for callback in callbacks or ():
                    if record is not None:
                        callback(self, record)

        if jobs == 1:
            work()
        else:
            threads = [threading.Thread(target=work, name=f"hpcopt-optimize-{k}") for k in range(jobs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if errors:
            raise errors[0]

    def _run(self, func: Callable[[Trial], Any], caught: tuple[type[BaseException], ...]) -> Record | None:
        trial = Trial(self)
        if self.campaign_id is not None:
            self._held_by(trial)
        try:
            result = func(trial)
        except TrialPruned as exc:
            return self._end(trial, "PRUNED", str(exc) or "pruned by the objective")
        except KeyboardInterrupt:
            self._end(trial, "PREEMPTED", "interrupted (Ctrl-C)")
            raise
        except Exception as exc:
            ended = self._end(trial, "FAILED", f"{type(exc).__name__}: {exc}"[:1000])
            if isinstance(exc, caught):
                log.warning("trial failed: %s: %s", type(exc).__name__, exc)
                return ended
            raise
        if isinstance(result, bool) or not isinstance(result, int | float) or not math.isfinite(result):
            return self._end(trial, "FAILED", f"the objective returned {result!r}, not a finite number")
        return self._end(trial, "COMPLETED", "", float(result))

    def _end(self, trial: Trial, state: str, reason: str, value: float | None = None) -> Record | None:
        with self._lock:
            if trial.active is None and self.campaign_id is None:
                if state == "COMPLETED":
                    raise ValueError(
                        "the objective suggested no parameter: a define-by-run study learns its space from the "
                        f"objective's trial.suggest_* calls (see {DOCS})"
                    )
                return None
            active = self._held_by(trial)
            unused = sorted(set(active.params) - set(trial.values))
            if (trial.outside or unused) and not active.ended:
                kept = {"outside": trial.outside, "unused": unused}
                try:
                    active.event(OUTSIDE, json.dumps(kept, default=str))
                except ApiError as exc:
                    log.warning("trial #%d: could not keep its parameters outside the space: %s", active.number, exc)
            if trial._pruned and state == "COMPLETED":
                state, reason = "PRUNED", "pruned by the campaign's pruner"
            constraints: dict[str, float] = {}
            if state == "COMPLETED":
                constraints = dict(trial.constraints)
                if self.constraints_func is not None:
                    constraints.update((str(k), float(v)) for k, v in enumerate(self.constraints_func(trial)))
            done = self.tell(active, value, state=state, reason=reason, constraints=constraints or None)
            return done if done is not None else self.client.get_trial(active.id)  # pruned, failed: callbacks see it

    # -- results (Optuna's names) ----------------------------------------------------------

    def suggested(self, record: Record) -> dict[str, Any]:
        """The parameters the objective suggested in ``record`` (a trial read with
        ``client.get_trial``, which has its events): those of the space it asked for, and
        those it was given outside the space."""
        params = dict(record.params)
        for e in record.events:
            if e.kind == OUTSIDE:
                try:
                    kept = json.loads(e.reason[e.reason.index("{") :])
                except ValueError:
                    continue
                params = {k: v for k, v in params.items() if k not in kept.get("unused", ())}
                params.update(kept.get("outside") or {})
        return params

    @property
    def best_trial(self) -> Record:
        if self.campaign_id is None:
            raise ValueError(f"study {self.study_name!r}: no trial has completed yet")
        return super().best_trial

    @property
    def trials(self) -> list[Record]:
        return [] if self.campaign_id is None else super().trials

    @property
    def best_params(self) -> dict[str, Any]:
        return self.suggested(self.client.get_trial(self.best_trial.id))

    @property
    def best_value(self) -> float | None:
        return self.best_trial.value

    @property
    def direction(self) -> str:
        return self.direction_name

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        super().close()

    def __repr__(self) -> str:
        return f"optuna-style Study({self.study_name!r}, {self.path!r}, campaign={self.campaign_id})"


def create_study(
    storage: Any = None,
    sampler: Any = None,
    pruner: Any = None,
    study_name: str | None = None,
    direction: Any = None,
    load_if_exists: bool = False,
    *,
    directions: Any = None,
    algorithm: str = "random",
    seed: int | None = None,
    constraints_func: Callable[[Trial], Sequence[float]] | None = None,
) -> Study:
    """Optuna's ``create_study``: a define-by-run study in ``storage`` (a database URL, a
    file path, or None for memory). ``algorithm``/``sampler``: an hpcopt algorithm's name;
    ``pruner``: a pruner's name (``median``, ``asha``). ``constraints_func``: what
    Optuna's samplers take, here the study's: called with each trial that returned a
    value, it gives the trial's constraint values (<= 0 holds), the campaign's
    ``constraint_0``, ``constraint_1``, ... (as ``trial.set_constraint(key, v)`` gives
    ``constraint_<key>``)."""
    _refuse("sampler", sampler, "random, sobol, bo, ea, skopt: algorithm='bo'")
    _refuse("pruner", pruner, "median, asha: pruner='median'")
    if isinstance(sampler, str):
        algorithm = sampler
    name = study_name or f"no-name-{secrets.token_hex(8)}"
    study = Study(
        storage,
        name,
        direction=_direction(direction, directions),
        algorithm=algorithm,
        pruner=pruner,
        seed=seed,
        campaign=None,
        constraints_func=constraints_func,
    )
    try:
        found = [c for c in study.client.list_campaigns() if c.name == name]
        if found and not load_if_exists:
            raise ValueError(
                f"a study named {name!r} exists in {study.path} (campaign {found[-1].id}): pass load_if_exists=True "
                "to continue it, or another study_name"
            )
        if found:
            study.campaign_id = max(c.id for c in found)
            study.service.reaper.reap()
    except BaseException:
        study.close()
        raise
    return study


def load_study(*, study_name: str, storage: Any, sampler: Any = None, pruner: Any = None) -> Study:
    """Optuna's ``load_study``: the newest campaign named ``study_name`` in ``storage``."""
    study = create_study(storage, sampler, pruner, study_name, load_if_exists=True)
    if study.campaign_id is None:
        study.close()
        raise ValueError(f"no study named {study_name!r} in {storage}")
    return study


def delete_study(*, study_name: str, storage: Any) -> None:
    """Not done: a campaign's trials are kept; ``hpcopt cancel`` ends one."""
    raise NotImplementedError(
        f"delete_study({study_name!r}): hpcopt keeps every campaign's trials; cancel the campaign instead "
        f"(hpcopt cancel ID), or use another study_name (see {DOCS})"
    )
