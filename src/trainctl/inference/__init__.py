"""Talking to a model: `trainctl model serve` (an OpenAI-compatible HTTP server) and `trainctl chat` (a terminal chat).

Both take what `trainctl eval` takes (a model option, a folder, a run: its latest checkpoint, or one checkpoint) and
resolve it the way eval does (trainctl.eval.targets: shards and LoRA adapters merged once, verified, into the cache),
compose the config training would use for it, and answer with validation's sampling settings (verl's `val_kwargs`).

  model.py      what MODEL means: the folder to load, the served name, the sampling defaults, checked before loading
  engine.py     continuous batching over trainctl's CPU sampler, token by token (streaming) for every request
  text.py       token ids to text as they come (incomplete characters, stop strings and tool-call markup held back)
  openai_api.py the OpenAI request and response shapes: chat, completions, streaming chunks, tool calls
  server.py     the Starlette app on uvicorn (auth, host check) for CPU hardware; vllm.py: vLLM's server on GPUs
  tools.py      the run's tools (MCP servers and functions) for `chat`, called through trainctl's bridge
  chat.py       a conversation: history as tokens, the tool loop, /reset /system /temp

Why trainctl's sampler and not `transformers serve` on CPU: a served greedy answer must be the answer `trainctl eval`
scored, token for token, and eval generates with this sampler (fp32 weights, its own prompt builder, continuous
batching with per-request settings). `transformers serve` runs one request at a time unless its continuous batching
is on, which takes one generation config for the whole batch, and it parses tool calls with its own parser, not the
one the run's tool loop used (verl's, here).
"""
