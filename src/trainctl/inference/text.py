"""Token ids to text while they are being generated.

A byte-level BPE token may hold part of a character, so the text of the tokens so far is decoded whole each time and
only what is new is sent; what is held back until more tokens come: an incomplete character (U+FFFD at the end), and
an ending that may be the start of a stop string or of a marker the caller hides (`<tool_call>`): a stop string is
never shown, and tool-call markup is the parser's to read, not the user's.
"""

from __future__ import annotations

from collections.abc import Sequence


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """The text before the first stop string (OpenAI's and vLLM's default: the stop string is not returned)."""
    found = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return text[: min(found)] if found else text


def _partial_tail(text: str, words: Sequence[str]) -> int:
    """The length of the longest ending of `text` that is the beginning of one of `words` (but not all of it)."""
    longest = 0
    for w in words:
        for n in range(min(len(w) - 1, len(text)), longest, -1):
            if text.endswith(w[:n]):
                longest = n
                break
    return longest


class TextStream:
    """Feed tokens with `push`; get the text that may be shown now. `stops` end the text; after a `markers` word
    (e.g. `<tool_call>`) nothing more is shown until `finish` says what the whole answer's text is."""

    def __init__(self, tokenizer, *, stops: Sequence[str] = (), markers: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.stops = [s for s in stops if s]
        self.markers = [m for m in markers if m]
        self.ids: list[int] = []
        self.shown = ""
        self.hidden = False  # a marker was seen: the rest waits for finish()

    def decode(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def push(self, tokens: Sequence[int]) -> str:
        self.ids.extend(int(t) for t in tokens)
        if self.hidden:
            return ""
        text = self.decode()
        end = len(text)
        while end and text[end - 1] == "\ufffd":
            end -= 1
        text = text[:end]
        for word in self.markers:
            at = text.find(word, max(0, len(self.shown) - len(word)))
            if at >= 0:
                self.hidden = True
                text = text[:at]
        cut = cut_at_stop(text, self.stops)
        if len(cut) < len(text):  # a whole stop string: the request is finishing; show what comes before it
            text = cut
        elif not self.hidden:
            text = text[: len(text) - _partial_tail(text, [*self.stops, *self.markers])]
        return self._advance(text)

    def finish(self, text: str) -> str:
        """The rest of the answer, given its final text; nothing when that does not continue what was shown."""
        return self._advance(text)

    def _advance(self, text: str) -> str:
        if len(text) <= len(self.shown) or not text.startswith(self.shown):
            return ""
        new, self.shown = text[len(self.shown) :], text
        return new
