"""WeightWatcher's (0.7.7) shape metrics of one weight matrix's eigenvalue spectrum, pure numpy/scipy.

Eigenvalues are WW's: λᵢ = σᵢ² of W (no 1/N), over the min(N, M) singular values. The definitions follow
``weightwatcher.RMT_Util`` (``fit_density_with_range``, ``resid_mp``, ``matrix_entropy``,
``jensen_shannon_distance``) and ``WeightWatcher.mp_fit``/``fit_powerlaw``; they are re-implemented so the
workflow does not import weightwatcher (and its torch/tensorflow probing) at run time, and are tested
against it (tests/test_shape.py). See docs/spectra.md, "WeightWatcher's shape metrics".
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, stats

KDE_BANDWIDTH = 0.1  # WW's mp_fit bandwidth (linear kernel) on the rescaled spectrum
KDE_THRESH = 0.01  # WW drops KDE grid points with density below this
KDE_GRID = 1000

RAND_COLUMNS = ("rand_distance", "num_rand_spikes")
SHAPE_COLUMNS = [
    "num_spikes",
    "sigma_mp",
    "mp_softrank",
    "alpha",
    "xmin",
    "D",
    "alpha_weighted",
    "log_alpha_norm",
    "entropy",
    *RAND_COLUMNS,
]


def _linear_kde(x: np.ndarray, grid: np.ndarray, bw: float) -> np.ndarray:
    """Density of a linear-kernel KDE (sklearn's ``KernelDensity(kernel='linear')``) on ``grid``."""
    out = np.zeros_like(grid)
    for chunk in np.array_split(np.arange(grid.size), max(1, grid.size * x.size // 4_000_000)):
        out[chunk] = np.clip(1.0 - np.abs(grid[chunk, None] - x[None, :]) / bw, 0.0, None).sum(axis=1)
    return out / (x.size * bw)


def _mp_residuals(sigmas: np.ndarray, xde: np.ndarray, yde: np.ndarray, q: float) -> np.ndarray:
    """WW's ``resid_mp`` for each σ in ``sigmas`` at once: squared misfit of the MP (or, at Q = 1,
    quarter-circle) density to the KDE; WW's penalty where the bulk misses the KDE's peak."""
    sigma = np.asarray(sigmas, dtype=np.float64)[:, None]
    if q == 1:
        ymp = np.nan_to_num((1 / (np.pi * sigma * sigma)) * np.sqrt(np.clip(4 - xde**2, 0, None)))
        return np.sum((ymp - yde) ** 2, axis=1)
    b = (sigma * (1 + np.sqrt(1 / q))) ** 2
    a = (sigma * (1 - np.sqrt(1 / q))) ** 2
    x_peak = xde[np.argmax(yde)]
    with np.errstate(divide="ignore", invalid="ignore"):
        ymp = np.nan_to_num(
            (q / (2 * np.pi * sigma * sigma * xde)) * np.sqrt(np.clip((b - xde) * (xde - a), 0, None))
        )
    misfit = np.sum((ymp - yde) ** 2, axis=1)
    outside = (b[:, 0] < x_peak) | (b[:, 0] > xde.max()) | (a[:, 0] > x_peak)
    return np.where(outside, float(yde.size) * 1000.0**2, misfit)


def _mp_residual(sigma: np.ndarray, xde: np.ndarray, yde: np.ndarray, q: float) -> float:
    return float(_mp_residuals(np.atleast_1d(sigma)[:1], xde, yde, q)[0])


def mp_fit(evals: np.ndarray, n: int, m: int) -> dict[str, float]:
    """WW's ``mp_fit`` (rescale=True): fit σ of an MP bulk to the spectrum, count spikes past its edge.

    The spectrum is rescaled to mean 1 (so ``sigma_mp`` is in those units, as WW reports it); σ is
    brute-forced on WW's grid (0.05..2 × the σ that puts λ_max at the edge) against a linear KDE of
    bandwidth 0.1, then polished by ``fmin`` (``scipy.optimize.brute``'s default finish). Spikes are
    eigenvalues above the fitted edge plus WW's Tracy–Widom margin; ``mp_softrank`` = edge / λ_max.
    """
    q = max(n, m) / min(n, m)
    lam = np.asarray(evals, dtype=np.float64)
    lam = lam * (lam.size / lam.sum())
    lam_max = float(lam.max())
    to_fit = np.sqrt(lam) if q == 1 else lam
    xde = np.linspace(0, to_fit.max() + 0.5, KDE_GRID)
    yde = _linear_kde(to_fit, xde, KDE_BANDWIDTH)
    good = yde > KDE_THRESH
    xde, yde = xde[good], yde[good]
    s0 = np.sqrt(lam_max / (1 + 1 / np.sqrt(q)) ** 2)
    # scipy.optimize.brute's grid search and fmin finish, with the grid evaluated in one vectorised call
    grid = np.mgrid[slice(0.05 * s0, 2.0 * s0, 0.01 * s0)]
    start = grid[np.argmin(_mp_residuals(grid, xde, yde, q))]
    sigma = float(optimize.fmin(_mp_residual, [start], args=(xde, yde, q), disp=False)[0])
    bulk_max = (sigma * (1 + 1 / np.sqrt(q))) ** 2
    tw = 1 / np.sqrt(q) * bulk_max ** (2 / 3) * min(n, m) ** (-2 / 3)
    return {
        "num_spikes": int((lam > bulk_max + np.sqrt(tw)).sum()),
        "sigma_mp": sigma,
        "mp_softrank": float(bulk_max / lam_max),
    }


def fit_powerlaw(evals: np.ndarray) -> dict[str, float]:
    """Clauset et al.'s continuous power-law fit, as ``powerlaw.Fit(evals)`` (WW's default ``fit_powerlaw``).

    Every distinct eigenvalue but the largest is an xmin candidate; α is the MLE 1 + n / Σ log(x/xmin)
    on the tail, and the xmin with the smallest KS distance D between the tail's empirical CDF and
    the fitted one wins. Hand-written (one vectorised O(n²) numpy pass) because ``powerlaw.Fit`` takes seconds
    per matrix; tested against it.
    """
    x = np.sort(np.asarray(evals, dtype=np.float64))
    x = x[x > 0]
    logx = np.log(x)
    _, first = np.unique(x, return_index=True)
    ks = first[:-1]  # candidate xmin = x[k]: the first occurrence of each distinct value but the largest
    suffix = np.cumsum(logx[::-1])[::-1]
    n_tail = x.size - ks
    alphas = 1 + n_tail / (suffix[ks] - n_tail * logx[ks])
    dists = np.empty(ks.size)
    j = np.arange(x.size)
    for chunk in np.array_split(np.arange(ks.size), max(1, ks.size * x.size // 2_000_000)):
        k, a = ks[chunk, None], alphas[chunk, None]
        with np.errstate(over="ignore"):  # keys below xmin overflow; np.where drops them
            cdf_fit = 1 - np.exp((1 - a) * (logx[None, :] - logx[k]))
        cdf_emp = (j[None, :] - k) / n_tail[chunk, None]
        dists[chunk] = np.where(j[None, :] >= k, np.abs(cdf_emp - cdf_fit), 0.0).max(axis=1)
    best = int(np.argmin(dists))
    d, alpha, xmin = float(dists[best]), float(alphas[best]), float(x[ks[best]])
    return {"alpha": alpha, "xmin": xmin, "D": d}


def entropy(evals: np.ndarray, n: int) -> float:
    """WW's ``matrix_entropy``: Shannon entropy of λ/Σλ over log(numerical rank), rank as numpy's."""
    sv = np.sqrt(np.asarray(evals, dtype=np.float64))
    rank = np.count_nonzero(sv > sv.max() * max(n, 0) * np.finfo(sv.dtype).eps) + 1e-7
    p = sv**2 / np.sum(sv**2) + 1e-7
    return float(-np.sum(p * np.log(p)) / np.log(rank))


def randomization(evals: np.ndarray, rand_evals: np.ndarray) -> dict[str, float]:
    """WW's randomisation test: ``rand_distance`` is its Jensen–Shannon distance between the sorted eigenvalue
    vectors (each normalised to sum 1, as ``jensen_shannon_distance`` does); ``num_rand_spikes`` (ours, WW
    0.7.7 has no such column) counts eigenvalues above the shuffled matrix's largest."""
    p = np.sort(np.asarray(evals, dtype=np.float64))
    r = np.sort(np.asarray(rand_evals, dtype=np.float64))
    p, r = p / p.sum(), r / r.sum()
    mid = (p + r) / 2
    js = (stats.entropy(p, mid) + stats.entropy(r, mid)) / 2
    n_above = int((np.asarray(evals) > np.max(rand_evals)).sum())
    return {"rand_distance": float(np.sqrt(js)), "num_rand_spikes": n_above}


def shape_metrics(evals: np.ndarray, n: int, m: int, rand_evals: np.ndarray | None) -> dict[str, float]:
    """All WW shape columns of one matrix (n × m) from its eigenvalues and its shuffled copy's
    (None: the randomisation columns are NaN)."""
    lam = np.asarray(evals, dtype=np.float64)
    pl = fit_powerlaw(lam)
    lam_max = float(lam.max())
    return {
        **mp_fit(lam, n, m),
        **pl,
        "alpha_weighted": pl["alpha"] * np.log10(lam_max),
        "log_alpha_norm": float(np.log10(np.sum(lam ** pl["alpha"]))),
        "entropy": entropy(lam, max(n, m)),
        **(randomization(lam, rand_evals) if rand_evals is not None else dict.fromkeys(RAND_COLUMNS, np.nan)),
    }
