# expect: KV103
from pathlib import Path

from openai import OpenAI

HANDBOOK = Path("handbook.md").read_text()


def ask(client: OpenAI, question: str) -> str:
    prompt = f"Question: {question}\n\nAnswer from this handbook:\n{HANDBOOK}"
    out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
    return out.choices[0].message.content
