"""Softmax experiments: the SLERP–KL curve and its cosine fit (thesis 5.2.4, fig. 5.1), synthetic
attention maps (7.2.1) and the pair sum of softmax weights (§5.3.2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax

from attnscope.theory.sampling import check_rng
from attnscope.theory.sphere import orthogonal_pairs, slerp


def slerp_kl(v: np.ndarray, w: np.ndarray, t: np.ndarray) -> np.ndarray:
    """D_KL(Softmax(w) ‖ Softmax(SLERP(v, w, t))) for pairs (..., n) at times t: (..., T)."""
    log_p = log_softmax(w, axis=-1)[..., None, :]
    log_q = log_softmax(slerp(v, w, t), axis=-1)
    return np.sum(np.exp(log_p) * (log_p - log_q), axis=-1)


@dataclass(frozen=True)
class CosineFit:
    """Least-squares fit y ≈ a·cos(πt/2 + b) + c (thesis 5.2.4); arrays broadcast over curves."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    fitted: np.ndarray
    rel_residual: np.ndarray
    """RMS of (y − fit) over t, divided by the amplitude |a|."""


def fit_cosine(t: np.ndarray, y: np.ndarray) -> CosineFit:
    """Fit a·cos(πt/2 + b) + c to curves ``y`` (..., T) sampled at ``t`` (T,).

    Linear in (α, β, c) for α·cos(πt/2) + β·sin(πt/2) + c, then a = |(α, β)|,
    b = atan2(−β, α).
    """
    t = np.asarray(t, dtype=float)
    design = np.stack([np.cos(np.pi * t / 2), np.sin(np.pi * t / 2), np.ones_like(t)], axis=1)
    y = np.asarray(y, dtype=float)
    coef, *_ = np.linalg.lstsq(design, y.reshape(-1, t.size).T, rcond=None)
    fitted = (design @ coef).T.reshape(y.shape)
    alpha, beta, c = (coef[i].reshape(y.shape[:-1]) for i in range(3))
    a = np.hypot(alpha, beta)
    rms = np.sqrt(np.mean((y - fitted) ** 2, axis=-1))
    return CosineFit(a=a, b=np.arctan2(-beta, alpha), c=c, fitted=fitted, rel_residual=rms / a)


@dataclass(frozen=True)
class SlerpKLCurve:
    """The SLERP–KL experiment of thesis fig. 5.1."""

    t: np.ndarray
    kl: np.ndarray
    """KL divergence per pair and time, (pairs, T)."""
    kl_mean: np.ndarray
    fit: CosineFit
    """Cosine fit of the pair-averaged curve ``kl_mean``."""
    pair_fit: CosineFit
    """Cosine fits of the individual pair curves."""


def slerp_kl_curve(
    seed: int = 0, dim: int = 128, pairs: int = 1000, points: int = 101, length: float = 1.0
) -> SlerpKLCurve:
    """KL(Softmax(w) ‖ Softmax(SLERP(v, w, t))) for random orthogonal pairs of length ``length``."""
    v, w = orthogonal_pairs(check_rng(seed, "slerp_kl"), pairs, dim, length)
    t = np.linspace(0.0, 1.0, points)
    kl = slerp_kl(v, w, t)
    kl_mean = kl.mean(axis=0)
    return SlerpKLCurve(t=t, kl=kl, kl_mean=kl_mean, fit=fit_cosine(t, kl_mean), pair_fit=fit_cosine(t, kl))


def synthetic_attention(
    rng: np.random.Generator, n: int, head_dim: int, logit_scale: float = 1.0
) -> np.ndarray:
    """Softmax(s·QKᵀ/√d) for Q, K with i.i.d. N(0, 1) entries: logits have std ``s``."""
    q = rng.standard_normal((n, head_dim))
    k = rng.standard_normal((n, head_dim))
    return np.exp(log_softmax(logit_scale * q @ k.T / math.sqrt(head_dim), axis=-1))


def pair_product_sum(weights: np.ndarray) -> np.ndarray:
    """Σ_{i<j} (λ_i λ_j)² of each row of ``weights`` (= ((Σλ²)² − Σλ⁴)/2)."""
    return ((weights**2).sum(axis=-1) ** 2 - (weights**4).sum(axis=-1)) / 2
