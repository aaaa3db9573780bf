"""Quieting libraries that print and log while trainctl imports them to ask a question (the library never prints)."""

from __future__ import annotations

import contextlib
import io
import logging
import warnings


@contextlib.contextmanager
def quiet():
    """verl prints and logs while validating; the library must not."""
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)
