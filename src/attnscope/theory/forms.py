"""Moments of bilinear forms and traces of random matrices (thesis ch. 6.2): the exact
Gaussian moments, the thesis's formulas, and the traces of its aligned and edited constructions."""

from __future__ import annotations

import numpy as np


def bilinear_form_moments(C: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> tuple[float, float]:
    """Exact mean and variance of ``xᵀCy`` for jointly Gaussian ``(x, y) ~ N(mean, cov)``.

    ``mean`` is (μ_X, μ_Y) stacked (2n) and ``cov`` the joint 2n×2n covariance whose
    upper-right block is Σ_XY = Cov(x, y). With S the symmetrised block matrix
    ½[[0, C], [Cᵀ, 0]], xᵀCy = zᵀSz and the Gaussian quadratic-form moments give
    E = mᵀSm + Tr(SΣ) = μ_XᵀCμ_Y + Tr(CᵀΣ_XY), Var = 2Tr(SΣSΣ) + 4mᵀSΣSm.
    """
    n = C.shape[0]
    S = np.zeros((2 * n, 2 * n))
    S[:n, n:] = C / 2
    S[n:, :n] = C.T / 2
    s_cov = S @ cov
    return (
        float(mean @ S @ mean + np.trace(s_cov)),
        float(2 * np.trace(s_cov @ s_cov) + 4 * mean @ s_cov @ S @ mean),
    )


def thesis_bilinear_mean(C: np.ndarray, mu_x: np.ndarray, mu_y: np.ndarray, cov_xy: np.ndarray) -> float:
    """Thesis (6.2)/(B.1): E[⟨Ax, By⟩] = μ_XᵀCμ_Y + Tr(CΣ_XY)."""
    return float(mu_x @ C @ mu_y + np.trace(C @ cov_xy))


def thesis_bilinear_variance(
    C: np.ndarray, mu_x: np.ndarray, mu_y: np.ndarray, cov_x: np.ndarray, cov_y: np.ndarray
) -> float:
    """Thesis (6.3)/(B.2), for Σ_XY = 0: Tr(Σ_XCΣ_YCᵀ) + μ_YᵀCᵀΣ_XCμ_Y + μ_XᵀCΣ_YCᵀμ_X."""
    return float(
        np.trace(cov_x @ C @ cov_y @ C.T) + mu_y @ C.T @ cov_x @ C @ mu_y + mu_x @ C @ cov_y @ C.T @ mu_x
    )


def constructed_base_alignment(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tr(AᵀB') for B' = U_B' D_B V_Bᵀ with the thesis's choice U_AᵀU_B' = V_AᵀV_B (6.24), and
    Tr(AᵀB'') for full alignment B'' = U_A D_B V_Aᵀ; batched over (..., n, n).

    With W = V_BᵀV_A the first is Tr(D_A Wᵀ D_B W) = Σ_ij σ_ai σ_bj W_ji², the second Σᵢ σ_ai σ_bi
    (singular values in descending order).
    """
    _, sv_a, vt_a = np.linalg.svd(A)
    _, sv_b, vt_b = np.linalg.svd(B)
    rotation = vt_b @ np.swapaxes(vt_a, -1, -2)
    return np.einsum("...i,...ji,...j->...", sv_a, rotation**2, sv_b), np.sum(sv_a * sv_b, axis=-1)


def edited_spectrum_trace(sv_a: np.ndarray, sv_b: np.ndarray, w_u: np.ndarray, w_v: np.ndarray) -> np.ndarray:
    """Tr(ÂᵀB̂) = Tr(D̂_A W_U D̂_B W_V) = Σ_ij σ̂_ai (W_U)_ij σ̂_bj (W_V)_ji (6.30), with
    W_U = U_AᵀU_B and W_V = V_BᵀV_A of shape (batch, n, n) and spectra (k, n): (batch, k).
    """
    batch, n, _ = w_u.shape
    weights = (sv_a[:, :, None] * sv_b[:, None, :]).reshape(-1, n * n)
    return (w_u * np.swapaxes(w_v, 1, 2)).reshape(batch, n * n) @ weights.T
