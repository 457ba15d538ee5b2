"""radixgate's engine: paged KV pool, radix prefix cache, cache-aware continuous batching."""

from .config import EngineConfig, SamplingParams
from .engine import Engine
from .scheduler.request import GenerateOutput, StreamDelta

__all__ = ["Engine", "EngineConfig", "SamplingParams", "GenerateOutput", "StreamDelta"]
