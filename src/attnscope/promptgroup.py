"""One prompt's group of the attention store, filled layer by layer from the capture's hooks
(:class:`PromptGroup`, the sink :func:`attnscope.attention.extract` hands each layer's
probabilities to), and what it computes from each layer's maps: word maps, value-weighted maps
and singular values.

Store (Zarr v3), one group per prompt named by its ``prompt_index`` (``000``, ``001``, ...),
each array one shard file:

============================  =====================================  ==================
array                         dims                                   dtype
============================  =====================================  ==================
``attn``                      layer, head, query, key                float16 (prompts
                                                                     in ``keep_heads``)
``head_mean``                 layer, query, key                      float16
``word_attn_sum``             layer, query_word, key_word            float32
``word_attn_mean_query``      layer, query_word, key_word            float32
``thesis_word_attn_sum``      layer, query_thesis_word,              float32
                              key_thesis_word
``cosine``                    query, key                             float16
``metrics``                   layer, map, metric                     float64
``singular_values``           layer, map, singular_value             float64
``choices``                   layer, choice, choice_metric           float64
``value_attn``                layer, head, query, key                float16 (prompts
                                                                     in ``keep_heads``)
``value_head_mean``           layer, query, key                      float16
``value_word_attn_sum``       layer, query_word, key_word            float32
``value_metrics``             layer, map, metric                     float64
``value_choices``             layer, choice, choice_metric           float64
============================  =====================================  ==================

``map`` is the heads 0 … H−1, then the head mean at index H; ``metrics`` holds
``metrics.STREAMED`` of every map, ``singular_values`` the singular values (descending) of
the head mean and, with ``attention.head_spectra``, of the heads of the prompts in
``keep_heads`` (NaN for every other head) — and ``choices`` the head mean's ``choices.STORED``
(``n_queries``, then ``choices.CHOICE_METRICS``) under each of ``choices.CHOICES``; the root attributes
``metrics``, ``choices`` and ``choice_metrics`` name those axes.

The ``value_*`` arrays are the value-weighted maps (Kobayashi et al. 2020): per head
α_ij · ‖W_O,h v_j‖, the norm of the vector the head adds to query i's residual stream for key j
(:func:`value_weighted`, the norms from the layer's own value states:
:class:`attnscope.capture.ValueNorms`), stored as row shares (:func:`row_shares`: each row
sums to 1, so every metric and choice reads them as it reads the weights); ``value_head_mean``
is the row shares of their sum over heads (what the whole layer writes), not the mean of the
heads' shares. ``value_metrics`` and ``value_choices`` are ``metrics`` (no spectra) and
``choices`` of those maps, ``value_word_attn_sum`` the word map of ``value_head_mean``.

``head_mean`` is float16 of the mean over heads of the stored float16 maps (the thesis's
single-head simulation); every other array is computed from the stored float16 values,
so the store reproduces its own metrics. The words of the word maps are those of the
shots, the target and the generated clue (``WORD_SEGMENTS``):

- ``word_attn_sum`` sums a map over all query × key subword pairs of two words (thesis
  fig. 8.5: the total mass is preserved);
- ``word_attn_mean_query`` sums over the key word's subwords and averages over the query
  word's subwords, so a row is the mean distribution of the query word's tokens.
- ``thesis_word_attn_sum`` is ``word_attn_sum`` over the words of the thesis's own notebook
  (``prompts.THESIS_WORD_PATTERN``: the "Word" labels of the shot and target turns are
  words, "Duck-billed" is two words and its "-" belongs to none; prompt tokens only, never
  the appended clue), the word-level maps of its figures.
"""

from __future__ import annotations

import shutil
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from zarr.codecs import BloscCodec

from attnscope import choices, metrics, prompts, streamed, zarrwrite
from attnscope.store import DIMENSIONS, WORD_SEGMENTS, pool_words, query_word_means, word_membership_matrix

CHUNK_BYTES = 16 << 20
"""Largest ``attn`` chunk (long prompts get fewer heads per chunk)."""

# Every array of a prompt group is one shard file. ``attn`` and ``head_mean``
# (``zarrwrite.ShardWriter``) get one inner chunk per layer (all heads, fewer for long prompts:
# ``CHUNK_BYTES``), appended from the hook as the layer comes. Inside an ``attn`` chunk the
# heads of one (query, key) pair lie next to each other (``HEADS_LAST``), the float16 bytes
# are shuffled into a high-byte (sign, exponent) and a low-byte (mantissa) plane, then zstd
# level 1 over 4 MiB blocks: lossless, ~0.19-0.20x the float32 size (docs/attention.md).
COMPRESSOR = BloscCodec(cname="zstd", clevel=1, shuffle="shuffle", typesize=2, blocksize=4 << 20)
HEADS_LAST = (0, 2, 3, 1)


@dataclass
class PromptInput:
    """One prompt to capture: its tokens and labels, with the generated clue appended."""

    index: int
    prompt_id: str
    target: str
    annotation: prompts.Annotation
    n_prompt_tokens: int
    clue: str | None
    keep_heads: bool

    @property
    def group(self) -> str:
        return f"{self.index:03d}"


def word_membership(annotation: prompts.Annotation) -> tuple[np.ndarray, np.ndarray]:
    """(word indices, membership): the words of ``WORD_SEGMENTS`` (indices into
    ``annotation.words``) and a [token, word] 0/1 matrix of which tokens make up each word."""
    words = np.array(
        [i for i, segment in enumerate(annotation.word_segment) if segment in WORD_SEGMENTS], dtype=np.int64
    )
    return words, word_membership_matrix(annotation.token_word, words)


def thesis_membership(annotation: prompts.Annotation) -> np.ndarray:
    """The [token, thesis word] 0/1 matrix of the thesis convention (``thesis_token_word``)."""
    return word_membership_matrix(annotation.thesis_token_word, range(len(annotation.thesis_words)))


def word_maps(a: np.ndarray | torch.Tensor, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sum, mean over query subwords) of a [query, key] map aggregated to [query_word, key_word],
    in float32 (computed in torch: the capture calls it for every layer inside the forward pass)."""
    m = torch.from_numpy(membership)
    summed = pool_words(torch.as_tensor(a).float(), m)
    return summed.numpy(), query_word_means(summed, m).numpy()


def value_weighted(weights: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """α_ij · ‖W_O,h v_j‖ in float32 (Kobayashi et al. 2020): one head's attention map
    [..., query, key] times the norm of what each key's value writes through that head [..., key]
    (:class:`attnscope.capture.ValueNorms`); the norm of the vector the head adds for the pair,
    since α_ij ≥ 0."""
    return weights.float() * norms[..., None, :]


def row_shares(maps: torch.Tensor) -> torch.Tensor:
    """Each row divided by its sum (a row of zeros stays zero): a value-weighted map as the share
    of the row's written norm each key gives, comparable to attention probabilities."""
    total = maps.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, maps / total.clamp(min=torch.finfo(maps.dtype).tiny), 0.0)


def singular_values(
    maps: np.ndarray | torch.Tensor, workers: int = 1, chunk_bytes: int = CHUNK_BYTES
) -> np.ndarray:
    """Singular values (descending) of maps [map, query, key] in float64: LAPACK's SVD
    through numpy, which releases the GIL, so ``workers`` threads decompose groups of maps
    side by side (torch's batched SVD runs the maps one after another; the two routes side
    by side: docs/attention.md). Groups hold at most ``chunk_bytes`` of float64 copies."""
    maps = np.asarray(maps)
    n = maps.shape[-1]
    step = max(1, min(chunk_bytes // (8 * n * n), -(-len(maps) // workers)))
    groups = [maps[i : i + step] for i in range(0, len(maps), step)]
    spectra = partial(np.linalg.svd, compute_uv=False)
    to_float64 = partial(np.asarray, dtype=np.float64)
    mapped = _svd_pool(workers).map if workers > 1 and len(groups) > 1 else map
    return np.concatenate(list(mapped(lambda group: spectra(to_float64(group)), groups)))


@cache
def _svd_pool(workers: int) -> ThreadPoolExecutor:
    """The threads :func:`singular_values` decomposes on (idle between prompts)."""
    return ThreadPoolExecutor(workers, thread_name_prefix="attnscope-svd")


LAYER_QUEUE_DEPTH = 2
"""Layers a prompt's layer thread may be behind the forward pass (each holds its float16 maps);
0: no layer thread, each layer's work runs inside its hook (a capture without metrics, whose
copies and encoding are too small to pay for the forward pass's second thread)."""


def _in_inference_mode(work: Callable[..., None], *args: Any) -> None:
    with torch.inference_mode():
        work(*args)


class LayerQueue:
    """One thread that runs a prompt's per-layer work in layer order, at most ``depth`` layers
    behind the forward pass (a hook waits for the oldest beyond that; 0: the work runs in the
    hook, no thread), under ``torch.inference_mode`` (a thread's own: the hooks' maps are inference
    tensors). A hand-written queue on ``ThreadPoolExecutor``: its own queue is unbounded, and each
    queued layer holds a layer's maps."""

    def __init__(self, depth: int):
        self.depth = depth
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="attnscope-layers") if depth else None
        self.queued: deque[Future] = deque()

    def submit(self, work: Callable[..., None], *args: Any) -> None:
        """Queue ``work(*args)``, after the oldest queued work if ``depth`` are queued (its failure
        raised here); with depth 0 run it now."""
        if self.executor is None:
            _in_inference_mode(work, *args)
            return
        while len(self.queued) >= self.depth:
            self.queued.popleft().result()
        self.queued.append(self.executor.submit(_in_inference_mode, work, *args))

    def join(self) -> None:
        """Wait for every queued work, raising the first failure; the thread ends."""
        try:
            while self.queued:
                self.queued.popleft().result()
        finally:
            if self.executor is not None:
                self.executor.shutdown(wait=True, cancel_futures=True)


class PromptGroup:
    """The arrays of one prompt's group, filled layer by layer from the forward hooks."""

    def __init__(
        self,
        store: Path,
        prompt: PromptInput,
        cosine: np.ndarray,
        num_layers: int,
        num_heads: int,
        with_metrics: bool = True,
        workers: int = 1,
        value_norms: Callable[[int], torch.Tensor] | None = None,
        head_spectra: bool = False,
    ):
        ann = prompt.annotation
        self.directory, self.prompt = store / prompt.group, prompt
        self.num_layers, self.num_heads, self.with_metrics = num_layers, num_heads, with_metrics
        self.workers, self.head_spectra = workers, head_spectra
        self.cosine = cosine.astype(np.float16)
        self.layout = streamed.MapLayout(
            np.asarray(ann.token_shot), np.asarray(ann.token_segment), self.cosine
        )
        self.words, self.membership = word_membership(ann)
        n_words = len(self.words)
        self.word_sum = np.zeros((num_layers, n_words, n_words), np.float32)
        self.word_mean = np.zeros_like(self.word_sum)
        self.thesis_membership = thesis_membership(ann)
        n_thesis = self.thesis_membership.shape[1]
        self.thesis_word_sum = np.zeros((num_layers, n_thesis, n_thesis), np.float32)
        self.metrics = np.full((num_layers, num_heads + 1, len(metrics.STREAMED)), np.nan)
        n = len(ann.input_ids)
        self.singular = np.full((num_layers, num_heads + 1, n), np.nan)
        self.choices = np.full((num_layers, len(choices.CHOICES), len(choices.STORED)), np.nan)
        self.choice_step = max(1, choices.CHUNK_VALUES // (n * n))
        self.pending: list[tuple[int, np.ndarray]] = []  # head means awaiting their SVDs and choices
        self.value_norms = value_norms
        if value_norms is not None:
            self.value_word_sum = np.zeros_like(self.word_sum)
            self.value_metrics = np.full_like(self.metrics, np.nan)
            self.value_choices = np.full_like(self.choices, np.nan)
            self.value_pending: list[np.ndarray] = []

    def create(self) -> None:
        """Create the per-layer arrays; their chunks come with the layers. The group's own
        ``zarr.json`` is written last (:meth:`finish`): until then the directory is no group."""
        n = len(self.prompt.annotation.input_ids)
        if self.directory.exists():
            shutil.rmtree(self.directory)
        self.layers = LayerQueue(LAYER_QUEUE_DEPTH if self.with_metrics else 0)
        self.heads_per_chunk = max(1, min(self.num_heads, CHUNK_BYTES // (2 * n * n)))
        self.head_mean = self._array("head_mean", (self.num_layers, n, n), (1, n, n), "float16")
        self.attn = self.value_attn = self.value_head_mean = None
        heads_shape, heads_chunks = (self.num_layers, self.num_heads, n, n), (1, self.heads_per_chunk, n, n)
        if self.prompt.keep_heads:
            self.attn = self._array("attn", heads_shape, heads_chunks, "float16", order=HEADS_LAST)
        if self.value_norms is not None:
            mean_shape = (self.num_layers, n, n)
            self.value_head_mean = self._array("value_head_mean", mean_shape, (1, n, n), "float16")
            if self.prompt.keep_heads:
                self.value_attn = self._array(
                    "value_attn", heads_shape, heads_chunks, "float16", order=HEADS_LAST
                )

    def _array(
        self, name: str, shape: tuple[int, ...], chunks: tuple[int, ...], dtype: str, order=None
    ) -> zarrwrite.ShardWriter:
        return zarrwrite.ShardWriter(
            self.directory / name, shape, dtype, chunks, COMPRESSOR, DIMENSIONS[name], order
        )

    def _write_whole(self, name: str, data: np.ndarray) -> None:
        zarrwrite.write_whole_array(self.directory / name, data, COMPRESSOR, DIMENSIONS[name])

    def add_layer(self, layer: int, weights: torch.Tensor) -> None:
        """Take one layer's maps from the forward hook and queue what derives from them
        (:meth:`_derive_layer`) on the group's layer thread (:class:`LayerQueue`), so the forward
        pass computes the next layers meanwhile.

        ``weights`` [head, query, key] is the model's tensor: its float16 copy on the model's device
        (the heads of the layer's maps [map, query, key], whose last map will be the head mean) is
        made here, before the forward pass goes on, and so are the layer's value norms read.
        """
        shape = (self.num_heads + 1, *weights.shape[1:])
        maps = torch.empty(shape, dtype=torch.float16, device=weights.device)
        maps[: self.num_heads].copy_(weights)
        norms = self.value_norms(layer) if self.value_norms is not None else None
        self.layers.submit(self._derive_layer, layer, maps, norms)

    def _derive_layer(self, layer: int, maps: torch.Tensor, norms: torch.Tensor | None) -> None:
        """Store one layer's maps and compute what derives from them, layer after layer.

        The heads ``maps[:num_heads]`` are summed over heads in float32, head by head (numpy's order
        for a mean over an outer axis: the head mean is the mean of the stored values, and no float32
        copy of the layer is made), and, for the prompts that keep heads, copied to the CPU and
        transposed to heads-last chunk by chunk; the casts, sums and copies run in torch. The
        metrics follow: the streamed ones of the layer's maps (one batch, in torch on the maps'
        device), the singular values of the stored heads (with ``head_spectra`` only: nothing
        downstream reads them), and the singular values and choices of the head means once
        ``choice_step`` layers (or the last) are pending. On a CPU model every tensor is the
        CPU's already (no copy); on a GPU only the stored maps cross to the CPU.
        """
        a = maps[: self.num_heads]
        heads = a.cpu() if self.attn is not None else None
        if heads is not None:
            self._write_heads(self.attn, layer, heads)
        if norms is not None:
            self._add_value_layer(layer, a, norms)
        total = a[0].float()  # not a.sum(dtype=float32): that casts the whole layer first
        for head_map in a[1:]:
            total += head_map
        mean = (total / self.num_heads).to(torch.float16)
        stored_mean = mean.cpu()
        self.head_mean.write((layer, 0, 0), stored_mean.numpy()[None])
        self.word_sum[layer], self.word_mean[layer] = word_maps(stored_mean, self.membership)
        self.thesis_word_sum[layer] = word_maps(stored_mean, self.thesis_membership)[0]
        if self.with_metrics:
            maps[self.num_heads] = mean  # a copy: the pending head means keep no layer alive
            self.metrics[layer] = streamed.streamed_metrics(maps, self.layout)
            if heads is not None and self.head_spectra:
                self.singular[layer, : self.num_heads] = singular_values(heads, self.workers)
            self.pending.append((layer, stored_mean.numpy()))
            if len(self.pending) == self.choice_step or layer == self.num_layers - 1:
                self._measure_head_means()

    def _write_heads(self, writer: zarrwrite.ShardWriter, layer: int, maps: torch.Tensor) -> None:
        """Append one layer's float16 maps [head, query, key] to a per-head array, chunk by chunk
        of ``heads_per_chunk`` heads, heads last."""
        g = self.heads_per_chunk
        for head in range(0, self.num_heads, g):
            heads_last = maps[head : head + g].permute(1, 2, 0).contiguous().numpy()
            writer.write((layer, head // g, 0, 0), heads_last[None].transpose(0, 3, 1, 2))

    def _add_value_layer(self, layer: int, a: torch.Tensor, norms: torch.Tensor) -> None:
        """The value-weighted maps of one layer from its stored float16 maps ``a`` and the norms
        [head, key] its values write (:func:`value_weighted`), on the maps' device: per head as
        row shares (stored for the prompts that keep heads, measured for all), the head mean as
        the row shares of their sum over heads, with its word map and (pending) choices."""
        norms = norms.to(a.device)
        total = torch.zeros(a.shape[1:], dtype=torch.float32, device=a.device)
        shape = (self.num_heads + 1, *a.shape[1:])
        shares = torch.empty(shape, dtype=torch.float16, device=a.device)  # heads, head mean
        for head, head_map in enumerate(a):
            weighted = value_weighted(head_map, norms[head])
            total += weighted
            shares[head] = row_shares(weighted)
        if self.value_attn is not None:
            self._write_heads(self.value_attn, layer, shares[: self.num_heads].cpu())
        mean = row_shares(total).to(torch.float16)
        stored_mean = mean.cpu()
        self.value_head_mean.write((layer, 0, 0), stored_mean.numpy()[None])
        self.value_word_sum[layer] = word_maps(stored_mean, self.membership)[0]
        if self.with_metrics:
            shares[self.num_heads] = mean
            self.value_metrics[layer] = streamed.streamed_metrics(shares, self.layout)
            self.value_pending.append(stored_mean.numpy())

    def _measure_head_means(self) -> None:
        """The singular values and choices of the pending head means, batched over their layers
        (and the choices of the pending value-weighted head means)."""
        layers = [layer for layer, _ in self.pending]
        ann = self.prompt.annotation
        maps = np.stack([mean for _, mean in self.pending])
        self.singular[layers, self.num_heads] = singular_values(maps, self.workers)
        self.choices[layers] = choices.stored_choices(maps, ann.token_segment, ann.token_shot)
        self.pending.clear()
        if self.value_norms is not None:
            value_maps = np.stack(self.value_pending)
            self.value_choices[layers] = choices.stored_choices(value_maps, ann.token_segment, ann.token_shot)
            self.value_pending.clear()

    def finish(self) -> None:
        """Wait for the queued layers, close the per-layer arrays, write the whole-prompt arrays,
        then the group (complete)."""
        self.layers.join()
        for array in (self.head_mean, self.attn, self.value_head_mean, self.value_attn):
            if array is not None:
                array.close()
        self._write_whole("cosine", self.cosine)
        self._write_whole("word_attn_sum", self.word_sum)
        self._write_whole("word_attn_mean_query", self.word_mean)
        self._write_whole("thesis_word_attn_sum", self.thesis_word_sum)
        if self.value_norms is not None:
            self._write_whole("value_word_attn_sum", self.value_word_sum)
        if self.with_metrics:
            self._write_whole("metrics", self.metrics)
            self._write_whole("singular_values", self.singular)
            self._write_whole("choices", self.choices)
            if self.value_norms is not None:
                self._write_whole("value_metrics", self.value_metrics)
                self._write_whole("value_choices", self.value_choices)
        zarrwrite.write_zarr_group(self.directory, self._attributes())

    def _attributes(self) -> dict[str, Any]:
        ann, prompt = self.prompt.annotation, self.prompt
        return {
            "prompt_index": prompt.index,
            "prompt_id": prompt.prompt_id,
            "target": prompt.target,
            "clue": prompt.clue,
            "n_tokens": len(ann.input_ids),
            "n_prompt_tokens": prompt.n_prompt_tokens,
            "keep_heads": prompt.keep_heads,
            "input_ids": [int(i) for i in ann.input_ids],
            "tokens": list(ann.tokens),
            "token_segment": list(ann.token_segment),
            "token_shot": [int(s) for s in ann.token_shot],
            "token_word": [int(w) for w in ann.token_word],
            "words": list(ann.words),
            "word_segment": list(ann.word_segment),
            "word_shot": [int(s) for s in ann.word_shot],
            "map_words": [int(w) for w in self.words],
            "thesis_token_word": [int(w) for w in ann.thesis_token_word],
            "thesis_words": list(ann.thesis_words),
            "thesis_word_segment": list(ann.thesis_word_segment),
            "thesis_word_shot": [int(s) for s in ann.thesis_word_shot],
            "complete": True,
        }
