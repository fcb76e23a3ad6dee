"""The attention claims (ch. 8.2–8.5): layer bands of self mass and entropy, the within-shot
test, the value domain, the embedding cosine, the random model, and the α edits; each measured
on the per-prompt tables of the maps under one analysis choice."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from attnscope import stats
from attnscope.choices import MIN_SIDE_KEYS
from attnscope.claims.records import (
    Contrast,
    Result,
    Setting,
    Thresholds,
    equivalence_of,
    not_measured,
    verdict_of,
)
from attnscope.claims.views import (
    PromptTable,
    band_mean,
    layer_bands,
    paired_table,
    pick_variant,
    prompt_table,
)
from attnscope.evidence import Evidence
from attnscope.stats import Interval
from attnscope.store import HEAD_MEAN
from attnscope.variants import random_variants
from attnscope.verdicts import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, SUPPORTED

METRIC_NAMES = {"row_entropy": "normalised entropy", "self_mass": "self mass"}


def _measured_mean(values: np.ndarray) -> np.ndarray:
    """The mean of the measured values over the last axis [..., n] → [...] (layers, or prompts), as
    ``np.nanmean`` computes it (the sum of the measured values over their count), where none is
    measured (a target whose prompts all lack the metric, a mass part a choice does not have) NaN
    without the warning for the mean of an empty slice."""
    measured = ~np.isnan(values)
    with np.errstate(invalid="ignore"):
        return np.where(measured, values, 0.0).sum(axis=-1) / measured.sum(axis=-1)


def _bands_of(ev: Evidence, setting: Setting, metrics: list[str]) -> PromptTable | None:
    return prompt_table(ev.choices, ["trained"], metrics, setting.choice)


def _band_text(table: PromptTable, band: str | int, name: str, column: int = 0) -> str:
    """``name`` of each band, from the table's ``column``-th metric."""
    parts = layer_bands(table.num_layers, band)
    means = np.nanmean(table.values, axis=0).reshape(-1, table.num_layers)[column]
    return name + " " + ", ".join(f"{part} {band_mean(means, idx):.3g}" for part, idx in parts.items())


def early_diagonal(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """The early band's share of diagonally dominant rows (a_ii ≥ Σ_{j≠i} a_ij over the visible
    keys); the self mass of every band and early/middle are reported beside it."""
    table = _bands_of(ev, setting, ["diagonal_share", "self_mass"])
    if table is None:
        return not_measured("no trained attention metrics")
    parts = layer_bands(table.num_layers, setting.band)
    interval = table.interval(lambda m: band_mean(m[..., 0, :], parts["early"]))
    ratio = table.interval(
        lambda m: band_mean(m[..., 1, :], parts["early"]) / band_mean(m[..., 1, :], parts["middle"])
    )
    verdict = verdict_of(interval, th.dominant_share, th.dominant_share)
    measured = (
        f"early rows diagonally dominant: {interval} ({_band_text(table, setting.band, 'share', 0)}); "
        f"{_band_text(table, setting.band, 'self mass', 1)}, early/middle {ratio}"
    )
    return Result(verdict, interval, measured, n_seeds=table.n_seeds)


def late_resembles_early(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """Late minus early share of diagonally dominant rows, tested for equivalence (±resemblance);
    the late/early self-mass ratio is reported beside it."""
    table = _bands_of(ev, setting, ["diagonal_share", "self_mass"])
    if table is None:
        return not_measured("no trained attention metrics")
    parts = layer_bands(table.num_layers, setting.band)
    interval = table.interval(
        lambda m: band_mean(m[..., 0, :], parts["late"]) - band_mean(m[..., 0, :], parts["early"])
    )
    ratio = table.interval(
        lambda m: band_mean(m[..., 1, :], parts["late"]) / band_mean(m[..., 1, :], parts["early"])
    )
    measured = (
        f"diagonally dominant rows, late − early: {interval} "
        f"({_band_text(table, setting.band, 'share', 0)}); self mass late/early {ratio}"
    )
    verdict = equivalence_of(interval, th.resemblance)
    contrast = Contrast("diagonal_share", "late", "early")
    return Result(verdict, interval, measured, n_seeds=table.n_seeds, contrast=contrast)


def entropy_step(later: str, earlier: str, sign: int) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """The change of normalised entropy from the ``earlier`` to the ``later`` band, expected up
    (``sign`` +1: attention disperses) or down (−1: it contracts) by the entropy step."""

    def measure(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
        table = _bands_of(ev, setting, ["row_entropy"])
        if table is None:
            return not_measured("no trained attention metrics")
        parts = layer_bands(table.num_layers, setting.band)
        interval = table.interval(
            lambda m: band_mean(m[..., 0, :], parts[later]) - band_mean(m[..., 0, :], parts[earlier])
        )
        verdict = verdict_of(interval, sign * th.entropy_step, 0.0)
        text = f"{_band_text(table, setting.band, 'normalised entropy')}; {later} − {earlier} = {interval}"
        contrast = Contrast("row_entropy", later, earlier)
        return Result(verdict, interval, text, n_seeds=table.n_seeds, contrast=contrast)

    return measure


WITHIN_SHOT_COLUMNS = [
    "row_drop",
    "row_placebo_previous",
    "row_placebo_own",
    "within_shot_mass",
    "across_shot_mass",
]
PLACEBOS = {1: "a cutoff inside the previous shot", 2: "a cutoff inside the own shot"}
"""The within-shot claim's columns of the choices table, and its placebos by column."""


def within_shot(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """The within-row shot-boundary drop (:mod:`attnscope.choices`): per query row, the jump of log
    attention at the row's shot boundary in a fit of a decay with distance and key-segment terms,
    so the keys compared share the row and locality and segment preferences score 0. It is
    supported (contradicted) only where it also lies above (below) the jumps at placebo cutoffs
    inside the previous and the own shot: a jump those show as well is a misfit of the decay, not
    the shots. Pooled over the shot draws; each draw's estimate is in the measured text."""
    table = prompt_table(ev.choices, ["trained"], WITHIN_SHOT_COLUMNS, setting.choice)
    if table is None or "row_drop" not in ev.choices:
        return not_measured("no trained attention metrics")
    layers = table.num_layers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a layer where no prompt has a drop
        means = np.nanmean(table.values, axis=0).reshape(len(WITHIN_SHOT_COLUMNS), layers)
    masses = f"within-shot mass {np.nanmean(means[3]):.3g}, across-shot {np.nanmean(means[4]):.3g}"
    if np.isnan(table.values[:, :layers]).all():
        return not_measured(
            f"not identifiable under this choice: no query row with {MIN_SIDE_KEYS} keys on each side of its "
            f"shot boundary that the key segments do not confound; {masses}"
        )
    interval = table.interval(lambda m: _measured_mean(m[..., 0, :]))
    excess = {p: table.interval(lambda m, p=p: _measured_mean(m[..., 0, :] - m[..., p, :])) for p in PLACEBOS}
    verdict = verdict_of(interval, th.boundary_drop, 0.0)
    if verdict == SUPPORTED and not all(e.low > 0 for e in excess.values()):
        verdict = INCONCLUSIVE  # the placebo cutoffs jump as much: curvature of the decay, not shots
    if verdict == CONTRADICTED and not all(e.high < 0 for e in excess.values()):
        verdict = INCONCLUSIVE  # ... the other way
    draws = "; ".join(
        f"{name} {part.interval(lambda m: _measured_mean(m[..., 0, :]))}" for name, part in table.draws()
    )
    placebos = "; ".join(f"minus the jump at {PLACEBOS[p]} {e}" for p, e in excess.items())
    measured = (
        f"within-row drop at the shot boundary (log ratio) {interval}, dropping in "
        f"{int((means[0] > 0).sum())} of {layers} layers; per shot draw: {draws}; {placebos}; {masses}"
    )
    return Result(verdict, interval, measured, n_seeds=table.n_seeds)


def value_domain(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    table = prompt_table(ev.choices, ["trained"], ["small_mass", "small_share"], setting.choice)
    if table is None:
        return not_measured("no trained attention metrics")
    interval = table.interval(lambda m: _measured_mean(m[..., 0, :]))
    share = table.interval(lambda m: _measured_mean(m[..., 1, :]))
    verdict = verdict_of(interval, th.small_mass, th.small_mass)
    measured = (
        f"share of the attention mass on values ≤ 0.1: {interval} (share of values ≤ 0.1, "
        f"which a row of mass 1 cannot fail: {share})"
    )
    return Result(verdict, interval, measured, n_seeds=table.n_seeds)


COSINE_STATEMENT = "Attention is only weakly related to the embedding cosine similarity"
COSINE_COLUMNS = {
    "words": ["cosine_pearson_words", "cosine_spearman_words"],
    "full": ["cosine_pearson", "cosine_spearman"],
}
"""The correlation columns of the metrics table under each analysis choice that has them (the
renormalised choices have none: renormalising rescales each row, which a correlation over
pairs of many rows does not undo)."""
COSINE_PAIRS = {"words": "word and clue tokens, values as given", "full": "full maps"}


def _cosine_result(rows: pd.DataFrame, th: Thresholds, choice: str, heads: int = 0) -> Result:
    """The largest |r| or |ρ| (means over prompts) over the columns of ``rows``: layers, or with
    ``heads`` the layer × head pairs numbered layer·heads + head."""
    table = prompt_table(rows, ["trained"], COSINE_COLUMNS[choice])
    if table is None:
        return not_measured("no trained attention metrics")
    interval = table.interval(lambda m: np.nanmax(np.abs(m), axis=(-2, -1)))
    means = np.nanmean(table.values, axis=0).reshape(2, table.num_layers)
    peak = int(np.nanargmax(np.abs(means).max(axis=0)))
    where = f"layer {peak // heads}, head {peak % heads}" if heads else f"layer {peak}"
    what = "one head's" if heads else "a layer's head-mean"
    verdict = verdict_of(interval, th.weak_correlation, th.strong_correlation)
    measured = (
        f"largest |r| or |ρ| of {what} maps = {interval} ({where}); mean over "
        f"{'heads and layers' if heads else 'layers'} r = {np.nanmean(means[0]):.3g}, "
        f"ρ = {np.nanmean(means[1]):.3g} ({COSINE_PAIRS[choice]})"
    )
    return Result(verdict, interval, measured, n_seeds=table.n_seeds)


def cosine_weak(ev: Evidence, th: Thresholds, setting: Setting) -> list[tuple[str, Result]]:
    """The correlation with the input-embedding cosine on the head-mean maps (what fig. 8.6
    shows) and, where the metrics have them, on every head: a head the mean hides counts.
    Measured under the choices of :data:`COSINE_COLUMNS` (no result under the others)."""
    metrics = ev.metrics
    if setting.choice not in COSINE_COLUMNS:
        return []
    if not set(COSINE_COLUMNS[setting.choice]) <= set(metrics.columns):
        return [(COSINE_STATEMENT, not_measured("no trained attention metrics"))]
    head = metrics["head"] if "head" in metrics else pd.Series(HEAD_MEAN, index=metrics.index)
    results = [(COSINE_STATEMENT, _cosine_result(metrics[head == HEAD_MEAN], th, setting.choice))]
    per_head = metrics[head != HEAD_MEAN]
    if len(per_head):
        heads = int(per_head["head"].max()) + 1
        per_head = per_head.assign(layer=per_head["layer"] * heads + per_head["head"])
        statement = f"Per head: {COSINE_STATEMENT[0].lower()}{COSINE_STATEMENT[1:]}"
        results.append((statement, _cosine_result(per_head, th, setting.choice, heads)))
    return results


def random_uniform(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    names = random_variants(ev.variants())
    if not names:
        return not_measured("no random-s<seed> variant in the reference experiment", "random-s*")
    table = prompt_table(ev.choices, names, ["row_entropy"], setting.choice)
    if table is None:
        return not_measured("no random-model metrics under this choice", ", ".join(names))
    interval = table.interval(lambda m: np.nanmin(m[..., 0, :], axis=-1))
    means = np.nanmean(table.values, axis=0)
    verdict = verdict_of(interval, th.uniform_entropy, th.uniform_entropy_contradicted)
    measured = (
        f"normalised entropy: lowest layer mean {interval} (layer {int(np.nanargmin(means))}), "
        f"mean {np.nanmean(means):.3g}; {len(names)} init seed(s)"
    )
    return Result(verdict, interval, measured, ", ".join(names), table.n_seeds, draws="init seed")


def _layer_test(table: PromptTable, sign: int, alpha: float) -> stats.LayerTest:
    """The paired per-layer test on target means (replicates of a target averaged first)."""
    frame = pd.DataFrame(table.values[:, : table.num_layers] * sign).groupby(table.targets).mean()
    return stats.paired_layer_test(frame.to_numpy(), alpha=alpha)


def ablation(metric: str, direction: str, sign: int) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """An α-edit claim: ``metric`` of the α > 1 (``up``) or α < 1 (``down``) edit moves in
    direction ``sign`` relative to the trained model, on average and layer by layer."""
    label = "qkscale-a" + ("2" if direction == "up" else "0.5")

    def measure(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
        name = pick_variant(ev.variants(), "qkscale", direction, 2.0 if direction == "up" else 0.5)
        if name is None:
            return not_measured(f"no qkscale variant with α {'>' if direction == 'up' else '<'} 1", label)
        table = paired_table(ev.choices, name, [metric], setting.choice)
        if table is None:
            return not_measured("no trained attention metrics on the same prompts", name)
        effect = table.interval(lambda m: sign * _measured_mean(m[..., 0, :]))
        test = _layer_test(table, sign, th.alpha)
        way = "higher" if sign > 0 else "lower"
        moved = test.count(1) >= th.layer_share * table.num_layers
        verdict = verdict_of(effect, th.ablation_step, 0.0)
        if verdict == SUPPORTED and not moved:
            verdict = INCONCLUSIVE
        shown = Interval(
            sign * effect.estimate,
            *sorted((sign * effect.low, sign * effect.high)),
            effect.n,
            effect.n_clusters,
        )
        measured = f"{METRIC_NAMES[metric]} {name} − trained: mean {shown}; {test.describe(1, way)}"
        contrast = Contrast(metric, name, "trained")
        return Result(verdict, shown, measured, f"trained, {name}", table.n_seeds, contrast=contrast)

    return measure


MASS_PARTS = ("self_mass", "previous_mass", "sink_mass")


def alpha_up_self(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """α = 2 raises self mass *and* tokens attend predominantly to themselves; the measured text
    says where the mass the edit moves goes (self, previous token, sink, the rest)."""
    result = ablation("self_mass", "up", 1)(ev, th, setting)
    name = pick_variant(ev.variants(), "qkscale", "up", 2.0)
    if result.verdict == NOT_MEASURED:
        return result
    edited = prompt_table(ev.choices, [name], ["self_mass"], setting.choice)
    level = edited.interval(lambda m: _measured_mean(m[..., 0, :]))
    moved = paired_table(ev.choices, name, MASS_PARTS, setting.choice)
    deltas = _measured_mean(moved.values.T).reshape(len(MASS_PARTS), moved.num_layers).mean(axis=1)
    rest = -np.nansum(deltas)
    where = ", ".join(
        f"{part.removesuffix('_mass')} {d:+.3g}" for part, d in zip(MASS_PARTS, deltas) if not np.isnan(d)
    )
    verdict = result.verdict
    if level.high < th.predominant:
        verdict = CONTRADICTED
    elif verdict == SUPPORTED and level.low < th.predominant:
        verdict = INCONCLUSIVE
    measured = (
        f"{result.measured}; {name} self mass {level} (predominant ≥ {th.predominant:g}); "
        f"the mass moves: {where}, rest {rest:+.3g}"
    )
    return replace(result, verdict=verdict, measured=measured)
