"""The command line: parses, calls the library, prints. Nothing here decides anything about training."""
