"""The weight claims (ch. 7.2.2, A.19–A.22): the learned/random spectra observations and the
base alignment Tr(W_qᵀW_k) against random init, measured on the spectra and alignment tables."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from attnscope.claims.records import POINT, RANGE, Result, Setting, Thresholds, not_measured, verdict_of
from attnscope.comparison import OBSERVATIONS, Observation
from attnscope.evidence import Evidence
from attnscope.matrices import MATRIX_FORMS
from attnscope.stats import Interval


def _layer_values(table: pd.DataFrame, form: str, matrix: str, column: str | Callable) -> pd.Series:
    """One value per layer of ``matrix`` in ``form`` (tables without forms are raw)."""
    rows = table[table["matrix"] == matrix]
    if "form" in rows:
        rows = rows[rows["form"] == form]
    elif form != MATRIX_FORMS[0]:
        rows = rows.iloc[:0]
    values = column(rows) if callable(column) else rows[column]
    return pd.Series(np.asarray(values, np.float64), index=rows["layer"].to_numpy())


def layer_share_range(passes: np.ndarray, per_seed: list[np.ndarray]) -> Interval:
    """The share of layers (or heads) that pass, with its range over the init seeds: from the
    lowest to the highest share that one seed alone gives (a point with fewer than two seeds), a
    spread, not a confidence interval. The layers are the population the claim is about, not a
    sample of it: they are not resampled."""
    share = float(np.mean(passes))
    shares = [float(np.mean(p)) for p in per_seed] if len(per_seed) > 1 else []
    return Interval(share, min([share, *shares]), max([share, *shares]), len(passes), len(passes))


def _observation_result(
    ev: Evidence, obs: Observation, matrix: str, setting: Setting, th: Thresholds
) -> Result | None:
    """The share of layers whose learned/random ratio meets the observation's criterion (random:
    the init seeds' mean per layer), with the ratio's min / median / max over layers. Scale-free:
    the top singular value's share σ_max²/‖W‖²_F (1 / stable rank) in place of σ_max; Σσ² has no
    scale-free form."""
    randoms = [v for v in ev.spectra if v != "trained"]
    if setting.scale_free:
        if obs.measure != "sv_max":
            return None
        column: str | Callable = lambda rows: rows["lambda_max"] / rows["sum_sigma2"]  # noqa: E731
    else:
        column = obs.measure
    trained = _layer_values(ev.spectra["trained"], setting.form, matrix, column)
    seeds = pd.concat([_layer_values(ev.spectra[v], setting.form, matrix, column) for v in randoms], axis=1)
    layers = trained.index.intersection(seeds.dropna().index)
    if not len(layers):
        return None
    seeds = seeds.loc[layers].to_numpy()
    ratio = trained[layers].to_numpy() / seeds.mean(axis=1)
    test = np.vectorize(obs.test, otypes=[bool])
    interval = layer_share_range(
        test(ratio), [test(trained[layers].to_numpy() / seeds[:, i]) for i in range(seeds.shape[1])]
    )
    verdict = verdict_of(interval, th.layer_share, th.layer_share_contradicted)
    low, high = obs.thesis_range
    what = "σ_max²/‖W‖²_F" if setting.scale_free else {"sum_sigma2": "Σσ²", "sv_max": "σ_max"}[obs.measure]
    measured = (
        f"W_{matrix} {what}: learned/random ratio per layer min {ratio.min():.3g}, median "
        f"{np.median(ratio):.3g}, max {ratio.max():.3g} (thesis {low:g}–{high:g}); {obs.criterion} in "
        f"{int(test(ratio).sum())} of {len(layers)} layers, share {interval.estimate:.3g}, range over "
        f"{len(randoms)} init seed(s) [{interval.low:.3g}, {interval.high:.3g}]"
    )
    bounds = RANGE if len(randoms) > 1 else POINT
    variants = f"trained, {', '.join(randoms)}"
    return Result(verdict, interval, measured, variants, len(randoms), per_prompt=False, bounds=bounds)


def spectrum_rows(ev: Evidence, th: Thresholds, setting: Setting) -> list[tuple[str, Result | None]]:
    """One result per observation of ch. 7.2.2 and matrix (:data:`attnscope.spectra.OBSERVATIONS`)."""
    if "trained" not in ev.spectra or len(ev.spectra) < 2:
        statement = "Learned W_q/W_k spectra differ from random as observed in ch. 7.2.2"
        return [(statement, not_measured("no trained and random spectra tables", "trained, random-s*"))]
    return [
        (f"W_{matrix}: {obs.statement}", _observation_result(ev, obs, matrix, setting, th))
        for obs in OBSERVATIONS
        for matrix in obs.matrices
    ]


MIN_INIT_SEEDS = 3
"""Random init seeds needed before their spread replaces the formula's as the null of a z-score."""


def alignment_small(
    scope: str, scale_free: bool = False
) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """Share of layers (heads) whose Tr(W_qᵀW_k) is within ``alignment_z`` standard deviations
    of random matrices: the z-score against the random-init expectation, or (``scale_free``)
    cosine·√n, the trace over ‖W_q‖_F‖W_k‖_F, which is ≈ N(0, 1/n) for independent random
    matrices of any scale and so tests the alignment alone. Under the ``init seeds`` null the
    statistic is standardised by the random seeds' own mean and spread per layer (head) instead
    of the formula's. The layers (heads) are the population, not resampled, and the share is a point
    (:func:`layer_share_range` without seeds): no seed enters the formula's z-score, and the init
    seeds' null takes their spread together, which one seed alone does not have."""

    def statistic(table: pd.DataFrame) -> pd.Series:
        rows = table[table["scope"] == scope].set_index(["layer", "head"] if scope == "head" else ["layer"])
        return rows["cosine"] * np.sqrt(rows["n_terms"]) if scale_free else rows["z_score"]

    def measure(ev: Evidence, th: Thresholds, setting: Setting) -> Result | None:
        if "trained" not in ev.alignment:
            return not_measured("no base-alignment table")
        trained = statistic(ev.alignment["trained"])
        randoms = [statistic(t) for v, t in ev.alignment.items() if v != "trained"]
        if setting.null == "init seeds":
            if len(randoms) < MIN_INIT_SEEDS:
                return None
            spread = pd.concat(randoms, axis=1)
            trained = (trained - spread.mean(axis=1)) / spread.std(axis=1, ddof=1)
        z = trained.abs()
        if z.empty:
            return not_measured(f"no {scope} rows in the base-alignment table")
        interval = layer_share_range((z <= th.alignment_z).to_numpy(), [])
        verdict = verdict_of(interval, th.layer_share, th.layer_share_contradicted)
        name = "|cosine|·√n" if scale_free else "|z|"
        measured = (
            f"{name} ≤ {th.alignment_z:g} in {int((z <= th.alignment_z).sum())} of {len(z)} {scope}s "
            f"(share {interval.estimate:.3g}); "
            f"median {z.median():.3g}, max {z.max():.3g}"
        )
        return Result(verdict, interval, measured, n_seeds=len(randoms), per_prompt=False, bounds=POINT)

    return measure
