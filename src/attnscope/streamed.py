"""The streamed metrics of attention maps (:data:`attnscope.metrics.STREAMED`; what each measures:
:mod:`attnscope.metrics`), computed during the capture for every map, so they must be cheap:
:func:`streamed_metrics` takes a layer's maps [map, query, key] (its heads and head mean,
float16, on the model's device, CPU or GPU) and computes them in torch on that device, one
batched call per step for all maps, and hands back [map, metric] in float64. Float16 values are
read as float32 (exact). The masses are float64 sums of float16 values, which are exact (so in
any order). The entropy's terms a·log a are float32, each row's sum float64; the correlations
are float64; ranks of float16 values are exact average ranks from a histogram of their bit
patterns (``torch.bincount``, ``scatter_add_``; the correlations over ≥ :data:`HISTOGRAM_PAIRS`
pairs run over the histogram's bins, with no per-pair rank); the power iteration runs in
float32. Every map's value is bit for bit the one it gets in a batch of its own (tested on the
CPU, where they run on one torch thread: :func:`one_cpu_thread`): every inexact sum runs over
the last axis of one map's rows (:func:`row_sums`; long rows in fixed chunks, since torch splits
a lone long sum between threads), the histograms have a fixed number of bins, and the power
iteration's matrix-vector products are BLAS's of each map on its own at a fixed alignment
(torch's batched matmul splits a batch differently than one map, and MKL's product rounds by the
alignment of its operands). The numpy route this replaced (lookup tables of the 65 536 float16
bit patterns, float32 BLAS products) is the tests' reference (``tests/helpers.py``); what
changed, by how much: docs/attention.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.stats import rankdata

from attnscope.store import GENERATED, TARGET, WORD_SEGMENTS

BATCH_BYTES = 4 << 20
"""Largest batch of maps, in float32, that :func:`streamed_metrics` measures at once (a layer of
SmolLM2's 9 heads and head mean up to n = 323): its temporaries are a few float32 and float64
copies of the batch (and int64 codes of its pairs), bounded so for long prompts."""


POWER_ITERATIONS = 1000


POWER_TOLERANCE = 1e-6
"""Power iteration stops when σ₁² changes by less than this (relative): about 6 steps on
SmolLM2's maps, stable ranks within 1e-5 of the SVD's."""


PROBABILITY_BINS = 0x3C01
"""The float16 bit patterns of 0 … 1: the bins of a histogram of probabilities (a fixed number,
so a map's sums over the bins do not depend on the other maps of its batch)."""


HISTOGRAM_PAIRS = 1 << 12
"""Rows of at least this many float16 values are ranked and correlated through a histogram of
their bit patterns (:data:`PROBABILITY_BINS` bins a row), shorter ones through a sort."""


ALIGNMENT = 64
"""Bytes every map and vector of the power iteration is aligned to (:func:`_aligned_rows`)."""


ENTROPY_BLOCKS = 8
"""Blocks of rows :func:`row_entropy` computes apart, each over the keys up to its last row
(about (1 + 1/blocks)/2 of a causal map; more blocks leave out more zeros in more calls)."""


ROW_CHUNK = 4096
"""Rows longer than this are summed in chunks of it (:func:`row_sums`)."""


def _tensor(maps: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Maps as a tensor on their own device (numpy arrays as CPU tensors, without a copy)."""
    return torch.as_tensor(maps)


def _float32(maps: torch.Tensor) -> torch.Tensor:
    """Maps in float32 (float16 exactly: every float16 value is a float32), float32 as they are."""
    return maps if maps.dtype == torch.float32 else maps.to(torch.float32)


def row_sums(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sums over the last axis of ``x`` [..., value] (accumulated in ``dtype``, else x's), each row's
    sum a function of that row alone, whatever the other rows: torch splits one long sum between
    threads when it is the only output (at ≥ 32 768 values), so rows longer than
    :data:`ROW_CHUNK` are summed in chunks of it (each chunk one output of a last-axis sum), then
    the chunks' sums, then the tail."""
    length = x.shape[-1]
    if length <= ROW_CHUNK:
        return x.sum(dim=-1, dtype=dtype)
    whole = length // ROW_CHUNK * ROW_CHUNK
    chunks = x[..., :whole].unflatten(-1, (-1, ROW_CHUNK)).sum(dim=-1, dtype=dtype).sum(dim=-1)
    return chunks + x[..., whole:].sum(dim=-1, dtype=dtype) if whole < length else chunks


def _nan(maps: torch.Tensor) -> torch.Tensor:
    return torch.full((len(maps),), float("nan"), dtype=torch.float64, device=maps.device)


def _log_rows(n: int, device: torch.device) -> torch.Tensor:
    """log(i + 1) for the rows i = 1 … n − 1 (numpy's float64 logarithms, on ``device``)."""
    return torch.from_numpy(np.log(np.arange(2, n + 1, dtype=np.float64))).to(device)


def _xlogx(x: torch.Tensor) -> torch.Tensor:
    """x·log x elementwise for x ≥ 0 (0 at 0) in x's dtype: x times the log of x raised to the dtype's
    smallest normal number (below every float16 value)."""
    return x.clamp_min(torch.finfo(x.dtype).tiny).log_().mul_(x)


def row_entropy(maps: torch.Tensor | np.ndarray, log_rows: torch.Tensor | None = None) -> torch.Tensor:
    """Per map [map, query, key]: the mean over rows i ≥ 1 of the row's entropy divided by
    log(i + 1); the terms a·log a in float32 (float64 for float64 maps), each row's sum in
    float64. ``log_rows``: log(i + 1) for i ≥ 1 (:class:`LayoutTensors`).

    The rows run in :data:`ENTROPY_BLOCKS` blocks, each over the keys up to its last row where the
    keys after are all zero (causal maps: about half a map is left out), else over whole rows.
    For float16 values that changes no bit: every term is a float32 multiple of 2⁻⁴³
    (|a·log a| ≥ 2⁻²⁰ for a ≥ 2⁻²⁴) and a row's |sum| is below 2¹⁰, so its float64 sum is exact in
    any order (the test holds it to the sums over whole rows)."""
    maps = _tensor(maps)
    n = maps.shape[-1]
    if n < 2:
        return _nan(maps)
    dtype = torch.float64 if maps.dtype == torch.float64 else torch.float32
    edges = np.unique(np.linspace(1, n, ENTROPY_BLOCKS + 1).round().astype(int)).tolist()
    blocks = []
    for start, stop in zip(edges[:-1], edges[1:]):
        keys = n if bool(maps[:, start:stop, stop:].any()) else stop
        blocks.append(-row_sums(_xlogx(maps[:, start:stop, :keys].to(dtype)), torch.float64))
    entropy = torch.cat(blocks, dim=1)  # [map, row]
    log_rows = _log_rows(n, maps.device) if log_rows is None else log_rows
    return row_sums(entropy / log_rows) / (n - 1)


def _row_mean(values: torch.Tensor) -> torch.Tensor:
    """Per map, the mean of its values [map, row i ≥ 1] in float64 (NaN without rows)."""
    if not values.shape[1]:
        return _nan(values)
    return row_sums(values.double()) / values.shape[1]


def self_mass(maps: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Per map: the mean attention of rows i ≥ 1 on their own token."""
    return _row_mean(torch.diagonal(_tensor(maps), dim1=1, dim2=2)[:, 1:])


def previous_mass(maps: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Per map: the mean attention of rows i ≥ 1 on the token before."""
    return _row_mean(torch.diagonal(_tensor(maps), offset=-1, dim1=1, dim2=2))


def sink_mass(maps: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Per map: the mean attention of rows i ≥ 1 on the first token (the attention sink)."""
    return _row_mean(_tensor(maps)[:, 1:, 0])


def shot_keys(token_shot: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(queries, shots, own): the query tokens in shots ≥ 2, the keys' shots one-hot [key, shot]
    (float64) and each query's own shot."""
    shot = np.asarray(token_shot)
    queries = np.flatnonzero(shot >= 2)
    return queries, (shot[:, None] == np.arange(shot.max() + 1)).astype(np.float64), shot[queries]


def shot_masses(
    maps: torch.Tensor | np.ndarray, token_shot: Sequence[int] | None = None, keys=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per map, (within, across): the mean mass of the queries in shots ≥ 2 on their own shot's
    keys and on the other shots' keys (``keys``: :func:`shot_keys` as tensors, else from
    ``token_shot``). Each query's mass on each shot is a sum over its row in float64, exact for
    float16 maps (any sum of a row's float16 probabilities is a float64), so in any order: a
    matrix product with the shots' one-hot."""
    maps = _tensor(maps)
    if keys is None:
        keys = tuple(torch.from_numpy(k).to(maps.device) for k in shot_keys(token_shot))
    queries, shots, own = keys
    if not len(queries):
        return _nan(maps), _nan(maps)
    mass = maps[:, queries].double() @ shots  # [map, query, shot]
    within = mass[:, torch.arange(len(queries), device=maps.device), own]
    across = mass[:, :, 1:].sum(dim=2) - within
    return within.mean(dim=1), across.mean(dim=1)


def block_mass(
    maps: torch.Tensor | np.ndarray, queries: torch.Tensor | np.ndarray, keys: torch.Tensor | np.ndarray
) -> torch.Tensor:
    """Per map: the mean over ``queries`` of their total attention on ``keys`` (NaN if either is
    empty); each query's sum in float64 (exact for float16 maps)."""
    maps = _tensor(maps)
    if not len(queries) or not len(keys):
        return _nan(maps)
    queries, keys = (torch.as_tensor(i, device=maps.device) for i in (queries, keys))
    block = maps[:, queries][:, :, keys]  # [map, query, key]
    return row_sums(block.double()).mean(dim=1)


def average_ranks(values: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Ranks 1..n of each row of ``values`` [row, value] in float64 with ties averaged (as
    ``scipy.stats.rankdata``, whose exact values they are; a row with a NaN is all NaN): for rows
    of at least :data:`HISTOGRAM_PAIRS` non-negative float16 values from a histogram of the bit
    patterns of all rows at once (``torch.bincount``: O(n), no sort, on any device), else by a
    stable sort."""
    values = _tensor(values)
    if values.dtype == torch.float16 and values.shape[1] >= HISTOGRAM_PAIRS:
        codes = values.view(torch.int16).to(torch.int64)
        low, high = (int(c) for c in torch.aminmax(codes))
        if low >= 0 and high < 0x7C00:  # no negatives, infinities, NaNs: codes sort like values
            rows, bins = len(codes), high + 1  # up to 0x3C00 (1.0) for probabilities
            offsets = torch.arange(0, rows * bins, bins, device=codes.device)
            row_codes = codes + offsets[:, None]  # each row its own bins
            counts = torch.bincount(row_codes.view(-1), minlength=rows * bins)
            below = counts.view(rows, bins).cumsum(dim=1).view(-1) - counts
            return torch.take(below.double() + (counts + 1).double() / 2, row_codes)
    return _sorted_average_ranks(values)


def _sorted_average_ranks(values: torch.Tensor) -> torch.Tensor:
    """:func:`average_ranks` by a stable sort: a run of equal values shares the mean of its
    first and last position."""
    ordered, order = torch.sort(values, dim=1, stable=True)
    position = torch.arange(1, values.shape[1] + 1, dtype=torch.float64, device=values.device)
    position = position.expand(values.shape)
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = torch.ones_like(starts)
    ends[:, :-1] = starts[:, 1:]
    first = torch.cummax(torch.where(starts, position, 0.0), dim=1).values
    last = torch.cummin(torch.where(ends, position, float("inf")).flip(1), dim=1).values.flip(1)
    ranks = torch.empty_like(position).scatter_(1, order, (first + last) / 2)
    return torch.where(values.isnan().any(dim=1, keepdim=True), float("nan"), ranks)


def correlation(x: torch.Tensor | np.ndarray, y_unit: torch.Tensor | np.ndarray | None) -> torch.Tensor:
    """Pearson correlation of each row of ``x`` [row, value] with a reference given as its
    centred, unit-norm vector (NaN for a row without spread: ‖x − x̄‖² ≤ 1e-12 ‖x‖²), in float64:
    x − x̄ first, then the sums of its squares and of its products with the reference (each row's
    own sums, :func:`row_sums`)."""
    x = _tensor(x).double()
    if y_unit is None:
        return _nan(x)
    y_unit = torch.as_tensor(y_unit, dtype=torch.float64, device=x.device)
    centered = x - (row_sums(x) / x.shape[1])[:, None]
    return _correlation_of_sums(row_sums(centered * y_unit), row_sums(centered * centered), row_sums(x * x))


def _aligned_empty(rows: int, width: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised [rows, width] tensor whose rows each start at a multiple of
    :data:`ALIGNMENT` bytes (the rows of a fresh tensor, padded)."""
    size = torch.empty((), dtype=dtype).element_size()
    stride = -(-width * size // ALIGNMENT) * ALIGNMENT // size
    return torch.empty((rows, stride), dtype=dtype, device=device)[:, :width]


def _aligned_maps(maps: torch.Tensor) -> torch.Tensor:
    """Maps [map, query, key] in float32, each one C-contiguous from a multiple of
    :data:`ALIGNMENT` bytes: ``maps`` themselves if they are, else a copy (the float16 → float32
    cast of :func:`streamed_metrics` makes them so)."""
    n = maps.shape[-1]
    aligned = (
        maps.dtype == torch.float32
        and maps.stride()[1:] == (n, 1)
        and (maps.data_ptr() % ALIGNMENT == 0)
        and (maps.stride(0) * 4 % ALIGNMENT == 0 or len(maps) == 1)
    )
    if aligned:
        return maps
    copy = _aligned_empty(len(maps), n * n, torch.float32, maps.device)
    return copy.copy_(maps.reshape(len(maps), n * n)).unflatten(1, (n, n))


def _aligned_rows(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` [row, value] whose rows each start at a multiple of 64 bytes: a map and
    a vector go into BLAS's matrix-vector product at the same alignment in a batch as alone
    (MKL's product rounds differently at other alignments)."""
    return _aligned_empty(len(x), x.shape[1], x.dtype, x.device).copy_(x)


def stable_rank(maps: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Per map: ‖a‖²_F / σ₁², σ₁² the largest eigenvalue of aᵀa by power iteration from the ones
    vector in float32 (‖a‖²_F in float64), batched over the maps still iterating: each stops at
    its own convergence. A step's matrix-vector products are BLAS's of each map on its own (a
    batched matmul on the CPU splits a batch differently than one map), every map and vector
    64-byte aligned (:func:`_aligned_rows`); its dots and norms are sums over the map's own rows."""
    a = _float32(_tensor(maps))
    n = a.shape[-1]
    frobenius = row_sums(row_sums((a * a).double())).tolist()  # exact squares of float16 values
    out = [float("nan")] * len(a)
    running = [i for i, f in enumerate(frobenius) if f != 0]
    if running:
        aligned = _aligned_maps(a)
        maps_running = [aligned[i] for i in running]
        u, v, w = (_aligned_empty(len(running), n, torch.float32, a.device) for _ in range(3))
        v.fill_(1 / np.sqrt(n))
        largest = [0.0] * len(running)
        slots = [(m, m.T, v[k], u[k], w[k]) for k, m in enumerate(maps_running)]  # views, made once
        for step in range(POWER_ITERATIONS):
            for m, transposed, v_k, u_k, w_k in slots:  # w = aᵀ(a v)
                torch.mv(transposed, torch.mv(m, v_k, out=u_k), out=w_k)
            estimate = row_sums(v * w).tolist()  # float32 dots, compared and divided in float64
            torch.div(w, torch.sqrt(row_sums(w * w))[:, None], out=v)
            last = step == POWER_ITERATIONS - 1
            done = [last or abs(e - g) <= POWER_TOLERANCE * e for e, g in zip(estimate, largest)]
            largest = estimate
            if any(done):
                for i, e, finished in zip(running, estimate, done):
                    if finished:
                        out[i] = frobenius[i] / e
                keep = [k for k, finished in enumerate(done) if not finished]
                if not keep:
                    break
                running, largest = [running[k] for k in keep], [largest[k] for k in keep]
                maps_running = [maps_running[k] for k in keep]
                v, u, w = _aligned_rows(v[keep]), u[: len(keep)], w[: len(keep)]
                slots = [(m, m.T, v[k], u[k], w[k]) for k, m in enumerate(maps_running)]
    return torch.tensor(out, dtype=torch.float64, device=a.device)


@dataclass(frozen=True)
class CosinePairs:
    """The token pairs a cosine correlation runs over (flat indices into a [query, key] map) and
    the embedding cosine on them as centred unit vectors, of its values and of its ranks
    (float64 tensors; :meth:`to` moves them to the maps' device)."""

    index: torch.Tensor
    unit: torch.Tensor | None
    rank_unit: torch.Tensor | None

    @classmethod
    def of(cls, cosine: np.ndarray, tokens: np.ndarray) -> CosinePairs:
        """The pairs j < i with both tokens in the boolean mask ``tokens`` (CPU tensors)."""
        pairs = np.tri(len(tokens), len(tokens), -1, dtype=bool) & tokens[:, None] & tokens[None, :]
        index = torch.from_numpy(np.flatnonzero(pairs))
        if len(index) < 2:
            return cls(index, None, None)
        values = np.asarray(cosine).ravel()[index.numpy()]
        return cls(
            index,
            _unit_centered(values.astype(np.float32)),
            _unit_centered(rankdata(values.astype(np.float32))),
        )

    def to(self, device: torch.device) -> CosinePairs:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return CosinePairs(self.index.to(device), move(self.unit), move(self.rank_unit))


def _unit_centered(values: np.ndarray) -> torch.Tensor | None:
    centered = np.asarray(values, dtype=np.float64) - np.mean(values, dtype=np.float64)
    norm = np.linalg.norm(centered)
    return torch.from_numpy(centered / norm) if norm > 0 else None


@dataclass(frozen=True)
class LayoutTensors:
    """A prompt's layout as the metrics read it, as tensors on one device (:meth:`MapLayout.on`)."""

    log_rows: torch.Tensor
    shot_keys: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    clue_queries: torch.Tensor
    target_keys: torch.Tensor
    cosine_pairs: CosinePairs
    word_cosine_pairs: CosinePairs


@dataclass
class MapLayout:
    """A prompt's token labels and embedding cosine, prepared once for all of its maps (and
    moved once to each device its maps are on: :meth:`on`)."""

    token_shot: np.ndarray
    token_segment: np.ndarray
    cosine: np.ndarray
    cosine_pairs: CosinePairs = field(init=False)
    word_cosine_pairs: CosinePairs = field(init=False)
    clue_queries: np.ndarray = field(init=False)
    target_keys: np.ndarray = field(init=False)
    _devices: dict[torch.device, LayoutTensors] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        segment = np.asarray(self.token_segment)
        self.cosine_pairs = CosinePairs.of(self.cosine, np.ones(len(segment), dtype=bool))
        self.word_cosine_pairs = CosinePairs.of(self.cosine, np.isin(segment, WORD_SEGMENTS))
        self.clue_queries = np.flatnonzero(segment == GENERATED)
        self.target_keys = np.flatnonzero(segment == TARGET)

    def on(self, device: torch.device | str) -> LayoutTensors:
        """The layout's tensors on ``device``, made at the first call for that device."""
        device = torch.device(device)
        if device not in self._devices:
            self._devices[device] = LayoutTensors(
                _log_rows(len(self.token_segment), device),
                tuple(torch.from_numpy(k).to(device) for k in shot_keys(self.token_shot)),
                torch.from_numpy(self.clue_queries).to(device),
                torch.from_numpy(self.target_keys).to(device),
                self.cosine_pairs.to(device),
                self.word_cosine_pairs.to(device),
            )
        return self._devices[device]


def cosine_correlations(
    maps: torch.Tensor | np.ndarray, pairs: CosinePairs
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per map, (Pearson, Spearman) with the embedding cosine over ``pairs`` (NaN with fewer than
    two pairs or no spread); for non-negative float16 maps from the histogram of their values'
    bit patterns (:func:`histogram_correlations`), else from the values and their ranks."""
    maps = _tensor(maps)
    pairs = pairs.to(maps.device)
    if len(pairs.index) < 2:
        return _nan(maps), _nan(maps)
    flat = maps.reshape(len(maps), -1)
    values = torch.gather(flat, 1, pairs.index.expand(len(maps), -1))  # [map, pair]
    if values.dtype == torch.float16 and values.shape[1] >= HISTOGRAM_PAIRS:
        codes = values.view(torch.int16).to(torch.int64)
        low, high = (int(c) for c in torch.aminmax(codes))
        if low >= 0 and high < 0x7C00:  # no negatives, infinities, NaNs: codes sort like values
            bins = PROBABILITY_BINS if high < PROBABILITY_BINS else 0x7C00
            return histogram_correlations(codes, bins, pairs)
    return correlation(_float32(values), pairs.unit), correlation(average_ranks(values), pairs.rank_unit)


def histogram_correlations(
    codes: torch.Tensor, bins: int, pairs: CosinePairs
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Pearson, Spearman) of each row of float16 values, given as their bit patterns ``codes``
    [map, pair] (non-negative values, below ``bins``), with the cosine's centred unit vectors of
    ``pairs``: every sum over a row's values is a sum over the bins of its histogram, the count,
    and the sums of the two unit vectors over the pairs with the bin's value (in the pairs' order;
    ``scatter_add_``). So no per-pair rank or float64 copy of the values is made: the bins' average
    ranks and the sums of values and ranks (Σx, Σx², Σ(r − r̄)²) are exact, and Σx·y and
    Σ(r − r̄)·y are sums over the bins of the bin's value or centred rank times its cosine sum.
    Pearson's spread is Σx² − (Σx)²/m (Σx exact), Spearman's Σ(r − r̄)² with r̄ = (m + 1)/2;
    a row is flat (NaN) when its spread is at most 1e-12 of its sum of squares."""
    rows, m = codes.shape
    device = codes.device

    def per_bin(weights: torch.Tensor) -> torch.Tensor:  # [map, bin]: the weights' sum over each bin
        out = torch.zeros((rows, bins), dtype=weights.dtype, device=device)
        return out.scatter_add_(1, codes, weights.expand(rows, m))

    counts = per_bin(torch.ones((), dtype=torch.float64, device=device))
    value = torch.arange(bins, dtype=torch.int16, device=device).view(torch.float16).double()
    sum_x = row_sums(counts * value)
    squares = row_sums(counts * (value * value))
    spread = squares - sum_x * sum_x / m
    nan = torch.full((rows,), float("nan"), dtype=torch.float64, device=device)
    pearson = (
        nan
        if pairs.unit is None
        else _correlation_of_sums(row_sums(value * per_bin(pairs.unit)), spread, squares)
    )
    rank = counts.cumsum(dim=1) - (counts - 1) / 2  # each bin's average rank
    centered = rank - (m + 1) / 2
    rank_spread = row_sums(counts * (centered * centered))
    rank_squares = row_sums(counts * (rank * rank))
    if pairs.rank_unit is None:
        return pearson, nan
    spearman = _correlation_of_sums(row_sums(centered * per_bin(pairs.rank_unit)), rank_spread, rank_squares)
    return pearson, spearman


def _correlation_of_sums(products: torch.Tensor, spread: torch.Tensor, squares: torch.Tensor) -> torch.Tensor:
    """r = Σ(x − x̄)·y / √Σ(x − x̄)² from the sums (y a centred unit vector), clipped to [−1, 1];
    NaN where the spread is at most 1e-12 of Σx²."""
    flat = spread <= 1e-12 * squares
    r = products / torch.sqrt(torch.where(flat, 1.0, spread))
    return torch.where(flat, float("nan"), r.clamp(-1.0, 1.0))


def streamed_metrics(maps: torch.Tensor | np.ndarray, layout: MapLayout) -> np.ndarray:
    """The :data:`attnscope.metrics.STREAMED` metrics of maps [map, query, key] (a layer's heads and
    head mean, a float16 tensor on the model's device; numpy arrays are read as CPU tensors), as [map, metric]
    float64 numpy: computed in torch on the maps' device, one batched call per step for all maps
    (batches of :data:`BATCH_BYTES`), each map's values those it gets on its own, bit for bit
    (tested on the CPU). On the CPU on one torch thread (:func:`one_cpu_thread`)."""
    maps = _tensor(maps).contiguous()
    step = max(1, BATCH_BYTES // (4 * maps.shape[-1] ** 2))
    with one_cpu_thread(maps.device):
        return np.concatenate(
            [_streamed_batch(maps[i : i + step], layout) for i in range(0, len(maps), step)]
        )


@contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
    """On the CPU, run the block on one torch thread, then restore the count (elsewhere: as it is).
    The metrics' operations are many and short (a few hundred a layer, each over at most
    :data:`BATCH_BYTES`); torch's threads meet in a barrier at each, and while another process
    holds a core they wait on it (measured on two cores: docs/attention.md)."""
    if device.type != "cpu" or torch.get_num_threads() == 1:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _streamed_batch(maps: torch.Tensor, layout: MapLayout) -> np.ndarray:
    """:func:`streamed_metrics` of one batch of maps."""
    on = layout.on(maps.device)
    a32 = _aligned_maps(maps)  # float32, each map aligned for the power iteration's BLAS products
    values = torch.stack(
        [
            row_entropy(a32, on.log_rows),
            self_mass(maps),
            previous_mass(maps),
            sink_mass(maps),
            *shot_masses(maps, keys=on.shot_keys),
            block_mass(maps, on.clue_queries, on.target_keys),
            *cosine_correlations(maps, on.cosine_pairs),
            *cosine_correlations(maps, on.word_cosine_pairs),
            stable_rank(a32),
        ],
        dim=1,
    )
    return values.cpu().numpy()
