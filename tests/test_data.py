"""Clue import: every format, every rejection reason, encodings, determinism."""

import json
from pathlib import Path

import pandas as pd
import pytest

from attnscope import data, io

REPO = Path(__file__).resolve().parents[1]


def write(path: Path, content: str | bytes) -> str:
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return str(path)


def reasons(report: dict) -> list[tuple[int, str]]:
    return [(r["line"], r["reason"]) for r in report["rejections"]]


def test_thesis_format_strips_spaces_and_names_category_from_file(tmp_path):
    path = write(
        tmp_path / "sea_creatures.csv",
        "Word;Clue\n  Octopus ;  Eight arms, three hearts. \nCrab;Walks sideways.\n",
    )
    clues, report = data.import_clues([{"path": path}])
    assert clues.to_dict("records") == [
        {
            "category": "Sea Creatures",
            "word": "Octopus",
            "clue": "Eight arms, three hearts.",
            "source_file": path,
            "source_line": 2,
        },
        {
            "category": "Sea Creatures",
            "word": "Crab",
            "clue": "Walks sideways.",
            "source_file": path,
            "source_line": 3,
        },
    ]
    assert report["files"][0]["encoding"] == "utf-8"
    assert report["files"][0]["format"] == "thesis"


def test_every_rejection_reason_names_file_and_line(tmp_path):
    content = (
        "Word;Clue\n"
        "Ant;Tiny worker in a colony.\n"  # 2 accepted
        ";No word here.\n"  # 3 empty
        "Bee;\n"  # 4 empty
        "\n"  # 5 empty
        "Ant;Another tiny worker.\n"  # 6 duplicate (case-insensitive word)
        "Cat;Purrs; sleeps; repeats.\n"  # 7 wrong column count
        "Dog\n"  # 8 wrong column count
        "Fox;A fox in the henhouse.\n"  # 9 clue contains the answer
        "Hen;Hens lay eggs.\n"  # 10 plural of the answer
        "Owl;Hoots at night.\n"  # 11 accepted
    )
    path = write(tmp_path / "animals.csv", content)
    clues, report = data.import_clues([{"path": path, "category": "Animals"}])
    assert list(clues["word"]) == ["Ant", "Owl"]
    assert reasons(report) == [
        (3, data.EMPTY),
        (4, data.EMPTY),
        (5, data.EMPTY),
        (6, data.DUPLICATE),
        (7, data.COLUMN_COUNT),
        (8, data.COLUMN_COUNT),
        (9, data.ANSWER_IN_CLUE),
        (10, data.ANSWER_IN_CLUE),
    ]
    assert all(r["file"] == path for r in report["rejections"])
    assert "first at " + path + ":2" in report["rejections"][3]["text"]
    assert report["files"][0]["rejected_by_reason"] == {
        data.ANSWER_IN_CLUE: 2,
        data.DUPLICATE: 1,
        data.EMPTY: 3,
        data.COLUMN_COUNT: 2,
    }


def test_answer_word_inside_a_longer_word_is_not_a_leak():
    assert not data.answer_in_clue("Ant", "A giant of the savannah.")
    assert data.answer_in_clue("Ant", "Ants march in line.")
    assert data.answer_in_clue("Fox", "Sly FOX.")
    assert not data.answer_in_clue("Fox", "Foxglove is a flower.")


def test_latin1_file_is_detected_and_decoded(tmp_path):
    path = write(
        tmp_path / "food.csv",
        "Word;Clue\nCrème;Café topping, whipped.\nPurée;Mashed smooth.\n".encode("latin-1"),
    )
    clues, report = data.import_clues([{"path": path}])
    assert report["files"][0]["encoding"] == "latin-1"
    assert list(clues["word"]) == ["Crème", "Purée"]
    assert clues["clue"][0] == "Café topping, whipped."


def test_undecodable_line_in_a_utf8_file_is_rejected(tmp_path):
    raw = "Word;Clue\nCrème;Café topping.\n".encode() + b"Bad;\xff\xfe broken\n" + b"Tea;Steeped leaves.\n"
    path = write(tmp_path / "food.csv", raw)
    clues, report = data.import_clues([{"path": path}])
    assert report["files"][0]["encoding"] == "utf-8"
    assert list(clues["word"]) == ["Crème", "Tea"]
    assert reasons(report) == [(3, data.UNDECODABLE)]


def test_latin1_control_bytes_are_undecodable(tmp_path):
    path = write(tmp_path / "x.csv", b"Word;Clue\nCaf\xe9;Coffee place.\nOdd;Quote \x93here\x94.\n")
    clues, report = data.import_clues([{"path": path}])
    assert report["files"][0]["encoding"] == "latin-1"
    assert list(clues["word"]) == ["Café"]
    assert reasons(report) == [(3, data.UNDECODABLE)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("Word,Clue\nAnt,Tiny worker.\n", "uses ',' as delimiter"),
        ("Ant;Tiny worker.\nBee;Buzzes.\n", "add the header line 'Word;Clue'"),
        (b"\x00\x01binary", "binary file"),
        ("Word;Clue\nAnt;Tiny worker.\n".encode("utf-16"), "UTF-16 text.*Save it as UTF-8"),
    ],
)
def test_unreadable_file_fails_with_file_and_reason(tmp_path, content, message):
    path = write(tmp_path / "bad.csv", content)
    with pytest.raises(data.ClueImportError, match=message) as info:
        data.import_clues([{"path": path, "format": "thesis"}])
    assert path in str(info.value)


@pytest.mark.parametrize(
    ("name", "content", "fmt"),
    [
        ("animals.csv", "Word;Clue\n", "thesis"),
        ("animals.csv", "\ufeffWord ; Clue\r\n\r\n  \r\n", "thesis"),  # BOM, CRLF, blank lines
        ("table.csv", "category,word,clue\n", "long"),
    ],
)
def test_a_clue_file_of_only_its_header_is_refused(tmp_path, name, content, fmt):
    path = write(tmp_path / name, content)
    entry = {"path": path, "format": fmt, **({"category": "Animals"} if fmt == "long" else {})}
    with pytest.raises(data.ClueImportError, match="only its header line, no clue rows") as info:
        data.import_clues([entry, {"path": write(tmp_path / "food.csv", "Word;Clue\nPie;Baked.\n")}])
    assert str(info.value).startswith(f"{path}: ") and "data.clue_files" in str(info.value)


def test_missing_file_names_the_config_key(tmp_path):
    with pytest.raises(data.ClueImportError, match="not found.*data.clue_files"):
        data.import_clues([{"path": str(tmp_path / "nope.csv")}])


def test_long_csv_and_parquet(tmp_path):
    csv_path = write(
        tmp_path / "long.csv",
        'category,word,clue,source\nAnimals,Ant,Tiny worker.,x\nFood,Tea,"Steeped, hot.",y\n'
        "Food,Tea,Steeped again.,z\nFood,Pie\n",
    )
    clues, report = data.import_clues([{"path": csv_path}])
    assert report["files"][0]["format"] == "long"
    assert clues[["category", "word", "clue", "source_line"]].values.tolist() == [
        ["Animals", "Ant", "Tiny worker.", 2],
        ["Food", "Tea", "Steeped, hot.", 3],
    ]
    assert reasons(report) == [(4, data.DUPLICATE), (5, data.COLUMN_COUNT)]
    pq_path = tmp_path / "long.parquet"
    pd.DataFrame(
        {"Category": ["Animals", "Animals"], "Word": ["Owl", "Owl"], "Clue": ["Hoots.", "Owl again."]}
    ).to_parquet(pq_path)
    clues, report = data.import_clues([{"path": str(pq_path)}])
    assert list(clues["word"]) == ["Owl"]
    assert reasons(report) == [(2, data.ANSWER_IN_CLUE)]


def test_long_format_without_category_column_needs_a_category(tmp_path):
    path = write(tmp_path / "long.csv", "word,clue\nAnt,Tiny worker.\n")
    with pytest.raises(data.ClueImportError, match="missing \\['category'\\]"):
        data.import_clues([{"path": path, "format": "long"}])
    clues, _ = data.import_clues([{"path": path, "format": "long", "category": "Animals"}])
    assert list(clues["category"]) == ["Animals"]


def chat_completion(content: str) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
    }


def test_jsonl_chat_completion_and_batch_output(tmp_path):
    lines = [
        json.dumps(chat_completion("Ant;Tiny worker.\n2. Bee: Buzzing pollinator.\nCat")),
        json.dumps(
            {
                "custom_id": "a",
                "response": {"status_code": 200, "body": chat_completion("- Owl;Hoots.")},
                "error": None,
            }
        ),
        json.dumps({"custom_id": "b", "response": {"status_code": 500, "body": {}}, "error": None}),
        "{not json",
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "Emu;Big bird."},
                ]
            }
        ),
        json.dumps({"object": "list"}),
    ]
    path = write(tmp_path / "gpt4.jsonl", "\n".join(lines) + "\n")
    clues, report = data.import_clues([{"path": path, "category": "Animals"}])
    assert clues[["word", "clue", "source_line"]].values.tolist() == [
        ["Ant", "Tiny worker.", 1],
        ["Bee", "Buzzing pollinator.", 1],
        ["Owl", "Hoots.", 2],
        ["Emu", "Big bird.", 5],
    ]
    assert reasons(report) == [
        (1, data.COLUMN_COUNT),
        (3, data.API_ERROR),
        (4, data.BAD_JSON),
        (6, data.NO_ASSISTANT),
    ]
    assert "message line 3" in report["rejections"][0]["text"]


def test_jsonl_that_never_parses_is_unreadable(tmp_path):
    path = write(tmp_path / "x.jsonl", "Ant;Tiny worker.\n")
    with pytest.raises(data.ClueImportError, match="no line parses as JSON"):
        data.import_clues([{"path": path}])


def test_duplicates_across_files_keep_the_first(tmp_path):
    a = write(tmp_path / "a.csv", "Word;Clue\nAnt;Tiny worker.\n")
    b = write(tmp_path / "b.csv", "Word;Clue\nant;Other clue.\n")
    clues, report = data.import_clues(
        [{"path": a, "category": "Animals"}, {"path": b, "category": "Animals"}]
    )
    assert list(clues["clue"]) == ["Tiny worker."]
    assert report["rejections"][0]["file"] == b


def test_sample_data_imports_cleanly_and_byte_identically(tmp_path):
    import yaml

    entries = yaml.safe_load((REPO / "config.yaml").read_text())["data"]["clue_files"]
    entries = [{**e, "path": str(REPO / e["path"])} for e in entries]
    clues, report = data.import_clues(entries)
    counts = clues.groupby("category").size()
    assert len(counts) >= 6 and counts.min() >= 40
    assert report["rejected"] == 0
    encodings = {Path(f["path"]).name: f["encoding"] for f in report["files"]}
    assert encodings["food.csv"] == "latin-1" and encodings["animals.csv"] == "utf-8"
    io.write_parquet(clues, tmp_path / "a.parquet", {"config_digest": "x"})
    io.write_parquet(data.import_clues(entries)[0], tmp_path / "b.parquet", {"config_digest": "x"})
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
