"""What the backends accept, read off their installed versions: plain data, importing nothing of trainctl, so that
every layer (translation, checks, data tools, runtime code) can use it."""
