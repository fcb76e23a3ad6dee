"""The explorer's read side: the attention stores of a results folder, checked when scanned and
read map by map (no sockets here: :mod:`attnscope.explorer.server` serves what this returns).

Every read goes through zarr-python, so a map reads only the inner chunk of the shard file that
holds it (plus the shard's index); a :class:`CountingStore` counts those reads for
``/api/stats`` and turns a chunk that is not there into an error, never zarr's fill value.
Metadata (the stores' ``zarr.json``) is read once and cached. Nothing is written: the stores
are opened read-only.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.storage
from zarr.abc.store import SuffixByteRequest

from attnscope import mapdata, paths
from attnscope.chunks import METADATA_KEYS, MissingChunkError, StrictStore, check_chunks
from attnscope.mapview import ATTENTION_CMAP, BOUNDARY_COLOR, COSINE_CMAP, MASK_COLOR, MapAxis
from attnscope.store import GENERATED, HEAD_MEAN, STORE_VERSION

log = logging.getLogger("attnscope")

STORE_GLOB = paths.ATTENTION_STORE.removeprefix(f"{paths.RESULTS}/").format(
    model="*", variant="*", experiment="*"
)
"""Where the stores lie under a results folder: ``attention/{model}/{variant}/{experiment}.zarr``."""
PARTIAL_GLOB = STORE_GLOB.replace("/*.zarr", "/.*.zarr.partial")
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

GROUP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A prompt group's name in a store's ``prompts`` attribute (``"000"``...): a plain key, never a path."""
RERUN = "delete the store and rerun its extract_attention job (`snakemake --cores 2 attention`)"


class ExplorerError(Exception):
    """A request the stores cannot answer, with the HTTP status it is answered with."""

    status = 500


class BadRequest(ExplorerError):
    """A malformed request: a missing or invalid parameter, a value out of its range (HTTP 400)."""

    status = 400


class NotFound(ExplorerError):
    """An unknown store, prompt, array or page (HTTP 404)."""

    status = 404


class StoreError(ExplorerError):
    """A store that cannot give the data it promises: a missing, truncated or corrupt chunk, or a
    store removed while serving (HTTP 500)."""


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


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_attrs(attrs: dict[str, Any]) -> str | None:
    """What is wrong with a store's root attributes (None: nothing): this explorer's
    ``store_version``, ``num_layers`` and ``num_heads`` positive integers, ``metrics`` a list of
    names, ``prompts`` a non-empty list of ``{group, target}`` with plain group names."""
    version = attrs.get("store_version")
    if version != STORE_VERSION:
        return f"store version {version}, this explorer reads version {STORE_VERSION}"
    for key in ("num_layers", "num_heads", "metrics", "prompts"):
        if key not in attrs:
            return f"attribute {key!r} missing"
    for key in ("num_layers", "num_heads"):
        if not _is_count(attrs[key]):
            return f"attribute {key!r} is {attrs[key]!r}, not a positive integer"
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
        self._scan()

    def _problem(self, text: str) -> None:
        """A problem of the results folder: in the index (the page shows it) and on the terminal."""
        self.problems.append(text)
        log.warning("attnscope explore: %s", text)

    def _skip(self, path: Path, reason: str) -> None:
        """Leave a store out, with its reason in the problems and the index's ``unavailable``."""
        self.unavailable.append({"path": str(path), "reason": reason})
        self._problem(f"{path}: {reason}; {RERUN}")

    def _open(self, path: Path) -> StoreEntry | None:
        """The store at ``path`` if it opens and its attributes pass :func:`check_attrs`, else None."""
        try:
            root = zarr.open_group(
                CountingStore(zarr.storage.LocalStore(path, read_only=True), self.counts, self.lock),
                mode="r",
            )
            attrs = root.attrs.asdict()
        except Exception as err:  # any malformed zarr.json: zarr raises many types; the store is skipped
            self._skip(path, f"not a readable Zarr group ({type(err).__name__}: {str(err)[:200]})")
            return None
        reason = check_attrs(attrs)
        if reason is not None:
            self._skip(path, reason)
            return None
        experiment, variant, model = path.stem, path.parent.name, path.parent.parent.name
        return StoreEntry(f"{model}/{variant}/{experiment}", path, model, variant, experiment, attrs, root)

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
        """The stores, their prompts (group, prompt id, target), layers, heads and metrics; the
        store version read; the problems found and the stores left out; the colour-scale defaults."""
        return {
            "store_version": STORE_VERSION,
            "results": str(self.results),
            "problems": self.problems,
            "unavailable": self.unavailable,
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
            maps = mapdata.read_prompt_maps(entry.path, targets[group])
            maps.group = entry.root[group]  # reads through the counting store
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
            if name == "attn" and not prompt.group.attrs.get("keep_heads"):
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

    def map(self, store_id: str, group: str, level: str, layer: int, head: int) -> np.ndarray:
        """One map [query, key] as float32: the stored values over the level's axis (token maps
        over the figures' plotted tokens)."""
        entry = self._store(store_id)
        if level not in LEVELS:
            raise BadRequest(f"level={level!r} unknown; valid: {', '.join(LEVELS)}")
        entry.check_range("layer", layer, entry.attrs["num_layers"])
        entry.check_range("head", head, entry.attrs["num_heads"], head_mean=True)
        keep = self._prompt(entry, group).token_index
        if level == "cosine":
            values = self._read(entry, group, "cosine", ...)[np.ix_(keep, keep)]
        elif level == "token" and head == HEAD_MEAN:
            values = self._read(entry, group, "head_mean", layer)[np.ix_(keep, keep)]
        elif level == "token":
            values = self._read(entry, group, "attn", (layer, head))[np.ix_(keep, keep)]
        elif head != HEAD_MEAN:
            raise BadRequest(f"head={head}: word-level maps are stored for the head mean only ({HEAD_MEAN})")
        else:
            values = self._read(entry, group, WORD_ARRAYS[level], layer)
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
            raise BadRequest(f"{store_id} and {base_id}: prompt {group} differs before the generated clue")
        n = shared[0]
        return np.ascontiguousarray(maps[0][:n, :n] - maps[1][:n, :n]), n

    def metrics(self, store_id: str, group: str, head: int) -> dict[str, Any]:
        """The per-layer metric curves of one prompt's map (``head`` or the head mean)."""
        entry = self._store(store_id)
        num_heads = entry.attrs["num_heads"]
        entry.check_range("head", head, num_heads, head_mean=True)
        column = num_heads if head == HEAD_MEAN else head
        values = self._read(entry, group, "metrics", (slice(None), column, slice(None))).astype(float)
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
