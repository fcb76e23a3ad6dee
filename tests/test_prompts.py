"""Prompt building: shot sampling, segments and word indices from offsets, Mistral ids."""

import pandas as pd
import pytest
from mistral_common.protocol.instruct.messages import AssistantMessage, UserMessage
from mistral_common.protocol.instruct.request import ChatCompletionRequest
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

from attnscope import prompts
from tests.helpers import NOTEBOOK_FORMAT, notebook_groups, notebook_selection

THESIS_SHOTS = [
    ("Parrot", "Mimics you, but doesn't understand."),
    ("Butterfly", "Flutters by, colorfully."),
    ("Salmon", "Jumps upstream, but never down."),
]


# A non-default format: another task's wording, another end marker, a literal brace.
ANTONYM_FORMAT = prompts.PromptFormat(
    instruction="Give the antonym of each {category} word in {k} shots, then {end_marker}. Use {{no}} prose.",
    acknowledgement="Understood.",
    shot_user="Opposite of: {word}?",
    shot_assistant="Antonym -> {clue} ||",
    end_marker="||",
)
NO_INSTRUCTION = prompts.PromptFormat(instruction=None)
FORMATS = [prompts.THESIS_FORMAT, ANTONYM_FORMAT, NO_INSTRUCTION]


def thesis_prompt(tokenizer, shots=THESIS_SHOTS, target="Ant", fmt=prompts.THESIS_FORMAT):
    text, spans = prompts.render(tokenizer, prompts.conversation("Animals", shots, target, fmt))
    return text, prompts.tokenize(tokenizer, text, spans)


@pytest.mark.parametrize(
    ("fmt", "instruction", "shot_user", "shot_assistant"),
    [
        (
            prompts.THESIS_FORMAT,
            # Chapter 8.1's wording, typed out here rather than taken from the code.
            "You are a crossword clue generator and have to generate a short clue for each input word "
            "from the category Animals. I will give you a word, and you have to output a brief "
            "description of the word, which will be engaging and challenging. Just give one answer, "
            "marking the end with a #.",
            "Word: {}",
            "{}#",
        ),
        (
            ANTONYM_FORMAT,
            "Give the antonym of each Animals word in 3 shots, then ||. Use {no} prose.",
            "Opposite of: {}?",
            "Antonym -> {} ||",
        ),
    ],
)
def test_prompt_gives_mistral_common_ids(tiny_mistral, fmt, instruction, shot_user, shot_assistant):
    """The prompt tokenizes exactly as mistral_common's v1 tokenizer does, for any format."""
    _, tokenizer = tiny_mistral
    _, ann = thesis_prompt(tokenizer, fmt=fmt)
    messages = [UserMessage(content=instruction), AssistantMessage(content=fmt.acknowledgement)]
    for word, clue in THESIS_SHOTS:
        messages += [
            UserMessage(content=shot_user.format(word)),
            AssistantMessage(content=shot_assistant.format(clue)),
        ]
    messages.append(UserMessage(content=shot_user.format("Ant")))
    reference = MistralTokenizer.v1().encode_chat_completion(ChatCompletionRequest(messages=messages))
    assert ann.input_ids == reference.tokens


@pytest.mark.parametrize("fmt", FORMATS, ids=["thesis", "antonym", "no-instruction"])
@pytest.mark.parametrize("fixture", ["tiny_mistral", "tiny_llama"])
def test_segments_cover_exactly_the_parts(fixture, fmt, request):
    _, tokenizer = request.getfixturevalue(fixture)
    text, ann = thesis_prompt(tokenizer, fmt=fmt)
    for i, (word, clue) in enumerate(THESIS_SHOTS, start=1):
        clue_tokens = [
            t
            for t, s, sh in zip(range(len(ann.tokens)), ann.token_segment, ann.token_shot)
            if s == prompts.SHOT_CLUE and sh == i
        ]
        # The clue's tokens, decoded together, are exactly the clue (no template, no end marker).
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
        prompts.SHOT_WORD,
        prompts.SHOT_CLUE,
        prompts.TARGET,
    } | ({prompts.INSTRUCTION_SEGMENT} if fmt.instruction else set())
    # The format's literal text ("Word:", "Opposite of:", the end marker) is template.
    for literal in (fmt.shot_user.split("{")[0].strip(), fmt.end_marker):
        at = text.index(literal, text.index(THESIS_SHOTS[0][0]) - len(fmt.shot_user))
        covering = [t for t, (s, e) in enumerate(ann.offsets) if s < at + len(literal) and at < e]
        assert {ann.token_segment[t] for t in covering} == {prompts.TEMPLATE}, literal


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
    explicit, ann2 = thesis_prompt(tokenizer, fmt=prompts.PromptFormat(system_prompt="Be brief."))
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


def test_thesis_split_is_scikit_learns():
    """The notebook's training split: train_test_split(test_size=0.01, random_state=42)."""
    from sklearn.model_selection import train_test_split

    p = pool(230)  # 1 % is 2.3 rows: scikit-learn rounds the test share up, to 3
    train, _ = train_test_split(p, test_size=0.01, random_state=42)
    ours = prompts.thesis_training_split(p)
    assert len(ours) == 227
    pd.testing.assert_frame_equal(ours, train.reset_index(drop=True))


def test_thesis_shot_draw_is_the_notebooks(tiny_llama):
    """One random stream over all prompts, k draws with replacement each (the notebook's
    random.seed(44) then random.randint per shot), from the training split; a prompt's shots
    depend on the prompts before it."""
    import random

    from sklearn.model_selection import train_test_split

    p = pool(40)
    train = train_test_split(p, test_size=0.01, random_state=42)[0].reset_index(drop=True)
    random.seed(44)
    expected = [[train.iloc[random.randint(0, len(train) - 1)]["word"] for _ in range(5)] for _ in range(30)]
    drawn = prompts.thesis_shots(p, 30, 5, seed=44)
    assert [list(shots["word"]) for shots in drawn] == expected
    assert any(len(set(words)) < 5 for words in expected), "with replacement: some prompt repeats a shot"
    assert [list(s["word"]) for s in prompts.thesis_shots(p, 30, 5, seed=45)] != expected
    _, tokenizer = tiny_llama
    clues = p.assign(category="C")
    spec = {"category": "C", "k": 5, "seed": 44, "shot_draw": "thesis"}
    table = prompts.build_prompts(clues, "c-k5", spec, ["Ant", "Bee", "Fox"], tokenizer)
    assert [list(words) for words in table["shot_words"]] == expected[:3]


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


def test_no_instruction_drops_the_acknowledgement_too():
    roles = [m.role for m in prompts.conversation("Animals", THESIS_SHOTS, "Ant", NO_INSTRUCTION)]
    assert roles == ["user", "assistant"] * 3 + ["user"]
    thesis = prompts.conversation("Animals", THESIS_SHOTS, "Ant")
    assert [p.text for p in thesis[1].parts] == ["Ok"] and len(thesis) == len(roles) + 2


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"shot_user": "Word:"}, r"prompts\.shot_user: 'Word:' must hold the field \{word\} exactly once"),
        ({"shot_assistant": "{clue} {word}#"}, r"shot_assistant: .*found \['\{clue\}', '\{word\}'\]"),
        ({"instruction": "Clues on {topic}."}, r"prompts\.instruction: unknown field\(s\) \['topic'\]"),
        ({"instruction": "Use {braces"}, r"prompts\.instruction: .*write a literal brace as \{\{"),
        ({"end_marker": " "}, r"prompts\.end_marker: must not be blank"),
        ({"end_marker": "||"}, r"prompts\.end_marker: '\|\|' does not occur in shot_assistant '\{clue\}#'"),
    ],
)
def test_format_errors_name_their_key(override, message):
    fmt = prompts.resolve_format({}, override)
    with pytest.raises(ValueError, match=message):
        prompts.check_format(fmt)
    prompts.check_format(prompts.resolve_format({}, {}))  # the thesis's format passes


def test_resolve_format_applies_config_then_experiment():
    fmt = prompts.resolve_format({"acknowledgement": "Sure."}, {"instruction": None})
    assert fmt.acknowledgement == "Sure." and fmt.instruction is None
    assert fmt.shot_user == prompts.THESIS_FORMAT.shot_user
    assert prompts.PromptFormat.from_json(fmt.to_json()) == fmt


def sentencepiece_ids(text: str) -> list[int]:
    """Text tokenized as the thesis's Hugging Face tokenizer did: split at <s> and </s>, each
    piece SentencePiece-encoded on its own (with its leading "▁"), from mistral_common's model."""
    import re
    from pathlib import Path

    import mistral_common
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor(
        model_file=str(Path(mistral_common.__file__).parent / "data" / "tokenizer.model.v1")
    )
    ids = []
    for piece in re.split("(<s>|</s>)", text):
        ids += [1] if piece == "<s>" else [2] if piece == "</s>" else model.encode(piece) if piece else []
    return ids


def test_mistral_thesis_template_gives_the_notebooks_ids(tiny_mistral):
    """The thesis's printed prompt as its notebook tokenized it: two <s>, "[/INST]" straight
    before each clue, "</s>" after the last "[/INST]"."""
    from attnscope.prepared import CHAT_TEMPLATES

    _, tokenizer = tiny_mistral
    thesis = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    thesis.chat_template = CHAT_TEMPLATES["mistral-thesis"]
    text, ann = thesis_prompt(thesis)
    assert text.startswith("<s><s>[INST] You are a crossword clue generator")
    assert "Word: Parrot [/INST]Mimics you, but doesn't understand.#</s>[INST] Word: Butterfly" in text
    assert text.endswith("[INST] Word: Ant [/INST]</s>")
    assert ann.input_ids == sentencepiece_ids(text)
    # Pinned: <s> <s> ▁[ INST ] ▁You … and … ▁Ant ▁[ / INST ] </s>; "]" then "M" of "Mimics".
    assert ann.input_ids[:6] == [1, 1, 733, 16289, 28793, 995]
    assert ann.input_ids[-6:] == [3821, 733, 28748, 16289, 28793, 2]
    start = ann.token_segment.index(prompts.SHOT_CLUE)
    assert ann.tokens[start - 1 : start + 3] == ["]", "M", "im", "ics"]
    assert len(ann.input_ids) == 152


def thesis_tokens(annotation: prompts.Annotation) -> list[int]:
    """The tokens the thesis's figures draw, from the annotation's labels: the shots' words and
    clues (their punctuation too), the target, and the words the format adds in those turns
    ("Word"); never the chat template, the instruction, ":" or the end marker."""
    kept = (prompts.SHOT_WORD, prompts.SHOT_CLUE, prompts.TARGET)
    return [
        t
        for t, (segment, word) in enumerate(zip(annotation.token_segment, annotation.thesis_token_word))
        if segment in kept or word >= 0
    ]


def test_thesis_convention_is_the_notebooks_selection_and_grouping(tiny_mistral):
    from attnscope.prepared import CHAT_TEMPLATES

    _, tokenizer = tiny_mistral
    thesis = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    thesis.chat_template = CHAT_TEMPLATES["mistral-thesis"]
    shots = [*THESIS_SHOTS[:2], ("Platypus", "Duck-billed, egg-laying mammal.")]
    _, ann = thesis_prompt(thesis, shots, fmt=NOTEBOOK_FORMAT)
    drawn = notebook_selection(ann.tokens)
    assert thesis_tokens(ann) == drawn
    # Written down from running the notebook's logic by hand on the thesis's example prompt.
    _, example = thesis_prompt(thesis, fmt=NOTEBOOK_FORMAT)
    assert [example.tokens[t] for t in thesis_tokens(example)] == [
        "▁Word", "▁Par", "rot", "M", "im", "ics", "▁you", ",", "▁but", "▁doesn", "'", "t", "▁understand",
        ".", "▁Word", "▁Butter", "fly", "Fl", "ut", "ters", "▁by", ",", "▁color", "fully", ".", "▁Word",
        "▁Sal", "mon", "J", "umps", "▁up", "stream", ",", "▁but", "▁never", "▁down", ".", "▁Word", "▁Ant",
    ]  # fmt: skip
    # The notebook's words: the regex over every shot and target turn ("Word" included).
    notebook_words = [w for m in ("Word: Parrot", THESIS_SHOTS[0][1], "Word: Butterfly", THESIS_SHOTS[1][1],
                                  "Word: Platypus", "Duck-billed, egg-laying mammal.#", "Word: Ant")
                      for w in prompts.THESIS_WORD_PATTERN.findall(m)]  # fmt: skip
    assert ann.thesis_words == notebook_words
    assert "Duck" in ann.thesis_words and "billed" in ann.thesis_words
    groups = notebook_groups(ann.tokens, drawn, notebook_words)
    ours = [[t for t, w in enumerate(ann.thesis_token_word) if w == i] for i in range(len(ann.thesis_words))]
    assert ours == groups
    hyphen = ann.tokens.index("-")  # the "-" of "Duck-billed"
    assert ann.thesis_token_word[hyphen] == -1 and hyphen in drawn, "the '-' is drawn but in no word"
    # With the mistral-v1 template the notebook finds no "Ok" token and draws nothing.
    _, v1 = thesis_prompt(tokenizer, fmt=NOTEBOOK_FORMAT)
    assert notebook_selection(v1.tokens) == [] and thesis_tokens(v1) != []
