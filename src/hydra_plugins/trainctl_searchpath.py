"""trainctl's user config folders, searched before the built-in groups (Hydra's SearchPathPlugin API), and the
config source that reads trainctl's config files (Hydra's ConfigSource API).

Hydra's compose API searches one config folder, and `hydra.searchpath` entries come after it, so a user's
`conf/hardware/8gpu.yaml` could not shadow the built-in one. A search-path plugin is Hydra's public way to put
folders first. Hydra re-executes plugin modules when it scans them, so the folders (trainctl.config.compose) and
the parsed files (trainctl.config.yaml_files) are kept in trainctl and read at call time, not kept here.

Hydra parses every config file again for every composition; during a trainctl composition (and only then: verl's
own Hydra apps are left alone) trainctl's folders are read through `trainctl-file://` instead, Hydra's file source
with each file parsed once per process and file version.
"""

from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin


class TrainctlFileConfigSource(FileConfigSource):
    """Hydra's file source (folders, listings, headers) with each file parsed once per process and version."""

    @staticmethod
    def scheme() -> str:
        return "trainctl-file"

    def load_config(self, config_path: str) -> ConfigResult:
        import os

        from omegaconf import OmegaConf

        from trainctl.config.yaml_files import config_file

        full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        if not os.path.exists(full_path):
            raise ConfigLoadError(f"Config not found : {full_path}")
        header, content = config_file(full_path, ConfigSource._get_header_dict)
        return ConfigResult(
            config=OmegaConf.create() if content is None else OmegaConf.create(content),
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header=header,
        )


class TrainctlUserConfigDirs(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        # Hydra calls every installed search-path plugin for every Hydra app in this environment (verl's trainers
        # too): outside a trainctl composition there is nothing to add, and a mismatched trainctl must not break them
        try:
            from trainctl.config.compose import active_user_dirs, composing
        except ImportError:
            return
        if not composing():
            return
        for i, d in reversed(list(enumerate(active_user_dirs()))):
            search_path.prepend(provider=f"trainctl-user-{i}", path=f"{TrainctlFileConfigSource.scheme()}://{d}")
        # the built-in folder (the compose API's config folder: a plain path, which Hydra reads as file://)
        for element in search_path.get_path():
            path = element.path or ""
            if "://" not in path or path.startswith("file://"):
                element.path = f"{TrainctlFileConfigSource.scheme()}://{path.removeprefix('file://')}"
