"""What a request can ask of its output: structured output, tool calls and their parsers, logprobs."""
