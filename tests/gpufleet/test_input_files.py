"""Reading a file a user or a tool hands in: whole within a limit, or line by line with a limit on a line."""

from __future__ import annotations

import io
import tracemalloc

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.input_files import JsonFile, decode_utf8, numbered_lines, read_limited, text_lines


def test_lines_are_numbered_by_newlines_and_split_at_other_breaks(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"one\r\ntwo\rthree\n\nfour\xff\n")
    assert list(numbered_lines(str(path), max_line=1024, exit_code=2)) == [
        (1, "one"),
        (2, "two"),
        (2, "three"),
        (3, ""),
        (4, "four\ufffd"),
    ]


def test_text_is_split_as_a_file_is(tmp_path):
    assert list(text_lines("one\r\ntwo\rthree\n\nfour")) == [(1, "one"), (2, "two"), (2, "three"), (3, ""), (4, "four")]


def test_of_a_long_line_only_the_start_is_kept_and_the_rest_read_past(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"x" * 10_000 + b"\nnext\n")
    assert list(numbered_lines(str(path), max_line=100, exit_code=2)) == [(1, "x" * 100), (2, "next")]


def test_a_line_without_end_is_read_in_bounded_memory(tmp_path):
    path = tmp_path / "log"
    with path.open("wb") as handle:
        handle.truncate(64 << 20)  # sparse: nothing written
    tracemalloc.start()
    try:
        ((number, text),) = numbered_lines(str(path), max_line=64 << 10, exit_code=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (number, len(text)) == (1, 64 << 10)
    assert peak < 1 << 20


def test_stdin_is_read_as_bytes(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a\xffb\n"), encoding="utf-8", errors="strict"))
    assert list(numbered_lines("-", max_line=1024, exit_code=2)) == [(1, "a\ufffdb")]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"12345"), encoding="utf-8", errors="strict"))
    with pytest.raises(GpufleetError) as raised:
        read_limited("-", limit=4, expected="four bytes", exit_code=2)
    assert (raised.value.problems, raised.value.exit_code) == (
        ("<stdin>: larger than 4 bytes, far more than four bytes: refused unread",),
        2,
    )


def test_a_file_within_the_limit_is_read_whole(tmp_path):
    path = tmp_path / "capture"
    path.write_bytes(b"x" * 2048)
    assert read_limited(str(path), limit=2048, expected="a capture", exit_code=2) == b"x" * 2048
    path.write_bytes(b"x" * 2049)
    with pytest.raises(GpufleetError) as raised:
        read_limited(str(path), limit=2048, expected="a capture", exit_code=2)
    assert raised.value.problems == (f"{path}: larger than 2 KiB, far more than a capture: refused unread",)


def test_a_missing_file_or_a_directory_is_one_line(tmp_path):
    for path, reason in ((tmp_path / "missing", "No such file or directory"), (tmp_path, "Is a directory")):
        with pytest.raises(GpufleetError) as raised:
            read_limited(str(path), limit=10, expected="a capture", exit_code=2)
        assert raised.value.problems == (f"{path}: cannot read file ({reason})",)


def test_bytes_that_are_not_utf8_name_their_line():
    with pytest.raises(GpufleetError) as raised:
        decode_utf8("f.json", b"{\n\n\xe9}", fix="write it again", exit_code=1)
    assert raised.value.problems == (
        "f.json: line 3: not UTF-8 text (byte 0xe9: invalid continuation byte); write it again",
    )


def json_file(tmp_path, text: str) -> JsonFile:
    path = tmp_path / "file.json"
    path.write_text(text, encoding="ascii")
    return JsonFile(path, limit=1024, expected="a test file", fix="fix it", exit_code=3)


def problem_of(action) -> tuple[tuple[str, ...], int]:
    with pytest.raises(GpufleetError) as raised:
        action()
    return raised.value.problems, raised.value.exit_code


def test_a_json_value_of_the_wrong_kind_is_named_by_its_path_odd_keys_quoted(tmp_path):
    # A key with a line break (U+2028 is one to str.splitlines) would otherwise split the message in two.
    file = json_file(tmp_path, '{"a": {"b\\u2028 c": {"d": 1}}}')
    inner = file.document["a"]["b\u2028 c"]
    assert problem_of(lambda: file.get(inner, ("a", "b\u2028 c", "d"), str)) == (
        (f'{tmp_path}/file.json: a."b\\u2028 c".d: expected a string, got 1; fix it',),
        3,
    )
    assert problem_of(lambda: file.get(inner, ("a", "b\u2028 c", "e"), str)) == (
        (f'{tmp_path}/file.json: a."b\\u2028 c".e: missing; fix it',),
        3,
    )
    assert file.get(inner, ("a", "b\u2028 c", "e"), str, default="") == ""


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"a": ["x", "\\ud800"]}', 'a[1]: "\\ud800" holds half of a UTF-16 surrogate pair alone, which is no '
         "character"),
        ('{"a": {"\\udc00": 1}}', 'a: the key "\\udc00" holds half of a UTF-16 surrogate pair alone, which is no '
         "character"),
    ],
    ids=["value", "key"],
)  # fmt: skip
def test_a_lone_surrogate_escape_is_refused_as_no_printable_text(tmp_path, text, problem):
    assert problem_of(lambda: json_file(tmp_path, text)) == ((f"{tmp_path}/file.json: {problem}; fix it",), 3)


def test_a_surrogate_pair_escape_is_one_character(tmp_path):
    assert json_file(tmp_path, '{"a": "\\ud83d\\ude00"}').document == {"a": "\U0001f600"}
