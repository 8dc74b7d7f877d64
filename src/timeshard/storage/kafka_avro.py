"""A KAFKA source's ``avro`` sides, decoded by spark-avro's ``from_avro`` on the JVM.

A side in format ``avro`` is a bare Avro datum written with the side's declared
(reader) schema, or, with a schema source (a registry or a fixed map of ids), a
record in the Confluent wire format: magic byte 0, the writer schema's id (a
big-endian signed int32), the datum. :class:`_AvroSide` decodes each record
with the schema of its id, resolved into the reader schema, and says why a
record does not decode (its err row's message): not in the wire format, an id
unknown to the schema source, or a datum that does not decode. The semantics
are the KAFKA source's module doc (:mod:`timeshard.storage.kafka_source`, which
"module doc" means below).

What runs where: the driver builds the Column expressions (and finds the
range's schema ids with one small job, :func:`_schema_id`); the executors' JVMs
evaluate them in the read's job, no Python in the tasks.
"""

from __future__ import annotations

from typing import Any

from timeshard.storage.schema_registry import HEADER_BYTES, MAGIC


def _decoded_column(side: str) -> str:
    return f"_avro_{side}_decoded"


def _schema_id(raw: Any) -> Any:
    """The schema id of wire-format bytes ``raw`` (a big-endian signed int32, as a long),
    null if they are not in the wire format."""
    from pyspark.sql import functions as F

    framed = (F.length(raw) >= HEADER_BYTES) & (raw.substr(1, 1) == F.lit(MAGIC))
    unsigned = F.conv(F.hex(raw.substr(2, 4)), 16, 10).cast("long")
    signed = F.when(unsigned >= 1 << 31, unsigned - (1 << 32)).otherwise(unsigned)
    return F.when(framed, signed)


class _AvroSide:
    """The decoding of one side's raw bytes (driver: Column expressions; module doc)."""

    def __init__(
        self,
        side: str,
        raw: Any,
        reader: str,
        writers: dict[int, str | None] | None,
        unknown_to: str,
    ) -> None:
        from pyspark.sql import functions as F

        from timeshard.storage.avro import decode_datum

        self.side, self.raw, self.writers, self.unknown_to = side, raw, writers, unknown_to
        if writers is None:
            self.struct = decode_datum(raw, reader)
            return
        self.schema_id = _schema_id(raw)
        datum = raw.substr(HEADER_BYTES + 1, (1 << 31) - 1)
        found = {i: text for i, text in sorted(writers.items()) if text is not None}
        struct = F.when(F.lit(False), decode_datum(datum, reader))
        for i, text in found.items():
            struct = struct.when(self.schema_id == F.lit(i), decode_datum(datum, text, reader))
        self.struct = struct
        self.found = found

    @property
    def ok(self) -> Any:
        from pyspark.sql import functions as F

        from timeshard.storage.avro import datum_ok

        return datum_ok(F.col(_decoded_column(self.side)))

    def error(self, decoded: Any, where: Any) -> Any:
        """The err message of a record (null: none), ``<where>: AvroDecodeError: <side>: ...``."""
        from pyspark.sql import functions as F

        from timeshard.storage.avro import datum_ok

        head = F.concat(where, F.lit(f": AvroDecodeError: {self.side}: "))
        bad = self.raw.isNotNull() & ~datum_ok(decoded)
        if self.writers is None:
            return F.when(bad, F.concat(head, F.lit(_BARE_DATUM_ERROR)))
        sid = self.schema_id.cast("string")
        unknown = f" is unknown to {self.unknown_to}"
        known = F.lit(False)
        for i in self.found:
            known = known | (self.schema_id == F.lit(i))
        return (
            F.when(self.raw.isNull(), F.lit(None))
            .when(self.schema_id.isNull(), F.concat(head, F.lit(_NOT_WIRE_ERROR)))
            .when(
                ~known,
                F.concat(head, F.lit("schema id "), sid, F.lit(unknown)),
            )
            .when(
                bad,
                F.concat(
                    head,
                    F.lit("the datum does not decode with writer schema id "),
                    sid,
                    F.lit(f" into the declared columns ({_DECODE_CAUSES})"),
                ),
            )
        )


_DECODE_CAUSES = (
    "corrupt, truncated, too long, a value outside its logical type's range, "
    "or a schema the reader schema cannot resolve"
)
_BARE_DATUM_ERROR = f"the datum does not decode with the declared avro schema ({_DECODE_CAUSES})"
_NOT_WIRE_ERROR = (
    "not in the Confluent wire format (at least 5 bytes: magic byte 0, a 4-byte schema id)"
)
