"""A module with a Ray actor class, which Ray gives a random ID as the module is imported: the fork server's second
stage in tests/runtime/forkserver_harness.py, for the workers' Ray IDs to be checked distinct."""

import ray


@ray.remote
class Remote:
    pass
