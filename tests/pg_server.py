"""The throwaway PostgreSQL server now ships with the nemesis; tests import it from here."""

from timeshard.nemesis.postgres_server import PostgresServer, find_bin, free_port

__all__ = ["PostgresServer", "find_bin", "free_port"]
