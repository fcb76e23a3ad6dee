"""The claims table's verdict logic on constructed metric tables: each claim supported,
contradicted and inconclusive at its stated threshold, and 'not measured' without its input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope import claims
from attnscope.evidence import Evidence, copy_share, value_domain

LAYERS = 9  # thirds: 0-2 early, 3-5 middle, 6-8 late
BASE = {
    "row_entropy": 0.6,
    "self_mass": 0.2,
    "within_shot_mass": 0.3,
    "across_shot_mass": 0.1,
    "cosine_pearson": 0.1,
    "cosine_spearman": 0.1,
}


def metrics(variant: str = "trained", prompts: int = 3, **per_layer) -> pd.DataFrame:
    """Head-mean metric rows of one variant: every metric constant (BASE) unless given per layer."""
    rows = []
    for prompt in range(prompts):
        for layer in range(LAYERS):
            row = {"variant": variant, "prompt_index": prompt, "layer": layer, **BASE}
            for name, values in per_layer.items():
                row[name] = values[layer] if np.ndim(values) else values
            rows.append(row)
    return pd.DataFrame(rows)


def thirds(early: float, middle: float, late: float) -> list[float]:
    return [early] * 3 + [middle] * 3 + [late] * 3


def verdict(evidence: Evidence, claim: str) -> str:
    table = claims.evaluate(evidence)
    row = table[table["claim"] == claim]
    assert len(row) == 1, table
    return row["verdict"].iloc[0]


def evidence(*frames: pd.DataFrame, **parts) -> Evidence:
    return Evidence("m", "animals-k3", pd.concat(frames, ignore_index=True), **parts)


@pytest.mark.parametrize(
    ("self_mass", "early", "late"),
    [
        (thirds(0.6, 0.2, 0.5), claims.SUPPORTED, claims.SUPPORTED),  # ratios 3 and 2.5
        (thirds(0.2, 0.4, 0.2), claims.CONTRADICTED, claims.CONTRADICTED),  # ratios 0.5
        (thirds(0.25, 0.2, 0.22), claims.INCONCLUSIVE, claims.INCONCLUSIVE),  # ratios 1.25, 1.1
    ],
)
def test_diagonal_early_and_late_layers(self_mass, early, late):
    ev = evidence(metrics(self_mass=self_mass))
    assert verdict(ev, "early-diagonal") == early
    assert verdict(ev, "late-diagonal") == late


@pytest.mark.parametrize(
    ("entropy", "middle", "late"),
    [
        (thirds(0.3, 0.8, 0.4), claims.SUPPORTED, claims.SUPPORTED),
        (thirds(0.8, 0.5, 0.9), claims.CONTRADICTED, claims.CONTRADICTED),
        (thirds(0.5, 0.53, 0.51), claims.INCONCLUSIVE, claims.INCONCLUSIVE),  # steps of ±0.03 < 0.05
    ],
)
def test_dispersion_and_contraction(entropy, middle, late):
    ev = evidence(metrics(row_entropy=entropy))
    assert verdict(ev, "middle-dispersed") == middle
    assert verdict(ev, "late-contracting") == late


def test_within_shot_share_of_layers():
    within = np.full(LAYERS, 0.3)
    assert verdict(evidence(metrics(within_shot_mass=within)), "within-shot") == claims.SUPPORTED
    across_wins = np.where(np.arange(LAYERS) < 5, 0.5, 0.1)  # across > within in 5 of 9 layers
    assert verdict(evidence(metrics(across_shot_mass=across_wins)), "within-shot") == claims.CONTRADICTED
    across_some = np.where(np.arange(LAYERS) < 3, 0.5, 0.1)  # within wins in 6/9 = 67 %
    assert verdict(evidence(metrics(across_shot_mass=across_some)), "within-shot") == claims.INCONCLUSIVE
    no_shots = metrics(within_shot_mass=np.nan, across_shot_mass=np.nan)
    assert verdict(evidence(no_shots), "within-shot") == claims.NOT_MEASURED


def test_value_domain_from_maps():
    keep = np.arange(4)
    flat = np.tril(np.full((2, 4, 4), 0.05))  # every causal value 0.05 → 100 % small
    table = value_domain([(flat, keep)])
    assert list(table["n_values"]) == [10, 10] and list(table["n_small"]) == [10, 10]
    assert verdict(evidence(metrics(), value_domain=table), "value-domain") == claims.SUPPORTED
    peaked = np.tril(np.full((2, 4, 4), 0.5))
    table = value_domain([(peaked, keep)])
    assert verdict(evidence(metrics(), value_domain=table), "value-domain") == claims.CONTRADICTED
    mixed = pd.DataFrame({"layer": [0], "n_values": [100], "n_small": [80]})
    assert verdict(evidence(metrics(), value_domain=mixed), "value-domain") == claims.INCONCLUSIVE
    assert verdict(evidence(metrics()), "value-domain") == claims.NOT_MEASURED


def test_value_domain_counts_only_kept_tokens_and_the_causal_triangle():
    a = np.zeros((1, 3, 3))
    a[0, 2, 0] = 0.9  # a large value on a token that is not drawn
    table = value_domain([(a, np.array([1, 2]))])
    assert table.loc[0, "n_values"] == 3 and table.loc[0, "n_small"] == 3


@pytest.mark.parametrize(
    ("pearson", "spearman", "expected"),
    [(0.1, -0.2, claims.SUPPORTED), (0.1, -0.6, claims.CONTRADICTED), (0.4, 0.1, claims.INCONCLUSIVE)],
)
def test_cosine_correlation_uses_the_stronger_of_both(pearson, spearman, expected):
    layer_values = np.full(LAYERS, 0.05)
    layer_values[4] = spearman
    ev = evidence(metrics(cosine_pearson=pearson, cosine_spearman=layer_values))
    assert verdict(ev, "cosine-weak") == expected


def test_random_model_near_uniform():
    trained = metrics()
    assert (
        verdict(evidence(trained, metrics("random-s0", row_entropy=0.95)), "random-uniform")
        == claims.SUPPORTED
    )
    assert (
        verdict(evidence(trained, metrics("random-s0", row_entropy=0.6)), "random-uniform")
        == claims.CONTRADICTED
    )
    one_low = np.full(LAYERS, 0.97)
    one_low[0] = 0.7  # mean 0.94 but one layer below 0.9
    assert (
        verdict(evidence(trained, metrics("random-s0", row_entropy=one_low)), "random-uniform")
        == claims.INCONCLUSIVE
    )
    assert verdict(evidence(trained), "random-uniform") == claims.NOT_MEASURED


def test_alpha_edits_against_trained():
    trained = metrics()
    sharper = metrics("qkscale-a2", row_entropy=0.4, self_mass=0.5)
    flatter = metrics("qkscale-a0.5", row_entropy=0.7)
    ev = evidence(trained, sharper, flatter)
    assert verdict(ev, "alpha-up-entropy") == claims.SUPPORTED
    assert verdict(ev, "alpha-up-self") == claims.SUPPORTED
    assert verdict(ev, "alpha-down-entropy") == claims.SUPPORTED
    wrong_way = evidence(
        trained,
        metrics("qkscale-a2", row_entropy=0.7, self_mass=0.1),
        metrics("qkscale-a0.5", row_entropy=0.5),
    )
    assert verdict(wrong_way, "alpha-up-entropy") == claims.CONTRADICTED
    assert verdict(wrong_way, "alpha-up-self") == claims.CONTRADICTED
    assert verdict(wrong_way, "alpha-down-entropy") == claims.CONTRADICTED
    tiny = evidence(
        trained, metrics("qkscale-a2", row_entropy=0.59), metrics("qkscale-a0.5", row_entropy=0.61)
    )
    assert verdict(tiny, "alpha-up-entropy") == claims.INCONCLUSIVE  # 0.01 < 0.02
    assert verdict(tiny, "alpha-down-entropy") == claims.INCONCLUSIVE
    assert verdict(evidence(trained), "alpha-up-self") == claims.NOT_MEASURED


def test_alpha_variant_choice():
    names = ["trained", "qkscale-a4", "qkscale-a2", "qkscale-a2-L0-3", "qkscale-a0.25"]
    assert claims.pick_variant(names, "qkscale", "up", 2.0) == "qkscale-a2"
    assert claims.pick_variant(names, "qkscale", "down", 0.5) == "qkscale-a0.25"
    assert claims.pick_variant(["trained", "qkscale-a2-L0-3"], "qkscale", "up", 2.0) is None
    assert claims.pick_variant(["random-s3"], "random") == "random-s3"


def spectra_table(holds: bool) -> pd.DataFrame:
    """A comparison table whose raw observations hold (or not) and whose folded ones say the
    opposite (the claims read the raw rows: the thesis measured the stored weights)."""
    return pd.DataFrame(
        [
            {
                "row_type": "observation",
                "form": form,
                "matrix": m,
                "statement": "learned Σσ² far below random",
                "trained": 1.0,
                "random": 4.0 if holds else 1.0,
                "ratio": 0.25 if holds else 1.0,
                "thesis_ratio": "0.05–0.1",
                "criterion": "ratio < 0.5",
                "holds": holds if form == "raw" else not holds,
            }
            for form in ("raw", "folded")
            for m in ("q", "k")
        ]
        + [
            {
                "row_type": "measure",
                "form": "raw",
                "matrix": "q",
                "statement": "x",
                "trained": 1.0,
                "random": 1.0,
                "ratio": 1.0,
            }
        ]
    )


def test_spectra_rows_follow_the_comparison_table():
    table = claims.evaluate(evidence(metrics(), spectra=spectra_table(True)))
    rows = table[table["claim"] == "spectra"]
    assert len(rows) == 2 and set(rows["verdict"]) == {claims.SUPPORTED}
    assert rows["statement"].str.startswith("W_q").any()
    table = claims.evaluate(evidence(metrics(), spectra=spectra_table(False)))
    assert set(table.loc[table["claim"] == "spectra", "verdict"]) == {claims.CONTRADICTED}
    table = claims.evaluate(evidence(metrics()))
    assert list(table.loc[table["claim"] == "spectra", "verdict"]) == [claims.NOT_MEASURED]


def alignment(z: list[float], scope: str = "layer") -> pd.DataFrame:
    """Base-alignment rows whose z-scores are ``z`` and whose scale-free cosine·√n is z / 100."""
    n = 10_000
    cosine = np.asarray(z) / 100 / np.sqrt(n)
    return pd.DataFrame(
        {"layer": range(len(z)), "scope": scope, "z_score": z, "cosine": cosine, "n_terms": n}
    )


def test_scale_free_alignment_is_not_fooled_by_the_weights_scale():
    grown = evidence(metrics(), alignment=alignment([50.0] * 10, scope="head"))  # z 50, cosine·√n 0.5
    assert verdict(grown, "alignment-head-small") == claims.CONTRADICTED
    assert verdict(grown, "alignment-head-cosine") == claims.SUPPORTED
    aligned = evidence(metrics(), alignment=alignment([5000.0] * 10, scope="head"))  # cosine·√n 50
    assert verdict(aligned, "alignment-head-cosine") == claims.CONTRADICTED


def test_alignment_z_scores():
    assert (
        verdict(evidence(metrics(), alignment=alignment([0.5] * 9 + [3.0])), "alignment-layer-small")
        == claims.SUPPORTED
    )
    assert (
        verdict(evidence(metrics(), alignment=alignment([5.0] * 6 + [0.1] * 4)), "alignment-layer-small")
        == claims.CONTRADICTED
    )
    assert (
        verdict(evidence(metrics(), alignment=alignment([5.0] * 3 + [0.1] * 7)), "alignment-layer-small")
        == claims.INCONCLUSIVE
    )


def clue_rows(
    variant: str, experiment: str, k: int, chrf: float, clue: str = "a b", ok: bool = True, copy: float = 0.0
):
    return [
        {"variant": variant, "experiment": experiment, "category": "Animals", "k": k, "clue": clue,
         "format_ok": ok, "chrf": chrf, "copy_share": copy}
        for _ in range(3)
    ]  # fmt: skip


def test_more_shots_and_generation_claims():
    rows = clue_rows("trained", "animals-k3", 3, 10.0) + clue_rows("trained", "animals-k5", 5, 12.0)
    rows += clue_rows("trained", "animals-k8", 8, 13.0)
    rows += clue_rows("qkscale-a2", "animals-k3", 3, 5.0, copy=0.8)
    rows += clue_rows("qkscale-a0.5", "animals-k3", 3, 1.0, clue="", ok=False)
    ev = evidence(metrics(), clues=pd.DataFrame(rows))
    assert verdict(ev, "more-shots") == claims.SUPPORTED
    assert verdict(ev, "alpha-up-copies") == claims.SUPPORTED
    assert verdict(ev, "alpha-down-broken") == claims.SUPPORTED
    rows = clue_rows("trained", "animals-k3", 3, 12.0) + clue_rows("trained", "animals-k5", 5, 11.0)
    rows += clue_rows("trained", "animals-k8", 8, 10.0)
    rows += clue_rows("qkscale-a2", "animals-k3", 3, 5.0, copy=0.0)
    rows += clue_rows("qkscale-a0.5", "animals-k3", 3, 1.0)
    ev = evidence(metrics(), clues=pd.DataFrame(rows))
    assert verdict(ev, "more-shots") == claims.CONTRADICTED
    assert verdict(ev, "alpha-up-copies") == claims.CONTRADICTED
    assert verdict(ev, "alpha-down-broken") == claims.CONTRADICTED
    rows = clue_rows("trained", "animals-k3", 3, 10.0) + clue_rows("trained", "animals-k5", 5, 12.0)
    rows += clue_rows("trained", "animals-k8", 8, 11.0)  # up, then down: Spearman 0.5
    assert verdict(evidence(metrics(), clues=pd.DataFrame(rows)), "more-shots") == claims.INCONCLUSIVE
    one_k = pd.DataFrame(clue_rows("trained", "animals-k3", 3, 10.0))
    assert verdict(evidence(metrics(), clues=one_k), "more-shots") == claims.NOT_MEASURED


def test_copy_share():
    prompt = "Just give one answer marking the end with a".split()
    assert copy_share("Give one answer, marking the end", prompt) == 1.0
    assert copy_share("Tiny toiler lifts", prompt) == 0.0
    assert np.isnan(copy_share("Ant", prompt))


def test_table_and_markdown():
    table = claims.evaluate(evidence(metrics(self_mass=thirds(0.6, 0.2, 0.5))))
    assert list(table.columns) == claims.COLUMNS
    assert set(table["verdict"]) <= set(claims.VERDICTS)
    assert len(table) >= len(claims.CLAIMS)
    early = table[table["claim"] == "early-diagonal"].iloc[0]
    assert early["value"] == pytest.approx(3.0) and "≥ 1.5" in early["threshold"]
    text = claims.claims_markdown(table)
    assert (
        text.startswith("# Thesis claims")
        and "**supported**" in text
        and "## m (experiment animals-k3)" in text
    )


def test_more_shots_uses_only_targets_with_a_reference():
    """Targets without a reference clue (chrF empty) neither count as 0 nor vanish unsaid."""
    rows = clue_rows("trained", "animals-k3", 3, 10.0) + clue_rows("trained", "animals-k5", 5, 12.0)
    rows += clue_rows("trained", "animals-k8", 8, 13.0)
    # Two targets per k without a reference: read as 0, they would turn the trend around.
    rows += [{**row, "chrf": np.nan} for row in clue_rows("trained", "animals-k8", 8, 0.0)[:2]]
    rows += [{**row, "chrf": np.nan} for row in clue_rows("trained", "animals-k3", 3, 0.0)[:2]]
    table = claims.evaluate(evidence(metrics(), clues=pd.DataFrame(rows)))
    row = table[table["claim"] == "more-shots"].iloc[0]
    assert row["verdict"] == claims.SUPPORTED
    assert "k=3 10 (3 of 5 targets with a reference)" in row["measured"]
    assert "k=5 12 (3 of 3 targets with a reference)" in row["measured"]
    no_reference = [{**row, "chrf": np.nan} for row in rows]
    assert verdict(evidence(metrics(), clues=pd.DataFrame(no_reference)), "more-shots") == claims.NOT_MEASURED
