"""A TRL trainer from the backend config trainctl wrote (python -m trainctl.runtime.trl_entry --trainer FAMILY
--config FILE): DPO, reward models, KTO, ORPO, CPO/SimPO, each a row of trainctl.facts.trl.TRAINERS.

Started by torchrun on one machine (one process per device), or with --ray by Ray Train's TorchTrainer across
machines. A trainer with a reference model gets it the TRL way: a frozen copy of the policy for full fine-tuning,
the adapter-disabled base for LoRA. A reward model is the base model with a one-label classification head. The final
model (or adapter) is saved as checkpoints/checkpoint-<step>/ with its tokenizer and trainer_state.json, like the
intermediate ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _metrics_callback(path: str | None):
    from transformers import TrainerCallback
    from transformers.integrations.integration_utils import rewrite_logs

    class JsonlMetrics(TrainerCallback):
        """Metrics per logging step, in verl's file-logger format ({"step": N, "data": {...}}), under the names
        TRL's own wandb/TensorBoard integrations give them (train/loss, train/rewards/margins, eval/loss)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if path and state.is_world_process_zero and logs:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": state.global_step, "data": rewrite_logs(logs)}) + "\n")

    return JsonlMetrics()


def _datasets(data: dict):
    from datasets import load_dataset

    files = {"train": data["train_files"]}
    if data.get("val_files") and Path(data["val_files"]).is_file():
        files["test"] = data["val_files"]
    return load_dataset("parquet", data_files=files)


def train(family: str, config_path: str, resume: bool = False) -> None:
    from trainctl.import_cost import collector_paused, skip_unused

    skip_unused()  # before transformers loads (each rank, each Ray Train worker): trainctl.import_cost
    with collector_paused():
        import torch
        from omegaconf import OmegaConf
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, set_seed
        from trl import ModelConfig, get_peft_config

    from trainctl.facts.trl import TRAINERS
    from trainctl.runtime.trl_args import load_class, split_args

    spec = TRAINERS[family]
    flat = OmegaConf.to_container(OmegaConf.load(config_path), resolve=True)
    trainer_args, model_args, data = split_args(flat, family)
    with collector_paused():
        config_class, trainer_class = load_class(spec.config), load_class(spec.trainer)
    args = config_class(**trainer_args)
    model_config = ModelConfig(**model_args)
    path = model_config.model_name_or_path

    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
    kwargs = {"dtype": dtype}
    if model_config.attn_implementation:
        kwargs["attn_implementation"] = model_config.attn_implementation
    if model_config.load_in_4bit:
        # QLoRA (lora.quantize=4bit): the frozen base in 4-bit NF4, computing in the training dtype (TRL's
        # get_quantization_config would compute in ModelConfig.dtype, fp32 unless set), one copy per device
        from transformers import BitsAndBytesConfig
        from trl import get_kbit_device_map

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_compute_dtype=dtype,
            bnb_4bit_quant_type=model_config.bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=model_config.use_bnb_nested_quant,
            bnb_4bit_quant_storage=model_config.bnb_4bit_quant_storage or dtype,
        )
        kwargs["device_map"] = get_kbit_device_map()
    tokenizer = AutoTokenizer.from_pretrained(path)
    set_seed(args.seed)  # before the model: a reward model's new head is drawn at random (TRL does the same)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if spec.model == "classifier":
        # a reward model: the base with a one-label head (the reward), which TRL trains with the rest; the head's
        # weights are saved with the model, so the checkpoint loads as the classifier it is
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, **kwargs)
        model.config.pad_token_id = tokenizer.pad_token_id  # the reward is read at the last token that is not pad
    else:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    peft_config = get_peft_config(model_config)  # None unless use_peft

    dataset = _datasets(data)
    extra = {"ref_model": None} if spec.reference else {}  # TRL makes it: a frozen copy, or the base under the adapter
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=dataset["train"],
        eval_dataset=dataset.get("test") if args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[_metrics_callback(os.environ.get("TRAINCTL_METRICS_PATH"))],
        **extra,
    )
    last = _last_checkpoint(args.output_dir) if resume else None
    trainer.train(resume_from_checkpoint=last)
    final = Path(args.output_dir) / f"checkpoint-{trainer.state.global_step}"
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(final))
        trainer.state.save_to_json(str(final / "trainer_state.json"))


def _last_checkpoint(output_dir: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


def train_on_ray(family: str, config_path: str, resume: bool) -> None:
    """Ray Train across machines: one worker per device, each running the same training function."""
    from omegaconf import OmegaConf
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    flat = OmegaConf.to_container(OmegaConf.load(config_path), resolve=True)
    hardware = json.loads(os.environ.get("TRAINCTL_HARDWARE", "{}"))
    workers = int(hardware.get("nnodes", 1)) * int(hardware.get("gpus_per_node", 1))
    use_gpu = hardware.get("device", "cuda") == "cuda"
    config_text = Path(config_path).read_text()
    metrics = os.environ.get("TRAINCTL_METRICS_PATH")

    def loop(_):
        import tempfile

        if metrics:
            os.environ["TRAINCTL_METRICS_PATH"] = metrics
        # each Ray Train worker's copy of the config (a cluster node has no run folder), removed when it is done
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
            fh.write(config_text)
        try:
            train(family, fh.name, resume)
        finally:
            os.unlink(fh.name)

    trainer = TorchTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=RunConfig(storage_path=str(Path(flat["output_dir"]).parent / "ray")),
    )
    result = trainer.fit()
    if result.error:
        raise result.error


def main(argv: list[str] | None = None) -> int:
    from trainctl.facts.trl import TRAINERS

    parser = argparse.ArgumentParser(prog="trl_entry", description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=sorted(TRAINERS), default="dpo", help="the TRL trainer (its family)")
    parser.add_argument("--config", required=True, help="the backend config (trl_<family>.yaml in the run folder)")
    parser.add_argument("--ray", action="store_true", help="run on a Ray cluster with Ray Train")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint-N")
    ns = parser.parse_args(argv)
    if ns.ray:
        train_on_ray(ns.trainer, ns.config, ns.resume)
    else:
        train(ns.trainer, ns.config, ns.resume)
    return 0


if __name__ == "__main__":
    sys.exit(main())
