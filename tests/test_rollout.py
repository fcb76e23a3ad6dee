"""Attention rollout with the residual on a small synthetic store: the explicit matrix product,
the pooling to sources by hand, and a map whose flow is known in closed form."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import zarr

from attnscope import rollout
from attnscope.plots import plot_rollout
from attnscope.store import VALUE_WEIGHTED, WEIGHTINGS, WEIGHTS

LAYERS = 4
SEGMENTS = [
    ["template", "template", "instruction", "template", "shot_word", "shot_clue", "shot_clue", "template"]
    + ["shot_word", "shot_clue", "template", "target", "template", "generated", "generated"],
    ["template", "instruction", "instruction", "shot_word", "shot_clue", "template", "shot_word"]
    + ["shot_clue", "shot_clue", "template", "target", "target", "template", "generated"],
]
SHOTS = [
    [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0],
    [0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0, 0],
]


def causal_maps(rng: np.random.Generator, layers: int, n: int) -> np.ndarray:
    """Random causal row-stochastic maps [layer, query, key]."""
    a = np.tril(rng.random((layers, n, n)) ** 4)
    return a / a.sum(axis=-1, keepdims=True)


def write_store(path, head_means, segments=SEGMENTS, shots=SHOTS, value_head_means=None) -> None:
    """A store with the layout the rollout reads: root ``prompts``, per group ``head_mean`` and
    ``value_head_mean`` (float16, as extract_attention stores them; default: the same maps) and
    the token labels."""
    root = zarr.open_group(path, mode="w")
    root.attrs["prompts"] = [
        {"group": f"{i:03d}", "prompt_id": f"synthetic/{i:03d}", "target": f"T{i}"}
        for i in range(len(head_means))
    ]
    values = head_means if value_head_means is None else value_head_means
    for i, (a, v, segment, shot) in enumerate(zip(head_means, values, segments, shots)):
        group = root.create_group(f"{i:03d}")
        group.create_array("head_mean", data=a.astype(np.float16))
        group.create_array("value_head_mean", data=v.astype(np.float16))
        group.attrs.update(
            prompt_index=i,
            prompt_id=f"synthetic/{i:03d}",
            target=f"T{i}",
            token_segment=segment,
            token_shot=shot,
        )


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    maps = {w: [causal_maps(rng, LAYERS, len(segment)) for segment in SEGMENTS] for w in WEIGHTINGS}
    write_store(tmp_path / "s.zarr", maps[WEIGHTS], value_head_means=maps[VALUE_WEIGHTED])
    stored = {w: [m.astype(np.float16).astype(np.float64) for m in maps[w]] for w in WEIGHTINGS}
    return tmp_path / "s.zarr", stored


def explicit_rollout(a: np.ndarray) -> np.ndarray:
    """Abnar & Zuidema's rollout after every layer, written as np.linalg.multi_dot of the
    residual matrices (a loop builds each ½A + ½I, rows renormalised)."""
    n = a.shape[-1]
    mixed = []
    for layer in range(len(a)):
        m = 0.5 * a[layer] + 0.5 * np.identity(n)
        mixed.append(m / m.sum(axis=1)[:, None])
    return np.stack([mixed[0]] + [np.linalg.multi_dot(mixed[layer::-1]) for layer in range(1, len(a))])


def test_rollout_is_the_product_of_the_residual_matrices(store):
    _, stored = store
    a = stored[WEIGHTS][0]
    n = a.shape[-1]
    np.testing.assert_allclose(
        rollout.rollout_rows(a, np.identity(n)), explicit_rollout(a), rtol=0, atol=1e-12
    )
    rows = np.random.default_rng(1).random((3, n))
    np.testing.assert_allclose(rollout.rollout_rows(a, rows), rows @ explicit_rollout(a), rtol=0, atol=1e-12)
    # the order of the product matters: layer 0's matrix next to the keys, not to the queries
    reversed_order = np.linalg.multi_dot([0.5 * (m + np.identity(n)) for m in a])
    assert not np.allclose(rollout.rollout_rows(a, np.identity(n))[-1], reversed_order, atol=1e-3)


def test_table_pools_token_rows_into_sources_as_a_hand_loop_does(store):
    path, stored = store
    table = rollout.rollout_table(path)
    assert list(table.columns) == list(rollout.COLUMNS)
    for weighting, index in itertools.product(WEIGHTINGS, range(len(SEGMENTS))):
        a, segments, shots = stored[weighting][index], SEGMENTS[index], SHOTS[index]
        full = explicit_rollout(a)
        for query in ("target", "generated"):
            tokens = [t for t, s in enumerate(segments) if s == query]
            expected = {}
            for layer in range(LAYERS):
                for key in range(len(segments)):
                    kind = "sink" if key == 0 else segments[key]
                    shot = shots[key] if kind in ("shot_word", "shot_clue") else 0
                    share = sum(full[layer, t, key] for t in tokens) / len(tokens)
                    expected[layer, kind, shot] = expected.get((layer, kind, shot), 0.0) + share
            rows = table[(table["prompt_index"] == index) & (table["query"] == query)]
            rows = rows[rows["weighting"] == weighting]
            got = {(r.layer, r.source, r.shot): r.share for r in rows.itertuples()}
            assert got.keys() == expected.keys()
            np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), atol=1e-12)
    sums = table.groupby(["weighting", "prompt_index", "query", "layer"])["share"].sum()
    np.testing.assert_allclose(sums, 1.0, atol=1e-12)


def test_residual_halves_the_own_share_per_layer_when_every_token_attends_to_the_sink(tmp_path):
    """Every query puts all its attention on token 0: with the residual a token keeps ½ of its
    own state per layer (2^-(l+1) after layer l) and the sink gets the rest; without it the
    sink would hold everything after layer 0."""
    n = len(SEGMENTS[0])
    sink_only = np.zeros((LAYERS, n, n))
    sink_only[:, :, 0] = 1.0
    write_store(tmp_path / "s.zarr", [sink_only], SEGMENTS[:1], SHOTS[:1])
    table = rollout.rollout_table(tmp_path / "s.zarr", [WEIGHTS])
    assert set(table["weighting"]) == {WEIGHTS}
    target = table[table["query"] == "target"].groupby(["layer", "source"])["share"].sum()
    for layer in range(LAYERS):
        assert target[layer, "target"] == pytest.approx(2.0 ** -(layer + 1))
        assert target[layer, "sink"] == pytest.approx(1 - 2.0 ** -(layer + 1))
        assert target[layer, "shot_clue"] == 0.0


def test_a_store_without_token_labels_is_refused_with_its_group(tmp_path):
    rng = np.random.default_rng(0)
    write_store(tmp_path / "s.zarr", [causal_maps(rng, LAYERS, len(SEGMENTS[0]))], SEGMENTS[:1], SHOTS[:1])
    group = zarr.open_group(tmp_path / "s.zarr", mode="a")["000"]
    del group.attrs["token_shot"]
    with pytest.raises(KeyError, match=r"s\.zarr/000: attributes \['token_shot'\] missing"):
        rollout.rollout_table(tmp_path / "s.zarr")


def test_rollout_figure_has_a_heatmap_per_query_unit_and_the_flow_panel(store):
    path, _ = store
    fig = plot_rollout(rollout.rollout_table(path, [WEIGHTS]), "synthetic")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == [
        "target ← sources, after the last layer",
        "generated ← sources, after the last layer",
    ]
    assert any(title.startswith("share by layer") for title in titles)
