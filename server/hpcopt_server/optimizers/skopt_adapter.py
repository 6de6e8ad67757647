"""``algorithm: skopt``: scikit-optimize's ``Optimizer`` (GP, EI) behind our interface,
for users who want the reference implementation of the seed slides. Needs the
``skopt`` extra on the server (``pip install hpcopt-server[skopt]``).

Pending trials are handed to skopt as constant liars at the best value seen
(``cl_min``), the strategy skopt itself uses for ``ask(n_points=...)``. Options are
passed to ``skopt.Optimizer``; only those of :attr:`SkoptOptimizer.OPTIONS`, with
bounds, since their cost is the server's (a value not given is skopt's default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from hpcopt.core.options import Option
from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import Optimizer, Problem, pruned_loss, to_minimize

CHOICES = {
    "base_estimator": ("GP", "RF", "ET", "GBRT"),
    "acq_func": ("EI", "PI", "LCB", "gp_hedge"),
    "acq_optimizer": ("auto", "sampling", "lbfgs"),
    "initial_point_generator": ("random", "sobol", "halton", "hammersly", "lhs"),
}
NESTED: dict[str, dict[str, tuple[type, float, float]]] = {
    "acq_func_kwargs": {"xi": (float, 0.0, 1e6), "kappa": (float, 0.0, 1e6)},
    "acq_optimizer_kwargs": {"n_points": (int, 1, 20_000), "n_restarts_optimizer": (int, 1, 20)},
}


class SkoptOptimizer(Optimizer):
    OPTIONS: ClassVar[dict[str, Option]] = {
        **{
            name: Option(None, str, choices=allowed, optional=True, derived="skopt's", doc=f"skopt.Optimizer's {name}")
            for name, allowed in CHOICES.items()
        },
        "n_initial_points": Option(
            None, int, 0, 10_000, optional=True, derived="skopt's", doc="skopt.Optimizer's n_initial_points"
        ),
        **{
            name: Option(
                None,
                dict,
                optional=True,
                derived="skopt's",
                doc=f"skopt.Optimizer's {name}: "
                + ", ".join(f"{k} ({kind.__name__}, {low:g}..{high:g})" for k, (kind, low, high) in keys.items()),
            )
            for name, keys in NESTED.items()
        },
    }

    def __init__(self, problem: Problem):
        super().__init__(problem)
        if problem.multi_objective:
            raise ValueError("options: skopt optimizes one objective; use bo or ea for objectives")
        try:
            import skopt
        except ImportError as exc:
            raise ImportError(
                "algorithm 'skopt' needs scikit-optimize on the server: pip install 'hpcopt-server[skopt]'"
            ) from exc
        dims: list[Any] = []
        for dim in self.space.dims:
            if dim.type == "categorical":
                dims.append(skopt.space.Categorical(list(dim.choices), name=dim.name))
            elif dim.type == "int":
                prior = "log-uniform" if dim.log else "uniform"
                dims.append(skopt.space.Integer(int(dim.low), int(dim.high), prior=prior, name=dim.name))
            else:
                prior = "log-uniform" if dim.log else "uniform"
                dims.append(skopt.space.Real(dim.low, dim.high, prior=prior, name=dim.name))
        kwargs = {"base_estimator": "GP", "acq_func": "EI", "random_state": self.seed, **self._checked_options()}
        try:
            self._opt = skopt.Optimizer(dims, **kwargs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"options: skopt.Optimizer refused them: {exc}") from None
        self._names = [dim.name for dim in self.space.dims]
        self._seen = 0

    def _checked_options(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: self.option(k) for k in [*CHOICES, "n_initial_points"]}
        out = {k: v for k, v in out.items() if v is not None}
        for name, allowed in NESTED.items():
            given = self.option(name) or {}
            if set(given) - set(allowed):
                raise ValueError(f"options.{name} must be a mapping with keys among {sorted(allowed)}")
            nested: dict[str, Any] = {}
            for key, (kind, low, high) in allowed.items():
                if key in given:
                    value = given[key]
                    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
                        raise ValueError(f"options.{name}.{key} must be a number in {low}..{high}")
                    nested[key] = kind(value)
            if nested:
                out[name] = nested
        if "acq_optimizer_kwargs" in out:
            out["acq_optimizer_kwargs"]["n_jobs"] = 1
        return out

    def _point(self, params: d.Params) -> list[Any]:
        full = self.space.complete(params)  # inactive parameters at a fixed value
        return [full[n] for n in self._names]

    def observe(self, trials: Sequence[d.Trial]) -> None:
        xs, ys = [], []
        self._seen += len(trials)
        for t in trials:
            # A pruned trial counts at the value it reached when it was stopped.
            loss = to_minimize(t, self.direction)
            loss = pruned_loss(t, self.direction) if loss is None else loss
            if loss is not None:
                xs.append(self._point(t.params))
                ys.append(loss)
        if xs:
            self._opt.tell(xs, ys)

    def suggest(self, n: int, pending: Sequence[d.Params]) -> list[d.Params]:
        import numpy as np

        opt = self._opt
        # skopt draws its random points from opt.rng: seed it by position, so a restarted
        # server does not replay the initial design.
        opt.rng = np.random.RandomState((self.seed + 7919 * (self._seen + len(pending))) % 2**32)
        if pending and opt.yi:
            opt = opt.copy(random_state=opt.rng)
            opt.tell([self._point(p) for p in pending], [min(opt.yi)] * len(pending))
        points = opt.ask(n_points=n) if n > 1 else [opt.ask()]
        return [self.space.active(dict(zip(self._names, (_plain(v) for v in p), strict=True))) for p in points]


def _plain(v: Any) -> d.ParamValue:
    """numpy scalars to Python ones (they go to JSON)."""
    return v.item() if hasattr(v, "item") else v
