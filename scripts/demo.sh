#!/usr/bin/env bash
# Set up timeshard (first run only) and run the main job: `timeshard demo`.
source "$(dirname "$0")/bootstrap.sh"
exec timeshard demo "$@"
