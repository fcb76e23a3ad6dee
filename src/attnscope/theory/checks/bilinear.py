"""Checks of the bilinear form ⟨Ax, By⟩ = xᵀCy for Gaussian x, y (thesis 6.2, 6.3 / B.1–B.2, §6.2.4)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from attnscope.theory.forms import bilinear_form_moments, thesis_bilinear_mean, thesis_bilinear_variance
from attnscope.theory.rmt import random_covariance
from attnscope.theory.sampling import check_rng, mean_se, var_se
from attnscope.theory.table import Statement, by_check

STATEMENTS = by_check(
    Statement(
        check="bilinear_var_centered",
        kind="thesis",
        statement="Var⟨Ax,By⟩ = Tr(Σ_X C Σ_Y Cᵀ) for independent centred Gaussians",
        equation="6.3 / B.2",
    ),
    Statement(
        check="bilinear_mean",
        kind="thesis",
        statement="E⟨Ax,By⟩ = μ_XᵀCμ_Y (Σ_XY = 0)",
        equation="6.2 / B.1",
    ),
    Statement(
        check="bilinear_var",
        kind="thesis",
        statement="Var⟨Ax,By⟩ = Tr(Σ_XCΣ_YCᵀ) + μ_YᵀCᵀΣ_XCμ_Y + μ_XᵀCΣ_YCᵀμ_X (Σ_XY = 0)",
        equation="6.3 / B.2",
    ),
    Statement(
        check="bilinear_mean_cross",
        kind="thesis",
        statement="E⟨Ax,By⟩ = μ_XᵀCμ_Y + Tr(CΣ_XY) with Σ_XY ≠ 0",
        equation="6.2 / B.1",
        note="The trace term has the wrong orientation: E[yxᵀ] = μ_Yμ_Xᵀ + Σ_YX (not Σ_XY), so "
        "E⟨Ax,By⟩ = μ_XᵀCμ_Y + Tr(CΣ_YX) = μ_XᵀCμ_Y + Tr(CᵀΣ_XY). The two differ by Tr(C(Σ_XY − Σ_XYᵀ)): "
        "they agree when Σ_XY or C is symmetric (e.g. the diagonal Σ_XY of the hypersphere case 6.37).",
    ),
    Statement(
        check="bilinear_mean_cross_corrected",
        kind="corrected",
        statement="E⟨Ax,By⟩ = μ_XᵀCμ_Y + Tr(CᵀΣ_XY)",
        equation="6.2 / B.1",
    ),
    Statement(
        check="bilinear_var_cross",
        kind="extension",
        statement="Var⟨Ax,By⟩ = 2Tr(SΣSΣ) + 4mᵀSΣSm, S = ½[[0,C],[Cᵀ,0]] for dependent Gaussians",
        equation="6.3 / B.2 (Σ_XY ≠ 0)",
        note="The thesis states 6.3 only for Σ_XY = 0 (B.7 factorises E[yyᵀ]·E[xxᵀ], valid only for "
        "independent x, y); here it would predict {thesis_variance:.6g}. "
        "With Σ_XY ≠ 0 and zero means, Isserlis adds the term Tr((CΣ_YX)²) to Tr(Σ_XCΣ_YCᵀ).",
    ),
    Statement(
        check="bilinear_self_mean",
        kind="thesis",
        statement="E⟨Ax,Bx⟩ = Tr(CΣ_X) + μ_XᵀCμ_X (self-pairing)",
        equation="§6.2.4",
    ),
)


def check_bilinear_form(seed: int, n: int, samples: int) -> list[dict[str, Any]]:
    """Mean and variance of ⟨Ax, By⟩ = xᵀCy for Gaussian x, y (6.2, 6.3 / B.1–B.2, §6.2.4)."""
    rng = check_rng(seed, "bilinear_form")
    A, B = rng.normal(0.0, 1 / math.sqrt(n), (2, n, n))
    C = A.T @ B
    cov_x, cov_y = random_covariance(rng, n), random_covariance(rng, n)
    mu_x, mu_y = rng.standard_normal(n), rng.standard_normal(n)
    params = {"n": n, "samples": samples, "A, B": "i.i.d. N(0, 1/n)", "Sigma_X, Sigma_Y": "random SPD"}

    def simulate(mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
        z = mean + rng.standard_normal((samples, 2 * n)) @ np.linalg.cholesky(cov).T
        return np.sum((z[:, :n] @ C) * z[:, n:], axis=1)

    independent = np.zeros((2 * n, 2 * n))
    independent[:n, :n], independent[n:, n:] = cov_x, cov_y
    zero = np.zeros(n)
    rows = [
        STATEMENTS["bilinear_var_centered"].measured(
            {**params, "means": "0", "Sigma_XY": "0"},
            thesis_bilinear_variance(C, zero, zero, cov_x, cov_y),
            *var_se(simulate(np.zeros(2 * n), independent)),
        )
    ]
    form = simulate(np.concatenate([mu_x, mu_y]), independent)
    shifted = {**params, "means": "N(0, I)", "Sigma_XY": "0"}
    rows.append(
        STATEMENTS["bilinear_mean"].measured(
            shifted, thesis_bilinear_mean(C, mu_x, mu_y, np.zeros((n, n))), *mean_se(form)
        )
    )
    rows.append(
        STATEMENTS["bilinear_var"].measured(
            shifted, thesis_bilinear_variance(C, mu_x, mu_y, cov_x, cov_y), *var_se(form)
        )
    )
    rows += _dependent_rows(simulate, C, mu_x, mu_y, cov_x, cov_y, params)

    x = mu_x + rng.standard_normal((samples, n)) @ np.linalg.cholesky(cov_x).T
    rows.append(
        STATEMENTS["bilinear_self_mean"].measured(
            {**params, "means": "N(0, I)"},
            float(np.trace(C @ cov_x) + mu_x @ C @ mu_x),
            *mean_se(np.sum((x @ C) * x, axis=1)),
        )
    )
    return rows


def _dependent_rows(
    simulate: Callable[[np.ndarray, np.ndarray], np.ndarray],
    C: np.ndarray,
    mu_x: np.ndarray,
    mu_y: np.ndarray,
    cov_x: np.ndarray,
    cov_y: np.ndarray,
    params: dict[str, Any],
) -> list[dict[str, Any]]:
    """The rows of a dependent pair y = μ_Y + ρ·Cᵀ(x − μ_X)/‖C‖₂ + η, whose cross-covariance
    Σ_XY = ρΣ_X C/‖C‖₂ is not symmetric."""
    rho = 0.8
    link = rho * C.T / np.linalg.norm(C, 2)
    cov_xy = cov_x @ link.T
    cov_y_total = link @ cov_x @ link.T + cov_y
    joint = np.block([[cov_x, cov_xy], [cov_xy.T, cov_y_total]])
    joint_mean = np.concatenate([mu_x, mu_y])
    form = simulate(joint_mean, joint)
    exact_mean, exact_var = bilinear_form_moments(C, joint_mean, joint)
    cross = {**params, "means": "N(0, I)", "Sigma_XY": "rho*Sigma_X*C/||C||_2", "rho": rho}
    mean, se = mean_se(form)
    return [
        STATEMENTS["bilinear_mean_cross"].measured(
            cross, thesis_bilinear_mean(C, mu_x, mu_y, cov_xy), mean, se
        ),
        STATEMENTS["bilinear_mean_cross_corrected"].measured(cross, exact_mean, mean, se),
        STATEMENTS["bilinear_var_cross"].measured(
            cross,
            exact_var,
            *var_se(form),
            thesis_variance=thesis_bilinear_variance(C, mu_x, mu_y, cov_x, cov_y_total),
        ),
    ]
