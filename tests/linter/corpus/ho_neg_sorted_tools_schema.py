# expect: none
import json
from openai import OpenAI


def call(client: OpenAI, tool_specs: dict, q: str):
    tools_text = json.dumps([tool_specs[k] for k in sorted(tool_specs)], sort_keys=True, indent=1)
    return client.chat.completions.create(model="gpt-4o", messages=[
        {"role": "system", "content": "Available tools:\n" + tools_text},
        {"role": "user", "content": q}])
