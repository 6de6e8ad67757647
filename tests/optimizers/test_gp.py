"""GP numerics against slow, obvious references."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtr

from hpcopt_server.optimizers import acquisition as acq
from hpcopt_server.optimizers import gp, gp_model
from hpcopt_server.optimizers.gp_model import GPModel, standardize


def _kernel_matrix(X: np.ndarray, ell: np.ndarray, amp: float, noise: np.ndarray) -> np.ndarray:
    """The textbook Matern-5/2 matrix, one pair at a time."""
    n = len(X)
    K = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            r = math.sqrt(sum(((X[i, k] - X[j, k]) / ell[k]) ** 2 for k in range(X.shape[1])))
            K[i, j] = amp * (1 + math.sqrt(5) * r + 5 * r * r / 3) * math.exp(-math.sqrt(5) * r)
    return K + np.diag(noise)


@settings(max_examples=30, deadline=None)
@given(
    blocks=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=12),
    dim=st.integers(min_value=1, max_value=5),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_lazily_extended_factor_equals_a_fresh_cholesky(blocks: list[int], dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ell, amp = rng.uniform(0.1, 2.0, dim), float(rng.uniform(0.5, 2.0))
    X = rng.random((sum(blocks), dim))
    noise = rng.uniform(1e-4, 1e-1, len(X))
    lazy = gp.LazyCholesky(capacity=2)  # small, so the buffer grows several times
    n = 0
    for k in blocks:
        new = X[n : n + k]
        K12 = gp.matern52(X[:n], new, ell, amp)
        K22 = gp.matern52(new, new, ell, amp) + np.diag(noise[n : n + k])
        lazy.extend(K12, K22)
        n += k
        fresh = np.linalg.cholesky(_kernel_matrix(X[:n], ell, amp, noise[:n]))
        assert np.abs(lazy.L - fresh).max() <= 1e-8 * np.abs(fresh).max()


def test_truncating_fantasies_restores_the_factor_exactly() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((30, 3))
    lazy = gp.LazyCholesky()
    lazy.extend(np.zeros((0, 30)), gp.matern52(X, X, np.ones(3), 1.0) + 1e-3 * np.eye(30))
    before = lazy.L.copy()
    F = rng.random((5, 3))
    lazy.extend(gp.matern52(X, F, np.ones(3), 1.0), gp.matern52(F, F, np.ones(3), 1.0) + 1e-3 * np.eye(5))
    lazy.truncate(30)
    assert np.array_equal(lazy.L, before)


def test_triangular_solves_on_the_buffer_view_match_numpy() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((40, 2))
    lazy = gp.LazyCholesky(capacity=100)
    K = gp.matern52(X, X, np.ones(2), 1.0) + 1e-2 * np.eye(40)
    lazy.extend(np.zeros((0, 40)), K)
    b = rng.random((40, 3))
    L = np.linalg.cholesky(K)
    assert np.allclose(lazy.solve(b), np.linalg.solve(L, b))
    assert np.allclose(lazy.solve(b[:, 0], transpose=True), np.linalg.solve(L.T, b[:, 0]))
    # The leading block: the factor of the first 25 points.
    assert np.allclose(lazy.solve(b[:25], rows=25), np.linalg.solve(L[:25, :25], b[:25]))


@pytest.mark.parametrize("rotated", [False, True])
def test_posterior_equals_the_textbook_gp(rotated: bool) -> None:
    """Also in a rotated frame (``GPModel.rotation``): the kernel of X R, and the
    gradients with respect to X."""
    rng = np.random.default_rng(2)
    model = GPModel(dim=3)
    model.theta = np.r_[np.log([0.3, 0.5, 0.8]), np.log(1.3), np.log(1e-2)]
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0] if rotated else np.eye(3)
    model.rotation = R if rotated else None
    X = rng.random((25, 3))
    y_raw = np.sin(3 * X).sum(1)
    extra = rng.uniform(0, 0.05, 25)
    for i in range(0, 25, 5):  # five block extensions
        model.add(X[i : i + 5], y_raw[i : i + 5], extra[i : i + 5])
    y = model.outputs()
    Xs = rng.random((7, 3))
    mu, var = model.predict(Xs, y)

    ell, amp, noise = gp.unpack(model.theta)
    U, Us = X @ R, Xs @ R
    K = _kernel_matrix(U, ell, amp, noise + extra)
    Ks = np.array([[gp.matern52(U[i : i + 1], Us[j : j + 1], ell, amp)[0, 0] for j in range(7)] for i in range(25)])
    Kinv = np.linalg.inv(K)
    # The outputs are the standardized losses less the constant mean of largest
    # likelihood, 1^T K^-1 t / 1^T K^-1 1 (generalized least squares).
    t = standardize(y_raw, model.stats)
    c = Kinv.sum(0) @ t / Kinv.sum()
    assert np.allclose(y, t - c, rtol=1e-8, atol=1e-10)
    assert np.allclose(mu, Ks.T @ Kinv @ y, rtol=1e-8, atol=1e-10)
    assert np.allclose(var, amp - np.einsum("ij,ik,kj->j", Ks, Kinv, Ks), rtol=1e-7, atol=1e-10)

    alpha = model.alpha(y)
    x = Xs[0]
    m0, v0, dm, dv = model.predict_grad(x, alpha)
    assert m0 == pytest.approx(mu[0]) and v0 == pytest.approx(var[0])
    eps = 1e-6
    for k in range(3):
        step = np.eye(3)[k] * eps
        mp, vp = model.predict(np.array([x + step]), y)
        mm, vm = model.predict(np.array([x - step]), y)
        assert dm[k] == pytest.approx((mp[0] - mm[0]) / (2 * eps), rel=1e-4, abs=1e-7)
        assert dv[k] == pytest.approx((vp[0] - vm[0]) / (2 * eps), rel=1e-4, abs=1e-7)


def test_marginal_likelihood_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    X = rng.random((20, 2))
    y = np.cos(4 * X[:, 0]) + X[:, 1] + 3.0  # the constant mean is profiled out
    extra = rng.uniform(0, 1e-2, 20)
    theta = np.r_[np.log([0.4, 0.7]), 0.1, np.log(1e-2)]
    _, grad = gp.neg_log_posterior(theta, X, y, extra)
    for k in range(len(theta)):
        step = np.eye(len(theta))[k] * 1e-6
        fp, _ = gp.neg_log_posterior(theta + step, X, y, extra)
        fm, _ = gp.neg_log_posterior(theta - step, X, y, extra)
        assert grad[k] == pytest.approx((fp - fm) / 2e-6, rel=1e-4, abs=1e-6)


def test_the_constant_mean_is_the_likelihoods_and_lies_with_the_poor_losses_where_good_ones_are_rare() -> None:
    """Far from every observation the posterior reverts to the constant mean of largest
    likelihood; where the good losses sit in one small region among many poor ones it
    lies above the outputs' average, so a GP does not expect improvement at an
    unexplored corner (bo on Ackley-10 spent 40 of its last 50 evaluations at corners
    while the prior mean was the outputs' average)."""
    rng = np.random.default_rng(5)
    D = 4
    X = np.vstack([rng.random((40, D)), 0.5 + 0.05 * rng.normal(size=(8, D))])
    y_raw = np.r_[10.0 + rng.normal(size=40), rng.uniform(0.0, 2.0, 8)]
    model = GPModel(dim=D)
    refit = model.compute_refit(X, y_raw, np.zeros(48), np.zeros(48, bool), rng, 300)
    model.install(refit, (X, y_raw, np.zeros(48), np.zeros(48, bool)))
    theta, U = refit.theta, model.frame(X)  # the inputs as the kernel sees them
    y = model.outputs()
    # The likelihood's mean: a shift of the outputs changes the marginal likelihood by
    # less than nothing (it is the minimum over constant means).
    nll = [gp.neg_log_posterior(theta, U, y + shift, np.zeros(48), prior=None)[0] for shift in (0.0, 0.3, -0.3)]
    assert nll[0] == pytest.approx(nll[1]) == pytest.approx(nll[2])
    ell, amp, noise = gp.unpack(theta)
    Kinv = np.linalg.inv(_kernel_matrix(U, ell, amp, np.full(48, noise)))
    assert Kinv.sum(0) @ y == pytest.approx(0.0, abs=1e-8)  # y already has it removed
    # The poor side: the outputs' average lies below the prior mean (0 here) by much.
    assert y.mean() < -0.3, y.mean()
    corner = np.ones((1, D))
    mu, _ = model.predict(corner, y)
    assert mu[0] > np.percentile(y, 60), (mu, np.percentile(y, [50, 60]))


def test_fitted_lengthscales_find_the_irrelevant_dimension() -> None:
    rng = np.random.default_rng(4)
    X = rng.random((60, 2))
    y = np.sin(6 * X[:, 0])  # the second input does not matter
    theta = gp.fit_hyperparameters(X, y - y.mean(), np.zeros(60), rng)
    ell = np.exp(theta[:2])
    assert ell[1] > 3 * ell[0]


def test_log_h_is_accurate_and_finite_everywhere() -> None:
    z = np.linspace(-5, 5, 101)
    direct = np.log(z * ndtr(z) + np.exp(-z * z / 2) / math.sqrt(2 * math.pi))
    assert np.allclose(acq.log_h(z), direct, rtol=1e-9, atol=1e-12)
    far = acq.log_h(np.array([-30.0, -39.99, -40.01, -1e3, -1e6]))
    assert np.all(np.isfinite(far)) and np.all(np.diff(far) < 0)
    # continuity across the branch points
    for b in (-1.0, -40.0):
        assert acq.log_h(np.array([b - 1e-9]))[0] == pytest.approx(acq.log_h(np.array([b + 1e-9]))[0], rel=1e-6)


def test_log_ei_gradient_matches_finite_differences() -> None:
    dmu, dvar = np.array([0.3, -1.2]), np.array([0.05, 0.2])
    for mu, var, best in ((0.1, 0.04, 0.0), (3.0, 0.01, 0.0), (-1.0, 0.5, 0.0)):
        _, grad = acq.log_ei_grad(mu, var, best, dmu, dvar)
        eps = 1e-7
        for k in range(2):
            hi = acq.log_ei(np.array([mu + eps * dmu[k]]), np.array([var + eps * dvar[k]]), best)[0]
            lo = acq.log_ei(np.array([mu - eps * dmu[k]]), np.array([var - eps * dvar[k]]), best)[0]
            assert grad[k] == pytest.approx((hi - lo) / (2 * eps), rel=1e-4)


def test_a_local_penalizer_rules_out_a_ball_around_each_pending_point_with_its_exact_gradient() -> None:
    from hpcopt_server.optimizers.bo import _Balls

    centres = np.array([[0.2, 0.2], [0.7, 0.6]])
    balls = _Balls(centres, mu=np.array([1.0, 0.5]), sigma=np.array([0.1, 0.2]), best=0.0, lipschitz=4.0)
    # At a pending point worse than the best, the ball's edge is (mu - best) / L away.
    at_centre = balls.log_penalty(centres[:1])[0]
    assert at_centre < math.log(1e-10) and balls.log_penalty(np.array([[0.95, 0.05]]))[0] > math.log(0.5)
    edge = centres[0] + np.array([1.0 / 4.0, 0.0])  # radius 0.25: Phi(0) = 1/2 from this ball
    far = _Balls(centres[:1], np.array([1.0]), np.array([0.1]), 0.0, 4.0)
    assert far.log_penalty(edge[None, :])[0] == pytest.approx(math.log(0.5), rel=1e-9)
    x = np.array([0.45, 0.3])
    value, grad = balls.log_penalty_grad(x)
    assert value == pytest.approx(balls.log_penalty(x[None, :])[0], rel=1e-12)
    eps = 1e-7
    for k in range(2):
        step = np.eye(2)[k] * eps
        numeric = (balls.log_penalty((x + step)[None, :])[0] - balls.log_penalty((x - step)[None, :])[0]) / (2 * eps)
        assert grad[k] == pytest.approx(numeric, rel=1e-5)


def test_the_output_warp_is_monotone_gaussianizes_skewed_losses_and_leaves_gaussian_ones_alone() -> None:
    from scipy.stats import skew

    from hpcopt_server.optimizers.gp_model import WARP_BOUNDS, noise_scale, output_stats, standardize

    rng = np.random.default_rng(0)
    skewed = np.exp(rng.normal(size=200) * 1.5)  # a valley floor beside high walls
    stats = output_stats(skewed)
    t = standardize(skewed, stats)
    assert WARP_BOUNDS[0] <= stats.lam < 0.7, stats
    assert abs(skew(t)) < 0.3 * abs(skew(skewed)), (skew(t), skew(skewed))
    order = np.argsort(skewed)
    assert np.all(np.diff(t[order]) > 0)  # the best loss stays the best output
    assert abs(t.mean()) < 1e-12
    assert output_stats(skewed) == stats  # a deterministic function of the losses

    # A loss far better than any seen at the last refit (the exponent stays frozen
    # until the next one) is still finite and still the best.
    t = standardize(np.r_[skewed, -1e300], stats)
    assert np.all(np.isfinite(t)) and np.argmin(t) == len(skewed), t[-3:]

    normal = rng.normal(size=200)
    stats = output_stats(normal)
    assert abs(stats.lam - 1.0) < 0.25, stats
    # Without warping a loss's own variance scales by 1 / std^2, as before the warp.
    plain = stats._replace(lam=1.0)
    assert np.allclose(noise_scale(normal, plain), 1.0 / (plain.scale * plain.std) ** 2)


@pytest.mark.parametrize(
    "y",
    [
        np.full(6, 3.0),
        np.array([1.0, 1.0, 2.0]),
        np.array([np.nan, 1.0, np.nan, 5.0, 2.0, 1e300]),
        np.array([1.0, 2.0, 3.0, 4.0, 5.0, -1e300, -1e299]),
        np.array([]),
    ],
    ids=["constant", "three", "failed-and-huge", "huge-and-good", "empty"],
)
def test_the_output_warp_is_finite_on_degenerate_losses(y: np.ndarray) -> None:
    from hpcopt_server.optimizers.gp_model import noise_scale, output_stats, standardize

    stats = output_stats(y)
    assert all(np.isfinite(stats)), stats
    if len(y):
        t = standardize(y, stats)
        assert np.all(np.isfinite(t)), t
        assert np.all(np.isfinite(noise_scale(y, stats)))
        assert np.argmin(t) == np.nanargmin(y)


@pytest.mark.parametrize("compress", [True, False])
def test_log_slope_is_the_log_derivative_of_the_output_transform(compress: bool) -> None:
    from scipy.stats import yeojohnson

    from hpcopt_server.optimizers.gp_model import _z, log_slope, output_stats

    rng = np.random.default_rng(1)
    y = np.r_[np.exp(rng.normal(size=60) * 1.5), 12.0, 20.0]  # the last two compressed, not capped
    stats = output_stats(y, warp=compress)
    assert stats.compress is compress and (stats.lam == 1.0) is not compress

    def transform(v: np.ndarray) -> np.ndarray:  # standardize() before its (data-dependent) centring
        return np.asarray((yeojohnson(_z(v, stats), stats.lam) - stats.mean) / stats.std)

    eps = 1e-6
    numeric = (transform(y + eps) - transform(y - eps)) / (2 * eps)
    assert np.allclose(np.log(numeric), log_slope(y, stats), atol=1e-5)
    # Past the cap the transform is flat; the slope used is the uncapped one's, finite.
    assert np.all(np.isfinite(log_slope(np.array([1e3, 1e300]), stats)))


def _refit(f: object, n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, object]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, dim))
    y = np.array([f(x) for x in X])  # type: ignore[operator]
    model = GPModel(dim, rotatable=np.zeros(dim, bool))  # the output model alone: the frame has its own tests
    refit = model.compute_refit(X, y, np.zeros(n), np.zeros(n, bool), np.random.default_rng(7), 300)
    return refit.theta, refit.stats


def test_a_smooth_ill_conditioned_function_gets_the_plain_model_and_a_skewed_multimodal_one_keeps_the_warp() -> None:
    rotation = np.linalg.qr(np.random.default_rng(3).normal(size=(5, 5)))[0]
    scales = 10.0 ** np.linspace(0, 4, 5)

    def ellipsoid(x: np.ndarray) -> float:
        z = rotation @ (x * 10 - 6.5)
        return float(np.sum(scales * z * z) / 100)

    theta, stats = _refit(ellipsoid, 40, 5)
    # The polynomial-like fit: no taming or warp, an amplitude the default prior's bound
    # (20) rules out, long lengthscales.
    assert not stats.compress and stats.lam == 1.0, stats
    assert math.exp(theta[-2]) > 20 and np.all(np.exp(theta[:-2]) > 1.0), np.exp(theta)

    def spiky(x: np.ndarray) -> float:  # narrow wells on a flat floor: skewed losses
        wells = np.array([[0.2, 0.3], [0.75, 0.8], [0.6, 0.2]])
        return float(-np.exp(-40 * ((x - wells) ** 2).sum(1)).max())

    _, stats = _refit(spiky, 40, 2)
    assert stats.compress and stats.lam != 1.0, stats

    # A deterministic function of the history (the plain fit draws no random numbers).
    assert _refit(ellipsoid, 40, 5)[1] == _refit(ellipsoid, 40, 5)[1]
    # Below MIN_SELECT measured losses the warped model is used.
    assert _refit(ellipsoid, 8, 5)[1].compress
    # Losses near the float range overflow the plain z-scores: the tamed model stays, and
    # nothing warns.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, stats = _refit(lambda x: 1e300 if x[0] > 0.9 else ellipsoid(x), 40, 5)
    assert stats.compress, stats


def _rotated_valley(dim: int, seed: int) -> tuple[np.ndarray, Any]:
    """A quadratic with curvatures 1 .. 10^4 along the rows of a random rotation Q."""
    Q = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))[0]
    scales = 10.0 ** np.linspace(0, 4, dim)

    def f(x: np.ndarray) -> float:
        z = Q @ (x - 0.4)
        return float(np.sum(scales * z * z))

    return Q, f


def test_a_rotated_valley_is_modelled_in_the_frame_of_its_principal_axes() -> None:
    """On a rotated ill-conditioned quadratic the refit rotates the inputs so that the
    steep axes are coordinates of the frame, and ARD gives the steepest the shortest
    lengthscale; the rotated model is the more likely one, by far more than the margin."""
    Q, f = _rotated_valley(5, 3)
    rng = np.random.default_rng(11)
    X = rng.random((40, 5))
    y = np.array([f(x) for x in X])
    model = GPModel(5)
    refit = model.compute_refit(X, y, np.zeros(40), np.zeros(40, bool), np.random.default_rng(7), 300)
    V = refit.rotation
    assert V is not None
    assert np.allclose(V.T @ V, np.eye(5), atol=1e-10)  # orthonormal: distances are kept
    cosines = np.abs(Q @ V)  # [function axis, frame axis]
    steepest = int(np.argmax(cosines[-1]))
    assert cosines[-1, steepest] > 0.9, cosines.round(2)
    ell = np.exp(refit.theta[:-2])
    assert int(np.argmin(ell)) == steepest, (ell, cosines.round(2))
    # The model predicts the valley better than the unrotated fit of the same points.
    plain = GPModel(5, rotatable=np.zeros(5, bool))
    unrotated = plain.compute_refit(X, y, np.zeros(40), np.zeros(40, bool), np.random.default_rng(7), 300)
    assert unrotated.rotation is None
    Xt = 0.4 + (rng.random((200, 5)) - 0.5) * 0.2  # near the minimum
    errors = []
    for m, r in ((model, refit), (plain, unrotated)):
        m.install(r, (X, y, np.zeros(40), np.zeros(40, bool)))
        mu, _ = m.predict(Xt, m.outputs())
        truth = standardize(np.array([f(x) for x in Xt]), r.stats)
        errors.append(np.corrcoef(mu, truth)[0, 1])
    assert errors[0] > errors[1], errors
    # The same history gives the same frame.
    again = GPModel(5).compute_refit(X, y, np.zeros(40), np.zeros(40, bool), np.random.default_rng(7), 300)
    assert again.rotation is not None and np.array_equal(again.rotation, V)


@pytest.mark.slow
def test_the_frame_is_estimated_again_from_the_model_fitted_in_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first frame comes from a model that sees the valley across the axes and is
    off; estimated again from the model fitted in it (``FRAME_ESTIMATES``), a rotated
    discus's one steep axis (1000 times the others' curvature) becomes a coordinate of
    the frame, and the fit is more likely than with one estimate."""
    D, n = 6, 30
    cosines: dict[int, list[float]] = {1: [], gp_model.FRAME_ESTIMATES: []}
    for seed in range(5):
        Q = np.linalg.qr(np.random.default_rng(seed).normal(size=(D, D)))[0]
        X = np.random.default_rng(11 + seed).random((n, D))
        y = np.array([1e3 * (Q[-1] @ (x - 0.4)) ** 2 + np.sum((Q[:-1] @ (x - 0.4)) ** 2) for x in X])
        likelihood = {}
        for estimates in cosines:
            monkeypatch.setattr(gp_model, "FRAME_ESTIMATES", estimates)
            refit = GPModel(D).compute_refit(X, y, np.zeros(n), np.zeros(n, bool), np.random.default_rng(7), 300)
            assert refit.rotation is not None
            cosines[estimates].append(float(np.abs(Q[-1] @ refit.rotation).max()))
            yy = standardize(y, refit.stats)
            likelihood[estimates] = -gp.neg_log_posterior(
                refit.theta, X @ refit.rotation, yy - yy.mean(), np.zeros(n), prior=None
            )[0]
        assert likelihood[max(cosines)] >= likelihood[1], likelihood
    assert min(cosines[max(cosines)]) > 0.999, cosines
    assert min(cosines[1]) < 0.99, cosines  # the case the further estimates are for


def test_the_frame_leaves_categorical_coordinates_and_axis_aligned_functions_alone() -> None:
    rng = np.random.default_rng(12)
    # Coordinates 3 and 4 are a one-hot category: never mixed into the rotation.
    _, f = _rotated_valley(3, 4)
    X = np.c_[rng.random((40, 3)), np.eye(2)[rng.integers(0, 2, 40)]]
    y = np.array([f(x[:3]) + x[3] for x in X])
    refit = GPModel(5, rotatable=np.array([True, True, True, False, False])).compute_refit(
        X, y, np.zeros(40), np.zeros(40, bool), np.random.default_rng(7), 300
    )
    assert refit.rotation is not None
    assert np.array_equal(refit.rotation[3:, :], np.eye(5)[3:, :])
    assert np.array_equal(refit.rotation[:, 3:], np.eye(5)[:, 3:])
    # A separable function is already aligned with the axes: a frame gains too little to pay for itself.
    for seed in range(3):
        X = np.random.default_rng(seed).random((40, 4))
        y = np.array([np.sum(np.cos(6 * (x - 0.3)) ** 2) for x in X])
        assert (
            GPModel(4).compute_refit(X, y, np.zeros(40), np.zeros(40, bool), np.random.default_rng(7), 300).rotation
            is None
        )
