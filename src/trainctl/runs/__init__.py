"""Reading run folders: their status (alive, done, failed, killed), progress, metrics and configs.

Everything here reads what `trainctl train` writes into runs/<name>/ (run.json, trainctl.yaml, the backend config,
logs/attempt-N.log, metrics/attempt-N.jsonl); nothing here prints. The commands are in trainctl.cli.runs, the live
view in trainctl.cli.live.
"""
