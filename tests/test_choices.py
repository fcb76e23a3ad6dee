"""The choices table (attnscope.choices): head-mean metrics under the thesis's analysis
choices and the distance-matched null, against a row-by-row reference and synthetic maps
with known answers; the rule's output on a real tiny run."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest

from attnscope import choices, io, metrics
from tests.test_attention import llama_store  # noqa: F401 (fixture)
from tests.test_metrics import random_causal, uniform_causal


def k3_labels() -> tuple[list[str], np.ndarray]:
    """Token segments and shots laid out like a k = 3 prompt: template, instruction, three
    shots ("Word:" label, word, chat markers, clue, "#", chat markers), target, clue."""
    segment, shot = ["template"] * 5 + ["instruction"] * 8, [0] * 13
    for s in (1, 2, 3):
        for seg, sh, count in [
            ("template", s, 2),
            ("shot_word", s, 2),
            ("template", 0, 3),
            ("shot_clue", s, 5),
            ("template", s, 1),
            ("template", 0, 3),
        ]:
            segment += [seg] * count
            shot += [sh] * count
    for seg, count in [("target", 1), ("template", 3), ("generated", 4)]:
        segment += [seg] * count
        shot += [0] * count
    return segment, np.array(shot)


def row_stochastic(weights: np.ndarray) -> np.ndarray:
    """Causal rows of ``weights`` normalised to sum 1."""
    w = np.tril(weights)
    return w / w.sum(axis=1, keepdims=True)


def reference(a: np.ndarray, segment: list[str], shot: np.ndarray, choice: str) -> dict[str, float]:
    """The metrics of one map, row by row in float64 (the definitions of the module docstring)."""
    keep = choices.visible_tokens(choice, segment)
    b, kshot, pos = np.asarray(a, np.float64)[np.ix_(keep, keep)], shot[keep], keep
    rows = {}
    for i in range(1, len(keep)):
        row = b[i, : i + 1]
        if row.sum() > 0:
            rows[i] = row / row.sum() if choice != "full" else row
    entropy = [-(x[x > 0] * np.log(x[x > 0])).sum() / math.log(len(x)) for x in rows.values()]
    out = {
        "n_queries": len(rows),
        "row_entropy": np.mean(entropy),
        "self_mass": np.mean([x[-1] for x in rows.values()]),
        "previous_mass": np.mean([x[-2] for x in rows.values()]),
        "sink_mass": np.mean([x[0] for x in rows.values()]) if keep[0] == 0 else np.nan,
        "small_share": sum((x <= 0.1).sum() for x in rows.values()) / sum(len(x) for x in rows.values()),
        "small_mass": sum(x[x <= 0.1].sum() for x in rows.values()) / sum(x.sum() for x in rows.values()),
    }
    by_distance = defaultdict(list)
    for i, x in rows.items():
        for j, value in enumerate(x):
            by_distance[pos[i] - pos[j]].append(value)
    mean_at = {d: np.mean(v) for d, v in by_distance.items()}
    queries = [i for i in rows if kshot[i] >= 2]
    null = {}
    for i in queries:
        n = np.array([mean_at[pos[i] - pos[j]] for j in range(i + 1)])
        null[i] = n / n.sum()
    for suffix, maps in (("mass", rows), ("null", null)):
        own = [maps[i][kshot[: i + 1] == kshot[i]].sum() for i in queries]
        other = [maps[i][(kshot[: i + 1] >= 1) & (kshot[: i + 1] != kshot[i])].sum() for i in queries]
        out[f"within_shot_{suffix}"], out[f"across_shot_{suffix}"] = np.mean(own), np.mean(other)
    pairs = {"own": [], "prev": []}
    for i in queries:
        for j in range(i + 1):
            kind = {kshot[i]: "own", kshot[i] - 1: "prev"}.get(kshot[j])
            if kind:
                pairs[kind].append((pos[i] - pos[j], rows[i][j], null[i][j]))
    common = {d for d, _, _ in pairs["own"]} & {d for d, _, _ in pairs["prev"]}

    def log_ratio(kind: str) -> float:
        matched = [(o, e) for d, o, e in pairs[kind] if d in common]
        return math.log(sum(o for o, _ in matched) / sum(e for _, e in matched))

    out["boundary_drop"] = log_ratio("own") - log_ratio("prev")
    return out


def measured(maps: np.ndarray, segment: list[str], shot: np.ndarray, choice: str, layer: int = 0) -> dict:
    values, n_queries = choices.choice_metrics(maps, segment, shot, choice)
    return dict(zip(choices.CHOICE_METRICS, values[layer])) | {"n_queries": n_queries[layer]}


@pytest.mark.parametrize("choice", choices.CHOICES)
def test_every_choice_matches_the_row_by_row_reference(choice):
    segment, shot = k3_labels()
    rng = np.random.default_rng(0)
    maps = np.stack([random_causal(rng, len(segment), scale) for scale in (0.5, 2.0, 4.0, 2.0)])
    # layer 3: a shot-2 word attends only to the sink, a row left out of words and no_sink
    query = choices.visible_tokens("words", segment)[8]
    maps[3, query] = 0
    maps[3, query, 0] = 1
    values, n_queries = choices.choice_metrics(maps, segment, shot, choice)
    assert values.shape == (4, len(choices.CHOICE_METRICS))
    assert (n_queries[3] < n_queries[2]) == (choice != "full")
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
    a32 = metrics.as_float32(a)
    assert got["row_entropy"] == pytest.approx(metrics.row_entropy(a), abs=1e-9)
    for name, expected in [
        ("self_mass", metrics.self_mass(a32)),
        ("previous_mass", metrics.previous_mass(a32)),
        ("sink_mass", metrics.sink_mass(a32)),
        ("within_shot_mass", metrics.shot_masses(a32, shot)[0]),
        ("across_shot_mass", metrics.shot_masses(a32, shot)[1]),
    ]:
        assert got[name] == pytest.approx(expected, abs=1e-7), name
    assert got["n_queries"] == len(segment) - 1


def test_choices_restrict_and_renormalise():
    segment, shot = k3_labels()
    n = len(segment)
    a = uniform_causal(n)
    words = choices.visible_tokens("words", segment)
    assert list(choices.visible_tokens("no_sink", segment)) == list(range(1, n))
    assert {segment[i] for i in words} == {"shot_word", "shot_clue", "target", "generated"}
    # A uniform map stays uniform over the visible keys under every choice.
    for choice in choices.CHOICES:
        got = measured(a[None], segment, shot, choice)
        assert got["row_entropy"] == pytest.approx(1.0)
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


def locality(n: int, tau: float) -> np.ndarray:
    distance = np.arange(n)[:, None] - np.arange(n)[None, :]
    return np.exp(-np.clip(distance, 0, None) / tau)


@pytest.mark.parametrize("choice", choices.CHOICES)
def test_pure_locality_is_its_own_null_and_a_boundary_drop_is_found(choice):
    segment, shot = k3_labels()
    weights = locality(len(segment), tau=8.0)
    across = (shot[:, None] >= 1) & (shot[None, :] >= 1) & (shot[:, None] != shot[None, :])
    maps = np.stack([row_stochastic(weights), row_stochastic(np.where(across, 0.2 * weights, weights))])
    local, drop = (measured(maps, segment, shot, choice, layer) for layer in (0, 1))
    # Locality alone: within-shot exceeds across-shot, exactly as much as the null says.
    assert local["within_shot_mass"] > local["across_shot_mass"]
    assert local["within_shot_mass"] / local["within_shot_null"] == pytest.approx(1, abs=0.05)
    assert local["across_shot_mass"] / local["across_shot_null"] == pytest.approx(1, abs=0.07)
    assert abs(local["boundary_drop"]) < 0.15
    # Across-shot keys weighted by 0.2: more within-shot mass than the null, a clear drop.
    assert drop["within_shot_mass"] / drop["within_shot_null"] > 1.07
    assert drop["across_shot_mass"] / drop["across_shot_null"] < 0.6
    assert drop["boundary_drop"] > 1.0


def test_uniform_rows_show_no_boundary_but_fall_below_the_distance_null():
    """Uniform rows depend on the row's length, not on the distance: the null (rows pooled
    at each distance) puts more on near keys, so within < within_null; at matched distances
    own- and preceding-shot keys get the same, so no boundary drop."""
    segment, shot = k3_labels()
    for choice in choices.CHOICES:
        got = measured(uniform_causal(len(segment))[None], segment, shot, choice)
        assert got["within_shot_mass"] / got["within_shot_null"] < 0.8
        assert abs(got["boundary_drop"]) < 0.15


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
    assert len(table) == 2 * 2 * 3
    assert list(table["choice"][:3]) == list(choices.CHOICES)
    assert list(table["layer"]) == [0, 0, 0, 1, 1, 1] * 2
    assert list(table["target"]) == ["Ant"] * 6 + ["Bee"] * 6
    assert table[list(choices.CHOICE_METRICS)].dtypes.eq(np.float64).all()
    assert table["n_queries"].dtype == np.int64
    row = table[(table["prompt_index"] == 1) & (table["layer"] == 1) & (table["choice"] == "words")]
    group = zarr.open_group(path, mode="r")["001"]
    segment, shot = group.attrs["token_segment"], np.array(group.attrs["token_shot"])
    expected = reference(group["head_mean"][1], segment, shot, "words")
    assert row["n_queries"].item() == expected["n_queries"]
    for name in ("row_entropy", "within_shot_mass", "within_shot_null", "boundary_drop", "small_mass"):
        assert row[name].item() == pytest.approx(expected[name], rel=1e-5), name


@pytest.mark.integration
def test_rule_writes_the_choices_table_beside_the_metrics(tmp_path):
    from tests.helpers import snakemake, tiny_config

    config = tiny_config(**{"animals-k2": {"category": "Animals", "k": 2, "n_targets": 3}})
    base = tmp_path / "results" / "metrics" / "tiny-mistral" / "trained"
    snakemake(tmp_path, str(base.relative_to(tmp_path) / "animals-k2.choices.parquet"), config=config)
    table = pd.read_parquet(base / "animals-k2.choices.parquet")
    assert tuple(table.columns) == choices.COLUMNS
    assert set(table["choice"]) == set(choices.CHOICES)
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
