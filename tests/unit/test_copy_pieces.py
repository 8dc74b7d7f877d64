"""A file split into pieces (COPY of a large CSV or JSON file) is read line for line as a whole.

The driver counts each nominal range's newlines (:func:`count_newlines`) and
gives piece ``k`` the line number ``1 +`` the newlines before it; the task
reads the lines that *start* in its range (:func:`_piece_chunks`). Over random
files (empty lines, no final newline, lines longer than a piece, CR LF) and
random piece sizes, the pieces' numbered lines must be the whole file's, each
once, in order.
"""

from __future__ import annotations

from pathlib import Path

import hypothesis.strategies as st
from hypothesis import given, settings

from timeshard.storage import copy_task
from timeshard.storage.copy_task import Piece, _chunk_lines, _chunks, _piece_chunks, count_newlines
from timeshard.storage.file_source import DEFAULT_MAX_LINE_BYTES


def numbered(chunks: list[tuple[int, bytes | int]]) -> list[tuple[int, bytes | int]]:
    """The numbered lines of ``chunks``; a line longer than the limit is its length."""
    out: list[tuple[int, bytes | int]] = []
    for first, chunk in chunks:
        out += [(first, chunk)] if isinstance(chunk, int) else _chunk_lines(first, chunk)
    return out


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"x" * 40, b"\n\n"]), max_size=40
    ).map(b"".join),
    size=st.integers(1, 60),
    read=st.sampled_from([3, 7, 1 << 20]),
)
def test_pieces_read_every_line_once_with_its_number(data: bytes, size: int, read: int) -> None:
    whole, pieces, newlines = read_whole_and_in_pieces(data, size, read)
    assert pieces == numbered(whole)
    assert newlines == data.count(b"\n")


def read_whole_and_in_pieces(
    data: bytes, size: int, read: int, limit: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[list[tuple[int, bytes | int]], list[tuple[int, bytes | int]], int]:
    """``data`` as a file read whole (its chunks) and in pieces of ``size`` bytes (their
    numbered lines), reads of ``read`` bytes, and the newlines the pieces counted."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.csv"
        path.write_bytes(data)
        old = copy_task._READ_CHUNK
        copy_task._READ_CHUNK = read
        try:
            with open(path, "rb") as f:
                whole = list(_chunks(f.read, 1, limit))
            ranges = [
                Piece(str(path), s, min(s + size, len(data))) for s in range(0, len(data), size)
            ]
            counts = [count_newlines(p) for p in ranges]
            got: list[tuple[int, bytes | int]] = []
            for i, p in enumerate(ranges):
                piece = Piece(p.file, p.start, p.end, 1 + sum(counts[:i]))
                with open(path, "rb") as f:
                    got += numbered(list(_piece_chunks(f, piece, limit)))
        finally:
            copy_task._READ_CHUNK = old
    return whole, got, sum(counts)


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"x" * 40, b"\n\n"]), max_size=40
    ).map(b"".join),
    limit=st.integers(1, 90),
    size=st.integers(1, 60),
    read=st.sampled_from([3, 7, 1 << 20]),
)
def test_a_line_longer_than_the_limit_is_its_length_whole_or_in_pieces(
    data: bytes, limit: int, size: int, read: int
) -> None:
    """Lines of more than ``limit`` bytes (newline excluded) are measured, never held: a
    COPY of a file without newlines read the whole file into one line (quadratically)."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    want = [
        (n, len(line) if len(line) > limit else line.removesuffix(b"\r"))
        for n, line in enumerate(lines, 1)
    ]
    whole, got, _ = read_whole_and_in_pieces(data, size, read, limit)
    assert numbered(whole) == want
    assert got == want
    held = [len(c) for _, c in whole if isinstance(c, bytes)]
    assert all(n <= limit + min(read, limit + 1) for n in held), held  # a line, and one read
