"""Random-matrix helpers: Gaussian and Haar matrices, the Gram matrix, the ε-rank and the
Marchenko–Pastur law (density, distribution function, edges, KS distance, samples).

Used by the theory checks, by :mod:`attnscope.spectra` (the MP edge of a weight matrix,
the Gram matrix of its smaller side), :mod:`attnscope.metrics` (the ε-rank of an
attention map) and :mod:`attnscope.plots` (fig. 2.4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

TW1_MEAN = -1.2065335745820
"""Mean of the Tracy–Widom (β = 1) law of the largest eigenvalue of a real Wishart matrix."""

Matrix = TypeVar("Matrix")
"""A NumPy array or a torch tensor (both have ``swapaxes`` and ``@``)."""


def gram(a: Matrix) -> Matrix:
    """Gram matrix of the smaller side, aᵀa (tall) or aaᵀ (wide), batched over leading dimensions.

    Works on NumPy arrays and torch tensors alike (spectra decomposes torch batches on the
    GPU); the caller picks the dtype.
    """
    return a.swapaxes(-1, -2) @ a if a.shape[-2] >= a.shape[-1] else a @ a.swapaxes(-1, -2)


def random_covariance(rng: np.random.Generator, n: int, ridge: float = 0.5) -> np.ndarray:
    """A random well-conditioned covariance matrix ``LLᵀ/n + ridge·I``."""
    factor = rng.standard_normal((n, n))
    return factor @ factor.T / n + ridge * np.eye(n)


def haar_orthogonal(rng: np.random.Generator, batch: int, n: int) -> np.ndarray:
    """``batch`` Haar-distributed n×n orthogonal matrices (QR with sign correction)."""
    q, r = np.linalg.qr(rng.standard_normal((batch, n, n)))
    return q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]


def epsilon_rank_of_spectrum(sigma: np.ndarray, epsilon: float) -> int:
    """Smallest r with ‖a − a_r‖_F ≤ ε‖a‖_F, from the descending singular values of a."""
    squared = np.asarray(sigma, dtype=np.float64) ** 2
    tail = np.append(np.cumsum(squared[::-1])[::-1], 0.0)  # tail[r] = ‖a − a_r‖²_F
    return int(np.argmax(tail <= epsilon**2 * tail[0]))


def epsilon_rank(matrix: np.ndarray, eps: float = 0.1) -> int:
    """Smallest k with ‖M − M_k‖_F ≤ ε‖M‖_F (M_k the best rank-k approximation)."""
    return epsilon_rank_of_spectrum(np.linalg.svd(matrix, compute_uv=False), eps)


def marchenko_pastur_edges(q: float, sigma2: float = 1.0) -> tuple[float, float]:
    """Bulk edges σ²(1 ∓ √q)² of the Marchenko–Pastur law with ratio ``q`` ∈ (0, 1]."""
    _check_ratio(q)
    return sigma2 * (1 - math.sqrt(q)) ** 2, sigma2 * (1 + math.sqrt(q)) ** 2


def marchenko_pastur_pdf(x: np.ndarray | float, q: float, sigma2: float = 1.0) -> np.ndarray:
    """Marchenko–Pastur density √((λ₊−x)(x−λ₋)) / (2πσ²qx) on [λ₋, λ₊], 0 outside.

    It is the limit law of the eigenvalues of WᵀW/N for an N×M matrix W (N ≥ M) with
    i.i.d. N(0, σ²) entries and q = M/N; the squared singular values of W itself
    follow it after division by N. Thesis (2.4) is the case q = 1.
    """
    lo, hi = marchenko_pastur_edges(q, sigma2)
    x = np.asarray(x, dtype=float)
    inside = (x > lo) & (x < hi)
    xs = np.where(inside, x, (lo + hi) / 2)
    return np.where(inside, np.sqrt((hi - xs) * (xs - lo)) / (2 * np.pi * sigma2 * q * xs), 0.0)


def marchenko_pastur_curve(q: float, sigma2: float = 1.0, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(x, density): :func:`marchenko_pastur_pdf` on ``points`` even steps across the bulk [λ₋, λ₊]
    without its ends (where the density is 0, or diverges at q = 1), for drawing."""
    lo, hi = marchenko_pastur_edges(q, sigma2)
    x = np.linspace(lo, hi, points)[1:-1]
    return x, marchenko_pastur_pdf(x, q, sigma2)


def marchenko_pastur_cdf(x: np.ndarray | float, q: float, sigma2: float = 1.0) -> np.ndarray:
    """Distribution function of :func:`marchenko_pastur_pdf`, in closed form."""
    lo, hi = marchenko_pastur_edges(q, sigma2)
    x = np.clip(np.asarray(x, dtype=float), lo, hi)
    root = math.sqrt(lo * hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        inner = np.clip(((lo + hi) * x - 2 * lo * hi) / (x * (hi - lo)), -1, 1)
    antiderivative = (
        np.sqrt((hi - x) * (x - lo))
        + (lo + hi) / 2 * np.arcsin(np.clip((2 * x - lo - hi) / (hi - lo), -1, 1))
        - (root * np.arcsin(inner) if root > 0 else 0.0)
    )
    at_lo = -(lo + hi) * np.pi / 4 + root * np.pi / 2
    return np.clip((antiderivative - at_lo) / (2 * np.pi * sigma2 * q), 0.0, 1.0)


def ks_distance_mp(eigenvalues: np.ndarray, q: float, sigma2: float = 1.0) -> float:
    """Kolmogorov–Smirnov distance between an empirical spectrum and the MP law."""
    ev = np.sort(np.asarray(eigenvalues, dtype=float))
    cdf = marchenko_pastur_cdf(ev, q, sigma2)
    m = ev.size
    return float(max(np.max(np.arange(1, m + 1) / m - cdf), np.max(cdf - np.arange(m) / m)))


def _check_ratio(q: float) -> None:
    if not 0 < q <= 1:
        raise ValueError(f"Marchenko–Pastur ratio q must be in (0, 1] (short side / long side), got {q}")


def mp_ks_statistic(rng: np.random.Generator, big: int, small: int, trials: int, sigma: float) -> np.ndarray:
    """The squared singular values / N of ``trials`` N×M Gaussian matrices, [trial, M]."""
    return np.stack(
        [np.linalg.eigvalsh(gram(rng.normal(0.0, sigma, (big, small)))) / big for _ in range(trials)]
    )


def mp_figure_samples(
    seed: int, shapes: Sequence[Sequence[int]]
) -> list[tuple[str, np.ndarray, float, float]]:
    """The panels of thesis fig. 2.4: per (rows, cols) shape, the eigenvalues of WᵀW for W with
    i.i.d. N(0, 1/N) entries (so the MP law with σ² = 1), as (label, eigenvalues, q, σ²)."""
    rng = np.random.default_rng([seed, 24])
    samples = []
    for rows, cols in shapes:
        big, small = max(rows, cols), min(rows, cols)
        w = rng.standard_normal((big, small)) / np.sqrt(big)
        samples.append((f"{rows}×{cols}, entries N(0, 1/N)", np.linalg.eigvalsh(gram(w)), small / big, 1.0))
    return samples
