"""Each bad reward setting is one clear error before anything starts (no process, no Ray)."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import threading

import pytest

GRPO = ["recipe=grpo-arith-tiny-cpu"]


def one_error(result, message: str, hint: str | None = None) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.count("Error:") == 1, result.stderr
    assert f"Error: {message}" in result.stderr, result.stderr
    if hint is not None:
        assert f"Hint: {hint}" in result.stderr, result.stderr


@pytest.fixture
def reward_model(isolated, tiny_reward_model_dir):
    """The tiny reward model where reward.model=tiny-rm looks for it."""
    target = isolated / "models" / "tiny-rm"
    shutil.copytree(tiny_reward_model_dir, target)
    return target


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- reward=model -------------------------------------------------------------------------------------------------


def test_a_good_reward_model_validates(cli, tiny_model, arith_data, reward_model, no_processes):
    result = cli("config", "validate", *GRPO, "reward=model", "reward.model=tiny-rm")
    assert result.exit_code == 0, result.output
    shown = cli("config", "show", *GRPO, "reward=model", "reward.model=tiny-rm", "--backend")
    assert "name: SequenceClassifierRewardManager" in shown.stdout
    assert f"model_path: {reward_model}" in shown.stdout


def test_a_reward_model_that_does_not_exist(cli, tiny_model, arith_data, no_processes):
    one_error(
        cli("config", "validate", *GRPO, "reward=model", "reward.model=tiny-rn"),
        "reward.model = 'tiny-rn' is neither a model option nor a model folder.",
    )
    # an option that is not pulled yet: a warning while planning, an error when it would start
    planned = cli("train", *GRPO, "reward=model", "reward.model=tiny-rm", "--dry-run")
    assert planned.exit_code == 0 and "Warning: reward.model = tiny-rm is not at" in planned.stderr
    one_error(
        cli("train", *GRPO, "reward=model", "reward.model=tiny-rm"),
        "reward.model = tiny-rm is not at",
        "run: trainctl model init tiny-rm",
    )


def test_a_causal_lm_as_reward_model(cli, tiny_model, arith_data, no_processes):
    one_error(
        cli("train", *GRPO, "reward=model", "reward.model=tiny", "--dry-run"),
        "reward.model = tiny is a causal LM (Qwen2ForCausalLM), not a reward model",
        "a reward model: trainctl model ls (kind reward); to have an LLM grade responses, "
        "reward=judge reward.judge=tiny",
    )


def test_a_classifier_without_its_head_or_with_two_labels(cli, arith_data, tmp_path, tiny_model_dir, reward_model):
    # config.json says classifier, the weights are a causal LM's: transformers would start the head at random
    headless = tmp_path / "headless"
    shutil.copytree(tiny_model_dir, headless)
    config = json.loads((headless / "config.json").read_text())
    config |= {"architectures": ["Qwen2ForSequenceClassification"], "id2label": {"0": "LABEL_0"}}
    (headless / "config.json").write_text(json.dumps(config))
    one_error(
        cli("config", "validate", *GRPO, "reward=model", f"reward.model={headless}"),
        f"reward.model = {headless} has no classification head in its weights",
    )
    config = json.loads((reward_model / "config.json").read_text())
    (reward_model / "config.json").write_text(json.dumps(config | {"id2label": {"0": "bad", "1": "good"}}))
    one_error(
        cli("config", "validate", *GRPO, "reward=model", "reward.model=tiny-rm"),
        "reward.model = tiny-rm has 2 labels; a reward model has one (its logit is the reward).",
    )


def test_a_reward_model_as_the_policy(cli, tiny_model, arith_data, reward_model, no_processes):
    one_error(
        cli("config", "validate", *GRPO, "model=tiny-rm"),
        "model=tiny-rm is a reward model (kind: reward): the policy must be a causal LM.",
        "choose the policy with model=..., and score with reward=model reward.model=tiny-rm",
    )


def test_settings_of_another_kind_and_missing_ones(cli, tiny_model, arith_data, no_processes):
    one_error(cli("config", "validate", *GRPO, "reward=fn"), "reward=fn needs reward.fn.")
    one_error(cli("config", "validate", *GRPO, "reward=model"), "reward=model needs reward.model.")
    one_error(
        cli("config", "validate", *GRPO, "reward.model=tiny-rm"),
        "reward.model is set ('tiny-rm'), but reward=rule does not read it.",
        "reward=model reward.model=tiny-rm",
    )
    one_error(
        cli("config", "validate", "algorithm=sft", "reward=judge", "reward.judge=x"),
        "reward=judge scores RL responses, but algorithm=sft trains on fixed targets.",
    )


# -- reward=judge -------------------------------------------------------------------------------------------------


def test_an_unreachable_judge(cli, tiny_model, arith_data, no_processes):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = cli("config", "validate", *GRPO, "reward=judge", "reward.judge=m", f"reward.url={url}")
    one_error(result, f"reward.url = {url} does not answer")
    assert "Hint: start the judge's server, or fix reward.url" in result.stderr


def test_a_missing_or_unsafe_key(cli, tiny_model, arith_data, no_processes, monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    judge = [*GRPO, "reward=judge", "reward.judge=m", f"reward.url={url}"]
    one_error(
        cli("train", *judge, "reward.key_env=JUDGE_API_KEY", "--dry-run"),
        "reward.key_env = JUDGE_API_KEY, but JUDGE_API_KEY is not set in this environment.",
        "export JUDGE_API_KEY=... before trainctl runs (it is read when the run starts, never saved)",
    )
    monkeypatch.setenv("MY_JUDGE", "sk-123456789")
    result = cli("config", "validate", *judge, "reward.key_env=MY_JUDGE")
    assert "Error: reward.key_env = MY_JUDGE: trainctl hides and forwards only variables whose name says" in (
        result.stderr
    )
    assert "sk-123456789" not in result.output


class _Refusing(http.server.BaseHTTPRequestHandler):
    """An endpoint that refuses every key, saying which (as OpenAI's does, masked)."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
        body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_refused_key_is_named_but_never_shown(cli, tiny_model, arith_data, no_processes, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("JUDGE_API_KEY", "sk-secret-abcdef123")
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        result = cli("config", "validate", *GRPO, "reward=judge", "reward.judge=m", f"reward.url={url}",
                     "reward.key_env=JUDGE_API_KEY")  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    one_error(result, f"reward.url = {url} refused the key in JUDGE_API_KEY (HTTP 401)")
    assert "sk-secret-abcdef123" not in result.output and "***" in result.stderr


def test_a_judge_that_answers_validates(cli, tiny_model, arith_data, tiny_model_dir, no_processes):
    from tests.launch.judge_server import JudgeServer

    with JudgeServer(str(tiny_model_dir)) as server:
        result = cli("config", "validate", *GRPO, "reward=judge", "reward.judge=tiny", f"reward.url={server.url}")
    assert result.exit_code == 0, result.output
    assert server.probes == 1


def test_a_template_that_does_not_render(cli, tiny_model, arith_data, tmp_path, no_processes):
    judge = [*GRPO, "reward=judge", "reward.judge=tiny", "reward.url=http://127.0.0.1:9/v1"]
    broken = tmp_path / "broken.jinja"
    broken.write_text("Judge this:\n{% for r in responses %}{{ r }}\n")
    one_error(
        cli("config", "validate", *judge, f"reward.template={broken}"),
        f"reward.template: {broken}:2 is not a valid Jinja template",
    )
    unknown = tmp_path / "unknown.jinja"
    unknown.write_text("{{ question }} {% for r in responses %}{{ r }}{% endfor %}")
    result = cli("config", "validate", *judge, f"reward.template={unknown}")
    one_error(result, f"reward.template: {unknown} does not render: 'question' is undefined.")
    assert "it may use: messages, responses, response, n, rubric, ground_truth" in result.stderr


def test_group_judging_needs_a_group(cli, tiny_model, arith_data, no_processes):
    one_error(
        cli(
            "config",
            "validate",
            *GRPO,
            "algorithm=ppo",
            "reward=judge",
            "reward.judge=tiny",
            "reward.url=http://127.0.0.1:9/v1",
            "actor_rollout_ref.rollout.n=1",
        ),
        "reward.mode = group ranks a prompt's responses against each other, but rollout.n = 1.",
        "actor_rollout_ref.rollout.n=4, or reward.mode=single",
    )


def test_a_reward_manager_set_by_hand_conflicts_with_the_judge(cli, tiny_model, arith_data, no_processes):
    result = cli("config", "validate", *GRPO, "reward=judge", "reward.judge=tiny", "reward.url=http://127.0.0.1:9/v1",
                 "reward.reward_manager.name=dapo")  # fmt: skip
    one_error(
        result,
        "reward.reward_manager.name = 'dapo' (set in command line) would replace trainctl's judge reward manager.",
        "drop reward.reward_manager.name, or score with reward=rule / reward=fn",
    )


# -- the kind and its settings (trainctl.checks.reward.section, before the backend config is built) -------------


def test_an_unknown_kind_and_settings_of_the_wrong_kind_or_type(cli, no_processes):
    one_error(cli("config", "validate", "algorithm=grpo", "reward.kind=jugde"), "unknown reward kind 'jugde'.")
    misspelt = cli("config", "validate", "algorithm=grpo", "reward=judge", "reward.rubrik=be kind")
    one_error(misspelt, "unknown config key 'reward.rubrik'.")
    assert "Did you mean 'reward.rubric'?" in misspelt.stderr
    one_error(
        cli("config", "validate", "algorithm=grpo", "reward=judge", "reward.mode=groop"),
        "reward.mode = 'groop' is not one of: group, single.",
        "reward.mode=group",
    )
    one_error(
        cli("config", "validate", "algorithm=grpo", "reward.micro_batch_size=4"),
        "reward.micro_batch_size is set (4), but reward=rule does not read it.",
        "reward=model, or drop reward.micro_batch_size",
    )


def test_verls_own_reward_keys_stay_verls(cli):
    shown = cli("config", "show", "algorithm=grpo", "reward.num_workers=3", "--backend")
    assert shown.exit_code == 0, shown.output
    assert "num_workers: 3" in shown.stdout
