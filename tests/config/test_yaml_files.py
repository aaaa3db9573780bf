"""trainctl's config files, parsed once per process and file version, for Hydra's compositions and the origins."""

from __future__ import annotations

import os

import pytest

from trainctl.config import yaml_files
from trainctl.config.load import load


@pytest.fixture
def parses(monkeypatch, tmp_path) -> list[str]:
    """trainctl's config files parsed from now on (the per-process parses and the cache folder's start empty;
    Hydra's own package configs, which it reads itself, are not counted)."""
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "parses-cache"))
    seen: list[str] = []
    real = yaml_files.yaml.load

    def counted(stream, Loader):
        if "site-packages" not in getattr(stream, "name", "site-packages"):
            seen.append(stream.name)
        return real(stream, Loader=Loader)

    monkeypatch.setattr(yaml_files, "_CONFIG_FILES", {})
    monkeypatch.setattr(yaml_files.yaml, "load", counted)
    return seen


def test_a_file_is_parsed_once_and_again_when_it_changes(tmp_path, parses):
    f = tmp_path / "option.yaml"
    f.write_text("# @package _global_\nname: one\nlist: [1, 2]\n")
    header, first = yaml_files.config_file(str(f), lambda head: {"head": head.splitlines()[0]})
    first["name"] = "changed by a caller"
    assert yaml_files.config_file(str(f))[1] == {"name": "one", "list": [1, 2]}  # each caller gets its own copy
    assert header == {"head": "# @package _global_"}
    assert parses == [str(f)]
    f.write_text("name: two\n")
    assert yaml_files.config_file(str(f))[1] == {"name": "two"}
    assert parses == [str(f), str(f)]


def test_the_next_process_reads_a_file_parsed_before_from_the_cache_folder(tmp_path, parses):
    f = tmp_path / "option.yaml"
    f.write_text("name: one\n1: an integer key\n")
    os.utime(f, ns=(10**18, 10**18))  # written long enough ago: no rewrite within the clock's tick can hide
    assert yaml_files.config_file(str(f))[1] == {"name": "one", 1: "an integer key"}
    yaml_files._CONFIG_FILES.clear()  # a new process
    assert yaml_files.config_file(str(f))[1] == {"name": "one", 1: "an integer key"}
    assert parses == [str(f)]
    f.write_text("name: two\n")
    os.utime(f, ns=(4 * 10**18 + 1, 4 * 10**18 + 1))  # as if written this very tick: read, and not kept
    yaml_files._CONFIG_FILES.clear()
    assert yaml_files.config_file(str(f))[1] == {"name": "two"}
    yaml_files._CONFIG_FILES.clear()
    assert yaml_files.config_file(str(f))[1] == {"name": "two"}
    assert parses == [str(f), str(f), str(f)]


def test_a_parse_this_process_holds_is_written_to_a_new_cache_folder_too(tmp_path, parses, monkeypatch):
    """As the compositions (trainctl.paths.keep_cached): the processes launched for another cache folder's owner
    (a test's run, a server's home) find it there."""
    f = tmp_path / "option.yaml"
    f.write_text("name: one\n")
    os.utime(f, ns=(10**18, 10**18))
    yaml_files.config_file(str(f))
    monkeypatch.setenv("TRAINCTL_CACHE", str(tmp_path / "another"))
    assert yaml_files.config_file(str(f))[1] == {"name": "one"}
    assert parses == [str(f)] and len(list((tmp_path / "another" / "yaml").iterdir())) == 1


def test_compositions_parse_each_file_once_and_see_the_users_edits(isolated, parses):
    """Hydra reads trainctl's folders through the cache during a trainctl composition (the compositions below skip
    the disk cache of whole compositions: each composes anew), and an edited option file is read again."""
    mine = isolated.parent / "work" / "conf" / "model"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("defaults:\n  - tiny\n  - _self_\nname: mine\ncontext_length: 512\n")
    assert load(["model=mine", "run.seed=1"]).cfg.model.context_length == 512
    once = len(parses)
    assert once > 5 and len(set(parses)) == once
    assert load(["model=mine", "algorithm=grpo", "run.seed=2"]).cfg.algorithm.name == "grpo"
    assert len(parses) - once == len({*parses[once:]} - {*parses[:once]})  # only files not read before
    (mine / "mine.yaml").write_text("defaults:\n  - tiny\n  - _self_\nname: mine\ncontext_length: 2048\n")
    os.utime(mine / "mine.yaml", ns=(1, 1))  # another version even within the clock's resolution
    assert load(["model=mine", "run.seed=3"]).cfg.model.context_length == 2048
    assert parses[-1].endswith("mine.yaml")
