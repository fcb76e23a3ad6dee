"""The claims table on constructed tables with known effects: clear effects are supported,
absent ones contradicted, borderline ones (an interval across a bar) inconclusive; 'not
measured' without the input; the robust column, the framing and the replicates."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from attnscope import choices as attnscope_choices
from attnscope import claims
from attnscope.claims import views
from attnscope.claims.attention import COSINE_STATEMENT
from attnscope.evidence import Evidence, copy_share
from tests.helpers import k3_labels, map_choices, noisy_shot_maps, row_stochastic, shot_labels, synthetic

LAYERS = 9  # thirds: 0-2 early, 3-5 middle, 6-8 late
BASE = {
    "row_entropy": 0.6,
    "self_mass": 0.2,
    "diagonal_share": 0.3,
    "previous_mass": 0.1,
    "sink_mass": 0.3,
    "within_shot_mass": 0.3,
    "across_shot_mass": 0.1,
    "boundary_drop": 0.5,
    "placebo_drop": 0.0,
    "permuted_drop": 0.0,
    "row_drop": 0.5,
    "row_placebo_previous": 0.0,
    "row_placebo_own": 0.0,
    "small_mass": 0.8,
    "small_share": 0.97,
    "cosine_pearson": 0.1,
    "cosine_spearman": 0.1,
    "cosine_pearson_words": 0.1,
    "cosine_spearman_words": 0.1,
}
CHOICES = attnscope_choices.CHOICES


def choices(
    variant: str = "trained",
    prompts: int = 20,
    seeds: tuple[int, ...] = (0,),
    noise: float = 0.01,
    rng: int = 0,
    by_choice: dict[str, dict] | None = None,
    **per_layer,
) -> pd.DataFrame:
    """Head-mean rows per prompt × layer × choice: BASE unless given per layer (a list) or as a
    constant, plus per-prompt noise N(0, noise) so that intervals have a width."""
    shift = np.random.default_rng(rng).normal(0.0, noise, (len(seeds), prompts))  # drawn in row order
    shape = (len(seeds), prompts, len(CHOICES), LAYERS)  # the rows' order: seed, prompt, choice, layer
    index = np.indices(shape).reshape(len(shape), -1)
    experiments = ["animals-k3" if seed == seeds[0] else f"animals-k3-seed{seed}" for seed in seeds]
    columns = {
        "variant": [variant] * index.shape[1],
        "experiment": np.asarray(experiments, dtype=object)[index[0]],
        "seed": np.asarray(seeds, dtype=np.int64)[index[0]],
        "prompt_index": index[1],
        "target": np.asarray([f"t{p}" for p in range(prompts)], dtype=object)[index[1]],
        "layer": index[3],
        "choice": np.asarray(CHOICES, dtype=object)[index[2]],
    }
    given = [{**per_layer, **(by_choice or {}).get(choice, {})} for choice in CHOICES]
    for name in [*BASE, *dict.fromkeys(n for g in given for n in g if n not in BASE)]:
        value = np.full(shape[2:], np.nan)  # [choice, layer]
        for c, g in enumerate(given):
            value[c] = g.get(name, BASE.get(name, np.nan))
        value = np.broadcast_to(value, shape) + (shift[:, :, None, None] if name in BASE else 0.0)
        columns[name] = value.reshape(-1)
    return pd.DataFrame(columns)


def bands(early: float, middle: float, late: float) -> list[float]:
    return [early] * 3 + [middle] * 3 + [late] * 3


def evidence(*frames: pd.DataFrame, **parts) -> Evidence:
    table = pd.concat(frames, ignore_index=True) if frames else choices()
    metrics = table[table["choice"] == "full"].drop(columns=["choice"])
    return Evidence("m", "animals-k3", choices=table, metrics=metrics, **parts)


def rows_of(ev: Evidence, *claims_: str, bands_=claims.DEFAULT_BANDS) -> dict[str, pd.Series]:
    """Claim → its one row, from one evaluation of ``claims_`` (each row as the claim alone gives
    it: test_evaluating_one_claim_gives_its_rows_of_the_whole_table)."""
    table, _ = claims.evaluate(ev, bands=bands_, only=set(claims_))
    return rows_in(table, *claims_)


def rows_in(table: pd.DataFrame, *claims_: str) -> dict[str, pd.Series]:
    """Claim → its one row of a claims ``table``."""
    found = {}
    for claim in claims_:
        rows = table[table["claim"] == claim]
        assert len(rows) == 1, table
        found[claim] = rows.iloc[0]
    return found


def row_of(ev: Evidence, claim: str, bands_=claims.DEFAULT_BANDS) -> pd.Series:
    return rows_of(ev, claim, bands_=bands_)[claim]


def verdict(ev: Evidence, claim: str) -> str:
    return row_of(ev, claim)["verdict"]


NOT_REPLICATED = "not replicated on m"
S, NR, IN = claims.SUPPORTED, NOT_REPLICATED, claims.INCONCLUSIVE
DIAGONAL = {
    S: bands(0.8, 0.2, 0.8),  # dominant early, late alike
    NR: bands(0.2, 0.1, 0.6),  # 20 % early; late 0.4 above
    IN: bands(0.5, 0.2, 0.4),  # at the bars ± noise
}
ENTROPY = {
    S: bands(0.5, 0.7, 0.4),
    NR: bands(0.7, 0.5, 0.6),
    IN: bands(0.5, 0.55, 0.5),  # steps ±0.05 ± noise
}
UNSEEDED = {"noise": 0.05}
DIAGONAL_CASES = {v: lambda v=v: evidence(choices(diagonal_share=DIAGONAL[v], **UNSEEDED)) for v in DIAGONAL}
"""Verdict → the maps whose diagonal shares give early-diagonal and late-diagonal that verdict."""
ENTROPY_CASES = {v: lambda v=v: evidence(choices(row_entropy=ENTROPY[v], **UNSEEDED)) for v in ENTROPY}
"""Verdict → the maps whose entropies give middle-dispersed and late-contracting that verdict."""


@pytest.mark.parametrize(("share", "early", "late"), [(DIAGONAL[v], v, v) for v in DIAGONAL])
def test_diagonal_dominance_early_and_late_resembling_it(share, early, late, reached):
    """The shares of :data:`DIAGONAL` (per-prompt noise 0.05), evaluated once for this test and the
    reachability matrix below (:func:`reached`)."""
    build = DIAGONAL_CASES[early]
    assert build().choices.equals(evidence(choices(diagonal_share=share, noise=0.05)).choices)
    rows = rows_in(reached(build), "early-diagonal", "late-diagonal")
    assert rows["early-diagonal"]["verdict"] == early
    assert rows["late-diagonal"]["verdict"] == late
    row = rows["early-diagonal"]
    assert row["low"] <= row["estimate"] <= row["high"] and row["n_prompts"] == 20 and row["n_seeds"] == 1
    assert rows["late-diagonal"]["estimate"] == pytest.approx(share[-1] - share[0], abs=1e-9)


def test_late_is_compared_with_early_not_middle():
    """Late self mass far above middle (the old late/middle ratio passes), yet late rows are not
    diagonally dominant like the early ones: not replicated."""
    ev = evidence(choices(self_mass=bands(0.6, 0.2, 0.6), diagonal_share=bands(0.9, 0.1, 0.3)))
    row = row_of(ev, "late-diagonal")
    assert row["verdict"] == NOT_REPLICATED and row["estimate"] == pytest.approx(-0.6)
    assert "self mass late/early" in row["measured"]


def test_bands_change_what_early_means():
    """Early rows dominant only in the first layer: thirds dilute it, first/last 1 does not; the
    headline holds only where every band agrees, else the row says which band gives what."""
    share = [0.9] + [0.2] * 7 + [0.9]
    ev = evidence(choices(diagonal_share=share))
    table, sensitivity = claims.evaluate(ev, bands=("thirds", 1), only={"early-diagonal"})
    early = table[table["claim"] == "early-diagonal"].iloc[0]
    assert early["setting"] == "words, thirds" and early["verdict"] == claims.INCONCLUSIVE
    assert "the bands disagree (thirds: not replicated on m; first/last 1: supported)" in early["measured"]
    by_setting = sensitivity[sensitivity["claim"] == "early-diagonal"].set_index("setting")
    assert by_setting.loc["words, first/last 1", "estimate"] == pytest.approx(0.9, abs=0.02)
    assert by_setting.loc["words, thirds", "verdict"] == NOT_REPLICATED  # (0.9+0.2+0.2)/3
    assert set(by_setting.index) == {f"{c}, {b}" for c in CHOICES for b in ("thirds", "first/last 1")}
    agree = row_of(evidence(choices(diagonal_share=bands(0.9, 0.2, 0.9))), "early-diagonal", ("thirds", 1))
    assert agree["verdict"] == claims.SUPPORTED and "bands disagree" not in agree["measured"]


@pytest.mark.parametrize(("entropy", "middle", "late"), [(ENTROPY[v], v, v) for v in ENTROPY])
def test_dispersion_and_contraction(entropy, middle, late, reached):
    """The entropies of :data:`ENTROPY` (per-prompt noise 0.05), evaluated once for this test and
    the reachability matrix below (:func:`reached`)."""
    build = ENTROPY_CASES[middle]
    assert build().choices.equals(evidence(choices(row_entropy=entropy, noise=0.05)).choices)
    rows = rows_in(reached(build), "middle-dispersed", "late-contracting")
    assert rows["middle-dispersed"]["verdict"] == middle
    assert rows["late-contracting"]["verdict"] == late


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("boundary", claims.SUPPORTED),
        ("shot words", (claims.INCONCLUSIVE, NOT_REPLICATED)),  # a shot-blind preference
        ("across", NOT_REPLICATED),  # mostly across-shot attention
        ("locality", (claims.INCONCLUSIVE, NOT_REPLICATED)),  # pure locality
    ],
)
def test_within_shot_needs_a_boundary_that_shot_blind_maps_lack(name, expected):
    ev = evidence(map_choices(noisy_shot_maps(name), labels=shot_labels))
    row = row_of(ev, "within-shot")
    assert row["verdict"] in (expected if isinstance(expected, tuple) else (expected,)), row["measured"]
    assert row["setting"] == "words"
    if name != "boundary":
        assert row["high"] < claims.Thresholds().boundary_drop


def test_within_shot_from_constructed_drops():
    assert verdict(evidence(choices(row_drop=0.5)), "within-shot") == claims.SUPPORTED
    assert verdict(evidence(choices(row_drop=-0.1)), "within-shot") == NOT_REPLICATED
    assert verdict(evidence(choices(row_drop=0.2, noise=0.1)), "within-shot") == claims.INCONCLUSIVE
    # A jump the placebo cutoffs inside the shots give as well is no evidence of shots.
    placebo = evidence(choices(row_drop=0.5, row_placebo_previous=0.5))
    assert verdict(placebo, "within-shot") == claims.INCONCLUSIVE
    inside = row_of(evidence(choices(row_drop=0.5, row_placebo_own=0.5)), "within-shot")
    assert inside["verdict"] == claims.INCONCLUSIVE
    assert "minus the jump at a cutoff inside the own shot" in inside["measured"]


def test_targets_without_a_measured_layer_raise_no_warning():
    """A target whose prompts have no boundary drop in any layer (not identifiable there) is a
    cluster with nothing to average: NaN, not the warning for the mean of an empty slice."""
    table = choices()
    unmeasured = table["prompt_index"] < 5
    table.loc[unmeasured, ["row_drop", "row_placebo_previous", "row_placebo_own", "small_mass"]] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = row_of(evidence(table), "within-shot")
    assert row["verdict"] == claims.SUPPORTED


def test_value_domain_fails_one_hot_maps_and_passes_uniform_ones():
    segment, _ = k3_labels()
    n = len(segment)
    one_hot = np.eye(n)[None]  # every token on itself
    uniform = row_stochastic(np.ones((n, n)))[None]
    assert verdict(evidence(map_choices(lambda rng: one_hot)), "value-domain") == NOT_REPLICATED
    assert verdict(evidence(map_choices(lambda rng: uniform)), "value-domain") == claims.SUPPORTED


def test_value_domain_from_the_attention_mass():
    assert verdict(evidence(choices(small_mass=0.8)), "value-domain") == claims.SUPPORTED
    one_hot = evidence(choices(small_mass=0.0, small_share=0.99))  # the old measure passes it
    assert verdict(one_hot, "value-domain") == NOT_REPLICATED
    assert verdict(evidence(choices(small_mass=0.5, noise=0.05)), "value-domain") == claims.INCONCLUSIVE


@pytest.mark.parametrize(
    ("pearson", "expected"), [(0.1, claims.SUPPORTED), (0.7, NOT_REPLICATED), (0.3, claims.INCONCLUSIVE)]
)
def test_cosine_correlation_uses_the_stronger_of_both(pearson, expected):
    ev = evidence(
        choices(cosine_pearson_words=[0.05] * 8 + [pearson], cosine_spearman_words=-0.05, noise=0.03)
    )
    assert verdict(ev, "cosine-weak") == expected


def test_cosine_headline_is_the_thesis_choice_and_full_maps_are_its_other_setting():
    """Weak between words and clues (the thesis's choice), strong on the full maps: the headline
    reads the word pairs and says so; the robust column names the full maps' other verdict."""
    ev = evidence(
        choices(cosine_pearson_words=0.05, cosine_spearman_words=0.05, cosine_pearson=0.7, noise=0.01)
    )
    row = row_of(ev, "cosine-weak")
    assert row["verdict"] == claims.SUPPORTED and row["estimate"] == pytest.approx(0.05, abs=0.01)
    assert "word and clue tokens" in row["measured"]
    assert row["robust"].startswith("no (choices") and f"full: {NOT_REPLICATED}" in row["robust"]


def test_random_model_near_uniform_pools_its_init_seeds():
    trained = choices()
    uniform = [choices("random-s0", row_entropy=0.97, rng=1), choices("random-s1", row_entropy=0.96, rng=2)]
    row = row_of(evidence(trained, *uniform), "random-uniform")
    assert row["verdict"] == claims.SUPPORTED and row["n_seeds"] == 2 and "2 init seed" in row["measured"]
    assert row["robust"] == "yes (choices; 2 init seeds)"
    peaked = choices("random-s0", row_entropy=[0.5] + [0.95] * 8)
    assert verdict(evidence(trained, peaked), "random-uniform") == NOT_REPLICATED
    assert verdict(evidence(trained), "random-uniform") == claims.NOT_MEASURED


def test_alpha_edits_are_paired_per_prompt_and_tested_per_layer():
    trained = choices(rng=3, noise=0.05)
    sharper = choices("qkscale-a2", rng=3, noise=0.05, row_entropy=0.5, self_mass=0.7, sink_mass=0.1)
    flatter = choices("qkscale-a0.5", rng=3, noise=0.05, row_entropy=0.9)
    rows = rows_of(
        evidence(trained, sharper, flatter), "alpha-up-entropy", "alpha-down-entropy", "alpha-up-self"
    )
    row = rows["alpha-up-entropy"]
    # Noise shared by the pair cancels: the paired difference is exact.
    assert row["verdict"] == claims.SUPPORTED and row["estimate"] == pytest.approx(-0.1)
    assert "lower in 9 of 9 layers (adjusted p < 0.05)" in row["measured"]
    assert rows["alpha-down-entropy"]["verdict"] == claims.SUPPORTED
    self_row = rows["alpha-up-self"]
    assert self_row["verdict"] == claims.SUPPORTED
    assert "self +0.5, previous +0, sink -0.2, rest -0.3" in self_row["measured"]
    # Self mass up, but not to 'predominantly': 0.25 < 0.5.
    modest = choices("qkscale-a2", rng=3, noise=0.05, self_mass=0.25)
    assert verdict(evidence(trained, modest), "alpha-up-self") == NOT_REPLICATED
    # One layer moves: the mean clears nothing.
    one_layer = choices("qkscale-a0.5", rng=3, noise=0.05, row_entropy=[0.8] + [0.6] * 8)
    assert verdict(evidence(trained, one_layer), "alpha-down-entropy") == claims.INCONCLUSIVE


def test_alpha_variant_choice():
    names = ["trained", "qkscale-a1.5", "qkscale-a2", "qkscale-a4", "qkscale-a2-L0-3", "qkscale-a0.5"]
    assert claims.pick_variant(names, "qkscale", "up", 2.0) == "qkscale-a2"
    assert claims.pick_variant(names, "qkscale", "down", 0.5) == "qkscale-a0.5"
    assert claims.pick_variant(["trained", "qkscale-a2-L0-3"], "qkscale", "up", 2.0) is None
    assert claims.pick_variant(["random-s3", "trained"], "random") == "random-s3"


def spectra_tables(scale: float, layers: int = 10, n: int = 64, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Spectra tables of real random matrices: 'trained' is ``scale`` × a Gaussian matrix."""
    rng = np.random.default_rng(seed)

    def table(factor: float) -> pd.DataFrame:
        rows = []
        for layer in range(layers):
            for matrix in ("q", "k", "v"):
                sigma2 = np.linalg.svd(factor * rng.normal(0, 1 / np.sqrt(n), (n, n)), compute_uv=False) ** 2
                rows.append(
                    {
                        "layer": layer,
                        "matrix": matrix,
                        "form": "raw",
                        "sum_sigma2": sigma2.sum(),
                        "lambda_max": sigma2.max(),
                        "sv_max": np.sqrt(sigma2.max()),
                    }
                )
        return pd.DataFrame(rows)

    return {"trained": table(scale), "random-s0": table(1.0)}


def test_spectral_claims_the_weights_scale_cannot_fake():
    unscaled, scaled = (evidence(spectra=spectra_tables(s)) for s in (1.0, 10.0))
    rows = {}
    for name, ev in (("unscaled", unscaled), ("scaled", scaled)):
        rows[name] = rows_of_statement(ev, "W_q: learned σ_max").set_index("setting")
    # ×10 weights: every layer's raw σ_max ratio is above 1.
    assert rows["scaled"].loc["raw", ["estimate", "verdict"]].tolist() == [1.0, claims.SUPPORTED]
    assert rows["unscaled"].loc["raw", "verdict"] != claims.SUPPORTED
    # Scale-free, the two are the same matrices: the same share of layers, the same verdict.
    free = {name: r.loc["raw, scale-free"] for name, r in rows.items()}
    assert free["scaled"]["estimate"] == free["unscaled"]["estimate"]
    assert free["scaled"]["verdict"] == free["unscaled"]["verdict"] != claims.SUPPORTED
    table, _ = claims.evaluate(scaled, only={"spectra"})
    q_max = table[table["statement"].str.startswith("W_q: learned σ_max")].iloc[0]
    assert q_max["robust"].startswith("no (scale-free; 1 init seed: raw, scale-free:")
    assert "learned/random ratio per layer min 9." in q_max["measured"]
    # Σσ² has no scale-free form: no such setting.
    sum_rows = rows_of_statement(scaled, "W_q: learned Σσ²")
    assert list(sum_rows["setting"]) == ["raw"]


def test_weight_claims_count_layers_and_take_their_interval_from_init_seeds():
    """Layers are the population: the estimate is the share that passes, not a bootstrap mean;
    the interval spans the shares that each init seed alone gives."""
    layers = 30
    sv_max = np.where(np.arange(layers) < 5, 0.5, 3.0)  # 5 of 30 layers below random's 1
    trained = pd.DataFrame(
        {
            "layer": range(layers),
            "matrix": "v",
            "form": "raw",
            "sv_max": sv_max,
            "sum_sigma2": 1.0,
            "lambda_max": 1.0,
        }
    )
    seeds = {
        f"random-s{s}": trained.assign(sv_max=np.where(np.arange(layers) < 5 + 5 * s, 3.5, 1.0))
        for s in range(3)
    }
    ev = evidence(spectra={"trained": trained, **seeds})
    row = rows_of_statement(ev, "W_v: learned σ_max").set_index("setting").loc["raw"]
    ratio = sv_max / np.mean([t["sv_max"] for t in seeds.values()], axis=0)
    assert row["estimate"] == pytest.approx((ratio > 1).mean())
    per_seed = [(sv_max / t["sv_max"].to_numpy() > 1).mean() for t in seeds.values()]
    assert (row["low"], row["high"]) == pytest.approx((min(per_seed), max(per_seed)))
    assert row["estimate"] == pytest.approx(25 / 30) and per_seed == pytest.approx(
        [25 / 30, 20 / 30, 15 / 30]
    )
    assert row["n_seeds"] == 3 and row["verdict"] == claims.INCONCLUSIVE  # one seed alone: 50 %


def rows_of_statement(ev: Evidence, prefix: str) -> pd.DataFrame:
    """The sensitivity rows of the spectra statements that start with ``prefix``."""
    _, sensitivity = claims.evaluate(ev, only={"spectra"})
    return sensitivity[sensitivity["statement"].str.startswith(prefix)]


def test_spectra_not_measured_without_random_tables():
    table, _ = claims.evaluate(evidence(), only={"spectra"})
    assert list(table.loc[table["claim"] == "spectra", "verdict"]) == [claims.NOT_MEASURED]


def alignment(z: list[float], scope: str = "layer") -> dict[str, pd.DataFrame]:
    """The trained base-alignment rows whose z-scores are ``z`` and whose scale-free cosine·√n
    is z / 100, one row per layer (and head 0)."""
    n = 10_000
    cosine = np.asarray(z) / 100 / np.sqrt(n)
    table = {"layer": range(len(z)), "head": 0, "scope": scope, "z_score": z, "cosine": cosine, "n_terms": n}
    return {"trained": pd.DataFrame(table)}


def test_scale_free_alignment_is_not_fooled_by_the_weights_scale():
    grown = evidence(alignment=alignment([50.0] * 10, scope="head"))  # z 50, cosine·√n 0.5
    assert verdict(grown, "alignment-head-small") == NOT_REPLICATED
    assert verdict(grown, "alignment-head-cosine") == claims.SUPPORTED
    aligned = evidence(alignment=alignment([5000.0] * 10, scope="head"))  # cosine·√n 50
    assert verdict(aligned, "alignment-head-cosine") == NOT_REPLICATED


def test_alignment_null_from_the_init_seeds_spread():
    """Random seeds whose z-scores spread by 10 (not 1, as the formula says): a trained z of 5
    is large under the formula, small against the seeds."""
    rng = np.random.default_rng(0)
    tables = alignment([5.0] * 30)
    for seed in range(4):
        random = tables["trained"].assign(z_score=rng.normal(0, 10, 30))
        tables[f"random-s{seed}"] = random.assign(cosine=random["z_score"] / 100 / 100)
    _, sensitivity = claims.evaluate(evidence(alignment=tables), only={"alignment-layer-small"})
    rows = sensitivity[sensitivity["claim"] == "alignment-layer-small"].set_index("setting")
    assert rows.loc["formula", "verdict"] == NOT_REPLICATED
    assert rows.loc["init seeds", "estimate"] > 0.8 and rows.loc["init seeds", "n_seeds"] == 4
    # The heads (layers) are the population and no one seed gives a share: a point either way.
    assert (rows["low"] == rows["estimate"]).all() and (rows["high"] == rows["estimate"]).all()
    three = {k: tables[k] for k in ["trained", "random-s0", "random-s1"]}  # too few seeds: formula only
    _, sensitivity = claims.evaluate(evidence(alignment=three), only={"alignment-layer-small"})
    assert list(sensitivity.loc[sensitivity["claim"] == "alignment-layer-small", "setting"]) == ["formula"]


def test_alignment_shares_with_intervals():
    assert verdict(evidence(alignment=alignment([0.5] * 30)), "alignment-layer-small") == claims.SUPPORTED
    assert verdict(evidence(alignment=alignment([5.0] * 30)), "alignment-layer-small") == NOT_REPLICATED
    mixed = evidence(alignment=alignment([5.0, 0.1, 0.1] * 10))  # 67 %: between the bars
    assert verdict(mixed, "alignment-layer-small") == claims.INCONCLUSIVE


def clue_rows(variant: str, experiment: str, k: int, chrf, clue: str = "a b", ok: bool = True, copy=0.0):
    """One clue per target t0..t11; ``chrf`` and ``copy`` a constant or a value per target."""
    return [
        {"variant": variant, "experiment": experiment, "seed": 0, "category": "Animals", "k": k,
         "prompt_index": i, "target": f"t{i}", "clue": clue, "format_ok": ok,
         "chrf": chrf[i] if np.ndim(chrf) else chrf, "copy_share": copy[i] if np.ndim(copy) else copy}
        for i in range(12)
    ]  # fmt: skip


def test_more_shots_and_generation_claims():
    noise = np.random.default_rng(0).normal(0, 3, 12)
    rising = clue_rows("trained", "animals-k3", 3, 10 + noise) + clue_rows(
        "trained", "animals-k5", 5, 12 + noise
    )
    rising += clue_rows("trained", "animals-k8", 8, 14 + noise)
    edits = clue_rows("qkscale-a2", "animals-k3", 3, 5.0, copy=0.8)
    edits += clue_rows("qkscale-a0.5", "animals-k3", 3, 1.0, clue="", ok=False)
    ev = evidence(clues=pd.DataFrame(rising + edits))
    assert verdict(ev, "more-shots") == claims.SUPPORTED  # paired: the target noise cancels
    assert verdict(ev, "alpha-up-copies") == claims.SUPPORTED
    assert verdict(ev, "alpha-down-broken") == claims.SUPPORTED
    falling = clue_rows("trained", "animals-k3", 3, 14 + noise) + clue_rows(
        "trained", "animals-k5", 5, 12 + noise
    )
    falling += clue_rows("trained", "animals-k8", 8, 10 + noise)
    same = clue_rows("qkscale-a2", "animals-k3", 3, 5.0) + clue_rows("qkscale-a0.5", "animals-k3", 3, 1.0)
    ev = evidence(clues=pd.DataFrame(falling + same))
    assert verdict(ev, "more-shots") == NOT_REPLICATED
    assert verdict(ev, "alpha-up-copies") == NOT_REPLICATED
    assert verdict(ev, "alpha-down-broken") == NOT_REPLICATED
    unpaired = np.random.default_rng(1).normal(0, 3, 12)  # k = 8 no better on average, noisily
    noisy = clue_rows("trained", "animals-k3", 3, 10 + noise) + clue_rows(
        "trained", "animals-k8", 8, 10 + unpaired
    )
    assert verdict(evidence(clues=pd.DataFrame(noisy)), "more-shots") == claims.INCONCLUSIVE
    one_k = pd.DataFrame(clue_rows("trained", "animals-k3", 3, 10.0))
    assert verdict(evidence(clues=one_k), "more-shots") == claims.NOT_MEASURED


def test_more_shots_uses_only_targets_with_a_reference():
    """Targets without a reference clue (chrF empty) neither count as 0 nor vanish unsaid."""
    rows = clue_rows("trained", "animals-k3", 3, 10.0 + np.arange(12) * 0.1)
    rows += clue_rows("trained", "animals-k8", 8, 13.0 + np.arange(12) * 0.2)
    for row in rows[:2]:
        row["chrf"] = np.nan  # read as 0, they would turn the trend around
    row = row_of(evidence(clues=pd.DataFrame(rows)), "more-shots")
    assert row["verdict"] == claims.SUPPORTED
    assert "(10 of 12 targets with a reference)" in row["measured"]
    no_reference = pd.DataFrame([{**r, "chrf": np.nan} for r in rows])
    assert verdict(evidence(clues=no_reference), "more-shots") == claims.NOT_MEASURED


def test_more_shots_rests_on_the_draws_every_k_has():
    """Three shot draws at k = 3 and one at k = 8: the row rests on 1 draw, not 3."""
    rows = [
        r
        for experiment in ("animals-k3", "animals-k3-seed1", "animals-k3-seed2")
        for r in clue_rows("trained", experiment, 3, 10.0 + np.arange(12) * 0.1)
    ]
    rows += clue_rows("trained", "animals-k8", 8, 13.0 + np.arange(12) * 0.2)
    row = row_of(evidence(clues=pd.DataFrame(rows)), "more-shots")
    assert row["n_seeds"] == 1 and "shot draws k=3 3, k=8 1" in row["measured"]


def test_copy_share():
    prompt = "Just give one answer marking the end with a".split()
    assert copy_share("Give one answer, marking the end", prompt) == 1.0
    assert copy_share("Tiny toiler lifts", prompt) == 0.0
    assert np.isnan(copy_share("Ant", prompt))


def test_robust_column_names_the_choices_that_disagree():
    """Dominant rows early only when the sink is counted: the thesis's choice disagrees."""
    full = {"diagonal_share": bands(0.9, 0.2, 0.2)}
    ev = evidence(choices(diagonal_share=bands(0.2, 0.2, 0.2), by_choice={"full": full, "no_sink": full}))
    row = row_of(ev, "early-diagonal", ("thirds",))
    assert row["verdict"] == NOT_REPLICATED
    assert row["robust"] == "no (choices; 1 shot draw: full, thirds: supported; no_sink, thirds: supported)"
    agree = row_of(evidence(choices(diagonal_share=bands(0.9, 0.2, 0.2))), "early-diagonal", ("thirds", 3))
    assert agree["robust"] == "yes (choices, bands; 1 shot draw)"
    twice = choices(diagonal_share=bands(0.9, 0.2, 0.2), seeds=(0, 1, 2))
    assert row_of(evidence(twice), "early-diagonal", ("thirds",))["robust"] == "yes (choices; 3 shot draws)"


def test_value_weighted_maps_get_their_own_rows_outside_robust():
    """Weights diagonally dominant early, value-weighted maps not (a case built to disagree): the
    headline and robust column read the weights only; the value-weighted verdict is its own column
    and its own sensitivity rows. Without value-weighted tables neither appears."""
    weights = choices(diagonal_share=bands(0.9, 0.2, 0.2))
    values = choices(diagonal_share=bands(0.1, 0.2, 0.2), rng=1)
    ev = evidence(weights, value_choices=values, value_metrics=values[values["choice"] == "full"])
    table, sensitivity = claims.evaluate(ev, bands=("thirds",))
    row = table[table["claim"] == "early-diagonal"].iloc[0]
    assert row["verdict"] == claims.SUPPORTED and row["robust"] == "yes (choices; 1 shot draw)"
    assert row["value_weighted"].startswith(NOT_REPLICATED + ": 0.1")
    rows = sensitivity[sensitivity["claim"] == "early-diagonal"]
    assert rows.groupby("weighting")["setting"].count().to_dict() == {"value-weighted": 4, "weights": 4}
    value_rows = rows[rows["weighting"] == "value-weighted"]
    assert set(value_rows["verdict"]) == {NOT_REPLICATED}
    assert value_rows["setting"].str.startswith("value-weighted, ").all()
    plain, plain_sensitivity = claims.evaluate(evidence(weights), bands=("thirds",))
    assert set(plain["value_weighted"]) == {"–"} and set(plain_sensitivity["weighting"]) == {"weights"}
    weight_rows = table[table["claim"].str.startswith("spectra")]
    assert set(weight_rows["value_weighted"]) <= {"–"}


def test_contradicted_only_on_the_thesis_model():
    ev = evidence(choices(diagonal_share=bands(0.2, 0.4, 0.2)))
    assert verdict(ev, "early-diagonal") == "not replicated on m"
    ev.thesis_model = True
    assert verdict(ev, "early-diagonal") == claims.CONTRADICTED


def test_identical_replicates_do_not_narrow_the_interval():
    one = choices(diagonal_share=bands(0.5, 0.2, 0.3), noise=0.03)
    copy = one.assign(experiment="animals-k3-seed7", seed=7)
    single = row_of(evidence(one), "early-diagonal")
    twice = row_of(evidence(one, copy), "early-diagonal")
    assert (twice["n_seeds"], twice["n_prompts"], single["n_seeds"]) == (2, 20, 1)
    assert twice["estimate"] == pytest.approx(single["estimate"])
    assert twice["high"] - twice["low"] >= 0.95 * (single["high"] - single["low"])


def test_table_and_markdown():
    ev = evidence(choices(diagonal_share=bands(0.8, 0.2, 0.8)), spectra=spectra_tables(1.0))
    table, sensitivity = claims.evaluate(ev)
    assert list(table.columns) == claims.COLUMNS and list(sensitivity.columns) == claims.SENSITIVITY_COLUMNS
    known = set(claims.VERDICTS) | {NOT_REPLICATED}
    assert set(table["verdict"]) <= known and set(sensitivity["verdict"]) <= known
    assert {c.claim for c in claims.CLAIMS} == set(table["claim"])
    early = table[table["claim"] == "early-diagonal"].iloc[0]
    assert early["estimate"] == pytest.approx(0.8, abs=0.01) and "≥ 50%" in early["threshold"]
    # The bars' text follows the thresholds the table is evaluated with.
    stricter, _ = claims.evaluate(ev, thresholds=claims.Thresholds(dominant_share=0.9))
    assert "≥ 90%" in stricter.loc[stricter["claim"] == "early-diagonal", "threshold"].item()
    text = claims.claims_markdown(table, sensitivity, {"m": claims.measured_on(ev)})
    assert text.startswith("# Thesis claims") and "**supported**" in text
    assert "## m (experiment animals-k3)" in text and "### m: every analysis choice" in text
    assert "Measured on m: " in text and "20 target words" in text
    # Each row says which setting its verdict rests on: the choice and band, the weights' form.
    main = text.split("### m: every analysis choice")[0].splitlines()
    cells = {line.split(" | ")[1]: line.split(" | ")[2:5] for line in main if line.startswith("| ")}
    assert cells["statement"] == ["metric", "setting", "contrast"]
    assert [cells[s][1] for s in table["statement"]] == list(table["setting"])
    assert cells["Early layers are nearly diagonal-dominant"][1] == "words, thirds"
    assert cells["W_q: learned σ_max larger than random (thesis: 3–4 vs 2)"][1] == "raw"
    # Both pages say that the thesis's choice keeps the rows as the model gave them.
    page = claims.claims_html(table, {"m": claims.measured_on(ev)})
    assert all("the rows as the model gave them, unnormalised" in t for t in (text, page))


def _alpha(variant: str, **metrics) -> Evidence:
    return evidence(choices(rng=3, noise=0.05), choices(variant, rng=3, noise=0.05, **metrics))


def _clues(copy=0.0, clue="a b", ok=True, variant="qkscale-a2") -> Evidence:
    trained = clue_rows("trained", "animals-k3", 3, 10.0)
    edited = clue_rows(variant, "animals-k3", 3, 5.0, clue=clue, ok=ok, copy=copy)
    return evidence(clues=pd.DataFrame(trained + edited))


def _half_broken() -> Evidence:
    rows = clue_rows("trained", "animals-k3", 3, 10.0)
    edited = clue_rows("qkscale-a0.5", "animals-k3", 3, 1.0)
    for i, row in enumerate(edited):
        row["clue"] = "" if i % 2 else row["clue"]
    return evidence(clues=pd.DataFrame(rows + edited))


def _shots(*levels) -> Evidence:
    noise = np.random.default_rng(0).normal(0, 3, 12)
    rows = []
    for k, level in zip((3, 5, 8), levels):
        rows += clue_rows("trained", f"animals-k{k}", k, level + noise if np.ndim(level) == 0 else level)
    return evidence(clues=pd.DataFrame(rows))


def _spectrum(matrix: str, measure: str, meets: float, fails: tuple[float, ...], passing: int) -> Evidence:
    """Spectra of W_q, W_k, W_v (30 layers, one init seed, every ratio 1) but ``measure`` of
    W_``matrix``, whose learned/random ratio is ``meets`` in ``passing`` layers and cycles through
    ``fails`` in the rest."""
    layers = 30
    random = pd.DataFrame(
        [{"layer": layer, "matrix": m, "form": "raw", "sum_sigma2": 1.0, "lambda_max": 1.0, "sv_max": 1.0}
         for layer in range(layers) for m in ("q", "k", "v")]
    )  # fmt: skip
    ratios = [meets if layer < passing else fails[layer % len(fails)] for layer in random["layer"]]
    trained = random.assign(**{measure: np.where(random["matrix"] == matrix, ratios, 1.0)})
    return evidence(spectra={"trained": trained, "random-s0": random})


SPECTRUM_ROWS = {
    # statement: the matrix, the measure, a ratio that meets the criterion, ratios that do not
    "W_q: learned Σσ² far below random (thesis: n/20–n/10 vs n)": ("q", "sum_sigma2", 0.1, (1.0,)),
    "W_k: learned Σσ² far below random (thesis: n/20–n/10 vs n)": ("k", "sum_sigma2", 0.1, (1.0,)),
    "W_q: learned σ_max larger than random (thesis: 3–4 vs 2)": ("q", "sv_max", 2.0, (0.5,)),
    "W_k: learned σ_max larger than random (thesis: 3–4 vs 2)": ("k", "sv_max", 2.0, (0.5,)),
    "W_v: learned Σσ² near random (thesis: 0.9n–1.2n vs n)": ("v", "sum_sigma2", 1.0, (0.3, 3.0)),
    "W_v: learned σ_max larger than random (thesis: 2–3 vs 2)": ("v", "sv_max", 2.0, (0.5,)),
}
"""The spectra claim's rows (one per observation and matrix): the ratio that each tests."""
PER_HEAD_COSINE = "Per head: attention is only weakly related to the embedding cosine similarity"


def _per_head(peak: float) -> Evidence:
    """Head-mean maps weakly related to the cosine (|r| ≤ 0.1 in every layer), every head too but
    head 2, whose |r| in layer 8 is ``peak``."""
    frames = []
    for head in (-1, 0, 1, 2):
        pearson = [0.05] * 8 + [peak if head == 2 else 0.1]
        part = choices(cosine_pearson_words=pearson, cosine_spearman_words=0.05, noise=0.01)
        frames.append(part[part["choice"] == "full"].drop(columns=["choice"]).assign(head=head))
    return Evidence("m", "animals-k3", choices=choices(), metrics=pd.concat(frames, ignore_index=True))


def _knockout(**effect: float) -> Evidence:
    """Knockout rows of target-shots and its matched control (named − control per window; the
    control's five seeds each drawn around its mean), of target-shotwords, or of across-shots, each
    with its mean Δ log-probability per token."""
    names = {
        "shot0": "knockout-target-shots-L0-9",
        "shot1": "knockout-target-shots-L10-19",
        "control0": "knockout-control-target-shots-s0-4-L0-9",
        "control1": "knockout-control-target-shots-s0-4-L10-19",
        "words0": "knockout-target-shotwords-L0-9",
        "across0": "knockout-across-shots-L0-9",
        "across1": "knockout-across-shots-L10-19",
    }
    named = {names[key]: value for key, value in effect.items() if not key.startswith("control")}
    controls = {names[key]: value for key, value in effect.items() if key.startswith("control")}
    rows = [synthetic(named).assign(seed=pd.NA)] + [
        synthetic(controls, seed=seed + 1).assign(seed=seed) for seed in range(5) if controls
    ]
    rows = pd.concat(rows, ignore_index=True)
    return evidence(knockout=rows.assign(reference_delta_token=rows["delta_token"] / 2))


SHOTS_EQUAL = {"shot0": -0.2, "shot1": -0.2, "control0": -0.2, "control1": -0.2}
REFERENCE_HURTS = {"shot0": -0.6, "shot1": -0.6}


ONE_ROW = {
    "early-diagonal": DIAGONAL_CASES,
    "late-diagonal": DIAGONAL_CASES,
    "middle-dispersed": ENTROPY_CASES,
    "late-contracting": ENTROPY_CASES,
    "within-shot": {
        S: lambda: evidence(choices(row_drop=0.5)),
        NR: lambda: evidence(choices(row_drop=-0.1)),
        IN: lambda: evidence(choices(row_drop=0.2, noise=0.1)),
    },
    "built-from-shots": {
        S: lambda: _knockout(**{**SHOTS_EQUAL, "shot0": -0.6}),  # hurts more in the first window
        NR: lambda: _knockout(**{**SHOTS_EQUAL, "control0": -0.6, "control1": -0.6}),
        IN: lambda: _knockout(**SHOTS_EQUAL),  # as much as the control
    },
    "shots-within": {
        S: lambda: _knockout(**REFERENCE_HURTS, across0=0.0, across1=-0.02),
        NR: lambda: _knockout(**REFERENCE_HURTS, across0=0.0, across1=-0.9),  # hurts more than the reference
        IN: lambda: _knockout(**REFERENCE_HURTS, across0=0.0, across1=-0.6),  # as much as the reference
    },
    "value-domain": {
        S: lambda: evidence(choices(small_mass=0.8)),
        NR: lambda: evidence(choices(small_mass=0.0)),
        IN: lambda: evidence(choices(small_mass=0.5, noise=0.05)),
    },
    "cosine-weak": {
        v: lambda r=r: evidence(
            choices(cosine_pearson_words=[0.05] * 8 + [r], cosine_spearman_words=-0.05, noise=0.03)
        )
        for v, r in ((S, 0.1), (NR, 0.7), (IN, 0.3))
    },
    "random-uniform": {
        v: lambda e=e: evidence(choices(), choices("random-s0", row_entropy=e, rng=1, noise=0.01))
        for v, e in ((S, 0.97), (NR, [0.5] + [0.95] * 8), (IN, 0.85))
    },
    "alpha-up-entropy": {
        v: lambda e=e: _alpha("qkscale-a2", row_entropy=e)
        for v, e in ((S, 0.5), (NR, 0.7), (IN, [0.5] + [0.6] * 8))
    },
    "alpha-down-entropy": {
        v: lambda e=e: _alpha("qkscale-a0.5", row_entropy=e)
        for v, e in ((S, 0.9), (NR, 0.5), (IN, [0.8] + [0.6] * 8))
    },
    "alpha-up-self": {
        v: lambda m=m: _alpha("qkscale-a2", self_mass=m) for v, m in ((S, 0.7), (NR, 0.25), (IN, 0.5))
    },
    "alpha-up-copies": {
        S: lambda: _clues(copy=0.8),
        NR: lambda: _clues(copy=0.06),  # above trained's 0, far below the bar
        IN: lambda: _clues(copy=0.5 + np.random.default_rng(0).normal(0, 0.2, 12)),
    },
    "alpha-down-broken": {
        S: lambda: _clues(clue="", ok=False, variant="qkscale-a0.5"),
        NR: lambda: _clues(variant="qkscale-a0.5"),
        IN: _half_broken,
    },
    "more-shots": {
        S: lambda: _shots(10, 12, 14),
        NR: lambda: _shots(10, 20, 10),  # an inverted U: the second step lowers it
        IN: lambda: _shots(10, 10 + np.random.default_rng(1).normal(0, 3, 12)),
    },
    "alignment-layer-small": {
        v: lambda z=z: evidence(alignment=alignment(z))
        for v, z in ((S, [0.5] * 30), (NR, [5.0] * 30), (IN, [5.0, 0.1, 0.1] * 10))
    },
    "alignment-head-small": {
        v: lambda z=z: evidence(alignment=alignment(z, "head"))
        for v, z in ((S, [0.5] * 30), (NR, [5.0] * 30), (IN, [5.0, 0.1, 0.1] * 10))
    },
    "alignment-head-cosine": {
        v: lambda z=z: evidence(alignment=alignment(z, "head"))
        for v, z in ((S, [50.0] * 30), (NR, [5000.0] * 30), (IN, [5000.0, 10.0, 10.0] * 10))
    },
}
"""Claim → verdict → inputs that give it, for the claims with one row (the registry's statement)."""
STATEMENTS = {c.claim: c.statement for c in claims.CLAIMS}
REACHABLE = {
    **{(claim, STATEMENTS[claim]): cases for claim, cases in ONE_ROW.items()},
    **{
        ("spectra", statement): {
            v: lambda m=m, x=x, meets=meets, fails=fails, n=n: _spectrum(m, x, meets, fails, n)
            for v, n in ((S, 30), (NR, 3), (IN, 20))
        }
        for statement, (m, x, meets, fails) in SPECTRUM_ROWS.items()
    },
    ("cosine-weak", PER_HEAD_COSINE): {
        v: lambda p=p: _per_head(p) for v, p in ((S, 0.1), (NR, 0.7), (IN, 0.4))
    },  # the head mean stays weak: only the per-head row moves
}
"""(claim, statement) → verdict → inputs that give that row that verdict: every row of the table."""


def full_evidence() -> Evidence:
    """Every input a claim reads: attention tables of the trained, random and α-edited models with
    per-head metrics, clues at three k and of both edits, knockouts with their control, spectra
    of W_q, W_k, W_v, and alignment rows per layer and per head."""
    attention = [
        choices(noise=0.05),
        choices("random-s0", row_entropy=0.97, rng=1),
        choices("qkscale-a2", row_entropy=0.5, rng=3),
        choices("qkscale-a0.5", row_entropy=0.9, rng=3),
    ]
    clues = _shots(10, 12, 14).clues
    edits = clue_rows("qkscale-a2", "animals-k3", 3, 5.0, copy=0.8)
    edits += clue_rows("qkscale-a0.5", "animals-k3", 3, 1.0, clue="", ok=False)
    knockout = _knockout(**SHOTS_EQUAL, words0=-0.3, across0=0.0, across1=-0.02).knockout
    z = [0.5] * 30
    weights = pd.concat([alignment(z)["trained"], alignment(z, "head")["trained"]], ignore_index=True)
    return Evidence(
        "m",
        "animals-k3",
        choices=pd.concat(attention, ignore_index=True),
        metrics=_per_head(0.1).metrics,
        spectra=spectra_tables(1.0),
        alignment={"trained": weights},
        clues=pd.concat([clues, pd.DataFrame(edits)], ignore_index=True),
        knockout=knockout,
    )


@pytest.fixture(scope="module")
def whole_table() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The claims and sensitivity tables of :func:`full_evidence`, evaluated once (a read-only
    table that two tests read)."""
    return claims.evaluate(full_evidence())


def test_the_reachability_matrix_covers_every_row(whole_table):
    """The rows are those the registry gives on inputs that hold everything a claim reads (every
    row measured), not a list kept by hand: a new claim or statement needs its row here."""
    table, _ = whole_table
    assert claims.NOT_MEASURED not in set(table["verdict"]), table[["claim", "statement", "measured"]]
    assert set(table["claim"]) == set(STATEMENTS)
    assert set(zip(table["claim"], table["statement"])) == set(REACHABLE)


def test_evaluating_one_claim_gives_its_rows_of_the_whole_table(whole_table):
    """``only`` (which the matrix below and :func:`rows_of` use) leaves a claim's rows as the whole
    evaluation gives them, premise included (late-diagonal presupposes early-diagonal)."""
    whole, sensitivity = whole_table
    for claim in ("late-diagonal", "spectra", "built-from-shots"):
        alone, alone_sensitivity = claims.evaluate(full_evidence(), only={claim})
        for full, part in ((whole, alone), (sensitivity, alone_sensitivity)):
            expected = full[full["claim"] == claim].reset_index(drop=True)
            assert len(expected) and set(part["claim"]) == {claim}
            pd.testing.assert_frame_equal(part, expected)


@pytest.fixture(scope="module")
def reached() -> Callable[[Callable[[], Evidence]], pd.DataFrame]:
    """The claims table of a :data:`REACHABLE` case's inputs, evaluated once (on first use) for
    every claim whose cases share those inputs: early- and late-diagonal read the same maps, as do
    middle-dispersed and late-contracting, and the later claim measures the earlier as its premise
    anyway. ``only`` gives each claim's rows as it alone does
    (test_evaluating_one_claim_gives_its_rows_of_the_whole_table); the tables are only read."""
    readers: dict[Callable[[], Evidence], set[str]] = {}
    for (claim, _), cases in REACHABLE.items():
        for build in cases.values():
            readers.setdefault(build, set()).add(claim)
    tables: dict[Callable[[], Evidence], pd.DataFrame] = {}

    def table(build: Callable[[], Evidence]) -> pd.DataFrame:
        if build not in tables:
            tables[build], _ = claims.evaluate(build(), only=readers[build])
        return tables[build]

    return table


def _row_id(claim: str, statement: str) -> str:
    """A row's test id in ASCII: its claim, and for a claim of several rows which one."""
    if statement in SPECTRUM_ROWS:
        matrix, measure, *_ = SPECTRUM_ROWS[statement]
        return f"{claim} W_{matrix} {measure}"
    return claim + (" per head" if statement == PER_HEAD_COSINE else "")


@pytest.mark.parametrize(
    ("claim", "statement", "expected"),
    [(c, s, v) for (c, s), cases in REACHABLE.items() for v in cases],
    ids=[f"{_row_id(c, s)}: {v}" for (c, s), cases in REACHABLE.items() for v in cases],
)
def test_every_row_reaches_every_verdict(claim, statement, expected, reached):
    table = reached(REACHABLE[claim, statement][expected])
    rows = table[(table["claim"] == claim) & (table["statement"] == statement)]
    assert rows["verdict"].tolist() == [expected], rows["measured"].tolist()


def test_cosine_per_head_counts_a_head_that_the_mean_hides():
    """Every head weakly correlated but one (|r| 0.6 in layer 8): the head mean passes, the
    per-head row names that head and does not."""
    table, _ = claims.evaluate(_per_head(0.6), only={"cosine-weak"})
    rows = table[table["claim"] == "cosine-weak"].set_index("statement")
    assert rows.loc[COSINE_STATEMENT, "verdict"] == claims.SUPPORTED
    per_head = rows.loc[PER_HEAD_COSINE]
    assert per_head["verdict"] == NOT_REPLICATED and "(layer 8, head 2)" in per_head["measured"]
    assert per_head["estimate"] == pytest.approx(0.6, abs=0.02)


def test_built_from_shots_headlines_a_window_its_verdict_rests_on():
    """A larger excess drop in a window too noisy to count does not take the headline from the window
    that supports the claim: the printed estimate is the one the verdict rests on."""
    ev = _knockout(**{**SHOTS_EQUAL, "shot0": -0.6})  # L0-9: a clear excess drop of 0.4
    rows = ev.knockout
    noisy = rows["variant"] == "knockout-target-shots-L10-19"
    shift = np.random.default_rng(2).normal(-1.5, 4.0, int(noisy.sum()))
    rows.loc[noisy, "delta_token"] += shift  # L10-19: a larger mean excess, an interval that spans 0
    row = row_of(ev, "built-from-shots")
    assert row["verdict"] == claims.SUPPORTED and "L10-19: " in row["measured"]
    assert claims.Contrast.parse(row["contrast"]).minuend.endswith("-L0-9")
    assert row["estimate"] == pytest.approx(0.4, abs=0.05)


def test_knockout_claims_are_not_measured_without_their_knockouts():
    """No knockout, the set without its control, across-shots without its reference: not measured;
    the claim reads the set's own rows and names the clue it reads and the one beside it."""
    for ev in (evidence(), _knockout(shot0=-0.6, shot1=-0.6, across0=-0.5)):
        row = row_of(ev, "built-from-shots")
        assert row["verdict"] == claims.NOT_MEASURED and "matched control" in row["measured"]
    for ev in (evidence(), _knockout(across0=-0.02, across1=0.0)):
        assert verdict(ev, "shots-within") == claims.NOT_MEASURED
    row = row_of(_knockout(**{**SHOTS_EQUAL, "shot0": -0.6}, words0=-0.3), "built-from-shots")
    assert row["estimate"] == pytest.approx(0.4, abs=0.03) and row["n_prompts"] == 12
    assert (
        row["contrast"] == "delta_token: knockout-control-target-shots-s0-4-L0-9 − knockout-target-shots-L0-9"
    )
    assert "L0-9" in row["measured"] and "L10-19" in row["measured"] and "(5 seeds)" in row["measured"]
    assert (
        "greedy clue" in row["metric"] and "Beside it, the reference clue: L0-9: 0.19" in row["measured"]
    )  # half the greedy clue's
    assert (
        "target-shotwords alone (shot clues visible), the trained model's greedy clue: no matched control"
        in row["measured"]
    )


def test_hurts_little_is_judged_against_the_target_to_shots_effect_not_a_margin():
    """Across-shots −0.15 per token, within no margin of 0.1: with a reference that hurts −0.6 it
    hurts little (supported), with a reference that hurts −0.15 as well it does not (inconclusive);
    where the reference does not hurt and across-shots does, across-shots hurts more (contradicted)."""
    assert (
        verdict(_knockout(**REFERENCE_HURTS, across0=-0.15, across1=-0.15), "shots-within")
        == claims.SUPPORTED
    )
    same = _knockout(shot0=-0.15, shot1=-0.15, across0=-0.15, across1=-0.15)
    assert verdict(same, "shots-within") == claims.INCONCLUSIVE
    quiet = _knockout(shot0=-0.6, shot1=0.0, across0=0.0, across1=-0.1)
    assert verdict(quiet, "shots-within") == NOT_REPLICATED
    row = row_of(_knockout(**REFERENCE_HURTS, across0=0.0, across1=-0.02), "shots-within")
    assert row["contrast"] == "delta_token: knockout-across-shots-L10-19 − knockout-target-shots-L10-19"
    assert row["estimate"] == pytest.approx(0.58, abs=0.03)


def recomputed(ev: Evidence, row: pd.Series) -> float:
    """A row's estimate from its contrast and the evidence tables it names, by hand: a variant's
    column minus trained's paired per prompt and layer, a band's mean minus another's (thirds of
    the trained model's layer means), or a shot count's chrF minus another's paired per target."""
    contrast = claims.Contrast.parse(row["contrast"])
    if contrast.axis == "knockout":  # per prompt, each side's mean over its seeds
        per_prompt = ev.knockout.groupby(["variant", "experiment", "prompt_index"])[contrast.quantity].mean()
        return (per_prompt[contrast.minuend] - per_prompt[contrast.subtrahend]).dropna().mean()
    if contrast.axis == "k":
        clues = ev.clues[ev.clues["variant"] == "trained"]
        per_target = clues.groupby(["k", "target"])["chrf"].mean().unstack("k")
        minuend, subtrahend = (
            int(side.removeprefix("k")) for side in (contrast.minuend, contrast.subtrahend)
        )
        return (per_target[minuend] - per_target[subtrahend]).dropna().mean()
    choice, *band = row["setting"].split(", ")
    rows = ev.choices[ev.choices["choice"] == choice]
    if contrast.axis == "band":
        assert band == ["thirds"]
        thirds = dict(zip(("early", "middle", "late"), np.array_split(np.arange(LAYERS), 3)))
        per_layer = rows[rows["variant"] == "trained"].groupby("layer")[contrast.quantity].mean()
        return per_layer[thirds[contrast.minuend]].mean() - per_layer[thirds[contrast.subtrahend]].mean()
    keys = ["experiment", "prompt_index", "layer"]
    side = {
        name: rows[rows["variant"] == name].set_index(keys)[contrast.quantity]
        for name in (contrast.minuend, contrast.subtrahend)
    }
    return (side[contrast.minuend] - side[contrast.subtrahend]).dropna().mean()


def contrast_cases() -> list[Evidence]:
    """Every input the claims read, and band effects and an inverted U in k that make the band and
    k contrasts differ from 0 (and from their reverse)."""
    bands_ = evidence(
        choices(row_entropy=bands(0.5, 0.7, 0.4), diagonal_share=bands(0.8, 0.2, 0.7), noise=0.05)
    )
    return [full_evidence(), bands_, _shots(10, 13, 9)]


@pytest.mark.parametrize("case", range(3))
def test_every_estimate_is_the_contrast_its_row_names(case):
    """Each row with a contrast: its estimate equals the contrast recomputed from the evidence, its
    metric starts with the contrast in words. The case built to be wrong: the same rows read with
    their contrast reversed (the α = 2 entropy row's former text, trained − α=2) do not match."""
    ev = contrast_cases()[case]
    table, _ = claims.evaluate(ev, bands=("thirds",))
    rows = table[table["contrast"].notna() & table["estimate"].notna()]
    assert len(rows) >= (3 if case else 6), table[["claim", "contrast"]]
    for _, row in rows.iterrows():
        contrast = claims.Contrast.parse(row["contrast"])
        assert row["estimate"] == pytest.approx(recomputed(ev, row), abs=1e-9), row["claim"]
        assert row["metric"].startswith(contrast.text()), row["metric"]
        if abs(row["estimate"]) > 1e-6:
            reversed_ = f"{contrast.quantity}: {contrast.subtrahend} − {contrast.minuend}"
            assert recomputed(ev, row.copy().replace(row["contrast"], reversed_)) != pytest.approx(
                row["estimate"]
            )


def test_the_sharpening_row_prints_edited_minus_trained_against_a_bar_of_that_sign():
    """α = 2 lowers entropy by 0.1: the row says qkscale-a2 − trained, prints −0.1 and its bar is
    ≤ −step; the former bar (≥ +step) would not hold for the estimate it printed."""
    row = row_of(_alpha("qkscale-a2", row_entropy=0.5), "alpha-up-entropy")
    assert row["contrast"] == "row_entropy: qkscale-a2 − trained"
    assert row["metric"] == "normalised entropy, qkscale-a2 − trained, paired per prompt and layer"
    assert row["threshold"].startswith("supported if the mean's interval ≤ −0.02 and lower in ≥ 80%")
    assert row["threshold"].endswith("contradicted if it is ≥ 0")
    assert row["verdict"] == claims.SUPPORTED and row["high"] <= -0.02 and not row["low"] >= 0.02
    flatter = row_of(_alpha("qkscale-a0.5", row_entropy=0.7), "alpha-down-entropy")
    assert flatter["contrast"] == "row_entropy: qkscale-a0.5 − trained" and flatter["low"] >= 0.02
    assert "interval ≥ 0.02" in flatter["threshold"]


def test_more_shots_prints_the_step_its_verdict_rests_on():
    """chrF 10, 13, 9 at k = 3, 5, 8 (target noise shared, so paired steps are exact): the verdict
    rests on the fall k8 − k5 = −4, which the row prints and calls an inverted U; the whole range
    k8 − k3 = −1 (the former estimate) is not what decides. Rising steps: the weakest rise."""
    row = row_of(_shots(10, 13, 9), "more-shots")
    assert row["verdict"] == NOT_REPLICATED and row["contrast"] == "chrf: k8 − k5"
    assert row["estimate"] == pytest.approx(-4.0) and row["estimate"] != pytest.approx(-1.0)
    assert row["metric"].startswith("sentence chrF against the reference clues, k8 − k5, trained")
    assert "k8 − k3 -1" in row["measured"] and "the verdict rests on k8 − k5" in row["measured"]
    assert "an inverted U: k5 − k3 3" in row["measured"] and "then k8 − k5 -4" in row["measured"]
    rising = row_of(_shots(10, 13, 14), "more-shots")
    assert rising["verdict"] == claims.SUPPORTED and rising["contrast"] == "chrf: k8 − k5"
    assert rising["estimate"] == pytest.approx(1.0) and "inverted U" not in rising["measured"]
    noise = np.random.default_rng(2).normal(0, 3, 12)  # a rise whose interval includes 0, then a fall
    row = row_of(_shots(10, 10.5 + noise, 7), "more-shots")
    assert row["contrast"] == "chrf: k8 − k3"  # the clearest fall: exact, the target noise shared
    assert "rises (its interval includes 0: the rise is not established), then k8 − k5" in row["measured"]
    falling = row_of(_shots(14, 12, 10), "more-shots")  # falls throughout: no inverted U
    assert falling["verdict"] == NOT_REPLICATED and "inverted U" not in falling["measured"]
    assert falling["contrast"] == "chrf: k8 − k3" and falling["estimate"] == pytest.approx(-4.0)


def _alone(claim: str, ev: Evidence) -> str:
    """The claim's own verdict under the headline setting, without its premise."""
    (measure,) = [c.measure for c in claims.CLAIMS if c.claim == claim]
    return measure(ev, claims.Thresholds(), claims.Setting("words", "thirds")).verdict


def test_again_and_resembling_need_their_premise():
    """Entropy 0.7, 0.5, 0.3 by band: late layers contract (alone: supported), but the middle ones
    did not disperse first, so they do not contract *again*; early rows 0.5 % dominant and late
    1 %: late resembles early (alone: supported), but early is not diagonal-dominant. An inconclusive
    premise leaves the claim inconclusive; on the thesis's model a failed premise contradicts."""
    falling = evidence(choices(row_entropy=bands(0.7, 0.5, 0.3)))
    assert _alone("late-contracting", falling) == claims.SUPPORTED
    row = row_of(falling, "late-contracting")
    assert row["verdict"] == NOT_REPLICATED and row["estimate"] == pytest.approx(-0.2)
    premise = (
        "premise not met (Middle layers disperse attention over distant tokens: not replicated on m, -0.2"
    )
    assert row["measured"].startswith(premise), row["measured"]
    unsure = evidence(choices(row_entropy=bands(0.5, 0.55, 0.3), noise=0.05))
    assert _alone("late-contracting", unsure) == claims.SUPPORTED
    assert verdict(unsure, "late-contracting") == claims.INCONCLUSIVE
    flat = evidence(choices(diagonal_share=bands(0.005, 0.2, 0.01)))
    assert _alone("late-diagonal", flat) == claims.SUPPORTED
    row = row_of(flat, "late-diagonal")
    assert row["verdict"] == NOT_REPLICATED and "premise not met (Early layers are nearly" in row["measured"]
    flat.thesis_model = True
    assert verdict(flat, "late-diagonal") == claims.CONTRADICTED


def test_spread_over_init_seeds_is_a_range_not_an_interval():
    """The spectra rows' bounds are the shares of single init seeds: called a range in the table and
    on the page; the alignment's share a point; attention rows keep their 95 % interval."""
    trained = spectra_tables(1.0)["trained"]
    seeds = {f"random-s{s}": spectra_tables(1.0, seed=s + 1)["random-s0"] for s in range(3)}
    z = [0.5] * 30
    ev = evidence(spectra={"trained": trained, **seeds}, alignment=alignment(z))
    table, sensitivity = claims.evaluate(ev)
    bounds = table.set_index("claim")["bounds"]
    assert set(bounds["spectra"]) == {"range over init seeds"} and bounds["alignment-layer-small"] == "point"
    assert bounds["early-diagonal"] == "95 % CI" and set(sensitivity["bounds"]) == set(bounds)
    text = claims.claims_markdown(table, sensitivity, {"m": claims.measured_on(ev)})
    spectra_lines = [line for line in text.splitlines() if "learned σ_max" in line]
    assert spectra_lines and all("(range over init seeds)" in line for line in spectra_lines)
    assert "| 1.000 (point) |" in text
    early = [line for line in text.splitlines() if line.startswith("| 8.2, 9.1 | Early layers")][0]
    assert "range" not in early and "point" not in early


def test_prompt_tables_built_once_per_evaluation_equal_fresh_ones():
    """Inside ``views.built_once`` a table with the same arguments is built once (the object again),
    and it equals a fresh build; other arguments (a choice, a variant, metrics) get their own table,
    and outside the block every call builds anew."""
    trained = choices(by_choice={"full": {"row_entropy": 0.2}})
    table = pd.concat([trained, choices("random-s0", rng=1, row_entropy=0.9)], ignore_index=True)
    calls = [
        (["trained"], ["row_entropy"], "words"),
        (["trained"], ["row_entropy"], "full"),
        (["random-s0"], ["row_entropy"], "words"),
        (["trained"], ["self_mass", "row_entropy"], "words"),
    ]
    fresh = [views.prompt_table(table, *call) for call in calls]
    assert views.prompt_table(table, *calls[0]) is not fresh[0]
    with views.built_once():
        built = [views.prompt_table(table, *call) for call in calls]
        assert all(views.prompt_table(table, *call) is b for call, b in zip(calls, built, strict=True))
    for got, expected in zip(built, fresh, strict=True):
        np.testing.assert_array_equal(got.values, expected.values)
        assert got.index.equals(expected.index) and got.num_layers == expected.num_layers
    assert not np.array_equal(built[0].values, built[1].values, equal_nan=True)
    assert not np.array_equal(built[0].values, built[2].values, equal_nan=True)
    assert views.prompt_table(table, *calls[0]) is not built[0]
