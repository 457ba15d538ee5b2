"""radixgate: prompt-aware LLM serving. The SDK lives here; the engine, gateway and linter are subpackages."""

__version__ = "0.1.0"
