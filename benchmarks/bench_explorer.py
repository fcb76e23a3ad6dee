"""The explorer's speed: time to the first map, the 95th percentile of switching layer or head,
and map requests at 1, 10 and 20 concurrent clients.

    python benchmarks/bench_explorer.py --results results            # a finished run's stores
    python benchmarks/bench_explorer.py --synthetic /tmp/mistral-shape  # + a Mistral-7B-shaped store
    python benchmarks/bench_explorer.py --synthetic /tmp/smollm2-shape --shape 30,9,256  # SmolLM2's
    python benchmarks/bench_explorer.py --results results --browser  # + the page's own time per view
    python benchmarks/bench_explorer.py --results results --store smollm2/trained/animals-k8 --browser

The server runs as its own process (``python -m attnscope.explorer explore``), as a user starts
it; "first map" is from its start to the first map's bytes (index, prompt labels, map). A switch
is one ``/api/map`` request for another layer or head (the map the page shows; the page also
asks for the metric curves, timed apart). The concurrent figures are 100 map requests (the same
views) spread over 1, 10 or 20 client threads, each request on its own connection, as a burst of
page loads or several users make them. The synthetic store has the shape of Mistral-7B
(32 layers × 32 heads × 1024 tokens, 30 prompts; per-head maps kept for the first prompt, as
``attention.keep_heads`` keeps them for chosen targets) and is written with the writer and
chunking ``attention.extract`` uses (``zarrwrite.ShardWriter``, ``promptgroup.COMPRESSOR``, heads last).
Each measured store's figures go to ``benchmarks/out/explorer-{store}.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write  # noqa: E402

from attnscope import store, zarrwrite  # noqa: E402

SWITCHES = 60
CLIENTS = (1, 10, 20)
CONCURRENT_REQUESTS = 100


def write_synthetic(
    out: Path, num_layers: int = 32, num_heads: int = 32, n: int = 1024, prompts: int = 30
) -> Path:
    """A store of Mistral-7B's shape (by default) under
    ``out/attention/synthetic/trained/L{layers}-H{heads}-T{tokens}.zarr``: causal rows (seeded
    random, normalised), float16, the chunks of ``attention.extract``."""
    from attnscope import promptgroup  # torch: only for writing

    path = out / "attention" / "synthetic" / "trained" / f"L{num_layers}-H{num_heads}-T{n}.zarr"
    if (path / "zarr.json").exists():
        return path
    rng = np.random.default_rng(0)
    words = n // 4
    token_word = np.repeat(np.arange(words), 4)
    segment = np.where(token_word < words - 20, store.SHOT_CLUE, store.GENERATED).tolist()
    segment[0] = store.TEMPLATE
    shots = (token_word * 8 // words).tolist()
    metric_names = ["row_entropy", "self_mass", "sink_mass"]
    causal = np.tril(np.ones((n, n), dtype=bool))
    for p in range(prompts):
        directory = path / f"{p:03d}"
        keep_heads = p == 0
        g = max(1, min(num_heads, promptgroup.CHUNK_BYTES // (2 * n * n)))

        def writer(name, shape, chunks, order=None, directory=directory):
            return zarrwrite.ShardWriter(
                directory / name,
                shape,
                "float16",
                chunks,
                promptgroup.COMPRESSOR,
                store.DIMENSIONS[name],
                order,
            )

        head_mean = writer("head_mean", (num_layers, n, n), (1, n, n))
        attn = (
            writer("attn", (num_layers, num_heads, n, n), (1, g, n, n), promptgroup.HEADS_LAST)
            if keep_heads
            else None
        )
        for layer in range(num_layers):
            heads = []
            for _ in range(num_heads if keep_heads else 1):
                logits = rng.standard_normal((n, n), dtype=np.float32) * 2
                weights = np.where(causal, np.exp(logits), 0)
                heads.append((weights / weights.sum(1, keepdims=True)).astype(np.float16))
            head_mean.write((layer, 0, 0), heads[0][None])
            if attn is not None:
                for start in range(0, num_heads, g):
                    attn.write((layer, start // g, 0, 0), np.stack(heads[start : start + g])[None])
        for array in (head_mean, attn):
            if array is not None:
                array.close()
        whole = {
            "cosine": rng.uniform(-1, 1, (n, n)).astype(np.float16),
            "word_attn_sum": rng.uniform(0, 1, (num_layers, words, words)).astype(np.float32),
            "word_attn_mean_query": rng.uniform(0, 1, (num_layers, words, words)).astype(np.float32),
            "thesis_word_attn_sum": rng.uniform(0, 1, (num_layers, words, words)).astype(np.float32),
            "metrics": rng.uniform(0, 1, (num_layers, num_heads + 1, len(metric_names))),
        }
        for name, data in whole.items():
            array = zarrwrite.ShardWriter(
                directory / name,
                data.shape,
                data.dtype.name,
                data.shape,
                promptgroup.COMPRESSOR,
                store.DIMENSIONS[name],
            )
            array.write((0,) * data.ndim, data)
            array.close()
        word_text = [f"w{w}" for w in range(words)]
        word_segment = [segment[4 * w] for w in range(words)]
        zarrwrite.write_zarr_group(
            directory,
            {
                "target": f"T{p}",
                "clue": "synthetic",
                "n_tokens": n,
                "keep_heads": keep_heads,
                "tokens": [f"t{i}" for i in range(n)],
                "token_segment": segment,
                "token_shot": shots,
                "token_word": token_word.tolist(),
                "words": word_text,
                "word_segment": word_segment,
                "word_shot": [shots[4 * w] for w in range(words)],
                "map_words": list(range(words)),
                "thesis_words": word_text,
                "thesis_word_segment": word_segment,
                "thesis_word_shot": [shots[4 * w] for w in range(words)],
                "complete": True,
            },
        )
    zarrwrite.write_zarr_group(
        path,
        {
            "store_version": store.STORE_VERSION,
            "num_layers": num_layers,
            "num_heads": num_heads,
            "kv_head": [h // 4 for h in range(num_heads)],
            "metrics": metric_names,
            "prompts": [
                {"group": f"{p:03d}", "prompt_id": f"synthetic/{p:03d}", "target": f"T{p}"}
                for p in range(prompts)
            ],
        },
    )
    return path


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(results: Path, browser: bool, store_id: str | None = None) -> dict:
    """Start the server on ``results``; time the first map, then layer/head switches of the store
    ``store_id`` (the first one if None): its first prompt that keeps per-head maps."""
    started = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "attnscope.explorer", "explore", str(results), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        base = server.stdout.readline().rsplit(" ", 1)[-1].strip().rstrip("/")
        index = json.loads(get(f"{base}/api/index"))
        entry = next(s for s in index["stores"] if store_id in (None, s["id"]))
        prompts = {}
        for p in entry["prompts"]:
            prompts[p["group"]] = json.loads(get(f"{base}/api/prompt?store={entry['id']}&group={p['group']}"))
            if prompts[p["group"]]["keep_heads"]:
                break
        group = next(g for g in prompts if prompts[g]["keep_heads"]) if prompts else None
        group = group or entry["prompts"][0]["group"]
        get(f"{base}/api/map?store={entry['id']}&group={group}&level=token&layer=0&head=-1")
        first_map = time.perf_counter() - started
        layers, heads = entry["num_layers"], entry["num_heads"]
        views = [
            (s % layers, (s * 7) % heads if prompts[group]["keep_heads"] else -1)
            for s in range(1, SWITCHES + 1)
        ]
        switch, curves = [], []
        for layer, head in views:
            t0 = time.perf_counter()
            get(f"{base}/api/map?store={entry['id']}&group={group}&level=token&layer={layer}&head={head}")
            switch.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            get(f"{base}/api/metrics?store={entry['id']}&group={group}&head={head}")
            curves.append(time.perf_counter() - t0)
        urls = [
            f"{base}/api/map?store={entry['id']}&group={group}&level=token&layer={layer}&head={head}"
            for layer, head in views
        ]
        concurrent = {}
        for clients in CLIENTS:
            seconds = concurrent_requests([urls[i % len(urls)] for i in range(CONCURRENT_REQUESTS)], clients)
            for q in (50, 95):
                concurrent[f"clients{clients}_p{q}_ms"] = round(1000 * float(np.percentile(seconds, q)), 1)
        figures = {
            "store": entry["id"],
            "store_mib": round(
                sum(
                    f.stat().st_size
                    for f in Path(results, "attention", entry["id"] + ".zarr").rglob("*")
                    if f.is_file()
                )
                / 2**20,
                1,
            ),
            "tokens_shown": len(prompts[group]["axes"]["token"]["labels"]),
            "per_head": prompts[group]["keep_heads"],
            "first_map_s": round(first_map, 3),
            "switch_p50_ms": round(1000 * float(np.percentile(switch, 50)), 1),
            "switch_p95_ms": round(1000 * float(np.percentile(switch, 95)), 1),
            "curves_p95_ms": round(1000 * float(np.percentile(curves, 95)), 1),
            **concurrent,
            "server_rss_mib": round(rss_mib(server.pid), 1),
        }
        if browser:
            figures.update(page_timings(base, entry, group, prompts[group]["keep_heads"]))
            figures["server_rss_mib_after_page"] = round(rss_mib(server.pid), 1)
        return figures
    finally:
        server.terminate()
        server.wait(timeout=30)


def concurrent_requests(urls: list[str], clients: int) -> list[float]:
    """The seconds of each request of ``urls``, sent by ``clients`` threads at once."""

    def timed(url: str) -> float:
        t0 = time.perf_counter()
        get(url)
        return time.perf_counter() - t0

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(timed, urls))


def page_timings(base: str, entry: dict, group: str, heads: bool) -> dict:
    """The page's own time per view (requests, decode, canvas draw, metric curves), over alternating
    layer and head switches (layers only where ``group`` keeps no per-head maps) of ``entry``'s
    prompt ``group`` in headless Chromium (``explorerState.timings``); the page's JS heap after them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from tests.test_explorer import browser

    driver = browser()
    try:
        driver.get(base + "/")
        status = driver.find_element("id", "status")
        WebDriverWait(driver, 60).until(lambda _: status.get_attribute("data-ready") != "0")
        for name, value in [
            ("model", entry["model"]),
            ("experiment", entry["experiment"]),
            ("prompt", group),
        ]:
            ready = status.get_attribute("data-ready")
            chosen = Select(driver.find_element("id", name))
            if chosen.first_selected_option.get_attribute("value") != value:
                chosen.select_by_value(value)
                WebDriverWait(driver, 60).until(lambda _, r=ready: status.get_attribute("data-ready") != r)
        before = len(driver.execute_script("return window.explorerState.timings;"))
        known = driver.find_element("id", "problems").text
        layer, head = Select(driver.find_element("id", "layer")), Select(driver.find_element("id", "head"))
        for s in range(SWITCHES):
            chosen = layer if s % 2 == 0 or not heads else head
            current = chosen.options.index(chosen.first_selected_option)
            chosen.select_by_index((current + 1) % len(chosen.options))
            done = str(before + s + 1)
            WebDriverWait(driver, 60).until(lambda _, d=done: status.get_attribute("data-ready") == d)
        problems = driver.find_element("id", "problems").text
        assert problems == known, problems  # no view failed
        timings = driver.execute_script("return window.explorerState.timings;")[before:]
        heap = driver.execute_script("return performance.memory.usedJSHeapSize;")  # Chromium's
    finally:
        driver.quit()
    return {
        "page_view_p50_ms": round(float(np.percentile(timings, 50)), 1),
        "page_view_p95_ms": round(float(np.percentile(timings, 95)), 1),
        "page_js_heap_mib": round(heap / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, help="a finished run's results folder")
    parser.add_argument(
        "--synthetic", type=Path, help="where to write (once) and time the Mistral-shaped store"
    )
    parser.add_argument(
        "--shape",
        default="32,32,1024",
        help="layers,heads,tokens of the --synthetic store (default: Mistral-7B's, %(default)s)",
    )
    parser.add_argument("--store", help="the store of --results to time (model/variant/experiment)")
    parser.add_argument("--browser", action="store_true", help="also time the page in headless Chromium")
    args = parser.parse_args()
    if args.results:
        figures = measure(args.results, args.browser, args.store)
        write(f"explorer-{figures['store'].replace('/', '-')}", {"synthetic": False, **figures})
    if args.synthetic:
        t0 = time.perf_counter()
        num_layers, num_heads, n = (int(v) for v in args.shape.split(","))
        path = write_synthetic(args.synthetic, num_layers, num_heads, n)
        print(f"synthetic store written in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        write(f"explorer-synthetic-{path.stem}", {"synthetic": True, **measure(args.synthetic, args.browser)})


if __name__ == "__main__":
    main()
