"""The curvature numerics against their definitions, in one process: Lanczos's top
eigenvalues against the exact Hessian (``torch.autograd.functional.hessian``), SLQ's
quadrature against the exact spectrum, the surfaces against a second-order Taylor
expansion where that is exact, and the trajectory's projection. The same at 1, 2 and 4
ranks is ``curvature_check.py`` under mpiexec (``test_curvature_ranks.py``)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hpcopt.core.analysis import check, cost, planned_share, samples_for
from hpcopt.errors import OptionError
from hpcopt_agent.curvature import landscape as ls
from hpcopt_agent.curvature.analysis import analyse
from hpcopt_agent.curvature.lanczos import density, lanczos, slq_moment, start_vector, top_eigen
from hpcopt_agent.curvature.loss import FoldLoss


def _data(n: int = 96, features: int = 5, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def _mlp(seed: int = 1, hidden: int = 6) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, hidden), nn.Tanh(), nn.Linear(hidden, 3)).double()


def _ce(model: nn.Module, batch: Any) -> torch.Tensor:
    return F.cross_entropy(model(batch[0]), batch[1])


def _batches(x: torch.Tensor, y: torch.Tensor, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]


def _exact(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The exact Hessian of the mean loss in the flat weights, eigenvalues descending."""
    params = list(model.parameters())
    shapes = [p.shape for p in params]
    flat = torch.cat([p.detach().reshape(-1) for p in params])

    def loss(w: torch.Tensor) -> torch.Tensor:
        parts, at = [], 0
        for s in shapes:
            k = math.prod(s)
            parts.append(w[at : at + k].view(s))
            at += k
        names = [n for n, _ in model.named_parameters()]
        out = torch.func.functional_call(model, dict(zip(names, parts, strict=True)), (x,))
        return F.cross_entropy(out, y)

    hess = torch.autograd.functional.hessian(loss, flat)
    return torch.linalg.eigvalsh(hess).flip(0)


def test_the_top_eigenvalues_agree_with_the_exact_hessian_to_1e_4() -> None:
    x, y = _data()
    model = _mlp()
    op = FoldLoss(model, _ce, _batches(x, y))
    exact = _exact(model, x, y)
    eig = top_eigen(op.hvp, op.size, 4, 30, seed=7)
    assert op.hvps == 30 and eig.steps == 30
    for got, want, bound in zip(eig.values, exact[:4].tolist(), eig.residuals, strict=True):
        assert abs(got - want) <= 1e-4 * abs(want), (eig.values, exact[:4])
        assert bound <= 1e-4 * abs(want)  # the residual says it converged
    # Fewer iterations: further off, and the residual bound says by how much at most.
    rough = top_eigen(op.hvp, op.size, 1, 4, seed=7)
    assert abs(rough.values[0] - exact[0]) <= rough.residuals[0] + 1e-12


def test_a_negative_curvature_direction_is_found_and_the_loss_is_summed_not_averaged_per_batch() -> None:
    # Uneven batches (96 = 40 + 40 + 16): a per-batch mean of means would be wrong.
    x, y = _data()
    model = _mlp(seed=3)
    op = FoldLoss(model, _ce, _batches(x, y, 40))
    assert op.samples == 96
    assert op.value() == pytest.approx(float(_ce(model, (x, y)).detach()), rel=1e-12)
    exact = _exact(model, x, y)
    full = lanczos(op.hvp, start_vector(op.size, 1), op.size)
    theta, _ = full.eigh()
    assert theta[0] == pytest.approx(float(exact[-1]), abs=1e-8)  # the most negative eigenvalue too
    assert float(exact[-1]) < 0


def test_slq_with_a_full_krylov_space_puts_its_nodes_on_the_exact_eigenvalues() -> None:
    x, y = _data(n=64)
    model = _mlp(hidden=4)
    op = FoldLoss(model, _ce, _batches(x, y))
    exact = sorted(_exact(model, x, y).tolist())
    dens = density(op.hvp, op.size, samples=2, steps=op.size, seed=3)
    for nodes, weights in zip(dens.nodes, dens.weights, strict=True):
        assert sum(weights) == pytest.approx(1.0, abs=1e-10)
        # Every node is an exact eigenvalue (Lanczos stops early on repeated ones).
        assert all(min(abs(n - e) for e in exact) < 1e-7 * max(1.0, abs(n)) for n in nodes)
    # Its first moment is the quadratic form of the start vectors: tr(H)/n in expectation,
    # exactly v^T H v for each one.
    v = start_vector(op.size, 3 + 1, rademacher=True)
    first = slq_moment(dens.nodes[:1], dens.weights[:1])
    assert first == pytest.approx(float(v @ op.hvp(v)), rel=1e-9)
    assert all(d >= 0 for d in dens.density)
    step = dens.grid[1] - dens.grid[0]
    assert sum(dens.density) * step == pytest.approx(1.0, abs=1e-3)


def test_the_line_surface_of_a_quadratic_loss_is_its_taylor_expansion() -> None:
    # Linear least squares: the loss is exactly quadratic in the weights.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(80, 4, generator=g, dtype=torch.float64)
    y = torch.randn(80, 2, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    model = nn.Linear(4, 2).double()
    op = FoldLoss(model, lambda m, b: F.mse_loss(m(b[0]), b[1]), _batches(x, y))
    d = ls.random_direction(op, seed=5)
    w0 = op.weights()
    base = op.value()
    with op.at(w0):
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])  # type: ignore[union-attr]
    curv = float(d @ op.hvp(d))
    offsets = ls.grid(2.0, 9)
    line = ls.surface_1d(op, d, offsets)
    for a, got in zip(offsets, line, strict=True):
        assert got == pytest.approx(base + a * float(grad @ d) + 0.5 * a * a * curv, rel=1e-10)
    assert torch.equal(op.weights(), w0)  # the weights are put back
    # The bias gets no displacement; the weight's filters have the weights' norms.
    weight, bias = d[:8].view(2, 4), d[8:]
    assert torch.all(bias == 0)
    assert torch.allclose(weight.norm(dim=1), model.weight.detach().norm(dim=1))


def test_the_trajectory_projects_to_its_plane_coordinates_and_says_what_lies_off_it() -> None:
    final = torch.zeros(6, dtype=torch.float64)
    d1 = torch.tensor([1.0, 1, 0, 0, 0, 0], dtype=torch.float64)
    d2 = torch.tensor([0.0, 1, 1, 0, 0, 0], dtype=torch.float64)
    on = 2 * d1 - 3 * d2
    off = on + torch.tensor([0.0, 0, 0, 4, 0, 0], dtype=torch.float64)
    p = ls.project(final, [on, off, final], d1, d2)
    assert p.xs[:2] == pytest.approx([2, 2]) and p.ys[:2] == pytest.approx([-3, -3])
    assert p.off_plane[0] == pytest.approx(0, abs=1e-12)
    assert p.off_plane[1] == pytest.approx(4 / float(off.norm()))
    assert (p.xs[2], p.ys[2], p.off_plane[2]) == (0.0, 0.0, 0.0)


def test_an_analysis_costs_what_its_options_said_and_reports_it() -> None:
    x, y = _data()
    model = _mlp()
    op = FoldLoss(model, _ce, _batches(x, y))
    options = check(
        {
            "hessian": {"top_k": 2, "steps": 8, "density_samples": 2, "density_steps": 6, "trace": True},
            "landscape": {"directions": "eigen", "points": 5, "grid": 3},
        }
    )
    planned = cost(options)
    w = op.weights()
    checkpoints = [w + 0.1 * torch.randn_like(w), w + 0.05 * torch.randn_like(w)]
    lines: list[str] = []
    out = analyse(op, options, seed=1, checkpoints=checkpoints, say=lines.append)
    assert out["cost"]["hvps"] == planned.total_hvps(len(checkpoints)) == 8 + 2 * 6 + 2 * 8
    assert out["cost"]["passes"] == planned.passes == 5 + 9
    assert len(out["hessian"]["eigenvalues"]) == 2 and len(out["hessian"]["trace"]) == 2
    assert len(out["landscape"]["surface"]["loss"]) == 3 and len(out["landscape"]["line"]["loss"]) == 5
    assert len(out["landscape"]["trajectory"]["xs"]) == 2 and lines
    # The centre of the grid is the fold's own loss at its weights.
    assert out["landscape"]["surface"]["loss"][1][1] == pytest.approx(op.value(), rel=1e-12)
    import json

    assert json.loads(json.dumps(out)) == out  # plain numbers, nothing else


@pytest.mark.parametrize(
    "analysis,field,words",
    [
        ({"landscape": {"grid": 41}}, "analysis.landscape.max_points", "1,702 loss passes"),
        ({"hessian": {"steps": 2, "top_k": 3}}, "analysis.hessian.steps", "at least top_k"),
        ({"hessian": {"steps": 200, "density_samples": 4}}, "analysis.hessian.max_hvps", "320"),
        ({"landscape": {"directions": "eigen"}}, "analysis.landscape.directions", "add analysis.hessian"),
        ({"landscape": {"directions": "eigne"}}, "analysis.landscape.directions", "did you mean 'eigen'"),
        ({"hessian": {"top_k": 0}}, "analysis.hessian.top_k", ">= 1"),
        ({"hesian": {}}, "analysis.hesian", "did you mean 'hessian'"),
        ({"landscape": {"points": 0, "grid": 0}}, "analysis.landscape", "no surface"),
        ({"landscape": {"grid": 1}}, "analysis.landscape.grid", "at least 2"),
        ({}, "analysis", "nothing to compute"),
        ({"hessian": {}, "min_samples": 600}, "analysis.min_samples", "at most samples (512)"),
        ({"hessian": {}, "max_share": -0.1}, "analysis.max_share", ">= 0"),
        ({"hessian": {}, "when": "best"}, "analysis.when", "is not an option of the analysis"),
        ({"hessian": {}, "on": "sometimes"}, "analysis.on", "must be one of best, all"),
        ([1], "analysis", "must be a mapping"),
    ],
)
def test_bad_analysis_options_are_refused_naming_the_field(analysis: Any, field: str, words: str) -> None:
    with pytest.raises(OptionError) as err:
        check(analysis)
    assert err.value.field == field and words in err.value.message, str(err.value)


def test_the_defaults_fit_their_own_bounds() -> None:
    a = check({"hessian": {}, "landscape": None})
    c = cost(a)
    assert c.hvps == 20 + 30 and c.passes == 21 + 121 and c.samples == 512


def test_the_samples_fit_the_share_of_the_folds_training_by_counted_work() -> None:
    a = check({"hessian": {}, "landscape": {}})  # 50 HVPs and 142 loss passes a sample
    per_sample = 1.5 * 50 + 0.35 * 142
    # A long fold: the share buys every sample the options allow.
    assert samples_for(a, epochs=100, train_samples=40_000) == 512
    # A middling one: the share decides, and the plan stays inside it.
    s = samples_for(a, epochs=20, train_samples=20_000)
    assert s == int(0.03 * 20 * 20_000 / per_sample) and 64 < s < 512
    assert planned_share(a, s, epochs=20, train_samples=20_000) <= 0.03
    # A fold that trains in a second: the floor, and the share it then costs is said.
    assert samples_for(a, epochs=20, train_samples=1437) == 64
    assert planned_share(a, 64, epochs=20, train_samples=1437) > 0.03
    # Never more than the fold has; no share bound: the cap.
    assert samples_for(a, epochs=1, train_samples=40) == 40
    assert samples_for(check({"hessian": {}, "max_share": 0}), epochs=1, train_samples=1000) == 512
    # The trace's HVPs per epoch count too.
    traced = check({"hessian": {"trace": True}})
    assert samples_for(traced, epochs=20, train_samples=20_000) < samples_for(
        check({"hessian": {}}), epochs=20, train_samples=20_000
    )


def test_a_parameter_the_loss_does_not_use_has_no_curvature_and_no_error() -> None:
    class WithUnused(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.unused = _mlp(), nn.Linear(2, 2).double()  # unused: in parameters(), never called

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)  # type: ignore[no-any-return]

    x, y = _data()
    op = FoldLoss(WithUnused(), _ce, _batches(x, y))
    v = torch.ones(op.size, dtype=torch.float64)
    hv = op.hvp(v)
    assert torch.all(hv[-6:] == 0) and torch.any(hv[:-6] != 0)
