"""Checks of the hypersphere statements of thesis §6.3 (6.36, 6.45–6.48, 6.49) and the
'Jensen' bound on softmax weights of §5.3.2."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attnscope.theory.sampling import batches, check_rng, mean_se, var_se
from attnscope.theory.softmax import pair_product_sum
from attnscope.theory.sphere import uniform_sphere, unit_pair
from attnscope.theory.table import Statement, by_check

STATEMENTS = by_check(
    Statement(
        check="sphere_cov",
        kind="thesis",
        statement="x uniform on S_l^{n−1}: Cov[xᵢ, xⱼ] = −l²/(n(n−1))",
        equation="6.36",
        note="Σᵢ Var(xᵢ) = l² fixes the norm, not Σᵢ xᵢ, so it does not force negative covariances; "
        "the law is invariant under xᵢ → −xᵢ, hence Cov[xᵢ, xⱼ] = 0.",
    ),
    Statement(
        check="sphere_cov_corrected", kind="corrected", statement="Cov[xᵢ, xⱼ] = 0 (i ≠ j)", equation="6.36"
    ),
    Statement(
        check="angle_var_k{cosine:g}",
        kind="thesis",
        statement="C ~ N(0, 1/n) i.i.d., ‖v‖ = ‖w‖ = 1, ⟨v, w⟩ = k: Var(vᵀCw) = k²/n + (n−1)/n²",
        equation="6.45–6.48",
        note="Var(vᵀCw) = Σ_lm Var(C_lm) v_l² w_m² = ‖v‖²‖w‖²/n for fixed v, w: no angle enters, so "
        "the variance does not preserve angular information (6.48, the basis of 8.3 and 9.1).",
    ),
    Statement(
        check="angle_var_k{cosine:g}_corrected",
        kind="corrected",
        statement="Var(vᵀCw) = ‖v‖²‖w‖²/n at every angle",
        equation="6.45–6.48",
    ),
    Statement(
        check="cauchy_schwarz_cos",
        kind="thesis",
        statement="|⟨W_q x, W_k y⟩| ≤ ‖W_q‖‖W_k‖‖x‖‖y‖·|cos∠(x, y)|",
        equation="6.49",
        bound="upper",
        abs_tolerance=1e-12,
        note="Counterexample: x ⊥ y, so the bound is 0, while ⟨x, W_k y⟩ = 1. Cauchy–Schwarz bounds "
        "by ‖W_q x‖‖W_k y‖, which carries no angle between x and y.",
    ),
    Statement(
        check="cauchy_schwarz_corrected",
        kind="corrected",
        statement="|⟨W_q x, W_k y⟩| ≤ ‖W_q‖‖W_k‖‖x‖‖y‖ (max of the ratio "
        "over random W_q, W_k, x, y and the counterexample)",
        equation="6.49",
        bound="upper",
        abs_tolerance=1e-9,
    ),
    Statement(
        check="jensen_pairs",
        kind="thesis",
        statement="Σ_{i<j}(λᵢλⱼ)² ≤ Σ_{i<j}(1/n²)² for Σλᵢ = 1, λ ≥ 0",
        equation="§5.3.2",
        bound="upper",
        abs_tolerance=1e-12,
        note="Uniform weights do not maximise Σ_{i<j}(λᵢλⱼ)²: (½, ½, 0, …) gives 1/16; the maximum "
        "on the simplex is 1/16 (and a vertex gives 0).",
    ),
    Statement(
        check="jensen_pairs_max",
        kind="extension",
        statement="Σ_{i<j}(λᵢλⱼ)² ≤ 1/16 on the simplex (n ≥ 2)",
        equation="§5.3.2",
        bound="upper",
        abs_tolerance=1e-12,
    ),
)


def check_hypersphere(seed: int, n: int, samples: int, trials: int, radius: float) -> list[dict[str, Any]]:
    """The hypersphere statements of §6.3 (6.36, 6.45–6.48, 6.49) and the 'Jensen' bound of §5.3.2."""
    rng = check_rng(seed, "hypersphere")
    x = uniform_sphere(rng, samples, n, radius)
    params = {"n": n, "radius": radius, "samples": samples}
    cov = mean_se(x[:, 0] * x[:, 1])  # E[x_i] = 0
    rows = [
        STATEMENTS["sphere_cov"].measured(params, -(radius**2) / (n * (n - 1)), *cov),
        STATEMENTS["sphere_cov_corrected"].measured(params, 0.0, *cov),
    ]
    for cosine in (0.0, 1.0):
        v, w = unit_pair(rng, n, cosine)
        values = np.concatenate(
            [
                np.einsum("i,bij,j->b", v, rng.normal(0.0, 1 / math.sqrt(n), (b, n, n)), w)
                for b in batches(trials, n * n)
            ]
        )
        var = var_se(values)
        params = {"n": n, "cos(v, w)": cosine, "trials": trials}
        rows += [
            STATEMENTS["angle_var_k{cosine:g}"].measured(
                params, cosine**2 / n + (n - 1) / n**2, *var, cosine=cosine
            ),
            STATEMENTS["angle_var_k{cosine:g}_corrected"].measured(params, 1 / n, *var, cosine=cosine),
        ]
    rows += _cauchy_schwarz_rows(rng, n, trials)
    # §5.3.2: Σ_{i<j}(λᵢλⱼ)² ≤ Σ_{i<j}(1/n²)² on the simplex; two weights of ½ give 1/16.
    weights = np.vstack([rng.dirichlet(np.full(n, 0.5), samples), np.r_[0.5, 0.5, np.zeros(n - 2)]])
    largest = float(pair_product_sum(weights).max())
    params = {"n": n, "samples": samples, "weights": "Dirichlet(½) and (½, ½, 0, …)"}
    return [
        *rows,
        STATEMENTS["jensen_pairs"].measured(params, n * (n - 1) / 2 / n**4, largest, 0.0),
        STATEMENTS["jensen_pairs_max"].measured(params, 1 / 16, largest, 0.0),
    ]


def _cauchy_schwarz_rows(rng: np.random.Generator, n: int, trials: int) -> list[dict[str, Any]]:
    """6.49: the bound with |cos∠(x, y)| fails on x ⊥ y, W_q = I, W_k a permutation taking y to x;
    the bound without it holds there and on random W_q, W_k, x, y."""
    x, y = np.eye(n)[0], np.eye(n)[1]
    w_k = np.eye(n)[np.r_[1, 0, 2:n]]  # swaps coordinates 0 and 1: W_k y = x
    lhs = abs(float(x @ (w_k @ y)))
    cos = float(x @ y)
    counterexample = lhs / (np.linalg.norm(w_k, ord=2) * np.linalg.norm(x) * np.linalg.norm(y))
    params = {"n": n, "x": "e₁", "y": "e₂", "W_q": "I", "W_k": "swap(1, 2)"}
    rows = [STATEMENTS["cauchy_schwarz_cos"].measured(params, abs(cos), lhs, 0.0)]
    a, b = (
        rng.standard_normal((trials, n, n)) / math.sqrt(n),
        rng.standard_normal((trials, n, n)) / math.sqrt(n),
    )
    xs, ys = rng.standard_normal((trials, n)), rng.standard_normal((trials, n))
    lhs = np.abs(np.einsum("bi,bi->b", np.einsum("bij,bj->bi", a, xs), np.einsum("bij,bj->bi", b, ys)))
    rhs = (
        np.linalg.norm(a, ord=2, axis=(1, 2))
        * np.linalg.norm(b, ord=2, axis=(1, 2))
        * np.linalg.norm(xs, axis=1)
        * np.linalg.norm(ys, axis=1)
    )
    ratio = max(float((lhs / rhs).max()), counterexample)
    rows.append(STATEMENTS["cauchy_schwarz_corrected"].measured({"n": n, "trials": trials}, 1.0, ratio, 0.0))
    return rows
