"""Real servers for trying timeshard and for its tests, started on loopback (``timeshard dev``)."""
