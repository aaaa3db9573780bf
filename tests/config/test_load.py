"""`load_option`: one group option, looked up where a composition looks (the user's folders first)."""

from __future__ import annotations

import pytest

from trainctl.config.load import load_option
from trainctl.config.schema import Model
from trainctl.config.search import SearchPath
from trainctl.errors import ConfigProblems


def _folder(tmp_path, name: str, text: str):
    d = tmp_path / name / "model"
    d.mkdir(parents=True)
    (d / "mine.yaml").write_text(text)
    return tmp_path / name


def test_an_option_of_the_users_folder_shadows_nothing_and_is_found(tmp_path, isolated):
    team = _folder(tmp_path, "team", "defaults:\n  - tiny\n  - _self_\nname: mine\npath: /data/mine\n")
    found = load_option("model", "mine", SearchPath.default([team]))
    assert isinstance(found, Model)
    assert (found.name, found.path, found.kind, found.context_length) == ("mine", "/data/mine", "causal_lm", 1024)
    assert load_option("model", "mine", SearchPath.default()) is None  # not without the folder
    assert load_option("model", "tiny", SearchPath.default([team])).path.endswith("/models/tiny")


def test_dot_conf_is_one_of_the_users_folders(tmp_path, isolated):
    import os

    _folder(tmp_path, "work/conf", "defaults:\n  - tiny\n  - _self_\nname: mine\n")
    assert os.getcwd() == str(tmp_path / "work")
    assert load_option("model", "mine").path == str(isolated / "models" / "mine")


def test_an_option_that_does_not_load_names_its_file(tmp_path, isolated):
    team = _folder(tmp_path, "team", "defaults:\n  - _base\n  - _self_\nname: mine\ncontext_length: lots\n")
    with pytest.raises(ConfigProblems) as e:
        load_option("model", "mine", SearchPath.default([team]))
    (p,) = e.value.problems
    assert p.message.startswith("model.context_length must be an integer, not 'lots' (set in ")
    assert str(team / "model" / "mine.yaml") in p.message
