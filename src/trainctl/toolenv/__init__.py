"""The tool environment of a tools config, outside a run: what `trainctl tools` shows, what a run is checked and
locked against.

servers    every server of a tools config started or reached as a run does it: its tools, their parameter schemas
           and the prompt tokens they cost the chosen model (`trainctl tools ls`); one call, its answer as the model
           reads it and its latency (`trainctl tools call`)
preflight  one scripted trajectory per server, through the real servers and the model's chat template: the
           turn-by-turn token ids equal the whole conversation's, the assistant mask is not empty, the parser's stop
           tokens exist (before a training or an eval starts anything)
identity   what each server is (command or URL, package version, name and version from MCP's initialize, a hash of
           its tool schemas) for the run's lock.json, and how two such records differ

Built on trainctl.mcp (specs, discovery, calls) and the model's tokenizer; it never prints, and imports neither the
plan nor the CLI.
"""
