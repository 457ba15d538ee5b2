"""Constrained decoding with xgrammar: JSON schemas, regular expressions and EBNF grammars.

Who does what, and on which thread:

- `GrammarBackend.compile(key)` turns a request's grammar into an xgrammar `CompiledGrammar`. It
  runs on the caller's thread (the gateway compiles in a worker thread before it admits the
  request), never on the engine loop, and keeps one compiled grammar per key, so a schema sent
  again costs a dictionary lookup. A grammar xgrammar cannot compile is a `ValueError` saying why.
- `GrammarBackend.new_matcher(key)` gives each request its own `GrammarMatcher` (its position in
  the grammar), stored on `Req.grammar`.
- `GrammarBackend.apply_mask` is a sampler logits processor: for the rows that have a matcher it
  fills one bitmask row each and applies them to the batch's logits in one call, before the
  greedy argmax and the draw.
- `GrammarBackend.accept` advances each matcher by the token sampled for it. The matcher accepts
  only the engine's EOS tokens once the grammar is complete, so a finished document ends the
  request with `stop`.

A `GrammarKey` is (kind, source, any_whitespace): kind is "json_schema", "regex" or "ebnf".
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..scheduler.request import Req
    from .sampler import SamplingInfo

GrammarKey = tuple[str, str, bool]
GRAMMAR_KINDS = ("json_schema", "regex", "ebnf")
_MAX_CACHED_GRAMMARS = 512
# xgrammar's errors start with "[time] /path/file.cc:line: "; the rest is the reason.
_XGRAMMAR_ERROR_PREFIX = re.compile(r"^\[[0-9:]+\] \S+:\d+: ")
# xgrammar 0.2.9 writes the characters of a length-bounded JSON string (maxLength) as this class,
# which lets control characters through unescaped: invalid JSON that strict parsers (Python's
# json, pydantic, JavaScript) reject. Its unbounded strings already exclude them; so do we.
_LOOSE_STRING_CHAR = r"[^\"\\\r\n]"
_JSON_STRING_CHAR = r"[^\0-\x1f\"\\\r\n]"


def _json_schema_grammar(source: str, any_whitespace: bool) -> Any:
    """xgrammar's grammar for a JSON schema, with strings that exclude control characters."""
    import xgrammar as xgr

    grammar = xgr.Grammar.from_json_schema(source, any_whitespace=any_whitespace)
    text = str(grammar)
    if _LOOSE_STRING_CHAR not in text:
        return grammar
    return xgr.Grammar.from_ebnf(text.replace(_LOOSE_STRING_CHAR, _JSON_STRING_CHAR))


class GrammarBackend:
    """Compiles, caches and applies grammars for one engine's tokenizer and vocabulary."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids)
        self._lock = threading.Lock()  # guards _compiler creation and _compiled
        self._compiler: Any = None
        self._compiled: OrderedDict[GrammarKey, Any] = OrderedDict()
        self._bitmask: torch.Tensor | None = None  # [rows, ceil(vocab / 32)] int32, reused across steps
        self.num_compiled = 0

    def _get_compiler(self) -> Any:
        # Built on first use: reading a 100k-token vocabulary takes most of a second, and most
        # engines never see a grammar.
        with self._lock:
            if self._compiler is None:
                import xgrammar as xgr

                info = xgr.TokenizerInfo.from_huggingface(
                    self.tokenizer, vocab_size=self.vocab_size, stop_token_ids=self.stop_token_ids
                )
                self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            return self._compiler

    def compile(self, key: GrammarKey) -> Any:
        """The compiled grammar for `key`, from the cache or compiled now (on the calling thread)."""
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is not None:
                self._compiled.move_to_end(key)
                return compiled
        compiler = self._get_compiler()
        kind, source, any_whitespace = key
        try:
            if kind == "json_schema":
                schema = json.loads(source)
                if not isinstance(schema, dict):
                    raise ValueError("a JSON schema must be a JSON object")
                compiled = compiler.compile_grammar(_json_schema_grammar(source, any_whitespace))
            elif kind == "regex":
                compiled = compiler.compile_regex(source)
            elif kind == "ebnf":
                compiled = compiler.compile_grammar(source)
            else:
                raise ValueError(f"unknown grammar kind {kind!r}: use one of {GRAMMAR_KINDS}")
        except (RuntimeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            reason = _XGRAMMAR_ERROR_PREFIX.sub("", str(exc).strip())
            raise ValueError(f"the {kind} cannot be compiled: {reason}") from None
        with self._lock:
            self._compiled[key] = compiled
            self.num_compiled += 1
            while len(self._compiled) > _MAX_CACHED_GRAMMARS:
                self._compiled.popitem(last=False)
        return compiled

    def new_matcher(self, key: GrammarKey) -> Any:
        import xgrammar as xgr

        return xgr.GrammarMatcher(self.compile(key), override_stop_tokens=self.stop_token_ids)

    def apply_mask(self, logits: torch.Tensor, info: SamplingInfo) -> None:
        """Logits processor: -inf on every token the row's grammar does not allow next."""
        rows = [i for i, req in enumerate(info.reqs) if req.grammar is not None]
        if not rows:
            return
        import xgrammar as xgr

        batch = logits.shape[0]
        if self._bitmask is None or self._bitmask.shape[0] < batch:
            self._bitmask = xgr.allocate_token_bitmask(max(batch, 16), self.vocab_size)
        bitmask = self._bitmask[:batch]
        for i in rows:
            req = info.reqs[i]
            try:  # per request: a matcher that fails ends its request alone, its row left unmasked
                req.grammar.fill_next_token_bitmask(bitmask, i)
            except Exception as exc:
                req.fail("grammar mask", exc)
                bitmask[i] = -1
        bitmask = bitmask.to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=self.vocab_size, indices=rows)

    @staticmethod
    def accept(reqs: Sequence[Req], token_ids: Sequence[int]) -> None:
        """Advances each constrained request's matcher by the token sampled for it. A token the
        grammar refuses (or a matcher that raises) ends that request alone, with an error."""
        for req, token in zip(reqs, token_ids, strict=True):
            if req.grammar is None or req.error is not None:
                continue
            try:
                if not req.grammar.is_terminated() and not req.grammar.accept_token(token):
                    raise ValueError(f"sampled token {token} is not allowed by the request's grammar")
            except Exception as exc:
                req.fail("grammar", exc)
