"""trainctl's user config folders, searched before the built-in groups (Hydra's SearchPathPlugin API).

Hydra's compose API searches one config folder, and `hydra.searchpath` entries come after it, so a user's
`conf/hardware/8gpu.yaml` could not shadow the built-in one. A search-path plugin is Hydra's public way to put
folders first. Hydra re-executes plugin modules when it scans them, so the folders are read from
trainctl.config.compose at call time, not kept here.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class TrainctlUserConfigDirs(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # Hydra calls every installed search-path plugin for every Hydra app in this environment (verl's trainers
        # too): outside a trainctl composition there is nothing to add, and a mismatched trainctl must not break them
        try:
            from trainctl.config.compose import active_user_dirs
        except ImportError:
            return
        for i, d in reversed(list(enumerate(active_user_dirs()))):
            search_path.prepend(provider=f"trainctl-user-{i}", path=f"file://{d}")
