"""The ``timeshard`` command line."""
