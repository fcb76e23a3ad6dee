"""The choices table (attnscope.choices): head-mean metrics under the thesis's analysis
choices and the distance-matched null, against a row-by-row reference and synthetic maps
with known answers; the rule's output on a real tiny run."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from attnscope import choices, io, metrics, streamed
from tests.helpers import k3_labels, random_causal, shot_labels, shot_maps, uniform_causal


def token_kinds(segment: list[str], shot: np.ndarray) -> list[str]:
    """Each token's kind for the boundary test: its segment; a shot's template tokens by their
    place before the shot's word or after its clue."""
    kinds = list(segment)
    for s in set(shot[shot >= 1].tolist()):
        tokens = [t for t in range(len(shot)) if shot[t] == s]
        content = [t for t in tokens if segment[t] != "template"]
        for t in tokens:
            if segment[t] == "template":
                kinds[t] = f"before {t - tokens[0]}" if t < content[0] else f"after {t - content[-1]}"
    return kinds


def boundary_drop(
    rows: dict[int, np.ndarray], pos: np.ndarray, labels: np.ndarray, kinds: list[str]
) -> float:  # noqa: E501
    """The boundary drop of the restricted rows (row index → values over keys 0..i), pair by pair."""
    cells = defaultdict(list)  # (distance, query kind, key kind) → [(own, value)]
    for i, x in rows.items():
        if labels[i] < 2:
            continue
        for j, value in enumerate(x):
            if labels[j] >= 1:
                cells[(pos[i] - pos[j], kinds[i], kinds[j])].append((labels[i] == labels[j], value))
    sums = {True: [0.0, 0.0], False: [0.0, 0.0]}  # own → [observed, expected]
    for pairs in cells.values():
        if len({own for own, _ in pairs}) < 2:
            continue  # only own or only across pairs: no null for the contrast
        mean = np.mean([value for _, value in pairs])
        for own, value in pairs:
            sums[own][0] += value
            sums[own][1] += mean
    if not sums[True][1]:
        return math.nan
    return math.log(sums[True][0] / sums[True][1]) - math.log(sums[False][0] / sums[False][1])


def reference(a: np.ndarray, segment: list[str], shot: np.ndarray, choice: str) -> dict[str, float]:
    """The metrics of one map, row by row in float64 (the definitions of the module docstring)."""
    keep = choices.visible_tokens(choice, segment)
    b, kshot, pos = np.asarray(a, np.float64)[np.ix_(keep, keep)], shot[keep], keep
    rows = {}
    for i in range(1, len(keep)):
        row = b[i, : i + 1]
        if row.sum() > 0:
            rows[i] = row / row.sum() if choice in ("words_renormalised", "no_sink") else row
    # entropy is of the row's shape (the full rows: as stored, mass 1 up to float16 rounding)
    shapes = [x / x.sum() if choice != "full" else x for x in rows.values()]
    entropy = [-(x[x > 0] * np.log(x[x > 0])).sum() / math.log(len(x)) for x in shapes]
    out = {
        "n_queries": len(rows),
        "row_entropy": np.mean(entropy),
        "self_mass": np.mean([x[-1] for x in rows.values()]),
        "diagonal_share": np.mean([x[-1] >= x[:-1].sum() for x in rows.values()]),
        "previous_mass": np.mean([x[-2] for x in rows.values()]),
        "sink_mass": np.mean([x[0] for x in rows.values()]) if keep[0] == 0 else np.nan,
        "small_share": sum((x <= 0.1).sum() for x in rows.values()) / sum(len(x) for x in rows.values()),
        "small_mass": sum(x[x <= 0.1].sum() for x in rows.values()) / sum(x.sum() for x in rows.values()),
    }
    queries = [i for i in rows if kshot[i] >= 2]
    own = [rows[i][kshot[: i + 1] == kshot[i]].sum() for i in queries]
    other = [rows[i][(kshot[: i + 1] >= 1) & (kshot[: i + 1] != kshot[i])].sum() for i in queries]
    out["within_shot_mass"], out["across_shot_mass"] = np.mean(own), np.mean(other)
    kinds = [token_kinds(segment, shot)[t] for t in keep]
    # The boundary drop is measured on the rows as the model gave them, under every choice.
    as_given = {i: b[i, : i + 1] for i in rows}
    out["boundary_drop"] = boundary_drop(as_given, pos, kshot, kinds)
    out["placebo_drop"] = boundary_drop(as_given, pos, choices.placebo_shots(shot)[keep], kinds)
    out["permuted_drop"] = boundary_drop(as_given, pos, choices.permuted_shots(shot)[keep], kinds)
    return out


def measured(maps: np.ndarray, segment: list[str], shot: np.ndarray, choice: str, layer: int = 0) -> dict:
    values, n_queries = choices.choice_metrics(maps, segment, shot, choice)
    return dict(zip(choices.CHOICE_METRICS, values[layer])) | {"n_queries": n_queries[layer]}


@pytest.mark.routes
@pytest.mark.parametrize("labels", [k3_labels, shot_labels])
@pytest.mark.parametrize("choice", choices.CHOICES)
def test_every_choice_matches_the_row_by_row_reference(choice, labels):
    segment, shot = labels()
    rng = np.random.default_rng(0)
    maps = np.stack([random_causal(rng, len(segment), scale) for scale in (0.5, 2.0, 4.0, 2.0)])
    # layer 3: a shot-2 word attends only to the sink, a row left out of words and no_sink
    query = choices.visible_tokens("words", segment)[8]
    maps[3, query] = 0
    maps[3, query, 0] = 1
    values, n_queries = choices.choice_metrics(maps, segment, shot, choice)
    assert values.shape == (4, len(choices.CHOICE_METRICS))
    assert (n_queries[3] < n_queries[2]) == (choice != "full")
    assert np.isnan(values[:, choices.CHOICE_METRICS.index("boundary_drop")]).all() == (labels is k3_labels)
    for layer in range(4):
        expected = reference(maps[layer], segment, shot, choice)
        got = dict(zip(choices.CHOICE_METRICS, values[layer]))
        assert n_queries[layer] == expected.pop("n_queries")
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, rel=1e-5, nan_ok=True), (layer, name)
    # the batch over choices is the same computation
    batch, batch_n = choices.prompt_choices(maps, segment, shot)
    index = choices.CHOICES.index(choice)
    assert np.array_equal(batch[index], values, equal_nan=True) and np.array_equal(batch_n[index], n_queries)


def test_full_rows_are_the_streamed_metrics():
    segment, shot = k3_labels()
    a = random_causal(np.random.default_rng(1), len(segment))
    got = measured(a[None], segment, shot, "full")
    lay = streamed.MapLayout(shot, segment, np.eye(len(a), dtype=np.float16))
    expected = dict(zip(metrics.STREAMED, streamed.streamed_metrics(a[None], lay)[0]))
    assert got["row_entropy"] == pytest.approx(expected["row_entropy"], abs=1e-9)
    for name in ("self_mass", "previous_mass", "sink_mass", "within_shot_mass", "across_shot_mass"):
        assert got[name] == pytest.approx(expected[name], abs=1e-7), name
    assert got["n_queries"] == len(segment) - 1


def test_choices_restrict_and_renormalise():
    segment, shot = k3_labels()
    n = len(segment)
    a = uniform_causal(n)
    words = choices.visible_tokens("words", segment)
    assert list(choices.visible_tokens("no_sink", segment)) == list(range(1, n))
    assert {segment[i] for i in words} == {"shot_word", "shot_clue", "target", "generated"}
    # A uniform map stays uniform over the visible keys under every choice (entropy is of the
    # row's shape, also where the thesis's rows keep less than their full mass).
    for choice in choices.CHOICES:
        got = measured(a[None], segment, shot, choice)
        assert got["row_entropy"] == pytest.approx(1.0)
        if choice == "words":
            continue  # its self mass is the full row's 1/(i + 1): the reference test covers it
        m = len(choices.visible_tokens(choice, segment))
        assert got["self_mass"] == pytest.approx(np.mean(1 / np.arange(2, m + 1)))
        assert np.isnan(got["sink_mass"]) == (choice != "full")
    # All attention on the sink: the full rows say so, the other choices renormalise what is left.
    sink = np.zeros((n, n))
    sink[:, 0] = 0.9
    sink[np.arange(n), np.arange(n)] += 0.1
    full = measured(sink[None], segment, shot, "full")
    assert (full["sink_mass"], full["self_mass"]) == pytest.approx((0.9, 0.1))
    assert measured(sink[None], segment, shot, "no_sink")["self_mass"] == pytest.approx(1.0)
    # The thesis's choice keeps the values the model gave: a word's self mass stays 0.1 (its row
    # sums to 0.1, and it is diagonally dominant); renormalised, the word's row is all self.
    words_as_stored = measured(sink[None], segment, shot, "words")
    assert (words_as_stored["self_mass"], words_as_stored["diagonal_share"]) == pytest.approx((0.1, 1.0))
    assert measured(sink[None], segment, shot, "words_renormalised")["self_mass"] == pytest.approx(1.0)
    assert full["diagonal_share"] == 0  # 0.1 against the sink's 0.9
    # A word query that attends only to template tokens has no visible mass: left out.
    sink[words[3]] = 0
    sink[words[3], 0] = 1
    assert measured(sink[None], segment, shot, "words")["n_queries"] == len(words) - 2
    # No word tokens (or one): nothing to measure under words, the other choices unchanged.
    plain = ["template"] * (n - 1) + ["target"]
    values, n_queries = choices.choice_metrics(sink[None], plain, np.zeros(n, int), "words")
    assert np.isnan(values).all() and n_queries.tolist() == [0]
    assert measured(sink[None], plain, np.zeros(n, int), "full")["n_queries"] == n - 1
    with pytest.raises(ValueError, match="unknown analysis choice 'tokens'"):
        choices.visible_tokens("tokens", segment)


def test_placebo_boundaries_cut_every_shot_in_the_middle():
    shot = np.array([0, 1, 1, 1, 1, 0, 2, 2, 0, 0, 3, 3, 3, 3, 3, 3, 0])
    #          positions 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16
    # first tokens 1, 6, 10; middles of the spans [1, 6), [6, 10), [10, 16): 3.5, 8, 13
    expected = [0, 1, 1, 1, 2, 0, 2, 2, 0, 0, 3, 3, 3, 4, 4, 4, 0]
    assert choices.placebo_shots(shot).tolist() == expected
    assert choices.placebo_shots(np.zeros(5, int)).tolist() == [0] * 5


def test_permuted_labels_keep_each_shots_count_and_scatter_it():
    shot = np.array([0, 1, 1, 1, 1, 0, 2, 2, 2, 2, 0, 3, 3, 3, 3, 0])
    permuted = choices.permuted_shots(shot)
    assert (permuted == choices.permuted_shots(shot)).all()  # seeded
    assert (permuted[shot == 0] == 0).all() and (permuted[shot >= 1] >= 1).all()
    assert np.bincount(permuted).tolist() == np.bincount(shot).tolist()
    assert not (permuted == shot).all() and not (permuted == choices.permuted_shots(shot, seed=1)).all()


@pytest.mark.parametrize("choice", choices.CHOICES)
def test_the_boundary_drop_needs_a_boundary_not_locality_or_segments(choice):
    segment, shot = shot_labels()
    got = {name: measured(a[None], segment, shot, choice) for name, a in shot_maps(segment, shot).items()}
    # Locality alone: more within- than across-shot mass, and no drop.
    assert got["locality"]["within_shot_mass"] > 3 * got["locality"]["across_shot_mass"]
    assert abs(got["locality"]["boundary_drop"]) < 0.01
    # A shot-blind preference for shot words: within-shot mass up, no drop.
    assert got["shot words"]["within_shot_mass"] > got["locality"]["within_shot_mass"]
    assert abs(got["shot words"]["boundary_drop"]) < 0.15
    # A real boundary: a clear drop, far above the placebo boundaries' one and the permuted labels'.
    assert got["boundary"]["boundary_drop"] > 0.9 and abs(got["boundary"]["placebo_drop"]) < 0.1
    assert got["boundary"]["boundary_drop"] > 3 * abs(got["boundary"]["permuted_drop"])
    # Attention across shots: a negative drop.
    assert got["across"]["boundary_drop"] < -0.5
    for values in got.values():
        assert abs(values["placebo_drop"]) < 0.15 and abs(values["permuted_drop"]) < 0.3


def test_the_boundary_drop_is_not_identifiable_where_the_format_keeps_shots_apart():
    """Short equal shots: no distance at which a query sees keys of the same segments in its own
    and another shot, so no null for the contrast: NaN, never a number."""
    segment, shot = k3_labels()
    for a in shot_maps(segment, shot).values():
        for choice in choices.CHOICES:
            assert np.isnan(measured(a[None], segment, shot, choice)["boundary_drop"])


def test_small_mass_can_fail_where_small_share_cannot():
    segment, shot = k3_labels()
    n = len(segment)
    causal = np.arange(2, n + 1).sum()  # causal entries of rows 1..n-1
    one_hot = measured(np.eye(n)[None], segment, shot, "full")
    assert one_hot["small_mass"] == 0
    assert one_hot["small_share"] == pytest.approx(1 - (n - 1) / causal)  # > 0.9 all the same
    assert one_hot["row_entropy"] == 0
    uniform = measured(uniform_causal(n)[None], segment, shot, "full")
    # rows of ≥ 10 keys are all ≤ 0.1 (mass 1 each), rows of 2..9 keys all above
    assert uniform["small_mass"] == pytest.approx((n - 9) / (n - 1))
    assert uniform["small_share"] == pytest.approx(np.arange(10, n + 1).sum() / causal)


def test_table_layout(llama_store):  # noqa: F811 (the fixture imported above)
    """The table of a store (the capture's ``choices`` arrays): COLUMNS in order, prompt ×
    layer × choice rows, and a row equal to the row-by-row reference on the stored head mean."""
    import zarr

    path, _ = llama_store
    table = choices.choices_table(path)
    assert tuple(table.columns) == choices.COLUMNS
    n = len(choices.TABLE_CHOICES)
    assert len(table) == 2 * 2 * n
    assert list(table["choice"][:n]) == list(choices.TABLE_CHOICES)
    assert list(table["layer"]) == ([0] * n + [1] * n) * 2
    assert list(table["target"]) == ["Ant"] * 2 * n + ["Bee"] * 2 * n
    assert table[list(choices.CHOICE_METRICS)].dtypes.eq(np.float64).all()
    assert table["n_queries"].dtype == np.int64
    row = table[(table["prompt_index"] == 1) & (table["layer"] == 1) & (table["choice"] == "words")]
    group = zarr.open_group(path, mode="r")["001"]
    segment, shot = group.attrs["token_segment"], np.array(group.attrs["token_shot"])
    expected = reference(group["head_mean"][1], segment, shot, "words")
    assert row["n_queries"].item() == expected["n_queries"]
    for name in ("row_entropy", "within_shot_mass", "diagonal_share", "boundary_drop", "small_mass"):
        assert row[name].item() == pytest.approx(expected[name], rel=1e-5, nan_ok=True), name


@pytest.mark.integration
def test_rule_writes_the_choices_table_beside_the_metrics(tiny_default_run):
    """The session's tiny run: animals-k2 has 3 prompts on the 2-layer tiny Mistral."""
    base = tiny_default_run / "results" / "metrics" / "tiny-mistral" / "trained"
    table = pd.read_parquet(base / "animals-k2.choices.parquet")
    assert tuple(table.columns) == choices.COLUMNS
    assert set(table["choice"]) == set(choices.TABLE_CHOICES)
    meta = io.read_parquet_metadata(base / "animals-k2.choices.parquet")
    assert meta["rule"] == "attention_metrics" and meta["variant"] == "trained"
    head_mean = pd.read_parquet(base / "animals-k2.parquet").query("head == -1")
    full = table[table["choice"] == "full"]
    assert len(full) == len(head_mean) == 3 * 2  # prompts × layers
    merged = full.merge(head_mean, on=["prompt_index", "layer"], suffixes=("", "_streamed"))
    for name in choices.CHOICE_METRICS[:6]:  # the streamed ones
        assert np.allclose(merged[name], merged[f"{name}_streamed"], rtol=0, atol=1e-6), name
    words = table[table["choice"] == "words"]
    assert (words["n_queries"] < full["n_queries"].to_numpy()).all() and words["sink_mass"].isna().all()
