"""Talking to a model: `trainctl model serve` (an OpenAI-compatible HTTP server) and `trainctl chat` (a terminal chat).

Both take what `trainctl eval` takes (a model option, a folder, a run: its latest checkpoint, or one checkpoint) and
resolve it the way eval does (trainctl.eval.targets: shards and LoRA adapters merged once, verified, into the cache),
compose the config training would use for it, and answer with validation's sampling settings (verl's `val_kwargs`).

  model.py      what MODEL means: the folder to load, the served name, the sampling defaults, checked before loading
  engine.py     continuous batching over trainctl's CPU sampler, token by token (streaming) for every request
  text.py       token ids to text as they come (incomplete characters, stop strings and tool-call markup held back)
  openai_api.py the OpenAI request and response shapes: chat, completions, streaming chunks, tool calls
  logprobs.py   log-probs in those shapes (vLLM's): completions' with echo (prompt log-probs), chat's top_logprobs
  server.py     the Starlette app on uvicorn (auth, host check) for CPU hardware; vllm.py: vLLM's server on GPUs
  tools.py      the run's tools (MCP servers and functions) for `chat`, called through trainctl's bridge
  prompts.py    messages to prompt ids (verl's builder, as eval) and tool calls back (verl's parser of tools.format)
  chat.py       a conversation: history, the tool loop as verl runs it, /reset /system /temp

Why trainctl's sampler and not `transformers serve` on CPU: a served greedy answer must be the answer `trainctl eval`
scored, token for token, and eval generates with this sampler (fp32 weights, verl's prompt builder, the run's
validation settings). `transformers serve` (5.10) starts every request from the model's generation_config (a
Qwen2.5-Instruct request without a temperature samples at 0.7, and its repetition_penalty 1.05 applies even to
temperature 0) and up to 1024 new tokens, not from the run's val_kwargs and response length; it runs one request at a
time unless `--continuous-batching` is on, which takes one generation config for the whole batch; it parses tool calls
with its own parser, not verl's, which the run's tool loop used; and it has no token. benchmarks/bench_model_serve.py
measures both on the tiny model (8 concurrent requests: 12x its default mode's tokens/s, 2.3x its continuous
batching's).
"""
