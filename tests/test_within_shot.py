"""The within-shot claim's within-row test (attnscope.choices ``row_drop``, the claim
``within-shot``): on synthetic maps through the choices table and the claims table, a decay with
distance whose sharpness depends on the query never reads *supported*, attention mostly across
shots reads *not replicated*, a real drop at the boundary on top of any of them reads *supported*;
it is identifiable on a layout like the default prompts, where the pooled-cell statistic it
replaces is not, and that statistic passes a map without shots that this test does not. The claims
about words read the summed word maps (``word_sums``), whose rows can sum to more than 1."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope import choices, claims, store
from attnscope.claims import attention
from attnscope.evidence import Evidence
from tests.helpers import k3_labels, map_choices, noisy_shot_maps, segment_positions, shot_labels

DEFAULT_LIKE = (9, 10, 9)
"""Clue lengths of a k = 3 layout like the default prompts' (SmolLM2's chat format, clues of 7–12
tokens): the nearest other-shot key is farther than the farthest own-shot key for every segment."""
SHARPNESS = {
    "position in its segment": lambda segment, rng: 1 + 0.5 * segment_positions(segment),
    "absolute position": lambda segment, rng: 1 + np.arange(len(segment)) / 15,
    "random per query": lambda segment, rng: rng.uniform(1, 10, len(segment)),
}
"""Each query's decay scale τ_i of a[i, j] ∝ exp(−(i − j)/τ_i): no shots, only locality whose
sharpness depends on the query."""
EXPECTED = {
    "locality": (claims.INCONCLUSIVE, claims.CONTRADICTED),
    "shot words": (claims.INCONCLUSIVE, claims.CONTRADICTED),
    "across": (claims.CONTRADICTED,),
    "boundary": (claims.SUPPORTED,),
}
"""The verdicts each edit of :func:`tests.helpers.shot_maps` may get on top of any decay (contradicted:
*not replicated* on a model other than the thesis's)."""


def decay_choices(name: str, sharpness: str, clues: tuple[int, ...] = DEFAULT_LIKE, seeds=(0, 1)):
    """The choices table of ``name`` maps over ``sharpness``'s decay, five targets per shot draw."""
    labels = lambda: shot_labels(clues)  # noqa: E731
    return map_choices(
        noisy_shot_maps(name, labels, SHARPNESS[sharpness], layers=2), 5, labels=labels, seeds=seeds
    )


def within_shot(table) -> claims.Result:
    """The within-shot claim on a choices table, under the thesis's choice."""
    ev = Evidence("m", "animals-k3", choices=table)
    return attention.within_shot(ev, claims.Thresholds(), claims.Setting(choice=claims.THESIS_CHOICE))


@pytest.mark.parametrize("sharpness", SHARPNESS)
@pytest.mark.parametrize("name", EXPECTED)
def test_only_a_drop_at_the_boundary_is_supported(name, sharpness):
    result = within_shot(decay_choices(name, sharpness))
    assert result.verdict in EXPECTED[name], result.measured
    assert result.n_seeds == 2 and result.interval.n_clusters == 5
    # one estimate pooled over the draws, each draw's in the measured text
    assert "per shot draw: animals-k3 " in result.measured and "animals-k3-seed1 " in result.measured
    if name != "boundary":
        assert result.interval.high < claims.Thresholds().boundary_drop


def test_the_pooled_cell_statistic_passes_a_map_without_shots_that_the_row_test_does_not():
    """Regression: on a layout whose cells hold own- and other-shot pairs, the old statistic
    (``boundary_drop``, a null pooled over the pairs of different rows) scores a decay whose
    sharpness depends on the query's place in its segment far above its bar and its placebos;
    within the row the same map scores about 0."""
    values = decay_choices("locality", "position in its segment", clues=(16, 25, 18, 30), seeds=(0,))
    words = values[values["choice"] == claims.THESIS_CHOICE]
    bar = claims.Thresholds().boundary_drop
    assert (words["boundary_drop"] > 2 * bar).all()
    assert (words["boundary_drop"] > words[["placebo_drop", "permuted_drop"]].abs().max(axis=1) + bar).all()
    result = within_shot(values)
    assert result.verdict in EXPECTED["locality"], result.measured


def test_the_row_test_is_identifiable_where_the_pooled_cells_are_not():
    segment, shot = shot_labels(DEFAULT_LIKE)
    maps = noisy_shot_maps("boundary", lambda: (segment, shot))(np.random.default_rng(0))
    values, _ = choices.prompt_choices(maps, segment, shot)
    column = {name: values[:, :, choices.CHOICE_METRICS.index(name)] for name in choices.CHOICE_METRICS}
    assert np.isnan(column["boundary_drop"]).all()
    assert (column["row_drop"] > 1).all()
    for placebo in ("row_placebo_previous", "row_placebo_own"):
        assert (np.abs(column[placebo]) < 0.3).all(), placebo


def test_a_layout_without_room_on_both_sides_is_not_measured():
    """Clues of five tokens: no row has three keys on each side of a cutoff inside a segment, so
    no placebo, and the claim cannot be supported; shots of one token each leave no row at all."""
    segment, shot = k3_labels()
    values, _ = choices.prompt_choices(
        noisy_shot_maps("boundary", k3_labels)(np.random.default_rng(0)), segment, shot
    )
    words = choices.CHOICES.index("words")
    assert np.isnan(values[words, :, choices.CHOICE_METRICS.index("row_placebo_own")]).all()
    short = within_shot(decay_choices("boundary", "absolute position", clues=(1, 1, 1), seeds=(0,)))
    assert short.verdict == claims.NOT_MEASURED and "not identifiable" in short.measured


def test_word_maps_are_the_summed_subword_pairs_and_their_rows_can_exceed_one():
    """A two-token word after a one-token word: its second token's row is not dominant (0.1 against
    0.9), its summed word row is (1.2 within the word against 0.8), and that row sums to 2."""
    segment, shot = ["shot_clue", "shot_word", "shot_word"], np.array([1, 2, 2])
    a = np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0.3, 0.6, 0.1]])[None]
    token_rows = choices.choice_metrics(a, segment, shot, "words")[0][0]
    assert token_rows[choices.CHOICE_METRICS.index("diagonal_share")] == 0.5
    sums = store.pool_words(a, store.word_membership_matrix([0, 1, 1], [0, 1]))
    assert sums[0].sum(axis=1).tolist() == pytest.approx([1.0, 2.0])
    values, n_queries = choices.word_sum_metrics(sums, ["shot_clue", "shot_word"], [1, 2], [0, 1])
    got = dict(zip(choices.CHOICE_METRICS, values[0]))
    assert n_queries[0] == 1  # the first word sees only itself
    assert got["diagonal_share"] == 1.0 and got["self_mass"] == pytest.approx(1.2)
    assert got["row_entropy"] == pytest.approx(-(0.4 * np.log(0.4) + 0.6 * np.log(0.6)) / np.log(2))
    assert got["small_mass"] == pytest.approx(0.0, abs=1e-6)  # both summed values are above 0.1


def test_each_attention_claim_reads_the_maps_its_sentence_describes():
    """The headline of a claim about the word maps (Fig. 8.5) is ``word_sums``, of one about the token
    maps (Fig. 8.4) ``words``; the other choices stay in the sensitivity table; the row quotes its
    sentence."""
    table = decay_choices("boundary", "absolute position", seeds=(0,))
    word_rows = table[table["choice"] == claims.THESIS_CHOICE].assign(choice=choices.WORD_SUMS)
    ev = Evidence("m", "animals-k3", choices=pd.concat([table, word_rows]))
    headline, sensitivity = claims.evaluate(ev, bands=("thirds",))
    row = headline.set_index("claim")
    assert row.loc["within-shot", "setting"] == choices.WORD_SUMS
    assert row.loc["early-diagonal", "setting"] == f"{choices.WORD_SUMS}, thirds"
    assert row.loc["value-domain", "setting"] == claims.THESIS_CHOICE
    assert row.loc["within-shot", "quote"].startswith("Generally, words do not attend across the boundaries")
    assert set(sensitivity[sensitivity["claim"] == "within-shot"]["setting"]) == set(choices.TABLE_CHOICES)
