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


def numbered(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    return [line for first, chunk in chunks for line in _chunk_lines(first, chunk)]


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"x" * 40, b"\n\n"]), max_size=40
    ).map(b"".join),
    size=st.integers(1, 60),
    read=st.sampled_from([3, 7, 1 << 20]),
)
def test_pieces_read_every_line_once_with_its_number(data: bytes, size: int, read: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.csv"
        path.write_bytes(data)
        old = copy_task._READ_CHUNK
        copy_task._READ_CHUNK = read
        try:
            with open(path, "rb") as f:
                whole = numbered(list(_chunks(f)))
            ranges = [
                Piece(str(path), s, min(s + size, len(data))) for s in range(0, len(data), size)
            ]
            counts = [count_newlines(p) for p in ranges]
            got: list[tuple[int, bytes]] = []
            for i, p in enumerate(ranges):
                piece = Piece(p.file, p.start, p.end, 1 + sum(counts[:i]))
                with open(path, "rb") as f:
                    got += numbered(list(_piece_chunks(f, piece)))
        finally:
            copy_task._READ_CHUNK = old
    assert got == whole
    assert sum(counts) == data.count(b"\n")
