"""libpq's blocking Describe of a prepared statement (``PQdescribePrepared``) against serve.

psycopg's C implementation calls ``PQdescribePrepared`` (and ``PQdescribePortal``)
without releasing the GIL, so a client in the server's own process blocks the
server's threads and waits for ever: the hang that was seen came from there, not
from serve (its answer to Parse/Sync is ParseComplete and ReadyForQuery ``I``).
The client runs here in a process of its own, as a real one does, and is given a
generous deadline: a stuck exchange fails with what the client printed so far.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from timeshard.server.pgwire import PgServer

#: Prints each step's outcome as it completes, so a stuck run shows where it stopped.
CLIENT = textwrap.dedent(
    """
    import sys
    from psycopg import pq
    conn = pq.PGconn.connect(
        f"host=127.0.0.1 port={sys.argv[1]} user=me dbname=x connect_timeout=10".encode()
    )
    print("connect", conn.status, flush=True)
    for step, call in [
        ("prepare", lambda: conn.prepare(b"", b"SELECT n, s FROM t WHERE n > $1")),
        ("describe_prepared", lambda: conn.describe_prepared(b"")),
        ("execute", lambda: conn.exec_prepared(b"", [b"1"])),
    ]:
        r = call()
        names = [r.fname(i) for i in range(r.nfields)]
        print(step, r.status, r.nparams, names, r.error_message, flush=True)
    print("status", conn.transaction_status, flush=True)
    """
)

DEADLINE_S = 60.0


def test_libpq_describe_prepared_is_answered(served: tuple[PgServer, object]) -> None:
    server, _ = served
    try:
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, str(server.port)],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"libpq got no answer in {DEADLINE_S} s (stuck, not slow); it printed: {e.stdout!r}"
        ) from None
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "connect 0",
        "prepare 1 0 [] b''",  # COMMAND_OK
        "describe_prepared 1 1 [b'n', b's'] b''",
        "execute 2 0 [b'n', b's'] b''",  # TUPLES_OK
        "status 0",  # idle
    ], done.stdout
