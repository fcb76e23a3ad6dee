"""Points and paths on the sphere: uniform points, pairs at a given angle, SLERP (thesis 5.2.4, 6.3)."""

from __future__ import annotations

import math

import numpy as np


def slerp(v: np.ndarray, w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Spherical interpolation λ₁(t)v + λ₂(t)w with λ₁ = sin((1−t)θ)/sin θ, λ₂ = sin(tθ)/sin θ.

    ``v`` and ``w`` are (..., n) and must not be parallel; ``t`` is (T,); the result is
    (..., T, n), equal to ``v`` at t = 0 and ``w`` at t = 1.
    """
    t = np.asarray(t, dtype=float)
    cos = np.sum(v * w, -1) / (np.linalg.norm(v, axis=-1) * np.linalg.norm(w, axis=-1))
    theta = np.arccos(np.clip(cos, -1, 1))[..., None]
    lam1 = np.sin((1 - t) * theta) / np.sin(theta)
    lam2 = np.sin(t * theta) / np.sin(theta)
    return lam1[..., None] * v[..., None, :] + lam2[..., None] * w[..., None, :]


def orthogonal_pairs(
    rng: np.random.Generator, pairs: int, dim: int, length: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """``pairs`` random orthogonal vector pairs (v, w) on the sphere of radius ``length``."""
    g = rng.standard_normal((2, pairs, dim))
    v = g[0] / np.linalg.norm(g[0], axis=1, keepdims=True)
    w = g[1] - np.sum(g[1] * v, axis=1, keepdims=True) * v
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    return length * v, length * w


def uniform_sphere(rng: np.random.Generator, count: int, n: int, radius: float = 1.0) -> np.ndarray:
    """``count`` points uniform on the sphere of ``radius`` in R^n (normalised Gaussians)."""
    g = rng.standard_normal((count, n))
    return radius * g / np.linalg.norm(g, axis=1, keepdims=True)


def unit_pair(rng: np.random.Generator, n: int, cosine: float) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors in R^n at ``cosine`` to each other, in a random orientation."""
    q, _ = np.linalg.qr(rng.standard_normal((n, 2)))
    v, u = q[:, 0], q[:, 1]
    return v, cosine * v + math.sqrt(max(0.0, 1.0 - cosine**2)) * u
