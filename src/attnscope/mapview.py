"""How an attention map is labelled and coloured, without any drawing library: the axes (tick
labels, per position its segment and shot, the boundary lines) and the colormap names that the
figures (:mod:`attnscope.plots.maps`) and the explorer share. No matplotlib here: the figures'
data reader (:mod:`attnscope.mapdata`) and the explorer's server import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnscope.store import GENERATED, SHOT_WORD, TARGET, TEMPLATE
from attnscope.store import WORD_SEGMENTS as PLOTTED_SEGMENTS

# PLOTTED_SEGMENTS, the tokens drawn in the maps: the shots' words and clues, the target and
# the generated clue (the thesis left out the instruction, the chat template and the separators).

ATTENTION_CMAP = "Blues"
COSINE_CMAP = "RdBu_r"
MASK_COLOR = "#e6e6e6"
BOUNDARY_COLOR = "#333333"

MAP_KINDS = {
    "token_grid": "token-level maps, 2×2 layers",
    "word_grid": "word-level maps, 2×2 layers",
    "cosine": "embedding cosine beside attention",
    "word_pass": "word-level maps, every layer",
    "token_pass": "token-level maps, every layer",
    "thesis_grid": (
        "the thesis's word-level maps (its notebook's words, prompt only), its layers, per-panel scales"
    ),
}
"""The kinds of attention-map figure (the ``kinds`` of ``figures.maps``) → what each shows, as
the HTML report labels it; :func:`attnscope.plots.attention_figure` draws them."""


def map_label(kind: str, append_clue: bool) -> str:
    """The report label of a map figure: its kind and the tokens it draws (a thesis_grid
    draws the prompt only, as the thesis did)."""
    clue = append_clue and kind != "thesis_grid"
    return MAP_KINDS[kind] + (", prompt + generated clue" if clue else ", prompt only")


def thesis_word_axis(words: Sequence[str], segments: Sequence[str], shots: Sequence[int]) -> MapAxis:
    """The axis of the thesis's word-level maps, labelled as its notebook labels them: a
    format word of a shot turn ("Word") reads "Word:", the target turn's "Target Word:"."""
    segments = np.asarray(segments)
    target_label = max((i for i, s in enumerate(segments) if s == TEMPLATE), default=-1)
    labels = [
        ("Target Word:" if i == target_label else f"{word}:") if segments[i] == TEMPLATE else word
        for i, word in enumerate(words)
    ]
    return MapAxis(labels, segments, np.asarray(shots))


def token_text(token: str) -> str:
    """A tokenizer piece as readable text (byte-level BPE ``Ġ``/``Ċ``, SentencePiece ``▁``)."""
    text = token.replace("Ġ", " ").replace("▁", " ").replace("Ċ", "\\n").strip()
    return text or "<space>"


@dataclass(frozen=True)
class MapAxis:
    """What runs along both axes of an attention map: labels, and per position its
    segment and shot (for the boundary lines)."""

    labels: list[str]
    segment: np.ndarray
    shot: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def boundaries(self) -> list[int]:
        """Positions p where a new block starts (a line is drawn between p - 1 and p): a new
        shot, the target word, the generated clue."""
        starts = []
        for p in range(1, len(self)):
            new_shot = self.shot[p] != self.shot[p - 1]
            new_block = self.segment[p] in (TARGET, GENERATED) and self.segment[p] != self.segment[p - 1]
            if new_shot or new_block:
                starts.append(p)
        return starts


def axis_labels(
    texts: Sequence[str], segments: Sequence[str], word_ids: Sequence[int] | None = None
) -> list[str]:
    """Tick labels: the first token of a shot's word gets ``Word:``, of the target ``Target Word:``."""
    labels = []
    for i, (text, segment) in enumerate(zip(texts, segments)):
        first = word_ids is None or i == 0 or word_ids[i] != word_ids[i - 1]
        prefix = {SHOT_WORD: "Word: ", TARGET: "Target Word: "}.get(segment, "") if first else ""
        labels.append(prefix + text)
    return labels


def token_axis(
    tokens: Sequence[str], segments: Sequence[str], shots: Sequence[int], words: Sequence[int]
) -> tuple[np.ndarray, MapAxis]:
    """(indices of the plotted tokens, their axis) from a prompt's per-token labels."""
    segments = np.asarray(segments)
    keep = np.flatnonzero(np.isin(segments, PLOTTED_SEGMENTS))
    texts = [token_text(tokens[i]) for i in keep]
    labels = axis_labels(texts, segments[keep], np.asarray(words)[keep])
    return keep, MapAxis(labels, segments[keep], np.asarray(shots)[keep])


def word_axis(words: Sequence[str], segments: Sequence[str], shots: Sequence[int]) -> MapAxis:
    """The axis of a word-level map (its words are already the plotted ones)."""
    return MapAxis(axis_labels(list(words), list(segments)), np.asarray(segments), np.asarray(shots))
