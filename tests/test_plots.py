"""Figure functions on small inputs: each writes non-empty PNG and SVG files with the expected
axis labels, titles and tick labels (read back from the matplotlib Axes and the SVG text)."""

from __future__ import annotations

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from attnscope import mapview, plots, prompts, theory
from attnscope.mapdata import PromptMaps
from attnscope.store import SHOT_CLUE, SHOT_WORD, TARGET

TOKENS = ["ĠCrab", "Wal", "ks", "Ġsideways", ",", "ĠSn", "ail", "ĠCar", "ries", "ĠAnt", "ĠTiny", "Ġworker"]
SEGMENTS = [
    "shot_word", "shot_clue", "shot_clue", "shot_clue", "shot_clue",
    "shot_word", "shot_word", "shot_clue", "shot_clue", "target", "generated", "generated",
]  # fmt: skip
SHOTS = [1, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0]
WORDS = [0, 1, 1, 2, -1, 3, 3, 4, 4, 5, 6, 7]


def attention(layers: int, n: int, seed: int = 0) -> np.ndarray:
    """Row-stochastic causal maps [layers, n, n]."""
    a = np.tril(np.random.default_rng(seed).random((layers, n, n)) ** 3) + np.eye(n) * 1e-3
    return a / a.sum(axis=-1, keepdims=True)


def written(fig, tmp_path, name: str) -> tuple[np.ndarray, str]:
    """Save as PNG and SVG; return the decoded PNG and the SVG text (both checked non-empty)."""
    paths = [tmp_path / f"{name}.png", tmp_path / f"{name}.svg"]
    plots.save_figure(fig, paths, dpi=40)
    for path in paths:
        assert path.stat().st_size > 1000, path
    image = matplotlib.image.imread(paths[0])
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50
    assert image[..., :3].std() > 0.05, "the PNG is blank"
    return image, paths[1].read_text()


@pytest.fixture
def token_axis():
    keep, axis = mapview.token_axis(
        TOKENS + ["<|im_end|>"], SEGMENTS + ["template"], SHOTS + [0], WORDS + [-1]
    )
    assert list(keep) == list(range(len(TOKENS))), "template tokens are not drawn"
    return axis


def test_plotted_segments_are_the_prompt_builders():
    assert mapview.PLOTTED_SEGMENTS == (
        prompts.SHOT_WORD,
        prompts.SHOT_CLUE,
        prompts.TARGET,
        prompts.GENERATED,
    )
    assert set(mapview.PLOTTED_SEGMENTS) < set(prompts.SEGMENTS)


def test_axis_labels_mark_shot_words_and_the_target(token_axis):
    assert token_axis.labels[:4] == ["Word: Crab", "Wal", "ks", "sideways"]
    assert token_axis.labels[5:7] == ["Word: Sn", "ail"], "only a word's first subword gets the prefix"
    assert token_axis.labels[9] == "Target Word: Ant"
    # a block starts at shot 2, at the target and at the generated clue
    assert token_axis.boundaries() == [5, 9, 10]


def test_token_text_and_layers():
    assert (
        mapview.token_text("ĠAnt") == "Ant"
        and mapview.token_text("▁Ant") == "Ant"
        and mapview.token_text("Ċ") == "\\n"
        and mapview.token_text("Ġ") == "<space>"
    )
    assert plots.resolve_layers([0, 2, 15, -1], 30) == [0, 2, 15, 29]
    assert plots.resolve_layers([0, 2, 15, -1], 2) == [0, 1], "missing layers dropped, -1 is the last"
    assert plots.resolve_layers([40], 8) == [0, 2, 5, 7]


def test_variant_colours_are_fixed_and_distinct():
    names = ["trained", "random-s0", "qkscale-a2", "qkscale-a0.5", "qktop-r8-a2", "qkflat"]
    colours = [plots.variant_color(v) for v in names]
    assert len(set(colours)) == len(names)
    assert plots.variant_color("random-s7") == plots.variant_color("random-s0")


def test_attention_grid(tmp_path, token_axis):
    layers = [0, 2, 15, 29]
    maps = attention(4, len(token_axis))
    fig = plots.plot_attention_maps(
        maps, layers, token_axis, 'smollm2 · trained · k = 3 · "Ant"', "token", vmax=0.1
    )
    panels = [ax for ax in fig.axes if ax.get_title().startswith("layer")]
    assert [ax.get_title() for ax in panels] == [f"layer {layer}" for layer in layers]
    assert (
        panels[0].get_ylabel() == "query token (attending)"
        and panels[2].get_xlabel() == "key token (attended to)"
    )
    assert panels[1].get_ylabel() == "" and panels[0].get_xlabel() == "", "inner panels share the labels"
    ticks = [t.get_text() for t in panels[0].get_yticklabels()]
    assert ticks[0] == "Word: Crab" and "Target Word: Ant" in ticks
    colorbar = [ax for ax in fig.axes if ax not in panels]
    assert len(colorbar) == 1 and colorbar[0].get_ylabel() == "attention (head mean)"
    assert all(ax.images[0].norm.vmax == 0.1 for ax in panels), "one colour scale across panels"
    masked = panels[0].images[0].get_array()
    assert masked.mask[0, 1] and not masked.mask[1, 0], "the non-causal upper triangle is masked"
    _, svg = written(fig, tmp_path, "grid")
    assert "Target Word: Ant" in svg and "layer 29" in svg and "smollm2" in fig.get_suptitle()


def test_full_pass_grid_of_many_layers(tmp_path):
    axis = mapview.word_axis(
        ["Crab", "walks", "Ant", "tiny"], ["shot_word", "shot_clue", "target", "generated"], [1, 1, 0, 0]
    )
    fig = plots.plot_attention_maps(attention(7, 4), list(range(7)), axis, "every layer", "word", ncols=3)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("layer")]
    assert len(panels) == 7
    assert [ax.get_xlabel() for ax in panels] == [""] * 4 + ["key word (attended to)"] * 3
    assert [bool(ax.get_ylabel()) for ax in panels] == [True, False, False, True, False, False, True]
    written(fig, tmp_path, "pass")
    with pytest.raises(ValueError, match="do not match"):
        plots.plot_attention_maps(attention(2, 4), [0, 1, 2], axis, "t")


def test_cosine_beside_attention(tmp_path, token_axis):
    n = len(token_axis)
    cosine = np.corrcoef(np.random.default_rng(1).standard_normal((n, 16)))
    fig = plots.plot_cosine_and_attention(
        cosine, attention(3, n), [0, 1, 2], token_axis, "cosine", {1: (0.12, 0.34)}, vmax=0.1
    )
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0] == "input-embedding cosine similarity"
    assert "Pearson r = 0.12, Spearman ρ = 0.34" in titles[2]
    labels = {ax.get_ylabel() for ax in fig.axes}
    assert {"cosine similarity", "attention (head mean)", "query token (attending)"} <= labels
    cos_panel = fig.axes[0]
    assert cos_panel.images[0].norm.vmin == -cos_panel.images[0].norm.vmax, (
        "diverging scale symmetric about 0"
    )
    written(fig, tmp_path, "cosine")


def test_metric_curves(tmp_path):
    rows = [
        {"variant": v, "layer": layer, "metric": m, "mean": 0.5, "q25": 0.4, "q75": 0.6}
        for v in ("trained", "qkscale-a2")
        for m in ("row_entropy", "self_mass", "across_shot_mass")
        for layer in range(5)
    ]
    fig = plots.plot_metric_curves(
        pd.DataFrame(rows), ["row_entropy", "self_mass", "across_shot_mass"], "curves"
    )
    assert [ax.get_ylabel() for ax in fig.axes] == [
        "normalised row entropy",
        "self (diagonal) mass",
        "across-shot mass",
    ]
    assert all(ax.get_xlabel() == "layer" for ax in fig.axes)
    legend = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert legend == ["trained", "qkscale-a2"]
    assert fig.axes[0].lines[0].get_color() == plots.variant_color("trained")
    assert len(fig.axes[0].collections) == 2, "one spread band per variant"
    written(fig, tmp_path, "curves")
    intervals = pd.DataFrame(rows).rename(columns={"q25": "low", "q75": "high"})
    fig = plots.plot_metric_curves(
        intervals, ["self_mass"], "curves", band=("low", "high"), band_label="95 % interval of the mean"
    )
    band = fig.axes[0].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.4) and band.max() == pytest.approx(0.6)
    assert "95 % interval" in fig.axes[-1].get_legend().get_title().get_text()


def test_squared_singular_values(tmp_path):
    rng = np.random.default_rng(2)
    learned = {m: np.sort(rng.random((3, 16)), axis=1)[:, ::-1] for m in ("q", "k")}
    fig = plots.plot_squared_singular_values(
        learned,
        {"q": 0.8, "k": 0.8},
        "spectra",
        reference={"q": learned["q"] / 2},
        reference_label="random-s0",
    )
    panels = fig.axes[:2]
    assert [ax.get_xlabel() for ax in panels] == ["index i (descending)"] * 2
    assert panels[0].get_ylabel() == r"$\sigma_i^2$" and panels[0].get_yscale() == "log"
    assert "learned" in panels[0].get_title()
    legend = [t.get_text() for t in panels[0].get_legend().get_texts()]
    assert legend == ["random-s0", r"MP edge $\lambda_+$"]
    assert fig.axes[-1].get_ylabel() == "layer", "colour bar of the layers"
    # The random seeds' band: from the smallest to the largest σᵢ² of every seed and layer.
    band = panels[0].collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx((learned["q"] / 2).min()) and band.max() == pytest.approx(
        (learned["q"] / 2).max()
    )
    assert len(panels[1].collections) == 0, "no band without a reference"
    written(fig, tmp_path, "spectra")


def squared_spectra_figure():
    """A constrained-layout figure with log axes, a legend and a colour bar."""
    rng = np.random.default_rng(2)
    learned = {m: np.sort(rng.random((3, 16)), axis=1)[:, ::-1] for m in ("q", "k")}
    return plots.plot_squared_singular_values(learned, {"q": 0.8, "k": 0.8}, "spectra " * 12)


def positions(fig) -> list[tuple[float, ...]]:
    return [tuple(ax.get_position().bounds) for ax in fig.axes]


def test_a_figure_is_laid_out_once_for_all_its_files(tmp_path, monkeypatch):
    """The PNG is what savefig alone writes; the SVG draws the PNG's layout instead of laying the
    figure out again; the figure keeps its layout engine."""
    import matplotlib
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    alone = squared_spectra_figure()
    with matplotlib.rc_context(plots.common.STYLE):
        alone.savefig(tmp_path / "alone.png", format="png", dpi=40)
    calls = []
    execute = ConstrainedLayoutEngine.execute
    monkeypatch.setattr(
        ConstrainedLayoutEngine, "execute", lambda self, figure: calls.append(1) or execute(self, figure)
    )
    fig = squared_spectra_figure()
    engine = fig.get_layout_engine()
    plots.save_figure(fig, [tmp_path / "f.svg", tmp_path / "f.png"], dpi=40)  # the PNG is written first
    assert len(calls) == 1 and fig.get_layout_engine() is engine
    assert (tmp_path / "f.png").read_bytes() == (tmp_path / "alone.png").read_bytes()
    assert positions(fig) == positions(alone)
    assert (tmp_path / "f.svg").stat().st_size > 1000
    plots.save_figure(fig, [tmp_path / "g.png"], dpi=40)
    assert len(calls) == 2, "a later save lays the figure out again"


def test_base_alignment(tmp_path):
    rows = [
        {
            "layer": layer,
            "scope": scope,
            "head": h,
            "trace": 0.1 * layer,
            "trace_std_init": 1.0,
            "z_score": 0.1 * layer,
            "cosine": 0.01,
            "n_terms": 100,
        }
        for layer in range(4)
        for scope, h in [("layer", -1), ("head", 0), ("head", 1)]
    ]
    table = pd.DataFrame(rows)
    fig = plots.plot_base_alignment({"trained": table, "random-s0": table.assign(trace=0.0)}, "A.22")
    left, middle, right = fig.axes
    assert left.get_xlabel() == middle.get_xlabel() == right.get_xlabel() == "layer"
    assert "Tr" in left.get_ylabel() and "z-score" in middle.get_ylabel() and "cosine" in right.get_ylabel()
    assert [t.get_text() for t in left.get_legend().get_texts()] == [
        "random ±2σ",
        "random ±1σ",
        "trained",
        "random-s0",
    ]
    assert middle.get_yscale() == right.get_yscale() == "symlog"
    np.testing.assert_allclose(right.collections[-1].get_offsets()[:, 1], 0.1)  # cosine·√n = 0.01·10
    written(fig, tmp_path, "alignment")


def test_mp_density_and_slerp_kl(tmp_path):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((200, 100)) / np.sqrt(200)
    x, density = theory.marchenko_pastur_curve(0.5)
    upper = theory.marchenko_pastur_edges(0.5)[1]
    fig = plots.plot_mp_density([("200×100", np.linalg.eigvalsh(w.T @ w), 0.5, x, density, upper)], "MP")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "density" and "eigenvalue" in ax.get_xlabel() and "q = 0.5" in ax.get_title()
    written(fig, tmp_path, "mp")
    curve = theory.slerp_kl_curve(pairs=20, dim=16, points=21)
    band = np.quantile(curve.kl, 0.1, axis=0), np.quantile(curve.kl, 0.9, axis=0)
    fig = plots.plot_slerp_kl(curve.t, curve.kl_mean, band, len(curve.kl), curve.fit.fitted, "fit", "SLERP")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "interpolation time t" and "SLERP" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "10–90 % of pairs",
        "mean over 20 pairs",
        "fit",
    ]
    written(fig, tmp_path, "slerp")


def test_prompt_maps_from_a_real_store(tiny_llama, sample_clues, tmp_path):
    """The figures' store reader on a store written by attention.extract (tiny Llama, clue appended)."""
    import zarr

    from attnscope import attention, mapdata
    from tests.helpers import clue_table

    model, tokenizer = tiny_llama
    table = prompts.build_prompts(
        sample_clues, "animals-k3", {"category": "Animals", "k": 3, "seed": 0}, ["Ant"], tokenizer
    )
    inputs = attention.prompt_inputs(table, tokenizer, clue_table(table, tokenizer), keep_heads=[])
    path = tmp_path / "store.zarr"
    attention.extract(model, inputs, path, {"config_digest": "test"}, progress=False)

    maps = mapdata.read_prompt_maps(path, "ant")
    group = zarr.open_group(str(path), mode="r")["000"]
    segments = np.asarray(group.attrs["token_segment"])
    assert list(maps.token_index) == list(np.flatnonzero(np.isin(segments, mapview.PLOTTED_SEGMENTS)))
    assert "generated" in maps.tokens.segment and maps.num_layers == 2 and maps.clue
    np.testing.assert_array_equal(
        maps.token_maps([1])[0], group["head_mean"][1][np.ix_(maps.token_index, maps.token_index)]
    )
    assert maps.word_maps([0, 1]).shape == (2, len(maps.words), len(maps.words))
    assert maps.words.labels[-1 - maps.words.segment[::-1].tolist().index("target")] == "Target Word: Ant"
    assert sum(label.startswith("Word: ") for label in maps.words.labels) == 3, "one per shot"
    names = list(group["metrics"].attrs.get("metric", [])) or list(
        zarr.open_group(str(path)).attrs["metrics"]
    )
    r = group["metrics"][1, -1, names.index("cosine_pearson")]
    assert maps.correlations([1])[1][0] == pytest.approx(float(r))
    fig = plots.plot_attention_maps(maps.word_maps([0, 1]), [0, 1], maps.words, "store", "word")
    assert "Target Word: Ant" in [t.get_text() for t in fig.axes[0].get_yticklabels()]
    with pytest.raises(KeyError, match="no prompt for target 'Owl'"):
        mapdata.read_prompt_maps(path, "Owl")


@pytest.mark.parametrize(("num_layers", "layers"), [(32, [0, 10, 20, 30]), (30, [0, 9, 19, 28]), (2, [0, 1])])
def test_thesis_layers_keep_the_relative_depth(num_layers, layers):
    assert plots.thesis_layers(num_layers) == layers


def test_thesis_word_axis_labels_like_the_notebook():
    words = ["Word", "Parrot", "Mimics", "Word", "Ant"]
    segments = [prompts.TEMPLATE, prompts.SHOT_WORD, prompts.SHOT_CLUE, prompts.TEMPLATE, prompts.TARGET]
    axis = mapview.thesis_word_axis(words, segments, [1, 1, 1, 0, 0])
    assert axis.labels == ["Word:", "Parrot", "Mimics", "Target Word:", "Ant"]
    assert axis.boundaries() == [3, 4]


def test_per_panel_scales_title_each_panel_with_its_maximum():
    maps = np.stack([np.tril(np.full((3, 3), v)) for v in (0.2, 0.8)])
    axis = mapview.thesis_word_axis(
        ["Word", "Ant", "x"], [prompts.TEMPLATE, prompts.TARGET, prompts.TARGET], [0, 0, 0]
    )
    fig = plots.plot_attention_maps(maps, [0, 1], axis, "t", "word", per_panel=True)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["layer 0 (scale 0–0.2)", "layer 1 (scale 0–0.8)"], "no shared colour bar"


@pytest.mark.parametrize("clue", ["Tiny toiler", None])
def test_map_titles_say_whether_the_generated_clue_is_drawn(clue):
    """Token/word maps of a store with the appended clue say so in the title; without it, "prompt only"."""
    words = mapview.word_axis(["Word", "Bee", "Ant"], [SHOT_WORD, SHOT_CLUE, TARGET], [1, 1, 0])
    tokens = mapview.MapAxis(list(words.labels), words.segment, words.shot)
    maps = PromptMaps(
        target="Ant",
        clue=clue,
        num_layers=2,
        token_index=np.arange(3),
        tokens=tokens,
        words=words,
        thesis_words=words,
        group={key: np.tril(np.ones((2, 3, 3), np.float32)) / 3 for key in ("head_mean", "word_attn_sum")},
        metric_names=[],
    )
    options = {"grid_layers": [0, 1], "color_max": {"token": 0.1, "word": 0.5}, "pass_columns": 2}
    for kind in ("word_grid", "token_pass"):
        title = plots.attention_figure(maps, kind, options, "header")._suptitle.get_text()
        assert ("prompt + generated clue" in title) == (clue is not None), title
        assert ("prompt only" in title) == (clue is None), title


def test_an_unknown_map_kind_is_refused_naming_the_kinds():
    with pytest.raises(ValueError, match="kind 'word_gird'; the kinds: token_grid, word_grid, cosine"):
        plots.attention_figure(None, "word_gird", {}, "header")


@pytest.mark.parametrize("append_clue", [True, False])
def test_map_labels_say_which_tokens_are_drawn(append_clue):
    """The thesis's grid draws the prompt only, whatever attention.append_clue says."""
    assert mapview.map_label("thesis_grid", append_clue).endswith(", prompt only")
    drawn = ", prompt + generated clue" if append_clue else ", prompt only"
    assert mapview.map_label("word_pass", append_clue) == "word-level maps, every layer" + drawn
