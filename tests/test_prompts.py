"""Prompt building: shot sampling, segments and word indices from offsets, Mistral ids."""

import pandas as pd
import pytest
from mistral_common.protocol.instruct.messages import AssistantMessage, UserMessage
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from attnscope import prompts

THESIS_SHOTS = [
    ("Parrot", "Mimics you, but doesn't understand."),
    ("Butterfly", "Flutters by, colorfully."),
    ("Salmon", "Jumps upstream, but never down."),
]


def thesis_prompt(tokenizer, shots=THESIS_SHOTS, target="Ant", system_prompt=None):
    text, spans = prompts.render(tokenizer, prompts.conversation("Animals", shots, target, system_prompt))
    return text, prompts.tokenize(tokenizer, text, spans)


def test_thesis_example_gives_mistral_common_ids(tiny_mistral):
    """Chapter 8.1's example prompt tokenizes exactly as mistral_common's v1 tokenizer does."""
    _, tokenizer = tiny_mistral
    _, ann = thesis_prompt(tokenizer)
    messages = [
        UserMessage(content=prompts.INSTRUCTION.format(category="Animals")),
        AssistantMessage(content="Ok"),
    ]
    for word, clue in THESIS_SHOTS:
        messages += [UserMessage(content=f"Word: {word}"), AssistantMessage(content=f"{clue}#")]
    messages.append(UserMessage(content="Word: Ant"))
    reference = MistralTokenizer.v1().encode_chat_completion(ChatCompletionRequest(messages=messages))
    assert ann.input_ids == reference.tokens


@pytest.mark.parametrize("fixture", ["tiny_mistral", "tiny_llama"])
def test_segments_cover_exactly_the_parts(fixture, request):
    _, tokenizer = request.getfixturevalue(fixture)
    text, ann = thesis_prompt(tokenizer)
    for i, (word, clue) in enumerate(THESIS_SHOTS, start=1):
        clue_tokens = [
            t
            for t, s, sh in zip(range(len(ann.tokens)), ann.token_segment, ann.token_shot)
            if s == prompts.SHOT_CLUE and sh == i
        ]
        # The clue's tokens, decoded together, are exactly the clue (no template, no "#").
        decoded = tokenizer.decode([ann.input_ids[t] for t in clue_tokens]).strip()
        assert decoded == clue
        # Every token whose characters lie inside the clue carries that shot's clue segment.
        start = text.index(clue)
        for t, (s, e) in enumerate(ann.offsets):
            inside = text[s:e].strip() and start <= s + (
                len(text[s:e]) - len(text[s:e].lstrip())
            ) < start + len(clue)
            if inside:
                assert (ann.token_segment[t], ann.token_shot[t]) == (prompts.SHOT_CLUE, i)
        word_tokens = [
            t
            for t, (s, sh) in enumerate(zip(ann.token_segment, ann.token_shot))
            if s == prompts.SHOT_WORD and sh == i
        ]
        assert tokenizer.decode([ann.input_ids[t] for t in word_tokens]).strip() == word
    target_tokens = [t for t, s in enumerate(ann.token_segment) if s == prompts.TARGET]
    assert tokenizer.decode([ann.input_ids[t] for t in target_tokens]).strip() == "Ant"
    assert set(ann.token_segment) == {
        prompts.TEMPLATE,
        prompts.INSTRUCTION_SEGMENT,
        prompts.SHOT_WORD,
        prompts.SHOT_CLUE,
        prompts.TARGET,
    }


@pytest.mark.parametrize("fixture", ["tiny_mistral", "tiny_llama"])
def test_word_indices_group_the_subwords_of_one_word(fixture, request):
    _, tokenizer = request.getfixturevalue(fixture)
    shots = [("Dog", "Man's best friend."), ("Mink", "Furred, semi-aquatic mammal.")]
    _, ann = thesis_prompt(tokenizer, shots, target="Hippopotamus")
    for word in ["Man's", "semi-aquatic", "Hippopotamus", "Furred"]:
        index = ann.words.index(word)
        members = [t for t, w in enumerate(ann.token_word) if w == index]
        assert len(members) >= 1
        assert members == list(range(members[0], members[-1] + 1)), "a word's subwords are contiguous"
        assert tokenizer.decode([ann.input_ids[t] for t in members]).strip() == word
    # Punctuation and template tokens belong to no word.
    assert all(w == -1 for w, s in zip(ann.token_word, ann.token_segment) if s == prompts.TEMPLATE)
    assert ann.word_segment[ann.words.index("Hippopotamus")] == prompts.TARGET
    assert ann.word_shot[ann.words.index("semi-aquatic")] == 2


def test_smollm2_default_system_turn_is_template_and_recorded(tiny_llama):
    _, tokenizer = tiny_llama
    text, ann = thesis_prompt(tokenizer)
    assert "You are a helpful AI assistant named SmolLM" in text
    first_instruction = ann.token_segment.index(prompts.INSTRUCTION_SEGMENT)
    prefix = tokenizer.decode(ann.input_ids[:first_instruction])
    assert "SmolLM" in prefix and set(ann.token_segment[:first_instruction]) == {prompts.TEMPLATE}
    explicit, ann2 = thesis_prompt(tokenizer, system_prompt="Be brief.")
    assert "SmolLM" not in explicit and "Be brief." in explicit
    assert text.endswith("<|im_start|>assistant\n")


def pool(n: int) -> pd.DataFrame:
    return pd.DataFrame({"word": [f"W{i:02d}" for i in range(n)], "clue": [f"clue {i}" for i in range(n)]})


def test_shot_sampler_is_seeded_excludes_target_and_nests_over_k():
    p = pool(12)
    a = prompts.sample_shots(p, "W03", 5, seed=7, category="C")
    b = prompts.sample_shots(p.sample(frac=1, random_state=1), "W03", 5, seed=7, category="C")
    assert list(a["word"]) == list(b["word"]), "independent of the pool's row order"
    assert "W03" not in set(a["word"])
    bigger = prompts.sample_shots(p, "W03", 8, seed=7, category="C")
    assert list(bigger["word"][:5]) == list(a["word"])
    assert list(prompts.sample_shots(p, "W03", 5, seed=8, category="C")["word"]) != list(a["word"])
    assert list(prompts.sample_shots(p, "w03", 11, seed=7, category="C")["word"]).count("W03") == 0
    with pytest.raises(ValueError, match="fewer than k=12"):
        prompts.sample_shots(p, "W03", 12, seed=7, category="C")


def test_build_prompts_table(tiny_llama, sample_clues):
    _, tokenizer = tiny_llama
    targets = ["Ant", "Bee", "Parrot"]
    table = prompts.build_prompts(
        sample_clues, "animals-k3", {"category": "Animals", "k": 3, "seed": 0}, targets, tokenizer
    )
    assert list(table["target"]) == targets
    for row in table.itertuples():
        assert row.target not in row.shot_words and len(row.shot_words) == 3
        assert len(row.input_ids) == row.n_tokens == len(row.token_segment) == len(row.token_word)
        assert tokenizer(row.text, add_special_tokens=False)["input_ids"] == list(row.input_ids)
    assert table["reference_clue"].notna().all()
    with pytest.raises(ValueError, match="animals-k3.*context of 50 tokens; lower experiments.animals-k3.k"):
        prompts.build_prompts(
            sample_clues,
            "animals-k3",
            {"category": "Animals", "k": 3, "seed": 0},
            targets,
            tokenizer,
            max_length=50,
        )


def test_generated_tokens_are_labelled(tiny_llama):
    _, tokenizer = tiny_llama
    _, ann = thesis_prompt(tokenizer)
    generated = tokenizer("Small, semi-aquatic worker.#<|im_end|>", add_special_tokens=False)["input_ids"]
    full = prompts.annotate_generated(tokenizer, ann, generated, "Small, semi-aquatic worker.")
    tail = slice(len(ann.input_ids), None)
    assert full.input_ids[tail] == generated
    assert full.words[len(ann.words) :] == ["Small", "semi-aquatic", "worker"]
    segs = full.token_segment[tail]
    assert segs[-2:] == [prompts.TEMPLATE, prompts.TEMPLATE]  # "#" and <|im_end|>
    assert set(segs[:-2]) == {prompts.GENERATED}
    semi = full.words.index("semi-aquatic")
    assert (
        tokenizer.decode([i for i, w in zip(full.input_ids, full.token_word) if w == semi]).strip()
        == "semi-aquatic"
    )
