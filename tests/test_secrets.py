from __future__ import annotations

from trainctl.secrets import REDACTED, Redactor, is_secret_name


def test_secret_names():
    for name in ("HF_TOKEN", "WANDB_API_KEY", "RAY_AUTH_TOKEN", "MY_SERVICE_SECRET", "DB_PASSWORD", "AWS_ACCESS_KEY"):
        assert is_secret_name(name)
    for name in ("HOME", "PATH", "RAY_ADDRESS", "WANDB_MODE", "TRAINCTL_HOME"):
        assert not is_secret_name(name)


def test_values_are_redacted_in_text_and_trees():
    r = Redactor({"HF_TOKEN": "hf_abcdefghijkl", "WANDB_API_KEY": "0123456789abcdef", "HOME": "/root"})
    assert (
        r.text("token=hf_abcdefghijkl key 0123456789abcdef home /root") == f"token={REDACTED} key {REDACTED} home /root"
    )
    tree = r.tree({"a": {"api_key": "x1", "path": "/m/hf_abcdefghijkl", "n": 3}, "tokens": ["0123456789abcdef"]})
    assert tree == {"a": {"api_key": REDACTED, "path": f"/m/{REDACTED}", "n": 3}, "tokens": [REDACTED]}


def test_failure_excerpt_finds_the_trainers_exception_not_torchruns():
    from trainctl.launch.runner import failure_excerpt

    lines = [
        "step 1",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in f',
        "[rank0]: RuntimeError: boom: bad dataset",
        "E1122 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1)",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
    ]
    excerpt = failure_excerpt(lines, keep=3)
    assert excerpt == [
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in f',
        "[rank0]: RuntimeError: boom: bad dataset",
    ]
