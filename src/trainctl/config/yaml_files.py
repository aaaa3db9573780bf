"""trainctl's config files as Hydra reads them, each parsed once per process and file version.

Hydra parses every file of a composition again for every composition (~20 files, a third of its time); a test
session composes a thousand times and a server keeps composing. hydra_plugins.trainctl_searchpath reads trainctl's
config folders through `config_file` during a trainctl composition, and trainctl.config.origins reads the same files.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import yaml

from trainctl import paths

# per file version, (real path, mtime, size) -> (its first 512 characters, its content pickled, the cache folders it
# was written to)
_CONFIG_FILES: dict[tuple, tuple[str, bytes, set[str]]] = {}


def config_file(path: str, header_of=lambda text: {}) -> tuple[dict, Any]:
    """(header, content) of one of trainctl's config files, read as Hydra reads it (OmegaConf's YAML loader),
    parsed once per process and file version, and kept in the cache folder for the next process (parsing a mapping
    table, conf/mapping/, costs a plan ~10 ms). The content is the loader's plain data, a fresh copy for each
    caller; the header is Hydra's (`# @package ...`), read by `header_of` from the file's first 512 characters."""
    import omegaconf.version
    from omegaconf._utils import get_yaml_loader

    real = os.path.realpath(path)
    st = os.stat(real)
    key = (real, st.st_mtime_ns, st.st_size)
    known = _CONFIG_FILES.get(key)
    folder = str(paths.cache_dir())
    if known is None or folder not in known[2]:
        # a parse this process holds is written to a cache folder it has not written it to yet: the processes
        # launched for that folder's owner find it there (a test session, a server serving several homes)

        def parse() -> tuple[str, bytes]:
            if known is not None:
                return known[0], known[1]
            with open(real, encoding="utf-8") as f:  # parsed from the file: a syntax error names it
                head = f.read(512)
                f.seek(0)
                return head, pickle.dumps(yaml.load(f, Loader=get_yaml_loader()))

        loader = ("omegaconf", omegaconf.version.__version__, yaml.__version__)
        head, blob = paths.memo_on_files("yaml", [Path(real)], loader, parse, pickled=True)
        if len(_CONFIG_FILES) > 4096:
            _CONFIG_FILES.clear()
        known = _CONFIG_FILES[key] = (head, blob, {folder, *(known[2] if known else ())})
    return header_of(known[0]), pickle.loads(known[1])
