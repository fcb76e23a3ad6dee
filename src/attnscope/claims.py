"""The thesis-claims table: each qualitative claim of chapters 7.2.2, 8 and 9.1 against
this run's measurements, as an estimate with a 95 % confidence interval and a verdict from
the whole interval.

Verdicts: ``supported`` (the whole interval clears the supported bar), ``contradicted``
(it lies wholly on the other side of the contradicted bar; on a model other than the
thesis's Mistral-7B this reads *not replicated on <model>*), ``inconclusive`` (the
interval straddles a bar), ``not measured`` (the run lacks the variant or table the claim
needs). The bars are fixed in :class:`Thresholds` and printed in every row.

Intervals resample target words (:mod:`attnscope.stats`): the prompts of one target under
several shot seeds form one cluster. Weight claims resample layers. Each attention claim is
measured under every analysis choice of the maps (the thesis's: keys restricted to the
words and clues; full rows; full rows without the first token) and every layer band of
``claims.bands``; the table gives the verdict under the thesis's choice with the first
band and says whether the others agree (``robust``); the sensitivity table lists them all.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from attnscope import stats
from attnscope import variants as variant_names
from attnscope.evidence import Evidence
from attnscope.io import markdown_table
from attnscope.spectra import OBSERVATIONS, Observation
from attnscope.stats import Interval
from attnscope.verdicts import CLAIM_VERDICTS as VERDICTS
from attnscope.verdicts import CONTRADICTED, NOT_MEASURED, SUPPORTED
from attnscope.verdicts import INCONCLUSIVE as INCONCLUSIVE  # re-exported: callers test against claims.*

COLUMNS = [
    "model",
    "claim",
    "section",
    "statement",
    "metric",
    "setting",
    "estimate",
    "low",
    "high",
    "n_prompts",
    "n_seeds",
    "measured",
    "threshold",
    "verdict",
    "robust",
    "experiment",
    "variants",
]
SENSITIVITY_COLUMNS = [
    "model",
    "claim",
    "statement",
    "setting",
    "estimate",
    "low",
    "high",
    "n_prompts",
    "n_seeds",
    "verdict",
]

THESIS_CHOICE = "words"
"""The thesis's analysis choice: "I chose to plot only the attention scores that address the
words and clues" (keys and queries restricted to them, rows renormalised)."""
DEFAULT_BANDS: tuple[str | int, ...] = ("thirds", 3, 5)
"""``claims.bands``: the layers split into thirds, or the first/last n layers against the rest."""
SPECTRA_FORMS = ("raw", "folded")
"""Weight forms of the spectra claims: the stored matrices (what the thesis measured) first."""


@dataclass(frozen=True)
class Thresholds:
    """The bars of every verdict (see ``docs/figures.md``, "Claims")."""

    ratio_supported: float = 1.5
    """self-mass ratio (early/middle, late/middle) at or above which a band is 'diagonal-dominant' again"""
    ratio_contradicted: float = 1.0
    """... at or below which it is not more diagonal than the middle layers at all"""
    entropy_step: float = 0.05
    """entropy difference between bands that counts as dispersion / contraction"""
    layer_share: float = 0.8
    """share of layers an effect must hold in (at adjusted p < 0.05) to be supported"""
    layer_share_contradicted: float = 0.5
    """share of heads at or below which an alignment claim is contradicted"""
    boundary_drop: float = 0.25
    """log ratio by which a query's own-shot keys beat the preceding shot's at equal distance
    (relative to the distance-matched null) that counts as attending within the shot: e^0.25 ≈
    1.28×; pure locality scores 0 (within ±0.15 on synthetic maps)"""
    small_mass: float = 0.5
    """share of the attention mass carried by values ≤ 0.1 that counts as 'mostly in [0, 0.1]'"""
    weak_correlation: float = 0.3
    """largest per-layer |correlation| with the cosine that is still 'weak'"""
    strong_correlation: float = 0.5
    uniform_entropy: float = 0.9
    """smallest per-layer normalised entropy of the random model that is 'near uniform'"""
    uniform_entropy_contradicted: float = 0.8
    """... below which (the whole interval) the random model is not near uniform"""
    ablation_step: float = 0.02
    """mean per-layer change (entropy or self mass) an α edit must make"""
    predominant: float = 0.5
    """self mass at which tokens 'predominantly attend to themselves'"""
    alignment_z: float = 2.0
    """|z| of Tr(W_qᵀW_k) counted as 'small' (within 2σ of random init)"""
    copy_share: float = 0.5
    """mean share of a clue's word bigrams found in its prompt that counts as copying"""
    broken_share: float = 0.5
    """share of empty or unterminated clues that counts as 'empty or broken'"""
    alpha: float = 0.05
    """false discovery rate of the per-layer tests (Benjamini–Hochberg)"""


@dataclass(frozen=True)
class Setting:
    """One analysis setting of a claim: the maps' choice and layer band, or the weights' form."""

    choice: str | None = None
    band: str | int | None = None
    form: str | None = None
    scale_free: bool = False
    null: str | None = None

    def label(self) -> str:
        parts = [self.choice, band_name(self.band) if self.band is not None else None, self.form, self.null]
        if self.scale_free:
            parts.append("scale-free")
        return ", ".join(p for p in parts if p) or "–"


@dataclass(frozen=True)
class Result:
    """A claim's measurement: the estimate with its interval, a readable account, the verdict."""

    verdict: str
    interval: Interval
    measured: str
    variants: str = "trained"
    n_seeds: int = 1
    per_prompt: bool = True
    """False for weight claims: their interval resamples layers, not prompts."""


@dataclass(frozen=True)
class Claim:
    """One claim of the thesis and how it is measured."""

    claim: str
    section: str
    statement: str
    metric: str
    threshold: str
    measure: Callable[[Evidence, Thresholds, Setting], Result | list[tuple[str, Result | None]] | None]
    """One result (``None``: the setting does not apply), or (statement, result) rows."""
    varies: tuple[str, ...] = ()
    """The setting fields the claim is measured under: ``choice``, ``band``, ``form``."""


NAN_INTERVAL = Interval(float("nan"), float("nan"), float("nan"), 0, 0)


# --------------------------------------------------------------------------- helpers


def not_measured(reason: str, variants: str = "trained") -> Result:
    return Result(NOT_MEASURED, NAN_INTERVAL, reason, variants, 0)


def band_name(band: str | int) -> str:
    return "thirds" if band == "thirds" else f"first/last {band}"


def layer_bands(num_layers: int, band: str | int) -> dict[str, np.ndarray]:
    """Early, middle and late layers: thirds (three near-equal parts), or the first and last
    ``band`` layers with the rest as the middle."""
    layers = np.arange(num_layers)
    if band == "thirds":
        return dict(zip(("early", "middle", "late"), np.array_split(layers, 3)))
    n = min(int(band), num_layers // 3)
    return {"early": layers[:n], "middle": layers[n : num_layers - n], "late": layers[num_layers - n :]}


def _band_mean(means: np.ndarray, layers: np.ndarray) -> np.ndarray:
    """The mean over ``layers`` of per-layer means [..., layer] (NaN for an empty band)."""
    if not len(layers):
        return np.full(means.shape[:-1], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a band with no value in a resample
        return np.nanmean(means[..., layers], axis=-1)


def verdict_of(interval: Interval, supported_at: float, contradicted_at: float) -> str:
    """The verdict of an interval against two bars (their order says which way supports)."""
    if np.isnan(interval.estimate):
        return NOT_MEASURED  # e.g. a layer band the model is too shallow for
    side = stats.interval_side(interval, supported_at, contradicted_at)
    return {1: SUPPORTED, -1: CONTRADICTED, 0: INCONCLUSIVE}[side]


@dataclass(frozen=True)
class PromptTable:
    """Per prompt (a row per variant × replicate × prompt), one or more metrics per layer."""

    values: np.ndarray  # [prompt, metric × layer]
    targets: np.ndarray  # [prompt], the resampling clusters
    num_layers: int
    n_seeds: int
    index: pd.Index | None = None  # (experiment, prompt_index, target) of each row

    def interval(self, statistic: Callable[[np.ndarray], np.ndarray]) -> Interval:
        """``statistic`` of the per-layer means [..., metric, layer], clustered by target."""
        layers = self.num_layers

        def of_columns(means: np.ndarray) -> np.ndarray:
            return statistic(means.reshape(*means.shape[:-1], -1, layers))

        return stats.cluster_interval(self.values, self.targets, of_columns)


PROMPT_KEYS = ["experiment", "prompt_index", "target"]


def prompt_table(
    table: pd.DataFrame, variants: Sequence[str], metrics: Sequence[str], choice: str | None = None
) -> PromptTable | None:
    """The rows of ``variants`` (under ``choice``) as a :class:`PromptTable` of ``metrics``."""
    rows = table[table["variant"].isin(variants)] if "variant" in table else table.iloc[:0]
    if choice is not None and len(rows):
        rows = rows[rows["choice"] == choice]
    if rows.empty:
        return None
    wide = rows.set_index(["variant", *PROMPT_KEYS, "layer"])[list(metrics)].unstack("layer").sort_index()
    num_layers = wide.columns.get_level_values("layer").nunique()
    seeds = rows.drop_duplicates(["variant", "seed"])
    return PromptTable(
        wide.to_numpy(np.float64),
        wide.index.get_level_values("target").to_numpy(),
        num_layers,
        len(seeds),
        wide.index.droplevel("variant"),
    )


def paired_table(
    table: pd.DataFrame, variant: str, metrics: Sequence[str], choice: str | None
) -> PromptTable | None:
    """``variant`` − trained, paired per replicate, prompt and layer (the prompts both ran)."""
    edited = prompt_table(table, [variant], metrics, choice)
    trained = prompt_table(table, ["trained"], metrics, choice)
    if edited is None or trained is None or edited.num_layers != trained.num_layers:
        return None
    common = edited.index.intersection(trained.index)
    if not len(common):
        return None
    rows = edited.index.get_indexer(common), trained.index.get_indexer(common)
    return PromptTable(
        edited.values[rows[0]] - trained.values[rows[1]],
        common.get_level_values("target").to_numpy(),
        edited.num_layers,
        edited.n_seeds,
        common,
    )


def pick_variant(
    names: Iterable[str], kind: str, direction: str | None = None, target: float | None = None
) -> str | None:
    """The run's variant of ``kind`` (all layers edited): for ``qkscale`` the α > 1 (``up``) or
    α < 1 (``down``) edit closest to ``target`` (the thesis's 2 and ½)."""
    candidates = []
    for name in names:
        v = variant_names.parse(name)
        if v.kind != kind or v.layers is not None:
            continue
        if (
            direction == "up"
            and not (v.alpha and v.alpha > 1)
            or direction == "down"
            and not (v.alpha and v.alpha < 1)
        ):
            continue
        distance = abs(np.log(v.alpha / target)) if target and v.alpha else 0.0
        candidates.append((distance, name))
    return min(candidates)[1] if candidates else None


def random_variants(names: Iterable[str]) -> list[str]:
    """Every random-init variant (random-s<seed>): their seeds are replicates of one init."""
    return [n for n in names if variant_names.parse(n).kind == "random"]


# --------------------------------------------------------------------------- attention claims


def _bands_of(ev: Evidence, setting: Setting, metric: str) -> PromptTable | None:
    return prompt_table(ev.choices, ["trained"], [metric], setting.choice)


def _band_text(table: PromptTable, band: str | int, name: str) -> str:
    parts = layer_bands(table.num_layers, band)
    means = np.nanmean(table.values, axis=0)
    return name + " " + ", ".join(f"{part} {_band_mean(means, idx):.3g}" for part, idx in parts.items())


def _diagonal(band_part: str) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """Self mass of the early or late band against the middle one."""

    def measure(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
        table = _bands_of(ev, setting, "self_mass")
        if table is None:
            return not_measured("no trained attention metrics")
        parts = layer_bands(table.num_layers, setting.band)
        interval = table.interval(
            lambda m: _band_mean(m[..., 0, :], parts[band_part]) / _band_mean(m[..., 0, :], parts["middle"])
        )
        verdict = verdict_of(interval, th.ratio_supported, th.ratio_contradicted)
        measured = f"{_band_text(table, setting.band, 'self mass')}; {band_part}/middle = {interval}"
        return Result(verdict, interval, measured, n_seeds=table.n_seeds)

    return measure


def _entropy_step(later: str, earlier: str, sign: int) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """The change of normalised entropy from the ``earlier`` to the ``later`` band, expected up
    (``sign`` +1: attention disperses) or down (−1: it contracts) by the entropy step."""

    def measure(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
        table = _bands_of(ev, setting, "row_entropy")
        if table is None:
            return not_measured("no trained attention metrics")
        parts = layer_bands(table.num_layers, setting.band)
        interval = table.interval(
            lambda m: _band_mean(m[..., 0, :], parts[later]) - _band_mean(m[..., 0, :], parts[earlier])
        )
        verdict = verdict_of(interval, sign * th.entropy_step, 0.0)
        text = f"{_band_text(table, setting.band, 'normalised entropy')}; {later} − {earlier} = {interval}"
        return Result(verdict, interval, text, n_seeds=table.n_seeds)

    return measure


def _within_shot(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """The shot-boundary drop: log(observed/null) on the query's own-shot keys minus the same on
    the preceding shot's keys at matched distances, so locality alone scores 0
    (:mod:`attnscope.choices`); the within-shot mass over its null is reported beside it."""
    columns = ["boundary_drop", "within_shot_mass", "within_shot_null", "across_shot_mass"]
    table = prompt_table(ev.choices, ["trained"], columns, setting.choice)
    if table is None:
        return not_measured("no trained attention metrics")
    if np.isnan(table.values[:, : table.num_layers]).all():
        return not_measured(
            "no query in shot 2 or later with keys of its own and the preceding shot (k = 1?)"
        )
    interval = table.interval(lambda m: np.nanmean(m[..., 0, :], axis=-1))

    def over_null(m: np.ndarray) -> np.ndarray:
        return np.nanmean(m[..., 1, :], axis=-1) / np.nanmean(m[..., 2, :], axis=-1)

    ratio = table.interval(over_null)
    means = np.nanmean(table.values, axis=0).reshape(len(columns), table.num_layers)
    valid = ~np.isnan(means[1]) & ~np.isnan(means[3])
    share = float((means[1][valid] > means[3][valid]).mean())
    verdict = verdict_of(interval, th.boundary_drop, 0.0)
    measured = (
        f"shot-boundary drop (log ratio) {interval}, dropping in {int((means[0] > 0).sum())} of "
        f"{table.num_layers} layers; within-shot mass / its distance-matched null {ratio}; "
        f"(without a null: within > across in {share:.0%} of {int(valid.sum())} layers)"
    )
    return Result(verdict, interval, measured, n_seeds=table.n_seeds)


def _value_domain(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    table = prompt_table(ev.choices, ["trained"], ["small_mass", "small_share"], setting.choice)
    if table is None:
        return not_measured("no trained attention metrics")
    interval = table.interval(lambda m: np.nanmean(m[..., 0, :], axis=-1))
    share = table.interval(lambda m: np.nanmean(m[..., 1, :], axis=-1))
    verdict = verdict_of(interval, th.small_mass, th.small_mass)
    measured = (
        f"share of the attention mass on values ≤ 0.1: {interval} (share of values ≤ 0.1, "
        f"which a row of mass 1 cannot fail: {share})"
    )
    return Result(verdict, interval, measured, n_seeds=table.n_seeds)


def _cosine_weak(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    columns = ["cosine_pearson", "cosine_spearman"]
    has = set(columns) <= set(ev.metrics.columns)
    table = prompt_table(ev.metrics, ["trained"], columns) if has else None
    if table is None:
        return not_measured("no trained attention metrics")
    interval = table.interval(lambda m: np.nanmax(np.abs(m), axis=(-2, -1)))
    means = np.nanmean(table.values, axis=0).reshape(2, table.num_layers)
    peak_layer = int(np.nanargmax(np.abs(means).max(axis=0)))
    verdict = verdict_of(interval, th.weak_correlation, th.strong_correlation)
    measured = (
        f"largest layer-mean |r| or |ρ| = {interval} (layer {peak_layer}); mean over layers "
        f"r = {np.nanmean(means[0]):.3g}, ρ = {np.nanmean(means[1]):.3g}"
    )
    return Result(verdict, interval, measured, n_seeds=table.n_seeds)


def _random_uniform(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
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
    return Result(verdict, interval, measured, ", ".join(names), table.n_seeds)


def _layer_test(table: PromptTable, sign: int, alpha: float) -> stats.LayerTest:
    """The paired per-layer test on target means (replicates of a target averaged first)."""
    frame = pd.DataFrame(table.values[:, : table.num_layers] * sign).groupby(table.targets).mean()
    return stats.paired_layer_test(frame.to_numpy(), alpha=alpha)


def _ablation(metric: str, direction: str, sign: int) -> Callable[[Evidence, Thresholds, Setting], Result]:
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
        effect = table.interval(lambda m: sign * np.nanmean(m[..., 0, :], axis=-1))
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
        return Result(verdict, shown, measured, f"trained, {name}", table.n_seeds)

    return measure


MASS_PARTS = ("self_mass", "previous_mass", "sink_mass")


def _alpha_up_self(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    """α = 2 raises self mass *and* tokens attend predominantly to themselves; the measured text
    says where the mass the edit moves goes (self, previous token, sink, the rest)."""
    result = _ablation("self_mass", "up", 1)(ev, th, setting)
    name = pick_variant(ev.variants(), "qkscale", "up", 2.0)
    if result.verdict == NOT_MEASURED:
        return result
    edited = prompt_table(ev.choices, [name], ["self_mass"], setting.choice)
    level = edited.interval(lambda m: np.nanmean(m[..., 0, :], axis=-1))
    moved = paired_table(ev.choices, name, MASS_PARTS, setting.choice)
    deltas = np.nanmean(moved.values, axis=0).reshape(len(MASS_PARTS), moved.num_layers).mean(axis=1)
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
    return Result(verdict, result.interval, measured, result.variants, result.n_seeds)


# --------------------------------------------------------------------------- clue claims


def _reference_clues(ev: Evidence, name: str, column: str) -> tuple[PromptTable, PromptTable] | None:
    """``column`` per clue of ``name`` and of trained on the reference experiment's prompts:
    (edited, edited − trained)."""
    clues = ev.clues
    rows = clues[clues["experiment"].isin(ev.replicates)]
    rows = rows.assign(layer=0, broken=(rows["clue"].str.strip() == "") | ~rows["format_ok"].astype(bool))
    edited = prompt_table(rows, [name], [column])
    delta = paired_table(rows, name, [column], None)
    return None if edited is None or delta is None else (edited, delta)


def _clue_claim(
    direction: str, alpha: float, column: str, bar: Callable[[Thresholds], float], what: str
) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """A claim on the α edit's clues: its mean ``column`` clears the bar and exceeds trained's
    (paired per prompt); contradicted if it does not exceed trained's."""
    label = "qkscale-a" + ("2" if direction == "up" else "0.5")

    def measure(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
        clues = ev.clues
        name = (
            None
            if clues is None or clues.empty
            else pick_variant(clues["variant"].unique(), "qkscale", direction, alpha)
        )
        pair = None if name is None else _reference_clues(ev, name, column)
        if pair is None:
            return not_measured(f"no qkscale variant with α {'>' if direction == 'up' else '<'} 1", label)
        edited, delta = pair
        level = edited.interval(lambda m: m[..., 0, 0])
        above = delta.interval(lambda m: m[..., 0, 0])
        verdict = verdict_of(above, 1e-12, 0.0)
        if verdict == SUPPORTED:
            verdict = verdict_of(level, bar(th), -np.inf)
        measured = f"{what}: {name} {level}, minus trained (paired) {above}"
        return Result(verdict, level, measured, f"trained, {name}", edited.n_seeds)

    return measure


def _more_shots(ev: Evidence, th: Thresholds, setting: Setting) -> Result:
    clues = ev.clues
    if clues is None or clues.empty:
        return not_measured("no generated clues")
    trained = clues[clues["variant"] == "trained"]
    scored = trained.dropna(subset=["chrf"])  # chrF needs a reference clue
    if scored.empty:
        return not_measured("no target has a reference clue in the clue files")
    counts = scored.groupby("category")["k"].nunique()
    if counts.empty or counts.max() < 2:
        return not_measured("fewer than two shot counts k of one category")
    category = counts.idxmax()
    per_target = scored[scored["category"] == category].groupby(["k", "target"])["chrf"].mean().unstack("k")
    ks = list(per_target.columns)
    paired = per_target.dropna()
    if len(paired) < 2:
        return not_measured(f"{category}: fewer than two targets scored at every k")
    steps = [stats.cluster_mean_interval(paired[b] - paired[a]) for a, b in zip(ks, ks[1:])]
    overall = stats.cluster_mean_interval(paired[ks[-1]] - paired[ks[0]])
    if all(step.low > 0 for step in steps):
        verdict = SUPPORTED
    else:
        verdict = verdict_of(overall, np.inf, 0.0)
    of_category = trained[trained["category"] == category]
    n_all = of_category.groupby("k")["target"].nunique()
    levels = ", ".join(
        f"k={k} {per_target[k].mean():.3g} ({n} of {n_all[k]} targets with a reference)"
        for k, n in per_target.notna().sum().items()
    )
    step_text = ", ".join(f"k{b} − k{a} {step}" for (a, b), step in zip(zip(ks, ks[1:]), steps))
    measured = f"{category}: mean chrF {levels}; paired per target: {step_text}"
    n_seeds = of_category.drop_duplicates(["experiment"]).groupby("k").size().max()
    return Result(verdict, overall, measured, n_seeds=int(n_seeds))


# --------------------------------------------------------------------------- weight claims


def _layer_values(table: pd.DataFrame, form: str, matrix: str, column: str | Callable) -> pd.Series:
    """One value per layer of ``matrix`` in ``form`` (tables without forms are raw)."""
    rows = table[table["matrix"] == matrix]
    if "form" in rows:
        rows = rows[rows["form"] == form]
    elif form != SPECTRA_FORMS[0]:
        rows = rows.iloc[:0]
    values = column(rows) if callable(column) else rows[column]
    return pd.Series(np.asarray(values, np.float64), index=rows["layer"].to_numpy())


def _observation_result(ev: Evidence, obs: Observation, matrix: str, setting: Setting) -> Result | None:
    """A learned/random ratio of layer means with an interval over layers (paired by layer),
    judged by the observation's criterion on the whole interval. Scale-free: the top singular
    value's share σ_max²/‖W‖²_F (1 / stable rank) in place of σ_max; Σσ² has no scale-free form."""
    randoms = [v for v in ev.spectra if v != "trained"]
    if setting.scale_free:
        if obs.measure != "sv_max":
            return None
        column: str | Callable = lambda rows: rows["lambda_max"] / rows["sum_sigma2"]  # noqa: E731
    else:
        column = obs.measure
    trained = _layer_values(ev.spectra["trained"], setting.form, matrix, column)
    random = pd.concat([_layer_values(ev.spectra[v], setting.form, matrix, column) for v in randoms])
    random = random.groupby(level=0).mean()
    layers = trained.index.intersection(random.index)
    if not len(layers):
        return None
    values = np.column_stack([trained[layers], random[layers]])
    interval = stats.cluster_interval(values, layers, lambda m: m[..., 0] / m[..., 1])
    grid = np.linspace(interval.low, interval.high, 65)
    passes = np.array([obs.test(r) for r in grid])
    verdict = SUPPORTED if passes.all() else CONTRADICTED if not passes.any() else INCONCLUSIVE
    low, high = obs.thesis_range
    what = "σ_max²/‖W‖²_F" if setting.scale_free else {"sum_sigma2": "Σσ²", "sv_max": "σ_max"}[obs.measure]
    measured = (
        f"W_{matrix} {what}: trained {np.mean(values[:, 0]):.4g}, random {np.mean(values[:, 1]):.4g}, "
        f"ratio {interval} over {len(layers)} layers (thesis {low:g}–{high:g}); {obs.criterion}"
    )
    return Result(
        verdict, interval, measured, f"trained, {', '.join(randoms)}", len(randoms), per_prompt=False
    )


def _spectrum_rows(ev: Evidence, th: Thresholds, setting: Setting) -> list[tuple[str, Result | None]]:
    """One result per observation of ch. 7.2.2 and matrix (:data:`attnscope.spectra.OBSERVATIONS`)."""
    if "trained" not in ev.spectra or len(ev.spectra) < 2:
        statement = "Learned W_q/W_k spectra differ from random as observed in ch. 7.2.2"
        return [(statement, not_measured("no trained and random spectra tables", "trained, random-s*"))]
    return [
        (f"W_{matrix}: {obs.statement}", _observation_result(ev, obs, matrix, setting))
        for obs in OBSERVATIONS
        for matrix in obs.matrices
    ]


MIN_INIT_SEEDS = 3
"""Random init seeds needed before their spread replaces the formula's as the null of a z-score."""


def _alignment_small(
    scope: str, scale_free: bool = False
) -> Callable[[Evidence, Thresholds, Setting], Result]:
    """Share of layers (heads) whose Tr(W_qᵀW_k) is within ``alignment_z`` standard deviations
    of random matrices: the z-score against the random-init expectation, or (``scale_free``)
    cosine·√n, the trace over ‖W_q‖_F‖W_k‖_F, which is ≈ N(0, 1/n) for independent random
    matrices of any scale and so tests the alignment alone. Under the ``init seeds`` null the
    statistic is standardised by the random seeds' own mean and spread per layer (head) instead
    of the formula's. Interval: heads resampled by layer."""

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
        layers = z.index.get_level_values("layer").to_numpy()
        interval = stats.cluster_mean_interval((z <= th.alignment_z).astype(float), layers)
        verdict = verdict_of(interval, th.layer_share, th.layer_share_contradicted)
        name = "|cosine|·√n" if scale_free else "|z|"
        measured = (
            f"share with {name} ≤ {th.alignment_z:g}: {interval} of {len(z)} {scope}s; "
            f"median {z.median():.3g}, max {z.max():.3g}"
        )
        return Result(verdict, interval, measured, n_seeds=len(randoms), per_prompt=False)

    return measure


METRIC_NAMES = {"row_entropy": "normalised entropy", "self_mass": "self mass"}

_T = Thresholds()
ABLATION_BAR = (
    "supported if the mean's interval ≥ {step:g} and {way} in ≥ {share:.0%} of layers (adjusted p < 0.05); "
    "contradicted if it is ≤ 0"
)
MAPS, BANDS, FORMS, NULLS = ("choice",), ("choice", "band"), ("form", "scale_free"), ("null",)
CLAIMS = (
    Claim(
        "early-diagonal",
        "8.2, 9.1",
        "Early layers are nearly diagonal-dominant",
        "self mass (head mean), early band / middle band of the layers",
        f"supported ≥ {_T.ratio_supported:g}; contradicted ≤ {_T.ratio_contradicted:g}",
        _diagonal("early"),
        BANDS,
    ),
    Claim(
        "middle-dispersed",
        "8.2, 9.1",
        "Middle layers disperse attention over distant tokens",
        "normalised row entropy, middle band − early band",
        f"supported ≥ +{_T.entropy_step:g}; contradicted ≤ 0",
        _entropy_step("middle", "early", +1),
        BANDS,
    ),
    Claim(
        "late-contracting",
        "8.2, 9.1",
        "Late layers contract again (sparser attention)",
        "normalised row entropy, late band − middle band",
        f"supported ≤ −{_T.entropy_step:g}; contradicted ≥ 0",
        _entropy_step("late", "middle", -1),
        BANDS,
    ),
    Claim(
        "late-diagonal",
        "8.2",
        "Late layers resemble the diagonal-dominant early layers",
        "self mass (head mean), late band / middle band",
        f"supported ≥ {_T.ratio_supported:g}; contradicted ≤ {_T.ratio_contradicted:g}",
        _diagonal("late"),
        BANDS,
    ),
    Claim(
        "within-shot",
        "8.2",
        "Words attend within their own shot, not across shot boundaries",
        "shot-boundary drop: log(observed / distance-matched null) on the query's own-shot keys minus "
        "the same on the preceding shot's keys at equal distances (0 for attention that depends only "
        "on the query–key distance), queries of shots 2..k",
        f"supported ≥ {_T.boundary_drop:g}; contradicted ≤ 0",
        _within_shot,
        MAPS,
    ),
    Claim(
        "value-domain",
        "8.2",
        "Token-level attention values lie mostly in [0, 0.1]",
        "share of the head-mean attention mass carried by values ≤ 0.1 (0 for one-hot rows, 1 for "
        "uniform rows over ≥ 10 keys)",
        f"supported ≥ {_T.small_mass:.0%}; contradicted < {_T.small_mass:.0%}",
        _value_domain,
        MAPS,
    ),
    Claim(
        "cosine-weak",
        "8.3, 9.1",
        "Attention is only weakly related to the embedding cosine similarity",
        "largest per-layer mean |Pearson r| or |Spearman ρ| of attention with the input-embedding cosine",
        f"supported < {_T.weak_correlation:g}; contradicted ≥ {_T.strong_correlation:g}",
        _cosine_weak,
    ),
    Claim(
        "random-uniform",
        "8.4, 9.1",
        "The randomly initialised model's attention is near uniform",
        "normalised row entropy of the random-s<seed> models, lowest layer mean",
        f"supported ≥ {_T.uniform_entropy:g}; contradicted < {_T.uniform_entropy_contradicted:g}",
        _random_uniform,
        MAPS,
    ),
    Claim(
        "alpha-up-entropy",
        "8.5 (5.2.3)",
        "Scaling W_q, W_k by α = 2 sharpens attention (lower entropy)",
        "normalised entropy, trained − α=2, paired per prompt and layer",
        ABLATION_BAR.format(step=_T.ablation_step, share=_T.layer_share, way="lower"),
        _ablation("row_entropy", "up", -1),
        MAPS,
    ),
    Claim(
        "alpha-up-self",
        "8.5 (5.2.3)",
        "With α = 2 tokens predominantly attend to themselves (Dirac-like)",
        "self mass, α=2 − trained, paired per prompt and layer; and α=2's self mass",
        ABLATION_BAR.format(step=_T.ablation_step, share=_T.layer_share, way="higher")
        + f"; and α=2's self mass ≥ {_T.predominant:g} (contradicted if wholly below)",
        _alpha_up_self,
        MAPS,
    ),
    Claim(
        "alpha-down-entropy",
        "8.5 (5.2.3)",
        "Scaling W_q, W_k by α = ½ flattens attention (higher entropy)",
        "normalised entropy, α=½ − trained, paired per prompt and layer",
        ABLATION_BAR.format(step=_T.ablation_step, share=_T.layer_share, way="higher"),
        _ablation("row_entropy", "down", 1),
        MAPS,
    ),
    Claim(
        "alpha-up-copies",
        "8.5, 9.1",
        "With α = 2 the model writes English that repeats the prompt",
        "mean share of a clue's word bigrams that occur in its prompt",
        f"supported ≥ {_T.copy_share:g} and above trained (paired); contradicted if not above trained",
        _clue_claim(
            "up",
            2.0,
            "copy_share",
            lambda th: th.copy_share,
            "mean share of clue bigrams found in the prompt",
        ),
    ),
    Claim(
        "alpha-down-broken",
        "8.5, 9.1",
        "With α = ½ the model writes empty or broken text",
        "share of clues that are empty or lack the closing end marker",
        f"supported ≥ {_T.broken_share:.0%} and above trained (paired); contradicted if not above trained",
        _clue_claim(
            "down", 0.5, "broken", lambda th: th.broken_share, "share of clues empty or unterminated"
        ),
    ),
    Claim(
        "more-shots",
        "8.1",
        "Clue quality increases with the number of shots k",
        "sentence chrF against the reference clues, trained, paired per target between k",
        "supported if every step in k raises it (paired interval > 0); contradicted if the largest k "
        "is below the smallest (interval < 0)",
        _more_shots,
    ),
    Claim(
        "spectra",
        "7.2.2, 9.1, A.19–A.21",
        "",
        "learned/random ratio of the layer means, interval over layers",
        "the comparison table's criterion on the whole interval",
        _spectrum_rows,
        FORMS,
    ),
    Claim(
        "alignment-layer-small",
        "7.2.2, A.22",
        "Tr(W_qᵀW_k) behaves like that of random matrices (z-scores mostly small)",
        f"share of layers with |z| ≤ {_T.alignment_z:g} against random init (trained)",
        f"supported ≥ {_T.layer_share:.0%}; contradicted < {_T.layer_share_contradicted:.0%}",
        _alignment_small("layer"),
        NULLS,
    ),
    Claim(
        "alignment-head-small",
        "7.2.2, A.22",
        "Per head, Tr(W_q,hᵀW_k,h) behaves like that of random matrices",
        f"share of query heads with |z| ≤ {_T.alignment_z:g} against random init (trained)",
        f"supported ≥ {_T.layer_share:.0%}; contradicted < {_T.layer_share_contradicted:.0%}",
        _alignment_small("head"),
        NULLS,
    ),
    Claim(
        "alignment-head-cosine",
        "7.2.2, A.22",
        "Per head, W_q and W_k are aligned like independent random matrices (scale-free)",
        f"share of query heads with |cosine|·√n ≤ {_T.alignment_z:g}, "
        "cosine = Tr(W_qᵀW_k) / (‖W_q‖_F‖W_k‖_F)",
        f"supported ≥ {_T.layer_share:.0%}; contradicted < {_T.layer_share_contradicted:.0%}",
        _alignment_small("head", scale_free=True),
        NULLS,
    ),
)


# --------------------------------------------------------------------------- the table


def settings(claim: Claim, ev: Evidence, bands: Sequence[str | int]) -> list[Setting]:
    """The settings ``claim`` is measured under; the first is the thesis's (the headline)."""
    present = list(dict.fromkeys(ev.choices["choice"])) if "choice" in ev.choices else []
    choices = sorted(present, key=lambda c: c != THESIS_CHOICE) or [THESIS_CHOICE]
    options = {
        "choice": choices,
        "band": list(bands),
        "form": list(SPECTRA_FORMS),
        "scale_free": [False, True],
        "null": ["formula", "init seeds"],
    }
    return [
        Setting(**dict(zip(claim.varies, values)))
        for values in itertools.product(*(options[name] for name in claim.varies))
    ]


def _verdict_on(ev: Evidence, verdict: str) -> str:
    """A contradicted claim about Mistral-7B is *not replicated* on another model."""
    return verdict if ev.thesis_model or verdict != CONTRADICTED else f"not replicated on {ev.model}"


@dataclass
class _Row:
    claim: Claim
    statement: str
    results: dict[Setting, Result] = field(default_factory=dict)


def _measure_all(ev: Evidence, th: Thresholds, bands: Sequence[str | int]) -> list[_Row]:
    rows: dict[tuple[str, str], _Row] = {}
    for claim in CLAIMS:
        for setting in settings(claim, ev, bands):
            measured = claim.measure(ev, th, setting)
            results = measured if isinstance(measured, list) else [(claim.statement, measured)]
            for statement, result in results:
                row = rows.setdefault((claim.claim, statement), _Row(claim, statement))
                if result is not None:
                    row.results[setting] = result
    return list(rows.values())


def robustness(ev: Evidence, results: Mapping[Setting, Result]) -> str:
    """``yes`` when every other measured setting's verdict agrees with the first's, else the
    ones that differ (``–`` with nothing to compare: one setting, or none measured)."""
    (_, headline), *others = results.items()
    measured = [(s, r) for s, r in others if r.verdict != NOT_MEASURED]
    if not measured or headline.verdict == NOT_MEASURED:
        return "–"
    differ = [
        f"{s.label()}: {_verdict_on(ev, r.verdict)}" for s, r in measured if r.verdict != headline.verdict
    ]
    return "yes" if not differ else "no (" + "; ".join(differ) + ")"


def evaluate(
    evidence: Evidence, thresholds: Thresholds = _T, bands: Sequence[str | int] = DEFAULT_BANDS
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The claims table of one model (:data:`COLUMNS`: one row per claim, the spectra claim one
    per observation and matrix, under the thesis's setting) and its sensitivity table
    (:data:`SENSITIVITY_COLUMNS`: every setting)."""
    table, sensitivity = [], []
    for row in _measure_all(evidence, thresholds, bands):
        if not row.results:
            continue
        (setting, result), *_ = row.results.items()
        interval = result.interval
        table.append(
            {
                "model": evidence.model,
                "claim": row.claim.claim,
                "section": row.claim.section,
                "statement": row.statement,
                "metric": row.claim.metric,
                "setting": setting.label(),
                "estimate": interval.estimate,
                "low": interval.low,
                "high": interval.high,
                "n_prompts": interval.n_clusters if result.per_prompt else None,
                "n_seeds": result.n_seeds,
                "measured": result.measured,
                "threshold": row.claim.threshold,
                "verdict": _verdict_on(evidence, result.verdict),
                "robust": robustness(evidence, row.results),
                "experiment": evidence.experiment,
                "variants": result.variants,
            }
        )
        for setting, result in row.results.items():
            sensitivity.append(
                {
                    "model": evidence.model,
                    "claim": row.claim.claim,
                    "statement": row.statement,
                    "setting": setting.label(),
                    "estimate": result.interval.estimate,
                    "low": result.interval.low,
                    "high": result.interval.high,
                    "n_prompts": result.interval.n_clusters if result.per_prompt else None,
                    "n_seeds": result.n_seeds,
                    "verdict": _verdict_on(evidence, result.verdict),
                }
            )
    frames = pd.DataFrame(table, columns=COLUMNS), pd.DataFrame(sensitivity, columns=SENSITIVITY_COLUMNS)
    for frame in frames:
        frame["n_prompts"] = frame["n_prompts"].astype("Int64")
    return frames


def measured_on(ev: Evidence) -> str:
    """The header line of a model's claims: what was measured on what."""
    attention = ev.choices
    targets = attention["target"].nunique() if "target" in attention else 0
    seeds = sorted(attention["seed"].unique()) if "seed" in attention else []
    randoms = random_variants(ev.variants())
    model = ev.model + (" (the thesis's model)" if ev.thesis_model else "")
    return (
        f"Measured on {model}: {ev.description}. Reference experiment {ev.experiment}: {targets} target "
        f"words, shot seeds {', '.join(map(str, seeds)) or '–'} ({', '.join(ev.replicates)}); variants "
        f"{', '.join(ev.variants()) or '–'}; random init seeds: {len(randoms)}."
        + (
            ""
            if ev.thesis_model
            else f" Claims the thesis made about Mistral-7B that this model does not show read "
            f"*not replicated on {ev.model}*, not contradicted."
        )
    )


def _with_interval(rows: pd.DataFrame) -> list[str]:
    return [
        "–" if np.isnan(e) else str(Interval(e, lo, hi, 0, 0))
        for e, lo, hi in zip(rows["estimate"], rows["low"], rows["high"])
    ]


def claims_markdown(table: pd.DataFrame, sensitivity: pd.DataFrame, header: Mapping[str, str]) -> str:
    """The claims table as Markdown, one section per model (``header``: model → what it was
    measured on), with its verdict count and its sensitivity table."""
    parts = ["# Thesis claims against the measurements", ""]
    parts.append(
        "Each row: a qualitative claim of the thesis (section), the metric that tests it, the estimate "
        "with its 95 % interval (cluster bootstrap over target words; over layers for weights), the "
        "verdict from the whole interval under the thesis's own analysis choice (attention: keys and "
        "queries restricted to the words and clues, layers in thirds; weights: the stored matrices), "
        'and whether every other choice agrees (robust; docs/figures.md, "Claims").'
    )
    for model, rows in table.groupby("model", sort=False):
        counts = rows["verdict"].value_counts()
        order = [v for v in VERDICTS if v in counts] + [v for v in counts.index if v not in VERDICTS]
        summary = ", ".join(f"{counts[v]} {v}" for v in order)
        parts += ["", f"## {model} (experiment {rows['experiment'].iloc[0]}): {summary}", ""]
        parts += [header.get(model, ""), ""]
        shown = rows.assign(
            estimate=_with_interval(rows),
            n=[
                "–" if pd.isna(p) else f"{p} × {s}" if s else f"{p}"
                for p, s in zip(rows["n_prompts"], rows["n_seeds"])
            ],
            verdict=rows["verdict"].map(lambda v: f"**{v}**"),
        )[["section", "statement", "metric", "estimate", "n", "measured", "threshold", "verdict", "robust"]]
        parts.append(
            markdown_table(shown.rename(columns={"estimate": "estimate [95 % CI]", "n": "n prompts × seeds"}))
        )
        of_model = sensitivity[sensitivity["model"] == model]
        parts += ["", f"### {model}: every analysis choice", ""]
        parts.append(
            markdown_table(
                of_model.assign(estimate=_with_interval(of_model))[
                    ["statement", "setting", "estimate", "verdict"]
                ]
            )
        )
    return "\n".join(parts) + "\n"
