"""Clue import: thesis ``Word;Clue`` files, long CSV/Parquet tables and GPT-4 JSONL.

Every source row is either accepted into the clues table (category, word, clue,
source file, source line) or rejected into the import report with its file, line
and reason. A file as a whole fails only when it cannot be read at all (missing,
empty, binary, no ``Word;Clue`` header, wrong delimiter); the error names the file
and line and says what to do.
"""

from __future__ import annotations

import csv
import io as _io
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rapidfuzz.distance import DamerauLevenshtein

FORMATS = ("auto", "thesis", "long", "jsonl")
CLUE_COLUMNS = ["category", "word", "clue", "source_file", "source_line"]

# Reasons a row is rejected (the report's ``reason`` field).
EMPTY = "empty"
DUPLICATE = "duplicate"
COLUMN_COUNT = "wrong column count"
UNDECODABLE = "undecodable"
ANSWER_IN_CLUE = "clue contains the answer word"
BAD_JSON = "invalid JSON"
API_ERROR = "API error response"
NO_ASSISTANT = "no assistant message"

_ENUMERATION = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s+")
_C1_CONTROLS = re.compile("[\x80-\x9f]")


class ClueImportError(ValueError):
    """A whole clue file cannot be read; the message names file, line and remedy."""


@dataclass
class Row:
    """One candidate clue with where it came from."""

    category: str
    word: str
    clue: str
    line: int


@dataclass
class Rejection:
    """A rejected row: where, why, its text, and its word/clue fields where it had any."""

    file: str
    line: int
    reason: str
    text: str
    fields: list[str] = field(default_factory=list)


@dataclass
class FileResult:
    """What one source file yielded."""

    path: str
    format: str
    category: str | None
    encoding: str | None = None
    rows: list[Row] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)

    def reject(self, line: int, reason: str, text: str, fields: Iterable[str] = ()) -> None:
        self.rejections.append(Rejection(self.path, line, reason, text, [f.strip() for f in fields]))


def category_from_filename(path: str | Path) -> str:
    """``sea_creatures.csv`` → ``Sea Creatures``."""
    return Path(path).stem.replace("_", " ").replace("-", " ").title()


def answer_in_clue(word: str, clue: str) -> bool:
    """True when the clue contains the answer word (or its plural) as a word."""
    word, clue = word.casefold(), clue.casefold()
    if word not in clue:  # most clues: no pattern to compile (the config check reads every clue)
        return False
    return re.search(rf"(?<![^\W_]){re.escape(word)}(?:e?s)?(?![^\W_])", clue) is not None


def decode_lines(
    path: str, raw: bytes, key: str = "data.clue_files"
) -> tuple[str, list[tuple[int, str | None, bytes]]]:
    """Split ``raw`` into lines and decode them: UTF-8 if the file is UTF-8, else Latin-1.

    A file that holds valid multi-byte UTF-8 is UTF-8, and its lines that do not decode
    are marked ``None`` (rejected as undecodable); a file with stray high bytes and no
    UTF-8 sequences is Latin-1. Latin-1 lines with C1 control characters are undecodable.
    """
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ClueImportError(
            f"{path}: UTF-16 text; text inputs must be UTF-8 or Latin-1. Save it as UTF-8 "
            f"(e.g. iconv -f UTF-16 -t UTF-8) or fix its path in {key}"
        )
    if b"\x00" in raw:
        raise ClueImportError(
            f"{path}: binary file (NUL bytes), not a text file; "
            f"point {key} at the text file itself (uncompressed, UTF-8 or Latin-1)"
        )
    encoding = "utf-8"
    if raw.startswith(b"\xef\xbb\xbf"):
        raw, encoding = raw[3:], "utf-8-sig"
    raw_lines = raw.splitlines()
    decoded: list[str | None] = []
    has_multibyte = False
    for raw_line in raw_lines:
        try:
            text = raw_line.decode("utf-8")
            has_multibyte |= any(ord(c) > 127 for c in text)
            decoded.append(text)
        except UnicodeDecodeError:
            decoded.append(None)
    if None in decoded and not has_multibyte:
        encoding = "latin-1"
        decoded = [line.decode("latin-1") for line in raw_lines]
        decoded = [None if _C1_CONTROLS.search(line) else line for line in decoded]
    return encoding, [(i + 1, text, raw_line) for i, (text, raw_line) in enumerate(zip(decoded, raw_lines))]


def _read_bytes(path: str) -> bytes:
    p = Path(path)
    if not p.exists():
        looked = "" if p.is_absolute() else f" (looked for {p.resolve()})"
        raise ClueImportError(
            f"{path}: clue file not found{looked}; fix its path in data.clue_files in config.yaml "
            "(relative paths start at the working directory)"
        )
    if p.is_dir():
        raise ClueImportError(
            f"{path}: a directory, not a clue file; list each clue file in it under data.clue_files"
        )
    if not p.is_file():
        raise ClueImportError(f"{path}: not a regular file; point data.clue_files at a clue file")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ClueImportError(
            f"{path}: cannot read the clue file ({exc.strerror}); make it readable or fix its path "
            "in data.clue_files"
        ) from exc
    if not raw.strip():
        raise ClueImportError(
            f"{path}: the file is empty; expected a 'Word;Clue' header and clue rows. "
            "Fill it or remove it from data.clue_files"
        )
    return raw


def _accept(result: FileResult, category: str, word: str, clue: str, line: int, text: str) -> None:
    word, clue = word.strip(), clue.strip()
    if not word or not clue:
        result.reject(line, EMPTY, text, (word, clue))
    elif answer_in_clue(word, clue):
        result.reject(line, ANSWER_IN_CLUE, text, (word, clue))
    else:
        result.rows.append(Row(category, word, clue, line))


def read_thesis(path: str, category: str) -> FileResult:
    """The thesis's format: header ``Word;Clue``, ``;``-separated, UTF-8 or Latin-1."""
    result = FileResult(path, "thesis", category)
    result.encoding, lines = decode_lines(path, _read_bytes(path))
    first = next(((n, t) for n, t, _ in lines if t is None or t.strip()), None)
    assert first is not None  # _read_bytes rejects blank files
    header_line, header = first
    fields = [f.strip().casefold() for f in (header or "").split(";")]
    if fields != ["word", "clue"]:
        hint = ""
        for sep in (",", "\t", "|"):
            if header and [f.strip().casefold() for f in header.split(sep)] == ["word", "clue"]:
                hint = f" It uses {sep!r} as delimiter; the thesis format uses ';'."
        if not hint and header and len(header.split(";")) == 2:
            hint = " The first line looks like a clue row: add the header line 'Word;Clue'."
        raise ClueImportError(
            f"{path}:{header_line}: expected the header 'Word;Clue', found {header!r}.{hint} "
            "(For a table with category/word/clue columns set format: long.)"
        )
    for number, text, raw_line in lines:
        if number <= header_line:
            continue
        if text is None:
            result.reject(number, UNDECODABLE, raw_line.decode("utf-8", "backslashreplace"))
            continue
        if not text.strip():
            result.reject(number, EMPTY, text)
            continue
        parts = text.split(";")
        if len(parts) != 2:
            result.reject(number, COLUMN_COUNT, text, parts)
            continue
        _accept(result, category, parts[0], parts[1], number, text)
    return result


def read_long(path: str, category: str | None) -> FileResult:
    """A long table (CSV or Parquet) with ``category``, ``word``, ``clue`` columns."""
    result = FileResult(path, "long", category)
    if Path(path).suffix.lower() == ".parquet":
        if not Path(path).is_file():
            _read_bytes(path)
        try:
            table = pd.read_parquet(path)
        except Exception as exc:
            raise ClueImportError(f"{path}: cannot read as Parquet ({exc})") from exc
        columns = {c.strip().casefold(): c for c in table.columns}
        _require_long_columns(path, 1, list(table.columns), columns, category)
        for i, record in enumerate(table.to_dict("records")):
            values = {key: record[col] for key, col in columns.items()}
            _accept_long(result, values, i + 1, category, json.dumps(record, default=str))
        result.encoding = "parquet"
        return result
    result.encoding, lines = decode_lines(path, _read_bytes(path))
    good = "\n".join(text if text is not None else "" for _, text, _ in lines)
    reader = csv.reader(_io.StringIO(good))
    header = next(reader)
    columns = {c.strip().casefold(): i for i, c in enumerate(header)}
    _require_long_columns(path, 1, header, columns, category)
    undecodable = {n for n, text, _ in lines if text is None}
    for row in reader:
        number = reader.line_num
        text = ",".join(row)
        if number in undecodable:
            result.reject(number, UNDECODABLE, lines[number - 1][2].decode("utf-8", "backslashreplace"))
        elif not any(cell.strip() for cell in row):
            result.reject(number, EMPTY, text)
        elif len(row) != len(header):
            result.reject(number, COLUMN_COUNT, text, row)
        else:
            values = {key: row[i] for key, i in columns.items()}
            _accept_long(result, values, number, category, text)
    return result


def _require_long_columns(path: str, line: int, header: list, columns: dict, category: str | None) -> None:
    needed = ["word", "clue"] + ([] if category else ["category"])
    missing = [c for c in needed if c not in columns]
    if missing:
        hint = ""
        if missing == ["category"] and len(header) == 2:
            hint = (
                " For the thesis format use ';' as delimiter (header 'Word;Clue');"
                " for a word,clue table set category: for this entry in data.clue_files."
            )
        raise ClueImportError(
            f"{path}:{line}: long format needs columns {needed}; missing {missing} in header {header}.{hint}"
        )


def _accept_long(result: FileResult, values: dict, line: int, category: str | None, text: str) -> None:
    cat = category or str(values.get("category") or "").strip()
    if not cat:
        result.reject(line, EMPTY, text)
        return
    word, clue = values.get("word"), values.get("clue")
    _accept(result, cat, "" if word is None else str(word), "" if clue is None else str(clue), line, text)


def _assistant_contents(record: Any) -> Iterator[str]:
    """Assistant message texts of a chat completion, batch-API output or messages record."""
    if not isinstance(record, dict):
        return
    body = record
    response = record.get("response")
    if isinstance(response, dict):
        body = response.get("body") or {}
    for choice in body.get("choices") or []:
        message = choice.get("message") or {}
        if message.get("role", "assistant") == "assistant" and isinstance(message.get("content"), str):
            yield message["content"]
    for message in record.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "assistant":
            if isinstance(message.get("content"), str):
                yield message["content"]


def split_clue_line(text: str) -> list[str]:
    """``Word;Clue`` or ``Word: Clue`` (an enumeration prefix such as ``3.`` is dropped)."""
    text = _ENUMERATION.sub("", text)
    if ";" in text:
        return text.split(";")
    return text.split(":", 1) if ":" in text else [text]


def read_jsonl(path: str, category: str) -> FileResult:
    """GPT-4 output: chat-completion or batch-API JSONL whose assistant text holds clue lines.

    Rejections name the JSONL line; the text says which line of the message it was.
    """
    result = FileResult(path, "jsonl", category)
    result.encoding, lines = decode_lines(path, _read_bytes(path))
    parsed_any = False
    for number, text, raw_line in lines:
        if text is None:
            result.reject(number, UNDECODABLE, raw_line.decode("utf-8", "backslashreplace"))
            continue
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            result.reject(number, BAD_JSON, f"{exc.msg} at column {exc.colno}")
            continue
        parsed_any = True
        response = record.get("response") if isinstance(record, dict) else None
        if isinstance(record, dict) and (
            record.get("error") or (isinstance(response, dict) and response.get("status_code", 200) != 200)
        ):
            result.reject(number, API_ERROR, json.dumps(record.get("error") or response.get("status_code")))
            continue
        contents = list(_assistant_contents(record))
        if not contents:
            result.reject(number, NO_ASSISTANT, text[:200])
            continue
        for content in contents:
            for part_number, clue_line in enumerate(content.splitlines(), start=1):
                where = f"message line {part_number}: {clue_line}"
                if not clue_line.strip():
                    continue
                parts = split_clue_line(clue_line)
                if len(parts) != 2:
                    result.reject(number, COLUMN_COUNT, where, parts)
                    continue
                _accept(result, category, parts[0], parts[1], number, where)
    if not parsed_any:
        raise ClueImportError(f"{path}: no line parses as JSON; expected chat-completion or batch-API JSONL")
    return result


def detect_format(path: str) -> str:
    """Guess a file's format from its extension and, for CSV, its header."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix == ".parquet":
        return "long"
    head = _read_bytes(path)[:4096].decode("latin-1").lstrip("\ufeff\xef\xbb\xbf")
    first = next((line for line in head.splitlines() if line.strip()), "")
    names = [f.strip().casefold() for f in re.split(r"[,;\t]", first)]
    if {"word", "clue"} <= set(names) and ("category" in names or first.count(",") >= 1 and ";" not in first):
        return "long"
    return "thesis"


def read_clue_file(entry: dict[str, Any]) -> FileResult:
    """Read one ``data.clue_files`` entry (``path``, optional ``category`` and ``format``)."""
    path = str(entry["path"])
    fmt = entry.get("format", "auto")
    if fmt == "auto":
        fmt = detect_format(path)
    category = entry.get("category")
    if fmt == "jsonl":
        return read_jsonl(path, category or category_from_filename(path))
    if fmt == "thesis":
        result = read_thesis(path, category or category_from_filename(path))
    elif fmt == "long":
        result = read_long(path, category)
    else:
        raise ClueImportError(f"{path}: unknown format {fmt!r}; use one of {FORMATS}")
    if not result.rows and all(r.reason == EMPTY for r in result.rejections):
        raise ClueImportError(
            f"{path}: only its header line, no clue rows; add one clue per line below the header, "
            "or remove the file from data.clue_files"
        )
    return result


def import_clues(entries: Iterable[dict[str, Any]]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read all clue files; return the clues table and the import report.

    A word repeated within a category (case-insensitive, across files) keeps its
    first clue; later rows are rejected as duplicates naming the first occurrence.
    """
    rows: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    rejections: list[Rejection] = []
    seen: dict[tuple[str, str], str] = {}
    for entry in entries:
        result = read_clue_file(entry)
        accepted = 0
        for row in result.rows:
            key = (row.category.casefold(), row.word.casefold())
            if key in seen:
                result.reject(
                    row.line, DUPLICATE, f"{row.word};{row.clue} (first at {seen[key]})", (row.word, row.clue)
                )
                continue
            seen[key] = f"{result.path}:{row.line}"
            rows.append(
                {
                    "category": row.category,
                    "word": row.word,
                    "clue": row.clue,
                    "source_file": result.path,
                    "source_line": row.line,
                }
            )
            accepted += 1
        result.rejections.sort(key=lambda r: r.line)
        rejections.extend(result.rejections)
        files.append(
            {
                "path": result.path,
                "format": result.format,
                "encoding": result.encoding,
                "category": result.category,
                "accepted": accepted,
                "rejected": len(result.rejections),
                "rejected_by_reason": dict(sorted(Counter(r.reason for r in result.rejections).items())),
            }
        )
    table = pd.DataFrame(rows, columns=CLUE_COLUMNS).astype({"source_line": "int64"})
    report = {
        "files": files,
        "categories": dict(sorted(Counter(table["category"]).items())),
        "accepted": len(table),
        "rejected": len(rejections),
        "rejections": [r.__dict__ for r in rejections],
    }
    return table, report


@dataclass
class TargetList:
    """The target words of a text file, with the line each came from."""

    path: str
    words: list[str]
    lines: list[int]
    encoding: str
    header: bool  # the first line named the category and was skipped


def read_target_list(path: str, category: str, key: str) -> TargetList:
    """One target word per line; blank lines and ``#`` comments skipped.

    A first line equal to the category name (case-insensitive) is a header, as in the
    thesis's own target files. UTF-8 with or without BOM or Latin-1, any line ending.
    """
    p = Path(path)
    if not p.is_file():
        raise ClueImportError(
            f"{key}: cannot read target list {path} (not a file); fix the path, or list the target words "
            "under the experiment's targets"
        )
    encoding, lines = decode_lines(path, p.read_bytes(), key)
    words, numbers = [], []
    for number, text, raw_line in lines:
        if text is None:
            raise ClueImportError(
                f"{path}:{number}: undecodable line {raw_line!r} ({key}); save the file as UTF-8"
            )
        word = text.strip()
        if word and not word.startswith("#"):
            words.append(word)
            numbers.append(number)
    header = bool(words) and words[0].casefold() == category.casefold()
    if header:
        words, numbers = words[1:], numbers[1:]
    return TargetList(path, words, numbers, encoding, header)


def closest_words(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates a typo away from ``word``, closest first (case-insensitive).

    A typo is one edit (insertion, deletion, substitution or swap of neighbours) in a word
    of up to five letters, two in a longer one: "Bea" finds Bee and Bear, "Eager" not Early.
    """
    folded = word.casefold()
    limit = 1 if len(folded) <= 5 else 2
    distances = {c: DamerauLevenshtein.distance(folded, c.casefold()) for c in dict.fromkeys(candidates)}
    close = sorted((d, c) for c, d in distances.items() if 0 < d <= limit)
    return [c for _, c in close[:n]]


def rows_mentioning(word: str, rejections: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rejected rows whose word or clue field holds ``word`` as a word (never their file name)."""
    pattern = re.compile(rf"(?<![^\W_]){re.escape(word.casefold())}(?![^\W_])")
    return [r for r in rejections if any(pattern.search(f.casefold()) for f in r.get("fields", []))]


def target_report(
    clues: pd.DataFrame, rejections: Iterable[dict[str, Any]], category: str, targets: Sequence[str]
) -> dict[str, Any]:
    """An experiment's targets: which have a reference clue, and near-miss warnings.

    A target without a clue is normal (the clue files are the shot pool); one whose
    spelling is close to a clue word of its category, or that a rejected row mentions,
    is probably a typo and gets a warning, never a refusal.
    """
    pool = list(clues.loc[clues["category"] == category, "word"])
    known = {w.casefold() for w in pool}
    without = [t for t in targets if t.casefold() not in known]
    warnings = []
    for target in without:
        close = closest_words(target, pool)
        rejected = rows_mentioning(target, rejections)
        if close or rejected:
            message = f"target {target!r} has no clue"
            if close:
                message += f"; closest clue words: {', '.join(close)}"
            if rejected:
                shown = ", ".join(f"{r['file']}:{r['line']} ({r['reason']})" for r in rejected[:5])
                message += f"; rejected rows that mention it: {shown}"
            warnings.append(message)
    return {
        "category": category,
        "targets": len(targets),
        "with_reference": len(targets) - len(without),
        "without_reference": without,
        "warnings": warnings,
    }
