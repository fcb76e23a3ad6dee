"""The attention explorer: its endpoints against zarr reads of the stores, the chunks a view
reads, bad input; the page driven in headless Debian Chromium on a real two-variant run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pytest
import zarr

from attnscope import attention, store
from attnscope.explorer import StoreReader
from attnscope.mapview import ATTENTION_CMAP, MASK_COLOR
from tests.helpers import (
    CLUES,
    EXPERIMENT,
    MODEL,
    WORD_ARRAYS,
    Page,
    browser,
    plotted,
    reference,
    serving,
    store_id,
    store_path,
)

CLUES_ORDER = ("qkscale-a2", "trained")  # variant, base of the difference view


def chunk_bytes(results: Path, variant: str, group: str, level: str, layer: int, head: int) -> int:
    """Encoded bytes of the inner chunk that holds a map, from its shard file's index (the whole
    file where the array is one inner chunk: zarr then reads the file in one request)."""
    name = "cosine" if level == "cosine" else WORD_ARRAYS.get(level, "head_mean" if head < 0 else "attn")
    array = zarr.open_array(store_path(results, variant) / group / name, mode="r")
    shard = next((store_path(results, variant) / group / name).glob("c.*"))
    grid = tuple(s // c for s, c in zip(array.shape, array.chunks))
    if all(g == 1 for g in grid):
        return shard.stat().st_size
    index_bytes = 16 * int(np.prod(grid))
    index = np.frombuffer(shard.read_bytes()[-index_bytes - 4 : -4], dtype="<u8").reshape(*grid, 2)
    position = (layer,) if name == "head_mean" else (layer, head // array.chunks[1])
    return int(index[position][(0,) * (len(grid) - len(position))][1])


@pytest.fixture(scope="module")
def server(results):
    """(explorer, base URL): the server on a free port in a thread."""
    explorer = StoreReader(results)
    with serving(explorer) as (host, port):
        yield explorer, f"http://{host}:{port}"


def get(url: str) -> tuple[bytes, dict[str, str]]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read(), dict(response.headers)


def get_map(base: str, **params) -> np.ndarray:
    body, headers = get(f"{base}/api/map?" + "&".join(f"{k}={v}" for k, v in params.items()))
    shape = tuple(int(s) for s in headers["X-Shape"].split(","))
    return np.frombuffer(body, dtype="<f4").reshape(shape)


VIEWS = [
    ("trained", "000", "token", 1, store.HEAD_MEAN),
    ("trained", "000", "token", 0, 3),
    ("qkscale-a2", "002", "token", 1, 2),
    ("trained", "001", "word", 1, store.HEAD_MEAN),
    ("qkscale-a2", "000", "word_mean", 0, store.HEAD_MEAN),
    ("trained", "002", "thesis_word", 1, store.HEAD_MEAN),
    ("qkscale-a2", "001", "cosine", 0, store.HEAD_MEAN),
]


@pytest.mark.parametrize(("variant", "group", "level", "layer", "head"), VIEWS)
def test_a_map_is_the_stored_array_and_reads_one_chunk(server, results, variant, group, level, layer, head):
    explorer, base = server
    params = {"store": store_id(variant), "group": group, "level": level, "layer": layer, "head": head}
    get_map(base, **params)  # opens the array (metadata, cached from then on)
    explorer.stats(reset=True)
    values = get_map(base, **params)
    expected = reference(results, variant, group, level, layer, head)
    assert values.shape == expected.shape
    np.testing.assert_array_equal(values, expected.astype(np.float32))
    reads = explorer.stats()
    assert reads["chunk"] == 1, reads  # one inner chunk of one shard file, no more bytes
    assert reads["chunk_bytes"] == chunk_bytes(results, variant, group, level, layer, head), reads
    assert reads["metadata"] == 0 and reads["index"] <= 1, reads


def test_a_map_of_another_layer_is_not_the_same_chunk(server, results):
    """The check above can fail: layer 0's map is not layer 1's."""
    _, base = server
    values = get_map(base, store=store_id("trained"), group="000", level="token", layer=0, head=-1)
    assert not np.array_equal(values, reference(results, "trained", "000", "token", 1, -1))


def test_difference_is_variant_minus_trained_over_the_shared_prompt(server, results):
    explorer, base = server
    values = get_map(
        base,
        store=store_id("qkscale-a2"),
        minus=store_id("trained"),
        group="000",
        level="token",
        layer=1,
        head=-1,
    )
    variant, trained = (
        reference(results, v, "000", "token", 1, -1).astype(np.float32) for v in ("qkscale-a2", "trained")
    )
    prompt = zarr.open_group(results / "attention" / MODEL / "trained" / f"{EXPERIMENT}.zarr", mode="r")[
        "000"
    ]
    segments = np.asarray(prompt.attrs["token_segment"])[plotted(prompt)]
    n = int(np.sum(segments != store.GENERATED))
    assert len(variant) != len(trained)  # the clues differ: only the prompt is shared
    np.testing.assert_array_equal(values, variant[:n, :n] - trained[:n, :n])


def test_index_prompt_and_metric_endpoints(server, results):
    _, base = server
    index = json.loads(get(f"{base}/api/index")[0])
    assert index["problems"] == [] and index["store_version"] == store.STORE_VERSION
    assert [s["variant"] for s in index["stores"]] == ["trained", "qkscale-a2"]  # trained first
    assert [p["target"] for p in index["stores"][0]["prompts"]] == ["Ant", "Bee", "Fox"]
    prompt = json.loads(get(f"{base}/api/prompt?store={store_id('trained')}&group=000")[0])
    assert prompt["target"] == "Ant" and prompt["keep_heads"]
    assert len(prompt["axes"]["token"]["labels"]) == len(
        reference(results, "trained", "000", "cosine", 0, -1)
    )
    curves = json.loads(get(f"{base}/api/metrics?store={store_id('trained')}&group=000&head=2")[0])
    stored = zarr.open_group(store_path(results, "trained"), mode="r")
    np.testing.assert_allclose(np.array(curves["values"], dtype=float), stored["000"]["metrics"][:, 2, :])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("/api/map?store=nope&group=000&level=token&layer=0", "no store 'nope'"),
        (
            f"/api/map?store={store_id('trained')}&group=000&level=token&layer=9",
            "layer=9 out of range; valid: 0..1",
        ),
        (f"/api/map?store={store_id('trained')}&group=001&level=token&layer=0&head=1", "keeps no heads"),
        (f"/api/map?store={store_id('trained')}&group=000&level=word&layer=0&head=1", "head mean only"),
        (f"/api/prompt?store={store_id('trained')}&group=777", "no prompt group '777'"),
    ],
)
def test_bad_requests_say_what_is_wrong(server, query, message):
    _, base = server
    with pytest.raises(urllib.error.HTTPError) as error:
        get(base + query)
    assert message in error.value.read().decode()


def old_and_partial(results: Path, tmp: Path) -> Path:
    """A results folder with a store of an older version and a partial store."""
    bad = tmp / "bad-results"
    source, old = store_path(results, "trained"), store_path(bad, "trained")
    shutil.copytree(source, old)
    meta = json.loads((old / "zarr.json").read_text())
    meta["attributes"]["store_version"] = store.STORE_VERSION - 1
    (old / "zarr.json").write_text(json.dumps(meta))
    shutil.copytree(
        source, attention.partial_path(bad / "attention" / MODEL / "qkscale-a2" / f"{EXPERIMENT}.zarr")
    )
    return bad


def test_bad_input_gives_clear_problems(results, tmp_path):
    assert "no attention stores" in StoreReader(tmp_path / "empty").problems[0]
    (tmp_path / "no-stores" / "attention").mkdir(parents=True)
    assert "no attention stores under" in StoreReader(tmp_path / "no-stores").problems[0]
    problems = StoreReader(old_and_partial(results, tmp_path)).problems
    assert len(problems) == 2, problems
    assert "still being written" in problems[0] and ".animals-k3.zarr.partial" in problems[0]
    assert f"store version {store.STORE_VERSION - 1}" in problems[1] and "trained" in problems[1]


def test_the_command_prints_problems_and_the_url(results, tmp_path):
    command = [sys.executable, "-m", "attnscope.explorer", "explore", str(old_and_partial(results, tmp_path))]
    process = subprocess.Popen(
        [*command, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        url_line = process.stdout.readline()
    finally:
        process.terminate()
    stderr = process.communicate(timeout=30)[1]
    assert "0 stores; open http://127.0.0.1:" in url_line
    assert "still being written" in stderr and "store version" in stderr


# --- the page in headless Debian Chromium, on a real Snakemake run of two variants ---


@pytest.fixture(scope="module")
def two_variant_run(tmp_path_factory) -> Path:
    """A real Snakemake run of the tiny Mistral: one experiment, trained and qkscale-a2, heads kept."""
    from tests.helpers import snakemake, tiny_config

    workdir = tmp_path_factory.mktemp("explorer-run")
    experiment = {"category": "Animals", "k": 2, "n_targets": 3, "variants": ["trained", "qkscale-a2"]}
    config = tiny_config(**{"animals-k2": experiment})
    config["attention"]["keep_heads"] = "all"
    snakemake(workdir, "attention", config=config)
    return workdir / "results"


@pytest.mark.integration
def test_the_page_shows_the_stored_values_and_reads_only_the_chunks_it_shows(two_variant_run, tmp_path):
    driver = browser()
    shots = [tmp_path] + (
        [Path(os.environ["ATTNSCOPE_ARTIFACTS"])] if os.environ.get("ATTNSCOPE_ARTIFACTS") else []
    )
    explorer = StoreReader(two_variant_run)
    stores = {
        v: zarr.open_group(two_variant_run / "attention" / MODEL / v / "animals-k2.zarr", mode="r")
        for v in CLUES
    }
    with serving(explorer) as (host, port):
        try:
            page = Page(driver, explorer, f"http://{host}:{port}/", shots)
            # a new prompt: its map, its cosine, its metric curves (first opened: metadata reads too)
            reads = page.view("prompt", lambda: page.select("prompt", "001"))
            assert reads["chunk"] == 3, reads
            # the map (curves kept); then the map and its curves
            assert page.view("layer", lambda: page.select("layer", "1"))["chunk"] == 1
            assert page.view("head", lambda: page.select("head", "2"))["chunk"] == 2
            prompt = stores["trained"]["001"]
            keep = plotted(prompt)
            stored = prompt["attn"][1, 2][np.ix_(keep, keep)]
            for query, key in [(5, 3), (12, 0), (len(keep) - 1, len(keep) - 2)]:
                hovered = page.hover(0, query, key)
                assert hovered["panel"] == "trained"
                assert float(hovered["value"]) == float(np.float32(stored[query, key])), (query, key, hovered)
                # the colour drawn there: the figures' colormap at that value (one step of 256)
                rgb, scale = page.pixel(0, query, key)
                share = (float(stored[query, key]) - scale["zmin"]) / (scale["zmax"] - scale["zmin"])
                expected = mpl.colormaps[ATTENTION_CMAP](share, bytes=True)[:3]
                assert np.abs(np.subtract(rgb, expected, dtype=int)).max() <= 4, (rgb, expected)
            assert page.pixel(0, 0, 5)[0] == [round(255 * c) for c in mpl.colors.to_rgb(MASK_COLOR)]  # masked

            reads = page.view("word", lambda: page.select("level", "word"))
            assert reads["chunk"] == 1, reads  # the head mean's curves: kept from the prompt's view
            hovered = page.hover(0, 4, 2)
            assert float(hovered["value"]) == float(np.float32(prompt["word_attn_sum"][1][4, 2]))

            box = driver.find_element("css selector", "#variants input[data-variant='qkscale-a2']")
            reads = page.view("variants", box.click)
            assert reads["chunk"] == 2, reads  # both variants' maps (trained's again)
            hovered = page.hover(1, 6, 1)
            assert hovered["panel"] == "qkscale-a2"
            assert float(hovered["value"]) == float(
                np.float32(stores["qkscale-a2"]["001"]["word_attn_sum"][1][6, 1])
            )

            reads = page.view("difference", driver.find_element("id", "diff").click)
            assert reads["chunk"] == 1 + 2, reads  # trained; both for the difference
            hovered = page.hover(1, 6, 2)
            variant_words, trained_words = (
                stores[v]["001"]["word_attn_sum"][1] for v in ("qkscale-a2", "trained")
            )
            difference = np.float32(variant_words[6, 2]) - np.float32(trained_words[6, 2])
            assert hovered["panel"] == "qkscale-a2-minus-trained", hovered
            assert float(hovered["value"]) == float(difference)

            page.mouse(0, 7, 0, click=True)
            spans = driver.find_elements("css selector", "#textview span.tok")
            word_row = np.float32(prompt["word_attn_sum"][1][7])
            assert [float(s.get_attribute("data-value")) for s in spans] == [float(v) for v in word_row]
            for folder in shots:
                driver.save_screenshot(str(folder / "explorer-textview.png"))
            page.view(
                "curve-click",
                lambda: driver.execute_script(
                    "document.getElementById('curves').emit('plotly_click', {points: [{x: 0}]});"
                ),
            )
            assert driver.find_element("id", "layer").get_attribute("value") == "0"
        finally:
            driver.quit()


@pytest.mark.integration  # a real browser, as every page test
@pytest.mark.parametrize(
    ("folder", "messages"),
    [
        ("bad", ["still being written", f"store version {store.STORE_VERSION - 1}"]),
        ("empty", ["no attention stores", "snakemake --cores 2 attention"]),
    ],
)
def test_the_page_says_what_is_wrong_with_the_results_folder(results, tmp_path, folder, messages):
    driver = browser()
    explorer = StoreReader(old_and_partial(results, tmp_path) if folder == "bad" else tmp_path / "empty")
    with serving(explorer) as (host, port):
        try:
            driver.get(f"http://{host}:{port}/")
            from selenium.webdriver.support.ui import WebDriverWait

            status = driver.find_element("id", "status")
            WebDriverWait(driver, 30).until(lambda _: status.get_attribute("data-ready") == "none")
            text = driver.find_element("id", "problems").text
            assert all(message in text for message in messages), text
            driver.save_screenshot(str(tmp_path / f"explorer-{folder}-input.png"))
        finally:
            driver.quit()
