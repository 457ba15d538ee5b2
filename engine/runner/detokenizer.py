"""Incremental detokenization with stop strings, for streaming."""

from __future__ import annotations

from ..scheduler.request import Req


class Detokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def final_text(self, req: Req) -> str:
        """The whole output's text, for a request that did not track it as it went."""
        if req.error is not None:
            return req.text
        try:
            return self.decode(req.output_ids, req.sampling.skip_special_tokens)
        except Exception as exc:  # per request: this request fails alone (Req.fail), the loop goes on
            req.fail("detokenization", exc)
            return req.text

    def update(self, req: Req) -> str:
        """Decodes the request's output so far; cuts at a stop string (finishing the request) and
        returns the text that is safe to send now: nothing that could still become a stop string
        or an incomplete UTF-8 character. A decoding failure fails this request alone (`Req.fail`)."""
        if req.error is not None:
            return ""
        p = req.sampling
        try:
            text = self.decode(req.output_ids, p.skip_special_tokens)
        except Exception as exc:
            req.fail("detokenization", exc)
            return ""
        stops = p.stop_strings
        if stops:
            search_from = max(0, req.num_sent_chars - max(len(s) for s in stops))
            hits = [(i, s) for s in stops if (i := text.find(s, search_from)) >= 0]
            if hits:
                text = text[: min(hits)[0]]
                if req.finish_reason is None:
                    req.finish_reason = "stop"
        req.text = text
        if req.finish_reason is not None:
            safe_end = len(text)
        else:
            safe_end = len(text)
            if text.endswith("\ufffd"):
                safe_end = len(text.rstrip("\ufffd"))
            if stops:
                holdback = max(len(s) for s in stops) - 1
                safe_end = max(req.num_sent_chars, min(safe_end, len(text) - holdback))
        delta = text[req.num_sent_chars : safe_end]
        req.num_sent_chars = max(req.num_sent_chars, safe_end)
        return delta
