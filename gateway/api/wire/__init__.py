"""Other vendors' wire APIs over the chat path: Anthropic's Messages API and OpenAI's Responses API."""
