"""The explorer's read side and HTTP server: the attention stores of a results folder, served
map by map.

Every request reads through zarr-python, so a map reads only the inner chunk of the shard file
that holds it (plus the shard's index); a :class:`CountingStore` counts those reads for
``/api/stats``. Metadata (the stores' ``zarr.json``) is read once and cached. Nothing is
written: the stores are opened read-only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np
import zarr
import zarr.storage
from zarr.abc.store import SuffixByteRequest

from attnscope import mapdata
from attnscope.mapview import ATTENTION_CMAP, BOUNDARY_COLOR, COSINE_CMAP, MASK_COLOR, MapAxis
from attnscope.store import GENERATED, HEAD_MEAN, STORE_VERSION

log = logging.getLogger("attnscope")

STORE_GLOB = "attention/*/*/*.zarr"
"""Where the stores lie under a results folder: ``attention/{model}/{variant}/{experiment}.zarr``."""
PARTIAL_GLOB = "attention/*/*/.*.zarr.partial"
"""An unfinished store (``attention.partial_path``)."""

LEVELS = ("token", "word", "word_mean", "thesis_word", "cosine")
"""Map levels: tokens (``attn``/``head_mean``), words summed over subword pairs (``word_attn_sum``),
words averaged over the query word's tokens (``word_attn_mean_query``), the thesis's words
(``thesis_word_attn_sum``), and the input-embedding cosine."""
WORD_ARRAYS = {
    "word": "word_attn_sum",
    "word_mean": "word_attn_mean_query",
    "thesis_word": "thesis_word_attn_sum",
}


METADATA_KEYS = ("zarr.json", ".zgroup", ".zattrs", ".zarray", ".zmetadata")
"""Metadata documents (zarr v3's, and v2's that zarr-python probes when opening a group)."""


class CountingStore(zarr.storage.WrapperStore):
    """A store that counts its reads and their bytes by kind: ``metadata`` (``zarr.json``), ``index``
    (a shard's index, read from its end) and ``chunk`` (an inner chunk or a whole chunk file)."""

    def __init__(self, store: zarr.abc.store.Store, counts: Counter, lock: threading.Lock):
        super().__init__(store)
        self.counts, self.lock = counts, lock

    async def get(self, key: str, prototype, byte_range=None):  # noqa: ANN001 (zarr's signature)
        if key.rsplit("/", 1)[-1] in METADATA_KEYS:
            kind = "metadata"
        elif isinstance(byte_range, SuffixByteRequest):
            kind = "index"
        else:
            kind = "chunk"
        value = await self._store.get(key, prototype, byte_range)
        with self.lock:
            self.counts[kind] += 1
            self.counts[f"{kind}_bytes"] += 0 if value is None else len(value)
        return value


class ExplorerError(Exception):
    """A request the stores cannot answer (unknown store, prompt, layer...): HTTP 404 with its message."""


@dataclass
class StoreEntry:
    """One store of the results folder and the arrays opened from it (cached)."""

    id: str
    path: Path
    model: str
    variant: str
    experiment: str
    attrs: dict[str, Any]
    root: zarr.Group
    arrays: dict[tuple[str, str], zarr.Array] = field(default_factory=dict)
    prompts: dict[str, mapdata.PromptMaps] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The store as the index lists it."""
        return {
            "id": self.id,
            "model": self.model,
            "variant": self.variant,
            "experiment": self.experiment,
            "num_layers": self.attrs["num_layers"],
            "num_heads": self.attrs["num_heads"],
            "metrics": self.attrs["metrics"],
            "prompts": self.attrs["prompts"],
            "k": self.attrs.get("k"),
            "category": self.attrs.get("category"),
        }


def _axis_json(axis: MapAxis) -> dict[str, Any]:
    return {
        "labels": list(axis.labels),
        "segment": [str(s) for s in axis.segment],
        "shot": [int(s) for s in axis.shot],
        "boundaries": axis.boundaries(),
    }


class Explorer:
    """The stores under ``results`` and the maps read from them (thread-safe reads)."""

    def __init__(self, results: str | os.PathLike, color_max: dict[str, float | None] | None = None):
        self.results = Path(results)
        self.color_max = color_max or {"token": None, "word": None}
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        self.problems: list[str] = []
        self.stores: dict[str, StoreEntry] = {}
        self._scan()

    def _scan(self) -> None:
        if not (self.results / "attention").is_dir():
            self.problems.append(
                f"{self.results}: no attention stores (no folder {self.results / 'attention'}); "
                "run `snakemake --cores 2 attention` first, or pass the run's results folder"
            )
            return
        for partial in sorted(self.results.glob(PARTIAL_GLOB)):
            self.problems.append(
                f"{partial}: a store still being written (or left by a killed job); it appears when "
                "its extract_attention job finishes"
            )
        for path in sorted(self.results.glob(STORE_GLOB)):
            try:
                root = zarr.open_group(
                    CountingStore(zarr.storage.LocalStore(path, read_only=True), self.counts, self.lock),
                    mode="r",
                )
                attrs = dict(root.attrs)
            except (FileNotFoundError, ValueError, KeyError, zarr.errors.NodeTypeValidationError) as err:
                self.problems.append(f"{path}: not a readable Zarr store ({err})")
                continue
            version = attrs.get("store_version")
            if version != STORE_VERSION:
                self.problems.append(
                    f"{path}: store version {version}, this explorer reads version {STORE_VERSION}; "
                    "rerun its extract_attention job (delete the store, then `snakemake attention`)"
                )
                continue
            experiment, variant, model = path.stem, path.parent.name, path.parent.parent.name
            store_id = f"{model}/{variant}/{experiment}"
            self.stores[store_id] = StoreEntry(store_id, path, model, variant, experiment, attrs, root)
        order = sorted(self.stores.values(), key=lambda e: (e.model, e.experiment, e.variant != "trained"))
        self.stores = {entry.id: entry for entry in order}  # trained first
        if not self.stores and not self.problems:
            self.problems.append(
                f"{self.results}: no attention stores under {self.results / STORE_GLOB}; "
                "run `snakemake --cores 2 attention` first"
            )

    def index(self) -> dict[str, Any]:
        """The stores, their prompts (group, prompt id, target), layers, heads and metrics; the
        store version read; the problems found; the colour-scale defaults."""
        return {
            "store_version": STORE_VERSION,
            "results": str(self.results),
            "problems": self.problems,
            "stores": [entry.summary() for entry in self.stores.values()],
            "levels": list(LEVELS),
            "color_max": self.color_max,
            "head_mean": HEAD_MEAN,
            "colors": colors(),
        }

    def stats(self, reset: bool = False) -> dict[str, int]:
        """Reads since the start or the last reset, by kind (:class:`CountingStore`)."""
        with self.lock:
            kinds = ("metadata", "index", "chunk")
            counts = {key: self.counts[key] for kind in kinds for key in (kind, f"{kind}_bytes")}
            if reset:
                self.counts.clear()
        return counts

    def _store(self, store_id: str) -> StoreEntry:
        if store_id not in self.stores:
            raise ExplorerError(f"no store {store_id!r} (stores: {', '.join(self.stores) or 'none'})")
        return self.stores[store_id]

    def _prompt(self, entry: StoreEntry, group: str) -> mapdata.PromptMaps:
        with self.lock:
            cached = entry.prompts.get(group)
        if cached is not None:
            return cached
        targets = {p["group"]: p["target"] for p in entry.attrs["prompts"]}
        if group not in targets:
            raise ExplorerError(f"{entry.id}: no prompt group {group!r} (groups: {', '.join(targets)})")
        maps = mapdata.read_prompt_maps(entry.path, targets[group])
        maps.group = entry.root[group]  # reads through the counting store
        with self.lock:
            entry.prompts[group] = maps
        return maps

    def _array(self, entry: StoreEntry, group: str, name: str) -> zarr.Array:
        key = (group, name)
        with self.lock:
            array = entry.arrays.get(key)
        if array is None:
            prompt = self._prompt(entry, group)
            if name not in prompt.group:
                raise ExplorerError(f"{entry.id}/{group}: no array {name!r} (the prompt keeps no heads)")
            array = prompt.group[name]
            with self.lock:
                entry.arrays[key] = array
        return array

    def prompt(self, store_id: str, group: str) -> dict[str, Any]:
        """One prompt's labels: the axes of each level (labels, segments, shots, boundaries), the
        token texts for the text view, whether heads are kept."""
        entry = self._store(store_id)
        maps = self._prompt(entry, group)
        attrs = maps.group.attrs
        return {
            "store": store_id,
            "group": group,
            "target": maps.target,
            "clue": maps.clue,
            "keep_heads": bool(attrs.get("keep_heads")),
            "n_tokens": int(attrs["n_tokens"]),
            "axes": {
                "token": _axis_json(maps.tokens),
                "word": _axis_json(maps.words),
                "word_mean": _axis_json(maps.words),
                "thesis_word": _axis_json(maps.thesis_words),
                "cosine": _axis_json(maps.tokens),
            },
            "token_index": maps.token_index.tolist(),
        }

    def map(self, store_id: str, group: str, level: str, layer: int, head: int) -> np.ndarray:
        """One map [query, key] as float32: the stored values over the level's axis (token maps
        over the figures' plotted tokens)."""
        entry = self._store(store_id)
        if level not in LEVELS:
            raise ExplorerError(f"unknown level {level!r} (levels: {', '.join(LEVELS)})")
        num_layers, num_heads = entry.attrs["num_layers"], entry.attrs["num_heads"]
        if not 0 <= layer < num_layers:
            raise ExplorerError(f"{store_id}: layer {layer} out of range 0..{num_layers - 1}")
        if head != HEAD_MEAN and not 0 <= head < num_heads:
            raise ExplorerError(f"{store_id}: head {head} out of range 0..{num_heads - 1} (or {HEAD_MEAN})")
        keep = self._prompt(entry, group).token_index
        if level == "cosine":
            values = self._array(entry, group, "cosine")[...][np.ix_(keep, keep)]
        elif level == "token" and head == HEAD_MEAN:
            values = self._array(entry, group, "head_mean")[layer][np.ix_(keep, keep)]
        elif level == "token":
            values = self._array(entry, group, "attn")[layer, head][np.ix_(keep, keep)]
        elif head != HEAD_MEAN:
            raise ExplorerError(f"word-level maps are stored for the head mean only (head {HEAD_MEAN})")
        else:
            values = self._array(entry, group, WORD_ARRAYS[level])[layer]
        return np.ascontiguousarray(values, dtype="<f4")

    def difference(
        self, store_id: str, base_id: str, group: str, level: str, layer: int, head: int
    ) -> tuple[np.ndarray, int]:
        """``store_id``'s map minus ``base_id``'s over the positions both prompts share (the prompt
        before the generated clue, which differs between variants); returns (map, size)."""
        maps = [self.map(s, group, level, layer, head) for s in (store_id, base_id)]
        axes = [self.prompt(s, group)["axes"][level] for s in (store_id, base_id)]
        shared = [sum(1 for s in axis["segment"] if s != GENERATED) for axis in axes]
        if shared[0] != shared[1] or axes[0]["labels"][: shared[0]] != axes[1]["labels"][: shared[1]]:
            raise ExplorerError(f"{store_id} and {base_id}: prompt {group} differs before the generated clue")
        n = shared[0]
        return np.ascontiguousarray(maps[0][:n, :n] - maps[1][:n, :n]), n

    def metrics(self, store_id: str, group: str, head: int) -> dict[str, Any]:
        """The per-layer metric curves of one prompt's map (``head`` or the head mean)."""
        entry = self._store(store_id)
        array = self._array(entry, group, "metrics")
        column = entry.attrs["num_heads"] if head == HEAD_MEAN else head
        values = np.asarray(array[:, column, :], dtype=float)
        return {
            "metrics": list(entry.attrs["metrics"]),
            "values": [[None if np.isnan(v) else float(v) for v in row] for row in values],
        }


@cache
def colors() -> dict[str, Any]:
    """The figures' colours for the page's canvas maps: 256-entry RGB tables of their colormaps
    (attention; cosine and differences), the masked triangle and the boundary lines."""
    import matplotlib as mpl

    def table(name: str) -> list[list[int]]:
        return mpl.colormaps[name](np.linspace(0, 1, 256), bytes=True)[:, :3].tolist()

    return {
        "attention": table(ATTENTION_CMAP),
        "diverging": table(COSINE_CMAP),
        "mask": MASK_COLOR,
        "boundary": BOUNDARY_COLOR,
    }


def _static(name: str) -> bytes:
    return resources.files("attnscope.explorer").joinpath("static", name).read_bytes()


@cache
def plotly_js() -> bytes:
    """plotly.js as the ``plotly`` Python package ships it (no CDN, no copy in this repo)."""
    return resources.files("plotly").joinpath("package_data", "plotly.min.js").read_bytes()


CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}


def make_handler(explorer: Explorer) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``explorer`` (GET only: the server never writes)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "attnscope-explorer"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            log.debug("%s " + format, self.address_string(), *args)

        def _send(self, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, obj: Any) -> None:
            self._send(json.dumps(obj, allow_nan=False).encode(), "application/json")

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            try:
                self._route(url.path, query)
            except ExplorerError as err:
                self.send_error(HTTPStatus.NOT_FOUND, explain=str(err))
            except (KeyError, ValueError) as err:
                self.send_error(HTTPStatus.BAD_REQUEST, explain=f"bad request {self.path}: {err}")

        def _route(self, path: str, q: dict[str, str]) -> None:
            if path in ("/", "/index.html"):
                self._send(_static("index.html"), CONTENT_TYPES[".html"])
            elif path == "/static/plotly.min.js":
                self._send(plotly_js(), CONTENT_TYPES[".js"], {"Cache-Control": "max-age=86400"})
            elif path.startswith("/static/") and Path(path).name in ("app.js", "style.css"):
                self._send(_static(Path(path).name), CONTENT_TYPES[Path(path).suffix])
            elif path == "/favicon.ico":
                self.send_response(HTTPStatus.NO_CONTENT)
                self.end_headers()
            elif path == "/api/index":
                self._json(explorer.index())
            elif path == "/api/stats":
                self._json(explorer.stats(reset=q.get("reset") == "1"))
            elif path == "/api/prompt":
                self._json(explorer.prompt(q["store"], q["group"]))
            elif path == "/api/metrics":
                self._json(explorer.metrics(q["store"], q["group"], int(q.get("head", HEAD_MEAN))))
            elif path == "/api/map":
                args = (q["group"], q["level"], int(q["layer"]), int(q.get("head", HEAD_MEAN)))
                if q.get("minus"):
                    values, _ = explorer.difference(q["store"], q["minus"], *args)
                else:
                    values = explorer.map(q["store"], *args)
                headers = {"X-Shape": ",".join(map(str, values.shape))}
                self._send(values.tobytes(), "application/octet-stream", headers)
            else:
                raise ExplorerError(f"no such page {path}")

    return Handler


def make_server(explorer: Explorer, host: str = "127.0.0.1", port: int = 8765) -> ThreadingHTTPServer:
    """The HTTP server over ``explorer`` (``port`` 0: a free port); call ``serve_forever``."""
    server = ThreadingHTTPServer((host, port), make_handler(explorer))
    server.daemon_threads = True
    return server
