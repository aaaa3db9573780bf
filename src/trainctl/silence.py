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


# libraries whose log records (and Python warnings) go to trainctl's debug log while trainctl asks them a question
LIBRARIES = ("transformers", "tokenizers", "huggingface_hub", "verl", "mcp", "httpx", "httpx2", "httpcore", "torch")
DEBUG_LOGGER = "trainctl.debug"


class _ToDebug(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(DEBUG_LOGGER).debug("%s: %s", record.name, record.getMessage())


@contextlib.contextmanager
def library_logs():
    """Library warnings and log records (transformers' "Token indices sequence length is longer than the specified
    maximum ...", the MCP SDK's tracebacks of a dropped stream) go to trainctl's debug log (TRAINCTL_DEBUG=1 shows
    it on stderr) instead of the terminal, for the duration."""
    handler = _ToDebug()
    saved = []
    # verl's agent-loop modules name their loggers by file path (logging.getLogger(__file__)), not by module
    by_path = [n for n in list(logging.root.manager.loggerDict) if any(f"/{lib}/" in n for lib in LIBRARIES)]
    for name in (*LIBRARIES, *by_path):
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers = [handler]
        logger.propagate = False
    shown = warnings.showwarning

    def to_debug(message, category, filename, lineno, file=None, line=None):
        logging.getLogger(DEBUG_LOGGER).debug("%s: %s (%s:%s)", category.__name__, message, filename, lineno)

    with warnings.catch_warnings():
        warnings.showwarning = to_debug
        try:
            yield
        finally:
            warnings.showwarning = shown
            for logger, handlers, propagate in saved:
                logger.handlers = handlers
                logger.propagate = propagate


def show_debug_log() -> None:
    """Print trainctl's debug log on stderr (TRAINCTL_DEBUG=1)."""
    import sys

    logger = logging.getLogger(DEBUG_LOGGER)
    handler = next((h for h in logger.handlers if getattr(h, "_trainctl", False)), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("debug: %(message)s"))
        handler._trainctl = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    handler.setStream(sys.stderr)  # this command's stderr (a test's capture, when run in-process)
    logger.setLevel(logging.DEBUG)


# Warnings a real model brings on every load that ask nothing of the user: in trainctl's own process they go to the
# debug log (TRAINCTL_DEBUG=1 shows them); a trainer's process, whose output is the run's log, keeps them there.
# logger name -> the start of each message quieted (the records other messages make are left alone)
KNOWN_NOISE = {
    # verl's continuous-token builder, which trainctl's eval, chat and model serve build prompts with: every model
    # type but the few verl registers a builder for (llama, SmolLM2's, is not one), once per prompt builder
    "verl.utils.tokenizer.continuous_token_wiring": ("No model-specific",),
    # transformers 5, on every load of a BPE tokenizer saved with clean_up_tokenization_spaces on (as transformers 4
    # saved most): it never applies it to BPE, and says so
    "transformers.tokenization_utils_tokenizers": ("Ignoring clean_up_tokenization_spaces",),
}


class _NoiseToDebug(logging.Filter):
    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(self.starts):
            logging.getLogger(DEBUG_LOGGER).debug("%s: %s", record.name, message)
            return False
        return True


def quiet_known_noise() -> None:
    """Send KNOWN_NOISE to the debug log in this process, from now on (once a process; the libraries need not be
    imported yet: their module loggers are these)."""
    for name, starts in KNOWN_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _NoiseToDebug) for f in logger.filters):
            logger.addFilter(_NoiseToDebug(starts))
