"""Few-shot prompts in a configurable conversation format, with per-token segments.

A prompt is a conversation (the thesis's chapter 8.1 by default): an instruction,
the assistant's acknowledgement, k shots (user ``Word: {word}``, assistant
``{clue}#``) and the target (the shot's user turn with the target word), rendered
with the model's own chat template and generation prompt. The wording is a
:class:`PromptFormat` (``prompts:`` in config.yaml, overridable per experiment).
Every token gets a segment, a shot number and a word index, computed from the
tokenizer's character offsets into the rendered text, never from string matching on
token pieces.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from attnscope.store import (  # noqa: F401 (the segment names, re-exported for the prompt builders)
    GENERATED,
    INSTRUCTION_SEGMENT,
    SEGMENTS,
    SHOT_CLUE,
    SHOT_WORD,
    TARGET,
    TEMPLATE,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class PromptFormat:
    """The wording of a few-shot conversation (config ``prompts:``; README "Your own task").

    ``instruction`` may use ``{category}``, ``{k}`` and ``{end_marker}``; ``shot_user``
    must hold ``{word}`` (the target's turn uses it too) and ``shot_assistant``
    ``{clue}``; ``None`` drops the instruction (and with it the acknowledgement), the
    acknowledgement, the system turn (then the chat template decides) or the end
    marker (then generation stops only at the end of the turn).
    """

    system_prompt: str | None = None
    instruction: str | None = (
        "You are a crossword clue generator and have to generate a short clue for each input word "
        "from the category {category}. I will give you a word, and you have to output a brief "
        "description of the word, which will be engaging and challenging. Just give one answer, "
        "marking the end with a {end_marker}."
    )
    acknowledgement: str | None = "Ok"
    shot_user: str = "Word: {word}"
    shot_assistant: str = "{clue}#"
    end_marker: str | None = "#"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> PromptFormat:
        return cls(**json.loads(text))


THESIS_FORMAT = PromptFormat()
FORMAT_KEYS = tuple(f.name for f in fields(PromptFormat))
INSTRUCTION_FIELDS = ("category", "k", "end_marker")
END_MARK = THESIS_FORMAT.end_marker

# A word: letters/digits with inner apostrophes or hyphens ("Man's", "semi-aquatic").
WORD_PATTERN = re.compile(r"[^\W_]+(?:['\u2019\-][^\W_]+)*")
# The thesis notebook's words (its regex): "Duck-billed" is two words and "-" none, and the
# text the format adds inside the shot and target turns ("Word" of "Word: Ant") is a word.
THESIS_WORD_PATTERN = re.compile(r"\b\w+(?:'\w+)?\b")
_SENTINEL = "\x00{}\x00"


@dataclass
class Part:
    """A piece of a message's content and what it is."""

    text: str
    segment: str
    shot: int = 0


@dataclass
class Message:
    role: str
    parts: list[Part]

    @property
    def content(self) -> str:
        return "".join(p.text for p in self.parts)


@dataclass
class Span:
    """A character range of the rendered text with its segment."""

    start: int
    end: int
    segment: str
    shot: int = 0
    message: int = 0


@dataclass
class Annotation:
    """Per-token and per-word labels of a token sequence."""

    input_ids: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]
    token_segment: list[str]
    token_shot: list[int]
    token_word: list[int]
    words: list[str] = field(default_factory=list)
    word_segment: list[str] = field(default_factory=list)
    word_shot: list[int] = field(default_factory=list)
    # The thesis convention (its notebook's selection and grouping), prompt tokens only:
    thesis_token_word: list[int] = field(default_factory=list)
    thesis_words: list[str] = field(default_factory=list)
    thesis_word_segment: list[str] = field(default_factory=list)
    thesis_word_shot: list[int] = field(default_factory=list)


def stable_int(text: str) -> int:
    """A platform-independent 32-bit integer of ``text`` (for seeding)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")


def sample_shots(pool: pd.DataFrame, target: str, k: int, seed: int, category: str) -> pd.DataFrame:
    """Draw k shots (word, clue rows) from ``pool`` for one target, never the target itself.

    The draw is a seeded permutation per (seed, category, target), so it does not
    depend on the other targets, and the k-shot set is a prefix of the (k+1)-shot set.
    """
    candidates = pool[pool["word"].str.casefold() != target.casefold()].sort_values("word", kind="stable")
    if len(candidates) < k:
        raise ValueError(
            f"category {category!r} has {len(candidates)} clues besides target {target!r}, fewer than k={k}"
        )
    rng = np.random.default_rng([seed, stable_int(category), stable_int(target.casefold())])
    order = rng.permutation(len(candidates))[:k]
    return candidates.iloc[order].reset_index(drop=True)


THESIS_SPLIT = (0.01, 42)
"""The notebook's held-out share and split seed: ``train_test_split(clues, test_size=0.01,
random_state=42)``; its shots come from the other 99 %."""


def thesis_training_split(pool: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``pool`` (in file order) that the notebook's ``train_test_split`` keeps for
    training, in its order: scikit-learn's ShuffleSplit, restated here so that the
    package needs no scikit-learn (tested against it)."""
    test_size, seed = THESIS_SPLIT
    n_test = math.ceil(test_size * len(pool))
    permutation = np.random.RandomState(seed).permutation(len(pool))
    return pool.iloc[permutation[n_test:]].reset_index(drop=True)


def thesis_shots(pool: pd.DataFrame, n_targets: int, k: int, seed: int) -> list[pd.DataFrame]:
    """The notebook's shot draw (``get_examples``): for each prompt in target order, k rows drawn
    with replacement by ``random.randint`` from its training split, one ``random.Random(seed)``
    stream for all prompts (the target itself is not excluded: its targets had no clue)."""
    train = thesis_training_split(pool)
    draw = random.Random(seed)
    return [
        train.iloc[[draw.randint(0, len(train) - 1) for _ in range(k)]].reset_index(drop=True)
        for _ in range(n_targets)
    ]


def resolve_format(base: Mapping[str, Any], override: Mapping[str, Any] | None = None) -> PromptFormat:
    """The thesis's format with the config's ``prompts:`` keys, then an experiment's, applied."""
    merged = {**asdict(THESIS_FORMAT), **dict(base), **dict(override or {})}
    return PromptFormat(**{key: merged[key] for key in FORMAT_KEYS})


BRACES = "write a literal brace as {{ or }}"


def _fields(key: str, template: str) -> list[str]:
    """The ``{field}`` names of a template, or an error naming its key."""
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ValueError(f"{key}: {exc} in {template!r} ({BRACES})") from None


def check_format(fmt: PromptFormat, key: str = "prompts") -> None:
    """Refuse a format that cannot be rendered or segmented; the message names the key."""
    for name, wanted in (("shot_user", "word"), ("shot_assistant", "clue")):
        found = _fields(f"{key}.{name}", getattr(fmt, name))
        if found != [wanted]:
            raise ValueError(
                f"{key}.{name}: {getattr(fmt, name)!r} must hold the field {{{wanted}}} exactly once and "
                f"no other field (found {['{' + f + '}' for f in found]}); {BRACES}"
            )
    if fmt.instruction is not None:
        unknown = sorted(set(_fields(f"{key}.instruction", fmt.instruction)) - set(INSTRUCTION_FIELDS))
        if unknown:
            raise ValueError(
                f"{key}.instruction: unknown field(s) {unknown}; the instruction may use "
                f"{', '.join('{' + f + '}' for f in INSTRUCTION_FIELDS)} ({BRACES})"
            )
    if fmt.end_marker is not None:
        if not fmt.end_marker.strip():
            raise ValueError(f"{key}.end_marker: must not be blank (null: stop only at the end of the turn)")
        if fmt.end_marker not in fmt.shot_assistant.replace("{clue}", ""):
            raise ValueError(
                f"{key}.end_marker: {fmt.end_marker!r} does not occur in shot_assistant "
                f"{fmt.shot_assistant!r}, so the shots never show where a clue ends; add it after "
                "{clue}, or set end_marker: null"
            )


def _parts(template: str, name: str, value: str, segment: str, shot: int) -> list[Part]:
    """A shot template's literal text as template parts and its one field as ``segment``."""
    parts = []
    for literal, field_name, _, _ in string.Formatter().parse(template):
        if literal:
            parts.append(Part(literal, TEMPLATE, shot))
        if field_name == name:
            parts.append(Part(value, segment, shot))
    return parts


def conversation(
    category: str,
    shots: Sequence[tuple[str, str]],
    target: str,
    fmt: PromptFormat = THESIS_FORMAT,
) -> list[Message]:
    """A few-shot conversation in ``fmt`` as messages made of labelled parts."""
    messages = []
    if fmt.system_prompt is not None:
        messages.append(Message("system", [Part(fmt.system_prompt, TEMPLATE)]))
    if fmt.instruction is not None:
        instruction = fmt.instruction.format(category=category, k=len(shots), end_marker=fmt.end_marker or "")
        messages.append(Message("user", [Part(instruction, INSTRUCTION_SEGMENT)]))
        if fmt.acknowledgement is not None:
            messages.append(Message("assistant", [Part(fmt.acknowledgement, INSTRUCTION_SEGMENT)]))
    for i, (word, clue) in enumerate(shots, start=1):
        messages.append(Message("user", _parts(fmt.shot_user, "word", word, SHOT_WORD, i)))
        messages.append(Message("assistant", _parts(fmt.shot_assistant, "clue", clue, SHOT_CLUE, i)))
    messages.append(Message("user", _parts(fmt.shot_user, "word", target, TARGET, 0)))
    return messages


def render(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]) -> tuple[str, list[Span]]:
    """Render with the chat template and generation prompt; locate every part's characters.

    The template is rendered once with sentinels in place of the contents, which gives
    the template text between messages without searching for content strings.
    """

    def apply(contents: list[str]) -> str:
        chat = [{"role": m.role, "content": c} for m, c in zip(messages, contents)]
        return tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)

    text = apply([m.content for m in messages])
    skeleton = apply([_SENTINEL.format(i) for i in range(len(messages))])
    pieces = re.split("\x00\\d+\x00", skeleton)
    if len(pieces) != len(messages) + 1:
        raise ValueError("the chat template drops or repeats message contents; cannot locate segments")
    spans: list[Span] = []
    position = 0
    for number, (piece, message) in enumerate(zip(pieces, messages)):
        position += len(piece)
        for part in message.parts:
            spans.append(Span(position, position + len(part.text), part.segment, part.shot, number))
            position += len(part.text)
    position += len(pieces[-1])
    rebuilt = "".join(p + m.content for p, m in zip(pieces, messages)) + pieces[-1]
    if rebuilt != text or position != len(text):
        raise ValueError(
            "the chat template changes message contents (e.g. strips them); cannot locate segments"
        )
    return text, spans


def words_of(text: str, spans: Sequence[Span]) -> list[tuple[int, int, Span]]:
    """The words inside the non-template spans, as (start, end, span)."""
    found = []
    for span in spans:
        if span.segment == TEMPLATE:
            continue
        for match in WORD_PATTERN.finditer(text, span.start, span.end):
            found.append((match.start(), match.end(), span))
    return found


def thesis_words_of(text: str, spans: Sequence[Span]) -> list[tuple[int, int, Span]]:
    """The thesis's words: every word (:data:`THESIS_WORD_PATTERN`) of the shot and target
    turns, from the first shot's user turn on, the format's own text included ("Word")."""
    first = next((s.message for s in spans if s.segment in (SHOT_WORD, TARGET)), None)
    found = []
    for span in spans:
        if first is not None and span.message >= first:
            for match in THESIS_WORD_PATTERN.finditer(text, span.start, span.end):
                found.append((match.start(), match.end(), span))
    return found


def _token_chars(text: str, start: int, end: int) -> tuple[int, int]:
    """A token's character range without surrounding whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def annotate(
    text: str,
    spans: Sequence[Span],
    input_ids: Sequence[int],
    tokens: Sequence[str],
    offsets: Sequence[tuple[int, int]],
) -> Annotation:
    """Label tokens by the span and word their characters fall in.

    A token's characters are its offset range without surrounding whitespace; a token
    overlapping a word belongs to it (the first, if a token spans two words).
    """
    words = words_of(text, spans)
    ann = Annotation(list(input_ids), list(tokens), [tuple(o) for o in offsets], [], [], [])
    ann.words = [text[s:e] for s, e, _ in words]
    ann.word_segment = [span.segment for _, _, span in words]
    ann.word_shot = [span.shot for _, _, span in words]
    thesis = thesis_words_of(text, spans)
    ann.thesis_words = [text[s:e] for s, e, _ in thesis]
    ann.thesis_word_segment = [span.segment for _, _, span in thesis]
    ann.thesis_word_shot = [span.shot for _, _, span in thesis]
    for raw_start, raw_end in ann.offsets:
        start, end = _token_chars(text, raw_start, raw_end)
        # The thesis's grouping: a token is part of the word whose characters it lies in.
        ann.thesis_token_word.append(
            next((i for i, (ws, we, _) in enumerate(thesis) if ws <= start and end <= we and end > start), -1)
        )
        span = next((s for s in spans if s.start <= start < s.end), None) if end > start else None
        ann.token_segment.append(span.segment if span else TEMPLATE)
        ann.token_shot.append(span.shot if span else 0)
        word = -1
        if span is not None and span.segment != TEMPLATE:
            word = next((i for i, (ws, we, _) in enumerate(words) if ws < end and start < we), -1)
        ann.token_word.append(word)
    return ann


def tokenize(tokenizer: PreTrainedTokenizerBase, text: str, spans: Sequence[Span]) -> Annotation:
    """Tokenize rendered text (its special tokens are in the text) and annotate it."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    return annotate(text, spans, enc["input_ids"], tokens, enc["offset_mapping"])


def annotate_generated(
    tokenizer: PreTrainedTokenizerBase, prompt: Annotation, generated_ids: Sequence[int], clue: str
) -> Annotation:
    """Extend a prompt's annotation with generated tokens (clue segment, ``#`` as template).

    Character offsets of generated tokens come from decoding growing prefixes of the
    generated ids, so the labels follow the same offsets rule as the prompt's.
    """
    generated_ids = list(generated_ids)
    cuts = [
        len(tokenizer.decode(generated_ids[:i], skip_special_tokens=False))
        for i in range(len(generated_ids) + 1)
    ]
    gen_text = tokenizer.decode(generated_ids, skip_special_tokens=False)
    clue_start = gen_text.find(clue) if clue else -1
    spans = [Span(clue_start, clue_start + len(clue), GENERATED)] if clue_start >= 0 else []
    tail = annotate(
        gen_text,
        spans,
        generated_ids,
        tokenizer.convert_ids_to_tokens(generated_ids),
        list(zip(cuts[:-1], cuts[1:])),
    )
    n_words = len(prompt.words)
    return Annotation(
        prompt.input_ids + tail.input_ids,
        prompt.tokens + tail.tokens,
        prompt.offsets + [(-1, -1)] * len(tail.offsets),
        prompt.token_segment + tail.token_segment,
        prompt.token_shot + tail.token_shot,
        prompt.token_word + [w + n_words if w >= 0 else -1 for w in tail.token_word],
        prompt.words + tail.words,
        prompt.word_segment + tail.word_segment,
        prompt.word_shot + tail.word_shot,
        prompt.thesis_token_word + [-1] * len(tail.input_ids),
        prompt.thesis_words,
        prompt.thesis_word_segment,
        prompt.thesis_word_shot,
    )


def draw_shots(pool: pd.DataFrame, targets: Sequence[str], spec: Mapping[str, Any]) -> list[pd.DataFrame]:
    """The shots of each target by the experiment's ``shot_draw``: attnscope's (:func:`sample_shots`)
    or the thesis notebook's (:func:`thesis_shots`)."""
    if spec.get("shot_draw") == "thesis":
        return thesis_shots(pool, len(targets), spec["k"], spec["seed"])
    return [sample_shots(pool, target, spec["k"], spec["seed"], spec["category"]) for target in targets]


def build_prompts(
    clues: pd.DataFrame,
    experiment: str,
    spec: dict[str, Any],
    targets: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    fmt: PromptFormat = THESIS_FORMAT,
    max_length: int | None = None,
) -> pd.DataFrame:
    """One row per target: shots, rendered text, token ids and per-token labels.

    ``spec`` is the experiment's config (category, k, seed, shot_draw). A target needs no
    clue of its own (its ``reference_clue`` is then empty). ``max_length`` (the model's
    context) bounds the prompt length.
    """
    category, k, seed = spec["category"], spec["k"], spec["seed"]
    pool = clues[clues["category"] == category]
    references = dict(zip(pool["word"].str.casefold(), pool["clue"]))
    rows = []
    for index, (target, shots) in enumerate(zip(targets, draw_shots(pool, targets, spec))):
        shot_pairs = list(zip(shots["word"], shots["clue"]))
        text, spans = render(tokenizer, conversation(category, shot_pairs, target, fmt))
        ann = tokenize(tokenizer, text, spans)
        if max_length is not None and len(ann.input_ids) > max_length:
            raise ValueError(
                f"experiments.{experiment}: the prompt for target {target!r} has "
                f"{len(ann.input_ids)} tokens, "
                f"more than the model's context of {max_length} tokens; lower experiments.{experiment}.k "
                "or use a model with a longer context"
            )
        rows.append(
            {
                "prompt_index": index,
                "prompt_id": f"{experiment}/{index:03d}",
                "experiment": experiment,
                "category": category,
                "k": k,
                "seed": seed,
                "target": target,
                "reference_clue": references.get(target.casefold()),
                "shot_words": list(shots["word"]),
                "shot_clues": list(shots["clue"]),
                "prompt_format": fmt.to_json(),
                "text": text,
                "template_prefix": text[: spans[0].start] if spans else text,
                **annotation_columns(ann),
            }
        )
    return pd.DataFrame(rows)


def annotation_columns(ann: Annotation) -> dict[str, Any]:
    """The prompt-table columns of an :class:`Annotation` (read back by :func:`prompt_annotation`)."""
    return {
        "n_tokens": len(ann.input_ids),
        "input_ids": ann.input_ids,
        "tokens": ann.tokens,
        "token_start": [o[0] for o in ann.offsets],
        "token_end": [o[1] for o in ann.offsets],
        "token_segment": ann.token_segment,
        "token_shot": ann.token_shot,
        "token_word": ann.token_word,
        "words": ann.words,
        "word_segment": ann.word_segment,
        "word_shot": ann.word_shot,
        "thesis_token_word": ann.thesis_token_word,
        "thesis_words": ann.thesis_words,
        "thesis_word_segment": ann.thesis_word_segment,
        "thesis_word_shot": ann.thesis_word_shot,
    }


def prompt_annotation(row: dict[str, Any] | pd.Series) -> Annotation:
    """The :class:`Annotation` stored in one prompt-table row."""
    return Annotation(
        list(row["input_ids"]),
        list(row["tokens"]),
        list(zip(row["token_start"], row["token_end"])),
        list(row["token_segment"]),
        list(row["token_shot"]),
        list(row["token_word"]),
        list(row["words"]),
        list(row["word_segment"]),
        list(row["word_shot"]),
        list(row["thesis_token_word"]),
        list(row["thesis_words"]),
        list(row["thesis_word_segment"]),
        list(row["thesis_word_shot"]),
    )


def table_format(prompt_table: pd.DataFrame) -> PromptFormat:
    """The one :class:`PromptFormat` all prompts of a prompt table were built with."""
    formats = set(prompt_table["prompt_format"])
    if len(formats) != 1:
        raise ValueError(f"a prompt table holds {len(formats)} prompt formats; expected one")
    return PromptFormat.from_json(formats.pop())
