"""A prepared model's manifest and tokenizer (``results/models/{model}/``, written by
:func:`attnscope.models.prepare_model`) and the chat templates: what building prompts reads,
without the model classes that :mod:`attnscope.models` loads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase, TokenizersBackend

MANIFEST = "manifest.json"
WEIGHTS_DIR = "weights"

# The Mistral v1 instruct format exactly as mistral_common encodes it: every user turn
# is "[INST] {content} [/INST]", every assistant turn " {content}</s>" (mistral_common
# encodes the assistant text as its own SentencePiece piece, hence the leading space).
MISTRAL_V1_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ raise_exception('mistral-v1 has no system turn') }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}"
)
# The thesis notebook's token ids (its Mistral-7B-Instruct-v0.2 tokenizer of early 2024):
# Hugging Face's v0.2 template ("[INST] {content} [/INST]", then the assistant text with no
# space before it and "</s>"), tokenized by its own tokenize(), which added a second "<s>"
# in front and "</s>" after the last "[/INST]".
MISTRAL_THESIS_TEMPLATE = (
    "{{ bos_token + bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ raise_exception('mistral-thesis has no system turn') }}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}{{ eos_token }}"
)
# No chat template (a base model, Gemma 3 270M): the conversation as plain text, one line per
# turn; an assistant turn follows "Clue: ", so a shot of the default format reads
# "Word: Ant\nClue: {clue}#\n". The generation prompt is "Clue:" without the space, which a
# SentencePiece tokenizer joins to the next word ("▁A"), so the model writes it, as in the shots.
PLAIN_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ 'Clue: ' }}{% endif %}{{ message['content'] + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Clue:' }}{% endif %}"
)
CHAT_TEMPLATES = {
    "mistral-v1": MISTRAL_V1_TEMPLATE,
    "mistral-thesis": MISTRAL_THESIS_TEMPLATE,
    "none": PLAIN_TEMPLATE,
}


class ModelUnavailableError(RuntimeError):
    """A model's files or package are missing; the message says what to install."""


def read_manifest(model_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a prepared model (``results/models/{model}``)."""
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise ModelUnavailableError(f"{path}: model not prepared; run `snakemake {path}`")
    return json.loads(path.read_text())


def weights_location(model_dir: str | os.PathLike, manifest: dict[str, Any]) -> str | Path:
    """Where ``from_pretrained`` finds the weights: the cache, a hub id or a local path."""
    location = manifest["location"]
    return Path(model_dir) / location if location == WEIGHTS_DIR else location


def gguf_tokenizer(gguf: str | os.PathLike) -> PreTrainedTokenizerBase:
    """The tokenizer a GGUF file carries (its vocabulary and merges, converted by transformers)."""
    gguf = Path(gguf)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def smollm2_tokenizer(gguf: str | os.PathLike) -> PreTrainedTokenizerBase:
    """SmolLM2's tokenizer from its GGUF: :func:`gguf_tokenizer`'s, the same bytes (tested), read by
    the class AutoTokenizer picks for it (tokenizers' generic backend). AutoTokenizer first reads
    the model's config from the whole GGUF to choose that class, with gguf's slow reader (most of
    its time); the tokenizer itself comes from transformers' fast metadata reader either way."""
    gguf = Path(gguf)
    return TokenizersBackend.from_pretrained(gguf.parent, gguf_file=gguf.name)


def load_tokenizer(model_dir: str | os.PathLike, chat_template: str | None = None) -> PreTrainedTokenizerBase:
    """The prepared model's tokenizer; ``chat_template`` overrides its template.

    ``chat_template`` is a key of ``CHAT_TEMPLATES`` (``mistral-v1``) or a Jinja string.
    A tokenizer without a pad token pads with its end-of-sequence token.
    """
    tokenizer = AutoTokenizer.from_pretrained(weights_location(model_dir, read_manifest(model_dir)))
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATES.get(chat_template, chat_template)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
