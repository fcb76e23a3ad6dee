"""WeightWatcher shape metrics (attnscope.shape) on synthetic matrices, and against powerlaw/sklearn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import optimize

from attnscope import shape, spectra


def _evals(w: np.ndarray) -> np.ndarray:
    return np.linalg.svd(w, compute_uv=False) ** 2


def _spiked(n: int, m: int, sigma: float, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.normal(0, sigma, (n, m))
    for i in range(k):
        u, v = rng.normal(size=n), rng.normal(size=m)
        w += (6 + 2 * i) * sigma * np.sqrt(n) * np.outer(u / np.linalg.norm(u), v / np.linalg.norm(v))
    return w


def _shuffled_evals(w: np.ndarray, seed: int) -> np.ndarray:
    return _evals(spectra.shuffle_entries(torch.from_numpy(w), seed).numpy())


@pytest.mark.parametrize(("shape_", "planted"), [((1000, 250), 0), ((1000, 250), 3), ((300, 300), 2)])
def test_grid_search_equals_scipy_brute(shape_: tuple[int, int], planted: int) -> None:
    """mp_fit's vectorised grid search + fmin finish is scipy.optimize.brute on WW's resid_mp."""
    n, m = shape_
    lam = _evals(_spiked(n, m, 0.05, planted))
    lam = lam * (lam.size / lam.sum())
    q = n / m
    to_fit = np.sqrt(lam) if q == 1 else lam
    xde = np.linspace(0, to_fit.max() + 0.5, shape.KDE_GRID)
    yde = shape._linear_kde(to_fit, xde, shape.KDE_BANDWIDTH)
    xde, yde = xde[yde > shape.KDE_THRESH], yde[yde > shape.KDE_THRESH]
    s0 = np.sqrt(lam.max() / (1 + 1 / np.sqrt(q)) ** 2)
    grid = slice(0.05 * s0, 2.0 * s0, 0.01 * s0)
    reference = optimize.brute(shape._mp_residual, (grid,), args=(xde, yde, q))[0]
    assert shape.mp_fit(lam, n, m)["sigma_mp"] == pytest.approx(reference, rel=1e-9)
    scalar = [shape._mp_residual(np.array([s]), xde, yde, q) for s in np.mgrid[grid]]
    np.testing.assert_allclose(shape._mp_residuals(np.mgrid[grid], xde, yde, q), scalar, rtol=1e-12)


@pytest.mark.parametrize("planted", [0, 3])
def test_mp_fit_counts_planted_spikes(planted: int) -> None:
    w = _spiked(1000, 250, 0.05, planted)
    fit = shape.mp_fit(_evals(w), *w.shape)
    assert fit["num_spikes"] == planted
    # sigma_mp is in units where the mean eigenvalue is 1; the bulk's true sigma in those units:
    lam = _evals(w)
    true_sigma = np.sqrt(0.05**2 * 1000 * lam.size / lam.sum())
    assert fit["sigma_mp"] == pytest.approx(true_sigma, rel=0.1)


def test_linear_kde_matches_sklearn() -> None:
    sk = pytest.importorskip("sklearn.neighbors")
    x = np.random.default_rng(1).gamma(2.0, size=300)
    grid = np.linspace(0, x.max() + 0.5, 200)
    ref = np.exp(
        sk.KernelDensity(kernel="linear", bandwidth=0.1).fit(x[:, None]).score_samples(grid[:, None])
    )
    np.testing.assert_allclose(shape._linear_kde(x, grid, 0.1), ref, rtol=1e-6, atol=1e-12)


def test_powerlaw_fit_matches_package() -> None:
    powerlaw = pytest.importorskip("powerlaw")
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(0.1, 1.0, 200), (1 - rng.uniform(size=300)) ** (-1 / 2.5)])
    ours = shape.fit_powerlaw(x)
    ref = powerlaw.Fit(x, verbose=False, parameter_ranges={"alpha": [1, 1000]})  # 2.0 caps alpha at 3
    assert ours["xmin"] == pytest.approx(ref.xmin, rel=1e-9)
    assert ours["alpha"] == pytest.approx(ref.alpha, rel=1e-6)
    assert ours["D"] == pytest.approx(ref.D, rel=1e-6)
    assert 3.0 < ours["alpha"] < 4.2  # density exponent 1 + 2.5


def test_heavy_tailed_matrix_alpha() -> None:
    w = np.random.default_rng(3).standard_t(2.5, size=(800, 200))
    assert 1.5 < shape.fit_powerlaw(_evals(w))["alpha"] < 5.0
    gauss = np.random.default_rng(3).normal(size=(800, 200))
    assert shape.fit_powerlaw(_evals(gauss))["alpha"] > 5.0


def test_randomization_iid_vs_structured() -> None:
    rng = np.random.default_rng(4)
    iid = rng.normal(size=(400, 200))
    r_iid = shape.randomization(_evals(iid), _shuffled_evals(iid, 0))
    low = _spiked(400, 200, 0.01, 3)
    r_low = shape.randomization(_evals(low), _shuffled_evals(low, 0))
    assert r_iid["rand_distance"] < 0.05
    assert r_low["rand_distance"] > 0.2
    assert r_iid["num_rand_spikes"] <= 1
    assert r_low["num_rand_spikes"] >= 3


def test_shuffle_is_seeded_and_keeps_the_entries() -> None:
    w = torch.from_numpy(np.random.default_rng(5).normal(size=(50, 30)))
    a, b = spectra.shuffle_entries(w, 7), spectra.shuffle_entries(w, 7)
    assert a.shape == w.shape and a.numpy().tobytes() == b.numpy().tobytes()
    assert not torch.equal(a, w) and not torch.equal(a, spectra.shuffle_entries(w, 8))
    assert torch.equal(a.reshape(-1).sort().values, w.reshape(-1).sort().values)


def test_entropy_bounds() -> None:
    assert shape.entropy(np.ones(100), 100) == pytest.approx(1.0, abs=1e-4)
    lam = np.r_[1e6, np.ones(99)]
    assert shape.entropy(lam, 100) < 0.1
