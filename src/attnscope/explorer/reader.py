"""The explorer's read side: the attention stores of a results folder, checked when scanned and
read map by map (no sockets here: :mod:`attnscope.explorer.server` serves what this returns).

Every read goes through zarr-python, so a map reads only the inner chunk of the shard file that
holds it (plus the shard's index); a :class:`CountingStore` counts those reads for
``/api/stats`` and turns a chunk that is not there into an error, never zarr's fill value.
Metadata (the stores' ``zarr.json``) is read once and cached. Nothing is written: the stores
are opened read-only.

Each map is of a kind (:data:`attnscope.explorer.kinds.KINDS`): the attention weights, the
value-weighted maps (a store whose value arrays are missing cannot give the kind, and says so), or
the attention rollout, computed here from the head-mean maps (:mod:`attnscope.rollout`). A head's
row of the head table and its head-type scores are read from the heads jobs' Parquet files.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import zarr
import zarr.storage
from zarr.abc.store import SuffixByteRequest

from attnscope import mapdata, paths
from attnscope.chunks import METADATA_KEYS, MissingChunkError, StrictStore, check_chunks
from attnscope.explorer.errors import BadRequest, NotFound, StoreError
from attnscope.explorer.kinds import (
    HEAD_ARRAYS,
    KIND_NAMES,
    KINDS,
    LEVELS,
    METRIC_ARRAYS,
    ROLLOUT_MAPS,
    TOKEN_ARRAYS,
    VALUE_ARRAYS,
    WORD_ARRAYS,
    word_membership,
)
from attnscope.mapview import ATTENTION_CMAP, BOUNDARY_COLOR, COSINE_CMAP, MASK_COLOR, MapAxis
from attnscope.rollout import extend_rollout
from attnscope.store import (
    GENERATED,
    HEAD_MEAN,
    STORE_VERSION,
    pool_words,
    query_word_means,
)
from attnscope.zarrwrite import ZARR_JSON

log = logging.getLogger("attnscope")

STORE_GLOB = paths.ATTENTION_STORE.removeprefix(f"{paths.RESULTS}/").format(
    model="*", variant="*", experiment="*"
)
"""Where the stores lie under a results folder: ``attention/{model}/{variant}/{experiment}.zarr``."""
PARTIAL_GLOB = STORE_GLOB.replace("/*.zarr", "/.*.zarr.partial")
"""An unfinished store (``attention.partial_path``)."""

ROLLOUT_CACHE_BYTES = 256 << 20
"""The rollout products kept for reuse, all stores and prompts together (least recently used dropped)."""
HEAD_FILES = {"table": paths.HEAD_TABLE, "types": paths.HEAD_TYPES}
"""The heads jobs' tables of a model × variant: one row per layer × head."""

GROUP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A prompt group's name in a store's ``prompts`` attribute (``"000"``...): a plain key, never a path."""
RERUN = "delete the store and rerun its extract_attention job (`snakemake --cores 2 attention`)"
HEADS_JOB = "the heads jobs write it (`snakemake --cores 2 heads`) for the variants of spectra.variants"


class CountingStore(StrictStore):
    """A :class:`StrictStore` that counts its reads and their bytes by kind: ``metadata``
    (``zarr.json``), ``index`` (a shard's index, read from its end) and ``chunk`` (an inner chunk or
    a whole chunk file)."""

    def __init__(self, store: zarr.storage.LocalStore, counts: Counter, lock: threading.Lock):
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
        return self.strict(key, byte_range, value)


class ByteLRU:
    """A thread-safe least-recently-used cache of arrays bounded by their bytes (``functools.lru_cache``
    bounds the number of entries only). Cached arrays are made read-only."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.nbytes = max_bytes, 0
        self.items: OrderedDict[Any, np.ndarray] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> np.ndarray | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: Any, value: np.ndarray) -> None:
        if value.nbytes > self.max_bytes:
            return
        value.flags.writeable = False
        with self.lock:
            old = self.items.pop(key, None)
            self.nbytes += value.nbytes - (0 if old is None else old.nbytes)
            self.items[key] = value
            while self.nbytes > self.max_bytes:
                self.nbytes -= self.items.popitem(last=False)[1].nbytes


def value_reason(path: Path, groups: list[str]) -> str | None:
    """Why the store at ``path`` has no value-weighted maps (None: every prompt group holds
    :data:`VALUE_ARRAYS`, as every store of this version does unless arrays were removed)."""
    missing = [
        f"{group}/{name}"
        for group in groups
        for name in VALUE_ARRAYS
        if not (path / group / name / ZARR_JSON).is_file()
    ]
    if not missing:
        return None
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return f"value-weighted arrays missing: {', '.join(missing[:3])}{more}; {RERUN}"


def _json_value(value: Any) -> Any:
    """A table cell as JSON: numpy scalars as Python's, NaN and infinities as null."""
    value = value.item() if isinstance(value, np.generic) else value
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _shown(value: Any) -> str:
    """A stored value in a reason: an integer as itself, anything else by its type only (the
    store's text is never echoed)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return "null" if value is None else f"a {type(value).__name__}"


def check_attrs(attrs: dict[str, Any]) -> str | None:
    """What is wrong with a store's root attributes (None: nothing): this explorer's
    ``store_version``, ``num_layers`` and ``num_heads`` positive integers, ``metrics`` a list of
    names, ``prompts`` a non-empty list of ``{group, target}`` with plain group names."""
    version = attrs.get("store_version")
    if version != STORE_VERSION:
        return f"store version {_shown(version)}, this explorer reads version {STORE_VERSION}"
    for key in ("num_layers", "num_heads", "metrics", "prompts"):
        if key not in attrs:
            return f"attribute {key!r} missing"
    for key in ("num_layers", "num_heads"):
        if not _is_count(attrs[key]):
            return f"attribute {key!r} is {_shown(attrs[key])}, not a positive integer"
    metrics, prompts = attrs["metrics"], attrs["prompts"]
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        return f"attribute 'metrics' is a {type(metrics).__name__}, not a list of names"
    if not isinstance(prompts, list) or not prompts:
        return f"attribute 'prompts' is a {type(prompts).__name__}, not a non-empty list"
    for i, entry in enumerate(prompts):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("group"), str)
            and GROUP_NAME.fullmatch(entry["group"])
            and isinstance(entry.get("target"), str)
        ):
            return f"prompts[{i}] is not {{group: a plain name, target: a word}}"
    return None


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
    missing_kinds: dict[str, str] = field(default_factory=dict)
    """The kinds of :data:`KINDS` the store cannot give, with the reason."""

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
            "kinds": [kind for kind in KINDS if kind not in self.missing_kinds],
            "kinds_unavailable": self.missing_kinds,
        }

    def check_kind(self, kind: str) -> None:
        """Raise :class:`BadRequest` for a kind not in :data:`KINDS`, :class:`NotFound` with the reason
        for one this store cannot give."""
        if kind not in KINDS:
            raise BadRequest(f"kind={kind!r} unknown; valid: {', '.join(KINDS)}")
        if kind in self.missing_kinds:
            raise NotFound(f"{self.id}: {KIND_NAMES[kind]} not available: {self.missing_kinds[kind]}")

    def check_range(self, name: str, value: int, top: int, head_mean: bool = False) -> None:
        """Raise :class:`BadRequest` naming ``name`` and its range unless ``0 <= value < top``
        (or ``value`` is :data:`HEAD_MEAN` where ``head_mean``)."""
        if 0 <= value < top or (head_mean and value == HEAD_MEAN):
            return
        mean = f", or {HEAD_MEAN} for the head mean" if head_mean else ""
        raise BadRequest(f"{self.id}: {name}={value} out of range; valid: 0..{top - 1}{mean}")


def _axis_json(axis: MapAxis) -> dict[str, Any]:
    return {
        "labels": list(axis.labels),
        "segment": [str(s) for s in axis.segment],
        "shot": [int(s) for s in axis.shot],
        "boundaries": axis.boundaries(),
    }


class StoreReader:
    """The stores under ``results`` and the maps read from them (thread-safe reads)."""

    def __init__(self, results: str | os.PathLike, color_max: dict[str, float | None] | None = None):
        self.results = Path(results)
        self.color_max = color_max or {"token": None, "word": None}
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        self.problems: list[str] = []
        self.unavailable: list[dict[str, str]] = []
        self.stores: dict[str, StoreEntry] = {}
        self.rollouts = ByteLRU(ROLLOUT_CACHE_BYTES)
        self.tables: dict[Path, tuple[tuple[int, int], pd.DataFrame]] = {}
        self._scan()

    def _problem(self, text: str, error: Exception | None = None) -> None:
        """A problem of the results folder: in the index (the page shows it) and on the terminal,
        there with the ``error`` behind it (its text can quote a file's bytes: never in the index)."""
        self.problems.append(text)
        detail = "" if error is None else f" ({type(error).__name__}: {error})"
        log.warning("attnscope explore: %s%s", text, detail)

    def _skip(self, path: Path, reason: str, error: Exception | None = None) -> None:
        """Leave a store out, with its reason in the problems and the index's ``unavailable``."""
        self.unavailable.append({"path": str(path), "reason": reason})
        self._problem(f"{path}: {reason}; {RERUN}", error)

    def _open(self, path: Path) -> StoreEntry | None:
        """The store at ``path`` if it opens and its attributes pass :func:`check_attrs`, else None."""
        try:
            root = zarr.open_group(
                CountingStore(zarr.storage.LocalStore(path, read_only=True), self.counts, self.lock),
                mode="r",
            )
            attrs = root.attrs.asdict()
        except Exception as err:  # any malformed zarr.json: zarr raises many types; the store is skipped
            metadata = path / ZARR_JSON
            name = metadata.relative_to(self.results)
            what = f"{name} is not valid Zarr v3 group metadata" if metadata.is_file() else f"no {name}"
            self._skip(path, f"not a readable Zarr group: {what} ({type(err).__name__})", err)
            return None
        reason = check_attrs(attrs)
        if reason is not None:
            self._skip(path, reason)
            return None
        experiment, variant, model = path.stem, path.parent.name, path.parent.parent.name
        entry = StoreEntry(f"{model}/{variant}/{experiment}", path, model, variant, experiment, attrs, root)
        reason = value_reason(path, [prompt["group"] for prompt in attrs["prompts"]])
        if reason is not None:
            entry.missing_kinds["value"] = entry.missing_kinds["value_rollout"] = reason
        return entry

    def _scan(self) -> None:
        if not (self.results / "attention").is_dir():
            self._problem(
                f"{self.results}: no attention stores (no folder {self.results / 'attention'}); "
                "run `snakemake --cores 2 attention` first, or pass the run's results folder"
            )
            return
        for partial in sorted(self.results.glob(PARTIAL_GLOB)):
            self._problem(
                f"{partial}: a store still being written (or left by a killed job); it appears when "
                "its extract_attention job finishes"
            )
        entries = [entry for path in sorted(self.results.glob(STORE_GLOB)) if (entry := self._open(path))]
        order = sorted(entries, key=lambda e: (e.model, e.experiment, e.variant != "trained"))
        self.stores = {entry.id: entry for entry in order}  # trained first
        if not self.stores and not self.problems:
            self._problem(
                f"{self.results}: no attention stores under {self.results / STORE_GLOB}; "
                "run `snakemake --cores 2 attention` first"
            )

    def index(self) -> dict[str, Any]:
        """The stores, their prompts (group, prompt id, target), layers, heads, metrics and map kinds;
        the store version read; the problems found and the stores left out; the colour-scale defaults."""
        return {
            "store_version": STORE_VERSION,
            "results": str(self.results),
            "problems": self.problems,
            "unavailable": self.unavailable,
            "stores": [entry.summary() for entry in self.stores.values()],
            "levels": list(LEVELS),
            "kinds": list(KINDS),
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
            raise NotFound(f"no store {store_id!r} (stores: {', '.join(self.stores) or 'none'})")
        return self.stores[store_id]

    def _prompt(self, entry: StoreEntry, group: str) -> mapdata.PromptMaps:
        with self.lock:
            cached = entry.prompts.get(group)
        if cached is not None:
            return cached
        targets = {p["group"]: p["target"] for p in entry.attrs["prompts"]}
        if group not in targets:
            raise NotFound(f"{entry.id}: no prompt group {group!r} (groups: {', '.join(targets)})")
        try:
            maps = mapdata.prompt_maps(entry.root, targets[group], entry.path)
        except Exception as err:  # a removed store or a malformed prompt group: zarr raises many types
            raise StoreError(
                f"{entry.id}: prompt group {group!r} unreadable ({type(err).__name__}); {RERUN}"
            ) from err
        with self.lock:
            entry.prompts[group] = maps
        return maps

    def _array(self, entry: StoreEntry, group: str, name: str) -> zarr.Array:
        """The array ``name`` of a prompt group, its chunks checked once (:func:`check_chunks`)."""
        key = (group, name)
        with self.lock:
            array = entry.arrays.get(key)
        if array is None:
            prompt = self._prompt(entry, group)
            if name in HEAD_ARRAYS and not prompt.group.attrs.get("keep_heads"):
                raise NotFound(f"{entry.id}/{group}: no array {name!r} (the prompt keeps no heads)")
            array = self._checked(entry, group, name, lambda: prompt.group[name])
            self._checked(entry, group, name, lambda: check_chunks(array, entry.path / group / name))
            with self.lock:
                entry.arrays[key] = array
        return array

    @staticmethod
    def _checked(entry: StoreEntry, group: str, name: str, read: Callable[[], Any]) -> Any:
        """``read()``, a failure of it as a :class:`StoreError` naming the store and array (the
        exception's type only: a corrupt chunk's bytes are never echoed)."""
        try:
            return read()
        except MissingChunkError as err:
            raise StoreError(f"{entry.id}: array {group}/{name}: missing data ({err})") from err
        except Exception as err:  # zarr and its codecs raise many types on corrupt bytes
            raise StoreError(
                f"{entry.id}: array {group}/{name}: unreadable ({type(err).__name__}); {RERUN}"
            ) from err

    def _read(self, entry: StoreEntry, group: str, name: str, selection: Any) -> np.ndarray:
        array = self._array(entry, group, name)
        return self._checked(entry, group, name, lambda: np.asarray(array[selection]))

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

    def map(
        self, store_id: str, group: str, level: str, layer: int, head: int, kind: str = "weights"
    ) -> np.ndarray:
        """One map [query, key] of ``kind`` as float32: the stored values over the level's axis (token
        maps over the figures' plotted tokens); a word level the kind does not store is its token
        map (head mean) pooled as the stored word maps are (:func:`attnscope.store.pool_words`)."""
        entry = self._store(store_id)
        if level not in LEVELS:
            raise BadRequest(f"level={level!r} unknown; valid: {', '.join(LEVELS)}")
        entry.check_range("layer", layer, entry.attrs["num_layers"])
        entry.check_range("head", head, entry.attrs["num_heads"], head_mean=True)
        entry.check_kind(kind)
        maps = self._prompt(entry, group)
        if level == "cosine":
            if kind != "weights":
                raise BadRequest(f"kind={kind}: the input-embedding cosine (level=cosine) has no kinds")
            values = maps.plotted(self._read(entry, group, "cosine", ...))
        elif kind in ROLLOUT_MAPS and head != HEAD_MEAN:
            raise BadRequest(f"head={head}: the rollout is of the head-mean maps only ({HEAD_MEAN})")
        elif level == "token":
            values = maps.plotted(self._token_map(entry, group, kind, layer, head))
        elif head != HEAD_MEAN:
            raise BadRequest(f"head={head}: word-level maps are stored for the head mean only ({HEAD_MEAN})")
        elif level in WORD_ARRAYS.get(kind, {}):
            values = self._read(entry, group, WORD_ARRAYS[kind][level], layer)
        else:
            membership = word_membership(maps.group.attrs, level)
            token_map = self._token_map(entry, group, kind, layer, HEAD_MEAN)
            values = pool_words(token_map, membership)
            if level == "word_mean":
                values = query_word_means(values, membership)
        return np.ascontiguousarray(values, dtype="<f4")

    def _token_map(self, entry: StoreEntry, group: str, kind: str, layer: int, head: int) -> np.ndarray:
        """A map [query, key] of ``kind`` over all the prompt's tokens (``head`` or the head mean)."""
        if kind in ROLLOUT_MAPS:
            return self._rollout(entry, group, layer, ROLLOUT_MAPS[kind])
        mean, heads = TOKEN_ARRAYS[kind]
        if head == HEAD_MEAN:
            return self._read(entry, group, mean, layer)
        return self._read(entry, group, heads, (layer, head))

    def _rollout(self, entry: StoreEntry, group: str, layer: int, array: str) -> np.ndarray:
        """The rollout R_layer [query, key] of a prompt's head-mean maps ``array`` over all its tokens
        (float64), continued from the deepest cached layer at or below ``layer``: reads the chunks of
        the layers after it, one at a time, and caches each layer's product."""
        start, product = -1, None
        for cached in range(layer, -1, -1):
            product = self.rollouts.get((entry.id, group, array, cached))
            if product is not None:
                start = cached
                break
        for step in range(start + 1, layer + 1):
            product = extend_rollout(self._read(entry, group, array, step)[None], product)
            self.rollouts.put((entry.id, group, array, step), product)
        return product

    def difference(
        self,
        store_id: str,
        base_id: str,
        group: str,
        level: str,
        layer: int,
        head: int,
        kind: str = "weights",
    ) -> tuple[np.ndarray, int]:
        """``store_id``'s map of ``kind`` minus ``base_id``'s over the positions both prompts share
        (the prompt before the generated clue, which differs between variants); returns (map, size)."""
        maps = [self.map(s, group, level, layer, head, kind) for s in (store_id, base_id)]
        axes = [self.prompt(s, group)["axes"][level] for s in (store_id, base_id)]
        shared = [sum(1 for s in axis["segment"] if s != GENERATED) for axis in axes]
        if shared[0] != shared[1] or axes[0]["labels"][: shared[0]] != axes[1]["labels"][: shared[1]]:
            raise BadRequest(f"{store_id} and {base_id}: prompt {group} differs before the generated clue")
        n = shared[0]
        return np.ascontiguousarray(maps[0][:n, :n] - maps[1][:n, :n]), n

    def metrics(self, store_id: str, group: str, head: int, kind: str = "weights") -> dict[str, Any]:
        """The per-layer metric curves of one prompt's map of ``kind`` (``head`` or the head mean)."""
        entry = self._store(store_id)
        num_heads = entry.attrs["num_heads"]
        entry.check_range("head", head, num_heads, head_mean=True)
        entry.check_kind(kind)
        if kind not in METRIC_ARRAYS:
            valid = ", ".join(METRIC_ARRAYS)
            raise BadRequest(f"kind={kind}: no stored metrics (computed on demand); valid: {valid}")
        column = num_heads if head == HEAD_MEAN else head
        selection = (slice(None), column, slice(None))
        values = self._read(entry, group, METRIC_ARRAYS[kind], selection).astype(float)
        return {
            "kind": kind,
            "metrics": list(entry.attrs["metrics"]),
            "values": [[None if np.isnan(v) else float(v) for v in row] for row in values],
        }

    def head(self, store_id: str, layer: int, head: int) -> dict[str, Any]:
        """One head's row of the store's model × variant head table (``table``) and head types
        (``types``): each its file's ``path``, the ``row`` (column: value; None where the file or
        the row is absent) and a ``note`` saying what is absent."""
        entry = self._store(store_id)
        entry.check_range("layer", layer, entry.attrs["num_layers"])
        entry.check_range("head", head, entry.attrs["num_heads"])
        answer: dict[str, Any] = {"store": store_id, "layer": layer, "head": head}
        for name, pattern in HEAD_FILES.items():
            relative = pattern.removeprefix(f"{paths.RESULTS}/")
            path = self.results / relative.format(model=entry.model, variant=entry.variant)
            answer[name] = self._head_row(path, layer, head)
        return answer

    def _head_row(self, path: Path, layer: int, head: int) -> dict[str, Any]:
        """A head's row of the table at ``path``: ``path``, ``row`` and ``note`` of :meth:`head`."""
        table = self._table(path)
        if table is None:
            return {"path": str(path), "row": None, "note": f"no file {path}; {HEADS_JOB}"}
        rows = table[(table["layer"] == layer) & (table["head"] == head)]
        if rows.empty:
            return {"path": str(path), "row": None, "note": f"{path}: no row for layer {layer}, head {head}"}
        row = {column: _json_value(value) for column, value in rows.iloc[0].items()}
        return {"path": str(path), "row": row, "note": None}

    def _table(self, path: Path) -> pd.DataFrame | None:
        """The Parquet table at ``path`` (None: no such file), cached until the file changes."""
        if not path.is_file():
            return None
        stat = path.stat()
        signature = (stat.st_mtime_ns, stat.st_size)
        with self.lock:
            cached = self.tables.get(path)
        if cached is not None and cached[0] == signature:
            return cached[1]
        try:
            table = pd.read_parquet(path)
        except Exception as err:  # pyarrow raises many types on a damaged file
            raise StoreError(f"{path}: unreadable Parquet ({type(err).__name__}); {HEADS_JOB}") from err
        if not {"layer", "head"} <= set(table.columns):
            raise StoreError(f"{path}: no columns 'layer' and 'head'; {HEADS_JOB}")
        with self.lock:
            self.tables[path] = (signature, table)
        return table


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
