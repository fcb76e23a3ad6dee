"""A researcher's own data and task: the thesis's input shapes, targets without clues,
text files as people save them, and a second few-shot task through the whole workflow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from attnscope import data, prepared, prompts
from tests.helpers import REPORT_AFTER_RUN, example_config, snakemake, tiny_config, write_config

# Written for these tests: the shot pool (thesis format) and new target words, none of
# which has a clue in the pool.
SHOT_POOL = [
    ("Parrot", "Mimics you, but doesn't understand."),
    ("Butterfly", "Flutters by, colorfully."),
    ("Salmon", "Jumps upstream, but never down."),
    ("Camel", "Desert traveller with a hump."),
    ("Owl", "Wise night watcher."),
    ("Beaver", "Builds dams with its teeth."),
    ("Penguin", "Dresses formally, never flies."),
    ("Zebra", "Striped horse of the savanna."),
]
NEW_TARGETS = ["Tapir", "Ocelot", "Pécari", "Narwhal"]


def thesis_files(directory: Path, encoding: str = "utf-8-sig", newline: str = "\r\n") -> tuple[Path, Path]:
    """A ``Word;Clue`` shot pool and a target list headed by its category, as the thesis saved them."""
    clues = directory / "animals.csv"
    lines = ["Word;Clue", *(f"{w};{c}  " for w, c in SHOT_POOL), ""]
    clues.write_bytes(newline.join(lines).encode(encoding))
    targets = directory / "animals_targets.txt"
    targets.write_bytes(newline.join(["Animals", *(f"{t} " for t in NEW_TARGETS), "", ""]).encode(encoding))
    return clues, targets


# Input quirks, each on its own (unit tier).


@pytest.mark.parametrize(
    ("encoding", "newline", "expected"),
    [
        ("utf-8", "\n", "utf-8"),
        ("utf-8-sig", "\n", "utf-8-sig"),
        ("utf-8", "\r\n", "utf-8"),
        ("utf-8-sig", "\r\n", "utf-8-sig"),
        ("latin-1", "\r\n", "latin-1"),
    ],
)
def test_target_list_as_people_save_it(tmp_path, encoding, newline, expected):
    _, path = thesis_files(tmp_path, encoding, newline)
    targets = data.read_target_list(str(path), "Animals", "data.targets.Animals")
    assert targets.words == NEW_TARGETS, "no BOM, CR or trailing blank in a word; the header skipped"
    assert targets.header and targets.encoding == expected
    assert targets.lines == [2, 3, 4, 5]


@pytest.mark.parametrize(("encoding", "newline"), [("utf-8-sig", "\r\n"), ("latin-1", "\r\n")])
def test_clue_file_as_people_save_it(tmp_path, encoding, newline):
    path, _ = thesis_files(tmp_path, encoding, newline)
    clues, report = data.import_clues([{"path": str(path), "category": "Animals"}])
    assert list(clues["word"]) == [w for w, _ in SHOT_POOL]
    assert list(clues["clue"]) == [c for _, c in SHOT_POOL]
    assert report["rejections"] == []


def test_header_is_only_the_category_name(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("# my targets\n\n  ANIMALS \nAnt\nanimals\n")
    assert data.read_target_list(str(path), "Animals", "k").words == ["Ant", "animals"]
    path.write_text("Ant\nAnimals\n")  # not the first line: a target word
    targets = data.read_target_list(str(path), "Animals", "k")
    assert targets.words == ["Ant", "Animals"] and not targets.header


def test_unreadable_target_list_names_its_key(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("Animals\nAnt\n".encode("utf-16"))
    with pytest.raises(
        data.ClueImportError, match=rf"{path}: UTF-16 text.*fix its path in data.targets.Animals"
    ):
        data.read_target_list(str(path), "Animals", "data.targets.Animals")
    with pytest.raises(data.ClueImportError, match="data.targets.Animals: cannot read target list"):
        data.read_target_list(str(tmp_path / "missing.txt"), "Animals", "data.targets.Animals")


def test_near_miss_target_warns_with_the_closest_words(tmp_path):
    pool = tmp_path / "animals.csv"
    pool.write_text("Word;Clue\nBee;Buzzing honey maker.\nBear;Sleeps all winter.\nFox;Sly and red.\nBea;\n")
    clues, report = data.import_clues([{"path": str(pool), "category": "Animals"}])
    checked = data.target_report(clues, report["rejections"], "Animals", ["Bea", "Fox", "Quokka"])
    assert checked["with_reference"] == 1 and checked["without_reference"] == ["Bea", "Quokka"]
    assert checked["warnings"] == [
        f"target 'Bea' has no clue; closest clue words: Bear, Bee; "
        f"rejected rows that mention it: {pool}:5 (empty)"
    ]


@pytest.mark.parametrize(
    ("word", "closest"),
    [
        ("Bea", ["Bear", "Bee"]),  # one insertion, one substitution
        ("Baer", ["Bear"]),  # neighbours swapped
        ("Hippopotamsu", ["Hippopotamus"]),  # long words allow two edits
        ("Eager", []),  # Early is three edits away: a new word, not a typo
        ("Stale", []),  # Tall: two edits in a short word
        ("Bee", []),  # the word itself is not "close"
    ],
)
def test_closest_words_are_a_typo_away(word, closest):
    pool = ["Bee", "Bear", "Early", "Tall", "Hippopotamus", "Fox"]
    assert data.closest_words(word, pool) == closest


def test_rejected_rows_match_fields_not_file_names(tmp_path):
    """A target named like the clue file (ant.csv) is not 'mentioned' by its rows."""
    pool = tmp_path / "ant.csv"
    pool.write_text("Word;Clue\nFern;Green; feathery\nIvy;Climbs walls, ant trail\n")
    clues, report = data.import_clues([{"path": str(pool), "category": "Plants"}])
    assert [r["line"] for r in data.rows_mentioning("ant", report["rejections"])] == []
    assert [r["line"] for r in data.rows_mentioning("feathery", report["rejections"])] == [2]


def test_prompts_for_targets_without_clues(tiny_llama, tmp_path):
    _, tokenizer = tiny_llama
    path, targets_path = thesis_files(tmp_path)
    clues, _ = data.import_clues([{"path": str(path), "category": "Animals"}])
    targets = data.read_target_list(str(targets_path), "Animals", "k").words
    table = prompts.build_prompts(clues, "e", {"category": "Animals", "k": 3, "seed": 0}, targets, tokenizer)
    assert list(table["target"]) == NEW_TARGETS and table["reference_clue"].isna().all()
    assert all(set(shots) <= {w for w, _ in SHOT_POOL} for shots in table["shot_words"])


# Through the workflow (integration tier).


@pytest.mark.integration
def test_thesis_shaped_data_end_to_end(tmp_path):
    """The thesis's shot pool and header-first target list, targets without clues: clues, maps, figures."""
    clue_path, targets_path = thesis_files(tmp_path)
    config = tiny_config(
        **{"animals-k3": {"category": "Animals", "k": 3, "variants": ["trained", "random-s0"]}}
    )
    config["data"] = {"clue_files": [{"path": str(clue_path)}], "targets": {"Animals": str(targets_path)}}
    config["attention"] = {"keep_heads": ["Tapir"]}
    grid = {"experiments": ["animals-k3"], "variants": "all", "targets": ["Tapir"], "kinds": ["word_grid"]}
    config["figures"] = {"maps": [grid]}
    # What is read below: the clue tables, their comparison and trained's map figures (the
    # second task below runs every target on targets without clues).
    read = (
        "results/tables/tiny-mistral/animals-k3_variants.csv",
        "results/figures/tiny-mistral/trained/animals-k3",
    )
    out = snakemake(tmp_path, "clues", *read, config=config)
    assert "warning:" not in out, "new words are no typos"
    results = tmp_path / "results"
    for variant in ("trained", "random-s0"):
        table = pd.read_csv(results / "tables" / "tiny-mistral" / variant / "animals-k3_clues.csv")
        assert list(table["Word"]) == NEW_TARGETS
        assert set(table["Reference Clue"]) == {"no reference"} and table["chrF"].isna().all()
    comparison = pd.read_csv(results / "tables" / "tiny-mistral" / "animals-k3_variants.csv")
    assert list(comparison["Word"]) == NEW_TARGETS
    snakemake(tmp_path, "data")
    checked = json.loads((results / "data" / "targets" / "animals-k3.json").read_text())
    assert checked["without_reference"] == NEW_TARGETS and checked["warnings"] == []
    assert (
        results / "figures" / "tiny-mistral" / "trained" / "animals-k3" / "Tapir" / "word_grid.png"
    ).is_file()


@pytest.mark.integration
def test_near_miss_target_is_a_warning_not_a_refusal(tmp_path):
    config = tiny_config(**{"a": {"category": "Animals", "k": 2, "targets": ["Ant", "Beee"]}})
    out = snakemake(tmp_path, "-n", config=config)
    assert "warning: experiments.a: target 'Beee' has no clue; closest clue words: Bee" in out


@pytest.mark.integration
def test_second_task_through_the_whole_workflow(tmp_path, embedded_model_dir):
    """The antonym example on the embedded SmolLM2: every target of the DAG, segments checked."""
    config = example_config("antonyms")
    config["theory"] = tiny_config()["theory"]
    # Every target, with fewer of the jobs that repeat per init seed, edge set and layer window,
    # without the spectra's randomisation test (every matrix decomposed once, not twice), and
    # with two head-type probes instead of eight.
    config["spectra"] = {"variants": ["trained", "random-s0"], "randomize": False}
    config["knockout"] = {"window": 30, "edges": ["target-shotwords", "control-target-shotwords"]}
    config["heads"] = {"probe_count": 2}
    models_dir = tmp_path / "results" / "models"
    models_dir.mkdir(parents=True)
    shutil.copytree(embedded_model_dir, models_dir / "smollm2")
    write_config(tmp_path, config)
    config_file = str(tmp_path / "config.yaml")
    snakemake(tmp_path, "--replace-workflow-config", "--configfile", config_file, *REPORT_AFTER_RUN)
    results = tmp_path / "results"
    fmt = prompts.resolve_format(config["prompts"])
    tokenizer = prepared.load_tokenizer(results / "models" / "smollm2")
    for experiment, instructed in (("adjectives-k5", True), ("adjectives-k5-noinstr", False)):
        table = pd.read_parquet(results / "prompts" / "smollm2" / f"{experiment}.parquet")
        assert list(table["target"]) == [
            "Hot",
            "Happy",
            "Brave",
            "Rare",
            "Eager",
            "Vague",
            "Stale",
            "Careful",
        ]
        assert list(table["reference_clue"][:4]) == ["Cold", "Sad", "Cowardly", "Common"]
        assert table["reference_clue"][4:].isna().all()
        for row in table.itertuples():
            ann = prompts.prompt_annotation(row._asdict())
            ids = row.input_ids

            def decoded(segment, shot=None, ann=ann, ids=ids):  # the tokens of one segment, as text
                chosen = [
                    i
                    for i, (s, sh) in enumerate(zip(ann.token_segment, ann.token_shot))
                    if s == segment and (shot is None or sh == shot)
                ]
                return tokenizer.decode([ids[i] for i in chosen]).strip()

            for shot, (word, antonym) in enumerate(zip(row.shot_words, row.shot_clues), start=1):
                assert decoded(prompts.SHOT_WORD, shot) == word
                assert decoded(prompts.SHOT_CLUE, shot) == antonym
            assert decoded(prompts.TARGET) == row.target
            assert (prompts.INSTRUCTION_SEGMENT in ann.token_segment) == instructed
            assert f"Opposite of: {row.target}" in row.text and "Word:" not in row.text
        expected = fmt if instructed else prompts.resolve_format(config["prompts"], {"instruction": None})
        assert prompts.table_format(table) == expected
        clues = pd.read_parquet(results / "clues" / "smollm2" / "trained" / f"{experiment}.parquet")
        assert not clues["clue"].str.contains("||", regex=False).any(), "the end marker is stripped"
        assert clues["chrf"][:4].notna().all() and clues["chrf"][4:].isna().all()
    assert (results / "report.html").is_file() and (results / "claims.md").is_file()
    curves = pd.read_csv(results / "tables" / "smollm2" / "adjectives-k5_variants.csv")
    assert list(curves.columns[:2]) == ["Word", "Reference Clue"]
