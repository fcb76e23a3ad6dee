"""The explorer's map kinds and head rows: the attention rollout (against explicit matrix products
of the stored head-mean maps), the value-weighted maps (against the arrays written; a store
without them says the kind is unavailable), a head's row of the heads jobs' Parquet tables, and the
page switching kinds in headless Chromium. The stores are copies of the tiny Mistral's (the
fixture ``results`` of tests/conftest.py) given synthetic head-mean maps and value-weighted arrays
here."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from attnscope import headtable, headtypes, paths, store
from attnscope.explorer import StoreReader, kinds
from attnscope.explorer.errors import NotFound
from attnscope.explorer.reader import ByteLRU
from attnscope.rollout import extend_rollout, rollout_rows
from tests.helpers import MODEL, Page, browser, json_error, plotted, request, serving, store_id, store_path

NUM_HEADS, NUM_LAYERS = 4, 2  # tiny-mistral's (tests/configs/tiny-models.yaml)
TRAINED, OLD = store_id("trained"), store_id("qkscale-a2")  # OLD: a store without value maps


def stochastic(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random causal maps [..., query, key] whose rows sum to 1 (peaked, so layers differ), float16."""
    values = np.tril(rng.random(shape) ** 4)
    return (values / values.sum(axis=-1, keepdims=True)).astype(np.float16)


def write_array(path: Path, data: np.ndarray, chunks: tuple[int, ...]) -> None:
    """An array of a prompt group written (or replaced) by zarr-python itself, every chunk on disk."""
    zarr.create_array(
        str(path), data=data, chunks=chunks, overwrite=True, config={"write_empty_chunks": True}
    )


def residual(head_mean: np.ndarray) -> np.ndarray:
    """½A + ½I of one layer's map, rows renormalised: the formula written out again."""
    mixed = 0.5 * head_mean.astype(np.float64) + 0.5 * np.eye(len(head_mean))
    return mixed / mixed.sum(axis=1)[:, None]


def explicit_rollout(head_mean: np.ndarray, layer: int) -> np.ndarray:
    """R_layer = Ã_layer ⋯ Ã_0 by one explicit product (``head_mean`` [layer, query, key])."""
    matrices = [residual(head_mean[step]) for step in range(layer, -1, -1)]
    return np.linalg.multi_dot(matrices) if len(matrices) > 1 else matrices[0]


@pytest.fixture(scope="module")
def kinds_results(results, tmp_path_factory) -> Path:
    """A copy of the tiny Mistral's results: trained's prompts get synthetic head-mean maps and
    value-weighted arrays (``value_attn`` where heads are kept), qkscale-a2 none (a store whose
    value arrays are gone), trained the heads jobs' two tables (NaN in one cell)."""
    out = tmp_path_factory.mktemp("kinds") / "results"
    shutil.copytree(results, out)
    rng = np.random.default_rng(0)
    root = zarr.open_group(store_path(out, "trained"), mode="r")
    metrics = len(root.attrs["metrics"])
    for entry in root.attrs["prompts"]:
        folder = store_path(out, "trained") / entry["group"]
        attrs = root[entry["group"]].attrs
        n, words = attrs["n_tokens"], len(attrs["map_words"])
        write_array(folder / "head_mean", stochastic(rng, (NUM_LAYERS, n, n)), (1, n, n))
        write_array(folder / "value_head_mean", stochastic(rng, (NUM_LAYERS, n, n)), (1, n, n))
        if attrs["keep_heads"]:
            heads = stochastic(rng, (NUM_LAYERS, NUM_HEADS, n, n))
            write_array(folder / "value_attn", heads, (1, NUM_HEADS, n, n))
        word_maps = stochastic(rng, (NUM_LAYERS, words, words)).astype(np.float32)
        write_array(folder / "value_word_attn_sum", word_maps, (NUM_LAYERS, words, words))
        value_metrics = rng.random((NUM_LAYERS, NUM_HEADS + 1, metrics))
        write_array(folder / "value_metrics", value_metrics, value_metrics.shape)
    for array in store_path(out, "qkscale-a2").glob("*/value_*"):  # in case the capture writes them
        shutil.rmtree(array)
    write_head_tables(out, rng)
    return out


def head_files(results: Path, variant: str) -> tuple[Path, Path]:
    """(head table, head types) of the tiny Mistral's ``variant`` under ``results``."""
    return tuple(
        results / pattern.removeprefix("results/").format(model=MODEL, variant=variant)
        for pattern in (paths.HEAD_TABLE, paths.HEAD_TYPES)
    )


def write_head_tables(results: Path, rng: np.random.Generator) -> None:
    """trained's head types (the workflow's builder on random probe scores) and a head table of its
    columns with random values, its heads typed at 0.4 (NaN for layer 1, head 2's ov_sigma_max)."""
    table_path, types_path = head_files(results, "trained")
    scores = rng.random((3, len(headtypes.SCORES), NUM_LAYERS, NUM_HEADS))
    types = headtypes.head_types_table(scores, [0, 0, 1, 1])
    table = pd.DataFrame(
        {column: rng.random(len(types)) for column in headtable.COLUMNS if column not in types.columns}
    )
    table = pd.concat([types, table], axis=1).assign(head_type=headtypes.head_types(types, 0.4))
    table = table[list(headtable.COLUMNS)]
    table.loc[(table["layer"] == 1) & (table["head"] == 2), "ov_sigma_max"] = np.nan
    types_path.parent.mkdir(parents=True)
    types.to_parquet(types_path)
    table.to_parquet(table_path)


def stored(results: Path, variant: str, group: str) -> zarr.Group:
    return zarr.open_group(store_path(results, variant), mode="r")[group]


# --- the rollout ---


def test_extend_rollout_is_the_explicit_product_of_the_residual_matrices():
    maps = stochastic(np.random.default_rng(1), (4, 7, 7))
    expected = explicit_rollout(maps, 3)
    np.testing.assert_allclose(extend_rollout(maps), expected, rtol=1e-12)
    np.testing.assert_allclose(extend_rollout(maps[2:], extend_rollout(maps[:2])), expected, rtol=1e-12)
    # the rows the rollout table uses are the same product
    np.testing.assert_allclose(rollout_rows(maps, np.eye(7))[3], expected, rtol=1e-12)
    # the check can fail: the product taken the other way round is another matrix
    reversed_order = np.linalg.multi_dot([residual(map_) for map_ in maps])
    assert not np.allclose(reversed_order, expected, atol=1e-3)


@pytest.mark.parametrize(("group", "layer"), [("000", 0), ("000", 1), ("001", 1)])
def test_a_rollout_map_is_the_product_over_the_layers(kinds_results, group, layer):
    prompt = stored(kinds_results, "trained", group)
    keep = np.ix_(plotted(prompt), plotted(prompt))
    head_mean = prompt["head_mean"][...]
    values = StoreReader(kinds_results).map(TRAINED, group, "token", layer, store.HEAD_MEAN, "rollout")
    expected = explicit_rollout(head_mean, layer)[keep]
    assert values.dtype == np.float32 and values.shape == expected.shape
    np.testing.assert_allclose(values, expected, rtol=1e-6, atol=1e-7)
    assert not np.allclose(values, head_mean[layer][keep], atol=1e-3)  # not the weights
    if layer:
        assert not np.allclose(values, (residual(head_mean[0]) @ residual(head_mean[1]))[keep], atol=1e-3)


def test_a_value_weighted_rollout_is_the_product_of_the_value_weighted_maps(kinds_results):
    prompt = stored(kinds_results, "trained", "001")
    keep = np.ix_(plotted(prompt), plotted(prompt))
    explorer = StoreReader(kinds_results)
    values = explorer.map(TRAINED, "001", "token", 1, store.HEAD_MEAN, "value_rollout")
    expected = explicit_rollout(prompt["value_head_mean"][...], 1)[keep]
    np.testing.assert_allclose(values, expected, rtol=1e-6, atol=1e-7)
    weights = explorer.map(TRAINED, "001", "token", 1, store.HEAD_MEAN, "rollout")  # cached apart
    assert not np.allclose(values, weights, atol=1e-3)
    expected_weights = explicit_rollout(prompt["head_mean"][...], 1)[keep]
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-6, atol=1e-7)


def test_the_rollout_reads_each_layer_once_and_its_cache_is_bounded(kinds_results):
    explorer = StoreReader(kinds_results)
    explorer.map(TRAINED, "002", "token", 0, store.HEAD_MEAN)  # opens head_mean (metadata, chunk check)
    explorer.stats(reset=True)
    explorer.map(TRAINED, "002", "token", 1, store.HEAD_MEAN, "rollout")
    assert explorer.stats(reset=True)["chunk"] == NUM_LAYERS  # layers 0 and 1
    for layer in (1, 0):
        explorer.map(TRAINED, "002", "token", layer, store.HEAD_MEAN, "rollout")
        assert explorer.stats(reset=True)["chunk"] == 0  # both products cached
    n = stored(kinds_results, "trained", "002").attrs["n_tokens"]
    explorer.rollouts = ByteLRU(8 * n * n)  # room for one product
    explorer.map(TRAINED, "002", "token", 1, store.HEAD_MEAN, "rollout")
    assert explorer.rollouts.nbytes == 8 * n * n and len(explorer.rollouts.items) == 1
    explorer.stats(reset=True)
    explorer.map(TRAINED, "002", "token", 0, store.HEAD_MEAN, "rollout")
    assert explorer.stats()["chunk"] == 1  # layer 0's product was dropped: read again


def pooled_map(values: np.ndarray, membership: np.ndarray, mean_query: bool) -> np.ndarray:
    """A token map pooled to words as the explorer pools it (:func:`attnscope.store.pool_words`)."""
    summed = store.pool_words(values, membership)
    return store.query_word_means(summed, membership) if mean_query else summed


@pytest.mark.parametrize("level", ["word", "word_mean", "thesis_word"])
def test_word_pooling_is_that_of_the_stored_word_maps(results, level):
    """The pooling of the kinds that store no word maps reproduces the capture's word maps of the weights."""
    prompt = stored(results, "trained", "001")
    membership = kinds.word_membership(prompt.attrs, level)
    for layer in range(NUM_LAYERS):
        pooled = pooled_map(prompt["head_mean"][layer], membership, level == "word_mean")
        stored_map = prompt[kinds.WORD_ARRAYS["weights"][level]][layer]
        np.testing.assert_allclose(pooled, stored_map, rtol=1e-5, atol=1e-6)
    other = pooled_map(prompt["head_mean"][1], membership, level != "word_mean")
    assert not np.allclose(other, stored_map, atol=1e-4)  # the check can fail


def test_a_word_level_rollout_is_the_token_rollout_pooled(kinds_results):
    prompt = stored(kinds_results, "trained", "000")
    token_word, words = np.asarray(prompt.attrs["token_word"]), prompt.attrs["map_words"]
    membership = np.stack([token_word == word for word in words], axis=1).astype(float)
    rollout = explicit_rollout(prompt["head_mean"][...], 1)
    values = StoreReader(kinds_results).map(TRAINED, "000", "word", 1, store.HEAD_MEAN, "rollout")
    np.testing.assert_allclose(values, membership.T @ rollout @ membership, rtol=1e-6, atol=1e-7)


# --- the value-weighted maps ---


@pytest.mark.parametrize(
    ("group", "level", "layer", "head", "array"),
    [
        ("000", "token", 1, store.HEAD_MEAN, "value_head_mean"),
        ("001", "token", 0, store.HEAD_MEAN, "value_head_mean"),
        ("002", "token", 1, 2, "value_attn"),
        ("000", "word", 0, store.HEAD_MEAN, "value_word_attn_sum"),
    ],
)
def test_a_value_weighted_map_is_the_array_written(kinds_results, group, level, layer, head, array):
    prompt = stored(kinds_results, "trained", group)
    written = prompt[array][layer] if head == store.HEAD_MEAN else prompt[array][layer, head]
    if level == "token":
        written = written[np.ix_(plotted(prompt), plotted(prompt))]
    values = StoreReader(kinds_results).map(TRAINED, group, level, layer, head, "value")
    np.testing.assert_array_equal(values, written.astype(np.float32))
    weights = StoreReader(kinds_results).map(TRAINED, group, level, layer, head)
    assert not np.array_equal(values, weights)  # another map than the weights


def test_value_word_means_pool_the_value_head_mean_and_the_curves_are_value_metrics(kinds_results):
    prompt = stored(kinds_results, "trained", "001")
    explorer = StoreReader(kinds_results)
    membership = kinds.word_membership(prompt.attrs, "word_mean")
    counts = membership.sum(axis=0)[:, None]
    summed = membership.T @ prompt["value_head_mean"][1].astype(np.float64) @ membership
    values = explorer.map(TRAINED, "001", "word_mean", 1, store.HEAD_MEAN, "value")
    np.testing.assert_allclose(values, summed / np.maximum(counts, 1), rtol=1e-6, atol=1e-7)
    curves = explorer.metrics(TRAINED, "001", 3, "value")
    assert curves["kind"] == "value" and curves["metrics"] == list(explorer.stores[TRAINED].attrs["metrics"])
    np.testing.assert_array_equal(np.array(curves["values"], dtype=float), prompt["value_metrics"][:, 3, :])
    weights = explorer.metrics(TRAINED, "001", 3)
    assert weights["values"] != curves["values"]


def test_a_store_without_value_arrays_says_the_kind_is_unavailable(kinds_results, tmp_path):
    explorer = StoreReader(kinds_results)
    stores = {entry["id"]: entry for entry in explorer.index()["stores"]}
    assert explorer.index()["kinds"] == ["weights", "value", "rollout", "value_rollout"]
    assert stores[TRAINED]["kinds"] == ["weights", "value", "rollout", "value_rollout"]
    assert stores[TRAINED]["kinds_unavailable"] == {}
    assert stores[OLD]["kinds"] == ["weights", "rollout"]
    assert stores[OLD]["kinds_unavailable"]["value"].startswith("value-weighted arrays missing: ")
    assert stores[OLD]["kinds_unavailable"]["value_rollout"] == stores[OLD]["kinds_unavailable"]["value"]
    with pytest.raises(NotFound, match="value-weighted maps not available: value-weighted arrays missing"):
        explorer.map(OLD, "000", "token", 0, store.HEAD_MEAN, "value")
    # the weights and the rollout of that store still serve
    explorer.map(OLD, "000", "token", 1, store.HEAD_MEAN, "rollout")
    with serving(explorer) as address:
        for path in (
            f"/api/map?store={OLD}&group=000&level=token&layer=0&kind=value",
            f"/api/map?store={OLD}&group=000&level=word&layer=1&head=-1&kind=value",
            f"/api/map?store={TRAINED}&group=000&level=token&layer=0&kind=value&minus={OLD}",
            f"/api/metrics?store={OLD}&group=000&head=-1&kind=value",
        ):
            status, headers, body = request(address, path)
            assert status == 404, (path, body)
            assert "value-weighted maps not available" in json_error(status, headers, body)
        status, headers, body = request(
            address, f"/api/map?store={TRAINED}&group=000&level=token&layer=0&kind=value"
        )
        assert status == 200 and headers["X-Shape"]
    # a store with some value arrays and not others names them
    partial = tmp_path / "results"
    shutil.copytree(store_path(kinds_results, "trained"), store_path(partial, "trained"))
    shutil.rmtree(store_path(partial, "trained") / "001" / "value_metrics")
    reason = StoreReader(partial).stores[TRAINED].missing_kinds["value"]
    assert reason.startswith("value-weighted arrays missing: 001/value_metrics;"), reason


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        (f"/api/map?store={TRAINED}&group=000&level=token&layer=0&kind=values", 400, "kind='values' unknown"),
        (
            f"/api/map?store={TRAINED}&group=000&level=token&layer=0&head=2&kind=rollout",
            400,
            "head-mean maps only",
        ),
        (f"/api/map?store={TRAINED}&group=000&level=cosine&layer=0&kind=value", 400, "has no kinds"),
        (f"/api/map?store={TRAINED}&group=001&level=token&layer=0&head=1&kind=value", 404, "keeps no heads"),
        (f"/api/map?store={TRAINED}&group=000&level=word&layer=0&head=1&kind=value", 400, "head mean only"),
        (f"/api/map?store={TRAINED}&group=000&level=token&layer=2&kind=rollout", 400, "layer=2 out of range"),
        (f"/api/metrics?store={TRAINED}&group=000&kind=rollout", 400, "no stored metrics"),
        (f"/api/head?store={TRAINED}&layer=0&head=-1", 400, "head=-1 out of range; valid: 0..3"),
        (f"/api/head?store={TRAINED}&layer=2&head=0", 400, "layer=2 out of range; valid: 0..1"),
        (f"/api/head?store={TRAINED}&layer=0&head=1_0", 400, "is not an integer"),
        (f"/api/head?store={TRAINED}&layer=0", 400, "missing parameter 'head'"),
        ("/api/head?store=../../etc&layer=0&head=0", 404, "no store '../../etc'"),
    ],
)
def test_bad_kind_and_head_requests_are_json_errors(kinds_results, query, status, message):
    with serving(StoreReader(kinds_results)) as address:
        answer = request(address, query)
    assert answer[0] == status, answer
    assert message in json_error(*answer)


# --- a head's rows of the heads jobs' tables ---


def test_a_heads_row_and_type_scores_are_read_from_the_tables(kinds_results, monkeypatch):
    table_path, types_path = head_files(kinds_results, "trained")
    table, types = pd.read_parquet(table_path), pd.read_parquet(types_path)
    reads = []
    read_parquet = pd.read_parquet
    monkeypatch.setattr(pd, "read_parquet", lambda path: reads.append(path) or read_parquet(path))
    explorer = StoreReader(kinds_results)
    answer = explorer.head(TRAINED, 1, 2)
    expected = table[(table["layer"] == 1) & (table["head"] == 2)].iloc[0]
    assert list(answer["table"]["row"]) == list(headtable.COLUMNS)
    assert answer["table"]["row"]["ov_sigma_max"] is None  # NaN
    for column in ("layer", "head", "kv_head", "qk_sigma_max", "n_prompts", "induction", "head_type"):
        assert answer["table"]["row"][column] == expected[column], column
    expected_types = types[(types["layer"] == 1) & (types["head"] == 2)].iloc[0].to_dict()
    assert answer["types"]["row"] == {
        k: v.item() if hasattr(v, "item") else v for k, v in expected_types.items()
    }
    assert answer["types"]["note"] is None and answer["types"]["path"] == str(types_path)
    assert answer != explorer.head(TRAINED, 1, 1)  # another head, another row
    assert sorted(reads) == sorted([table_path, types_path])  # read once, then cached
    # a rewritten file is read again
    types.assign(induction=types["induction"] + 1.0).to_parquet(types_path)
    again = explorer.head(TRAINED, 1, 2)
    assert again["types"]["row"]["induction"] == pytest.approx(expected_types["induction"] + 1.0)
    types.iloc[:-1].to_parquet(types_path)  # the last head's row missing
    last = explorer.head(TRAINED, NUM_LAYERS - 1, NUM_HEADS - 1)
    assert last["types"]["row"] is None and "no row for layer 1, head 3" in last["types"]["note"]
    types.to_parquet(types_path)


def test_absent_head_tables_are_said_so(kinds_results):
    answer = StoreReader(kinds_results).head(OLD, 0, 1)
    for name, path in zip(("table", "types"), head_files(kinds_results, "qkscale-a2")):
        assert answer[name]["row"] is None
        assert (
            answer[name]["note"].startswith(f"no file {path};")
            and "snakemake --cores 2 heads" in answer[name]["note"]
        )


# --- the page in headless Debian Chromium ---


def panel(driver, index: int, key: str) -> str | None:
    """A data attribute of the ``index``-th map panel (``title``, ``notice``, ``kind``...)."""
    return driver.execute_script(
        "return document.querySelectorAll('#maps .map')[arguments[0]].dataset[arguments[1]] ?? null;",
        index,
        key,
    )


@pytest.mark.integration  # a real browser, as every page test
def test_the_page_switches_the_map_kind(kinds_results, tmp_path):
    driver = browser()
    explorer = StoreReader(kinds_results)
    prompt = stored(kinds_results, "trained", "000")
    keep = np.ix_(plotted(prompt), plotted(prompt))
    query, key = 6, 2
    with serving(explorer) as (host, port):
        try:
            page = Page(driver, explorer, f"http://{host}:{port}/", [tmp_path])
            weights_title = panel(driver, 0, "title")
            assert "attention weights, layer 0, head mean" in weights_title
            weights = float(page.hover(0, query, key)["value"])
            assert weights == float(np.float32(prompt["head_mean"][0][keep][query, key]))

            page.view("value", lambda: page.select("kind", "value"))
            assert panel(driver, 0, "title") == "trained, value-weighted, layer 0, head mean"
            hovered = float(page.hover(0, query, key)["value"])
            assert hovered == float(np.float32(prompt["value_head_mean"][0][keep][query, key])) != weights
            assert "value-weighted" in driver.find_element("id", "curves").get_attribute("data-title")

            page.view("rollout", lambda: page.select("kind", "rollout"))
            assert panel(driver, 0, "title") == "trained, rollout, layer 0, head mean"
            assert driver.find_element("id", "head").get_attribute("disabled") is not None
            rollout = explicit_rollout(prompt["head_mean"][...], 0)[keep]
            hovered = float(page.hover(0, query, key)["value"])
            assert hovered == pytest.approx(rollout[query, key], rel=1e-6) and hovered != weights

            # beside a store without the value-weighted maps: a notice, not a map
            page.view("value-again", lambda: page.select("kind", "value"))
            box = driver.find_element("css selector", "#variants input[data-variant='qkscale-a2']")
            page.view("value-old-store", box.click)
            assert panel(driver, 0, "notice") is None and panel(driver, 1, "notice").startswith(
                f"value-weighted not available for {OLD}: value-weighted arrays missing"
            )
            assert (
                len(driver.find_elements("css selector", "#maps .map")[1].find_elements("tag name", "canvas"))
                == 0
            )
            page.view("rollout-old-store", lambda: page.select("kind", "rollout"))
            assert panel(driver, 1, "notice") is None and "rollout" in panel(driver, 1, "title")
            page.view("value-rollout", lambda: page.select("kind", "value_rollout"))
            assert panel(driver, 0, "title") == "trained, value-weighted rollout, layer 0, head mean"
            value_rollout = explicit_rollout(prompt["value_head_mean"][...], 0)[keep]
            hovered = float(page.hover(0, query, key)["value"])
            assert hovered == pytest.approx(value_rollout[query, key], rel=1e-6)
            assert panel(driver, 1, "notice").startswith(f"value-weighted rollout not available for {OLD}")

            # a head selected: its rows of the head tables, or that they are absent
            page.view("weights", lambda: page.select("kind", "weights"))
            assert driver.find_element("id", "heads").text == ""  # the head mean: no head rows
            page.view("head", lambda: page.select("head", "2"))
            trained, old = driver.find_elements("css selector", "#heads .head")
            table = pd.read_parquet(head_files(kinds_results, "trained")[0]).set_index(["layer", "head"])
            assert trained.find_element("css selector", ".types").text.startswith(
                f"head type: {table.loc[(0, 2), 'head_type']}; kv_head 1, previous_token "
            )
            cells = [c.text for c in trained.find_elements("css selector", ".table td")]
            assert cells[: 2 * 3] == ["layer", "0", "head", "2", "kv_head", "1"]
            assert "no file" in old.find_element("css selector", ".types").text
            assert "no file" in old.find_element("css selector", ".table").text
        finally:
            driver.quit()
