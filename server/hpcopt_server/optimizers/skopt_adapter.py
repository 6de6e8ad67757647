"""``algorithm: skopt``: scikit-optimize's ``Optimizer`` (GP, EI) behind our interface,
for users who want the reference implementation of the seed slides. Needs the
``skopt`` extra on the server (``pip install hpcopt-server[skopt]``).

Pending trials are handed to skopt as constant liars at the best value seen
(``cl_min``), the strategy skopt itself uses for ``ask(n_points=...)``. Options are
passed to ``skopt.Optimizer`` (for example ``acq_func``, ``n_initial_points``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hpcopt_server import domain as d
from hpcopt_server.optimizers.base import Optimizer, Problem, to_minimize


class SkoptOptimizer(Optimizer):
    def __init__(self, problem: Problem):
        super().__init__(problem)
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
        kwargs = {"base_estimator": "GP", "acq_func": "EI", "random_state": self.seed, **self.options}
        try:
            self._opt = skopt.Optimizer(dims, **kwargs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"options: skopt.Optimizer refused them: {exc}") from None
        self._names = [dim.name for dim in self.space.dims]
        self._seen = 0

    def _point(self, params: d.Params) -> list[Any]:
        return [params[n] for n in self._names]

    def observe(self, trials: Sequence[d.Trial]) -> None:
        xs, ys = [], []
        self._seen += len(trials)
        for t in trials:
            loss = to_minimize(t, self.direction)
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
        return [dict(zip(self._names, (_plain(v) for v in p), strict=True)) for p in points]


def _plain(v: Any) -> d.ParamValue:
    """numpy scalars to Python ones (they go to JSON)."""
    return v.item() if hasattr(v, "item") else v
