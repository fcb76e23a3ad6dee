"""The claims table on constructed tables with known effects: clear effects are supported,
absent ones contradicted, borderline ones (an interval across a bar) inconclusive; 'not
measured' without the input; the robust column, the framing and the replicates."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope import choices as attnscope_choices
from attnscope import claims
from attnscope.evidence import Evidence, copy_share
from tests.test_choices import k3_labels, row_stochastic

LAYERS = 9  # thirds: 0-2 early, 3-5 middle, 6-8 late
BASE = {
    "row_entropy": 0.6,
    "self_mass": 0.2,
    "previous_mass": 0.1,
    "sink_mass": 0.3,
    "within_shot_mass": 0.3,
    "within_shot_null": 0.2,
    "across_shot_mass": 0.1,
    "across_shot_null": 0.1,
    "boundary_drop": 0.5,
    "small_mass": 0.8,
    "small_share": 0.97,
    "cosine_pearson": 0.1,
    "cosine_spearman": 0.1,
}
CHOICES = ("words", "full", "no_sink")


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
    generator = np.random.default_rng(rng)
    rows = []
    for seed in seeds:
        experiment = "animals-k3" if seed == seeds[0] else f"animals-k3-seed{seed}"
        for prompt in range(prompts):
            shift = generator.normal(0.0, noise)
            for choice in CHOICES:
                given = {**per_layer, **(by_choice or {}).get(choice, {})}
                for layer in range(LAYERS):
                    row = {
                        "variant": variant,
                        "experiment": experiment,
                        "seed": seed,
                        "prompt_index": prompt,
                        "target": f"t{prompt}",
                        "layer": layer,
                        "choice": choice,
                        **BASE,
                    }
                    for name, values in given.items():
                        row[name] = values[layer] if np.ndim(values) else values
                    for name in BASE:
                        row[name] += shift
                    rows.append(row)
    return pd.DataFrame(rows)


def bands(early: float, middle: float, late: float) -> list[float]:
    return [early] * 3 + [middle] * 3 + [late] * 3


def evidence(*frames: pd.DataFrame, **parts) -> Evidence:
    table = pd.concat(frames, ignore_index=True) if frames else choices()
    metrics = table[table["choice"] == "full"].drop(columns=["choice"])
    return Evidence("m", "animals-k3", choices=table, metrics=metrics, **parts)


def row_of(ev: Evidence, claim: str, bands_=claims.DEFAULT_BANDS) -> pd.Series:
    table, _ = claims.evaluate(ev, bands=bands_)
    rows = table[table["claim"] == claim]
    assert len(rows) == 1, table
    return rows.iloc[0]


def verdict(ev: Evidence, claim: str) -> str:
    return row_of(ev, claim)["verdict"]


NOT_REPLICATED = "not replicated on m"


@pytest.mark.parametrize(
    ("self_mass", "expected"),
    [
        (bands(0.6, 0.2, 0.5), claims.SUPPORTED),  # ratios 3 and 2.5
        (bands(0.2, 0.4, 0.2), NOT_REPLICATED),  # ratios 0.5
        (bands(0.3, 0.2, 0.3), claims.INCONCLUSIVE),  # ratios 1.5 ± noise: across the bar
    ],
)
def test_diagonal_early_and_late_layers(self_mass, expected):
    ev = evidence(choices(self_mass=self_mass, noise=0.03))
    assert verdict(ev, "early-diagonal") == expected
    assert verdict(ev, "late-diagonal") == expected
    row = row_of(ev, "early-diagonal")
    assert row["low"] <= row["estimate"] <= row["high"] and row["n_prompts"] == 20 and row["n_seeds"] == 1


def test_bands_change_what_early_means():
    """Early self mass high only in the first layer: thirds dilute it, first/last 1 does not."""
    self_mass = [0.9] + [0.2] * 7 + [0.9]
    ev = evidence(choices(self_mass=self_mass))
    table, sensitivity = claims.evaluate(ev, bands=("thirds", 1))
    early = table[table["claim"] == "early-diagonal"].iloc[0]
    assert early["setting"] == "words, thirds" and early["verdict"] == claims.SUPPORTED  # (0.9+0.4)/3 / 0.2
    by_setting = sensitivity[sensitivity["claim"] == "early-diagonal"].set_index("setting")
    assert by_setting.loc["words, first/last 1", "estimate"] == pytest.approx(0.9 / 0.2, rel=0.05)
    assert set(by_setting.index) == {f"{c}, {b}" for c in CHOICES for b in ("thirds", "first/last 1")}


@pytest.mark.parametrize(
    ("entropy", "middle", "late"),
    [
        (bands(0.5, 0.7, 0.4), claims.SUPPORTED, claims.SUPPORTED),
        (bands(0.7, 0.5, 0.6), NOT_REPLICATED, NOT_REPLICATED),
        (bands(0.5, 0.55, 0.5), claims.INCONCLUSIVE, claims.INCONCLUSIVE),  # steps ±0.05 ± noise
    ],
)
def test_dispersion_and_contraction(entropy, middle, late):
    ev = evidence(choices(row_entropy=entropy, noise=0.05))
    assert verdict(ev, "middle-dispersed") == middle
    assert verdict(ev, "late-contracting") == late


def map_choices(maps_of_prompt, prompts: int = 12, variant: str = "trained") -> pd.DataFrame:
    """The choices table of synthetic maps: ``maps_of_prompt(rng)`` gives one prompt's maps
    [layer, query, key] on the k = 3 labels of tests/test_choices.py."""
    segment, shot = k3_labels()
    rng = np.random.default_rng(0)
    rows = []
    for prompt in range(prompts):
        values, n_queries = attnscope_choices.prompt_choices(maps_of_prompt(rng), segment, shot)
        for c, choice in enumerate(attnscope_choices.CHOICES):
            for layer, metrics in enumerate(values[c]):
                rows.append(
                    {"variant": variant, "experiment": "animals-k3", "seed": 0, "prompt_index": prompt,
                     "target": f"t{prompt}", "layer": layer, "choice": choice,
                     "n_queries": n_queries[c, layer], **dict(zip(attnscope_choices.CHOICE_METRICS, metrics))}
                )  # fmt: skip
    return pd.DataFrame(rows)


def locality_maps(boundary: float = 1.0):
    """Attention that decays with query–key distance (a random scale per prompt and layer),
    across-shot keys weighted by ``boundary`` (1: pure locality)."""
    segment, shot = k3_labels()
    n = len(segment)
    distance = np.clip(np.arange(n)[:, None] - np.arange(n)[None, :], 0, None)
    across = (shot[:, None] >= 1) & (shot[None, :] >= 1) & (shot[:, None] != shot[None, :])

    def maps(rng: np.random.Generator) -> np.ndarray:
        layers = []
        for tau in rng.uniform(3.0, 12.0, 3):
            weights = np.exp(-distance / tau) * np.where(across, boundary, 1.0)
            layers.append(row_stochastic(weights))
        return np.stack(layers)

    return maps


def test_within_shot_on_synthetic_maps_needs_a_boundary_not_locality():
    """Pure locality has more within- than across-shot mass, yet is not 'within-shot'
    attention; locality with a drop at the shot boundaries is."""
    local = evidence(map_choices(locality_maps()))
    row = row_of(local, "within-shot")
    assert row["verdict"] != claims.SUPPORTED and row["high"] < claims.Thresholds().boundary_drop
    assert "within > across in 100%" in row["measured"]  # the old measure would have said yes
    dropping = evidence(map_choices(locality_maps(boundary=0.2)))
    assert verdict(dropping, "within-shot") == claims.SUPPORTED
    assert row_of(dropping, "within-shot")["robust"] == "yes"


def test_within_shot_from_constructed_drops():
    assert verdict(evidence(choices(boundary_drop=0.5)), "within-shot") == claims.SUPPORTED
    assert verdict(evidence(choices(boundary_drop=-0.1)), "within-shot") == NOT_REPLICATED
    assert verdict(evidence(choices(boundary_drop=0.2, noise=0.1)), "within-shot") == claims.INCONCLUSIVE


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
    ev = evidence(choices(cosine_pearson=[0.05] * 8 + [pearson], cosine_spearman=-0.05, noise=0.03))
    assert verdict(ev, "cosine-weak") == expected


def test_random_model_near_uniform_pools_its_init_seeds():
    trained = choices()
    uniform = [choices("random-s0", row_entropy=0.97, rng=1), choices("random-s1", row_entropy=0.96, rng=2)]
    row = row_of(evidence(trained, *uniform), "random-uniform")
    assert row["verdict"] == claims.SUPPORTED and row["n_seeds"] == 2 and "2 init seed" in row["measured"]
    peaked = choices("random-s0", row_entropy=[0.5] + [0.95] * 8)
    assert verdict(evidence(trained, peaked), "random-uniform") == NOT_REPLICATED
    assert verdict(evidence(trained), "random-uniform") == claims.NOT_MEASURED


def test_alpha_edits_are_paired_per_prompt_and_tested_per_layer():
    trained = choices(rng=3, noise=0.05)
    sharper = choices("qkscale-a2", rng=3, noise=0.05, row_entropy=0.5, self_mass=0.7, sink_mass=0.1)
    flatter = choices("qkscale-a0.5", rng=3, noise=0.05, row_entropy=0.9)
    ev = evidence(trained, sharper, flatter)
    row = row_of(ev, "alpha-up-entropy")
    # Noise shared by the pair cancels: the paired difference is exact.
    assert row["verdict"] == claims.SUPPORTED and row["estimate"] == pytest.approx(-0.1)
    assert "lower in 9 of 9 layers (adjusted p < 0.05)" in row["measured"]
    assert verdict(ev, "alpha-down-entropy") == claims.SUPPORTED
    self_row = row_of(ev, "alpha-up-self")
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
        _, sensitivity = claims.evaluate(ev)
        rows[name] = sensitivity[
            (sensitivity["claim"] == "spectra")
            & sensitivity["statement"].str.startswith("W_q: learned σ_max")
        ].set_index("setting")
    raw = {name: r.loc["raw", "estimate"] for name, r in rows.items()}
    assert raw["scaled"] == pytest.approx(10 * raw["unscaled"], rel=0.05)  # the raw ratio moves ×10
    assert rows["scaled"].loc["raw", "verdict"] == claims.SUPPORTED
    free = {name: r.loc["raw, scale-free", "estimate"] for name, r in rows.items()}
    assert free["scaled"] == pytest.approx(free["unscaled"], rel=0.1) and free["scaled"] == pytest.approx(
        1, abs=0.15
    )
    assert (
        rows["scaled"].loc["raw, scale-free", "verdict"] == rows["unscaled"].loc["raw, scale-free", "verdict"]
    )
    assert rows["scaled"].loc["raw, scale-free", "verdict"] != claims.SUPPORTED
    table, _ = claims.evaluate(scaled)
    q_max = table[table["statement"].str.startswith("W_q: learned σ_max")].iloc[0]
    assert q_max["robust"].startswith("no (raw, scale-free:")
    # Σσ² has no scale-free form: no such setting.
    sum_rows = rows_of_statement(scaled, "W_q: learned Σσ²")
    assert list(sum_rows["setting"]) == ["raw"]


def rows_of_statement(ev: Evidence, prefix: str) -> pd.DataFrame:
    _, sensitivity = claims.evaluate(ev)
    return sensitivity[sensitivity["statement"].str.startswith(prefix)]


def test_spectra_not_measured_without_random_tables():
    table, _ = claims.evaluate(evidence())
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
    _, sensitivity = claims.evaluate(evidence(alignment=tables))
    rows = sensitivity[sensitivity["claim"] == "alignment-layer-small"].set_index("setting")
    assert rows.loc["formula", "verdict"] == NOT_REPLICATED
    assert rows.loc["init seeds", "estimate"] > 0.8 and rows.loc["init seeds", "n_seeds"] == 4
    three = {k: tables[k] for k in ["trained", "random-s0", "random-s1"]}  # too few seeds: formula only
    _, sensitivity = claims.evaluate(evidence(alignment=three))
    assert list(sensitivity.loc[sensitivity["claim"] == "alignment-layer-small", "setting"]) == ["formula"]


def test_alignment_shares_with_intervals():
    assert verdict(evidence(alignment=alignment([0.5] * 30)), "alignment-layer-small") == claims.SUPPORTED
    assert verdict(evidence(alignment=alignment([5.0] * 30)), "alignment-layer-small") == NOT_REPLICATED
    mixed = evidence(alignment=alignment([5.0, 0.1] * 15))  # 50 %: between the bars
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


def test_copy_share():
    prompt = "Just give one answer marking the end with a".split()
    assert copy_share("Give one answer, marking the end", prompt) == 1.0
    assert copy_share("Tiny toiler lifts", prompt) == 0.0
    assert np.isnan(copy_share("Ant", prompt))


def test_robust_column_names_the_choices_that_disagree():
    """Self mass high early only when the sink is counted: the thesis's choice disagrees."""
    full = {"self_mass": bands(0.6, 0.2, 0.2)}
    ev = evidence(choices(self_mass=bands(0.2, 0.2, 0.2), by_choice={"full": full, "no_sink": full}))
    row = row_of(ev, "early-diagonal", ("thirds",))
    assert row["verdict"] == NOT_REPLICATED
    assert row["robust"] == "no (full, thirds: supported; no_sink, thirds: supported)"
    agree = row_of(evidence(choices(self_mass=bands(0.6, 0.2, 0.2))), "early-diagonal", ("thirds", 3))
    assert agree["robust"] == "yes"


def test_contradicted_only_on_the_thesis_model():
    ev = evidence(choices(self_mass=bands(0.2, 0.4, 0.2)))
    assert verdict(ev, "early-diagonal") == "not replicated on m"
    ev.thesis_model = True
    assert verdict(ev, "early-diagonal") == claims.CONTRADICTED


def test_identical_replicates_do_not_narrow_the_interval():
    one = choices(self_mass=bands(0.3, 0.2, 0.3), noise=0.03)
    copy = one.assign(experiment="animals-k3-seed7", seed=7)
    single = row_of(evidence(one), "early-diagonal")
    twice = row_of(evidence(one, copy), "early-diagonal")
    assert (twice["n_seeds"], twice["n_prompts"], single["n_seeds"]) == (2, 20, 1)
    assert twice["estimate"] == pytest.approx(single["estimate"])
    assert twice["high"] - twice["low"] >= 0.95 * (single["high"] - single["low"])


def test_table_and_markdown():
    ev = evidence(choices(self_mass=bands(0.6, 0.2, 0.5)))
    table, sensitivity = claims.evaluate(ev)
    assert list(table.columns) == claims.COLUMNS and list(sensitivity.columns) == claims.SENSITIVITY_COLUMNS
    known = set(claims.VERDICTS) | {NOT_REPLICATED}
    assert set(table["verdict"]) <= known and set(sensitivity["verdict"]) <= known
    assert {c.claim for c in claims.CLAIMS} == set(table["claim"])
    early = table[table["claim"] == "early-diagonal"].iloc[0]
    assert early["estimate"] == pytest.approx(3.0, rel=0.05) and "≥ 1.5" in early["threshold"]
    text = claims.claims_markdown(table, sensitivity, {"m": claims.measured_on(ev)})
    assert text.startswith("# Thesis claims") and "**supported**" in text
    assert "## m (experiment animals-k3)" in text and "### m: every analysis choice" in text
    assert "Measured on m: " in text and "20 target words" in text
