# expect: KV202
from openai import OpenAI

REGISTRY = {"search": None, "fetch_url": None, "run_python": None}


def system_prompt(enabled: set[str]) -> str:
    names = set(REGISTRY) & enabled
    return ("You can call these tools: " + ", ".join(names) + ".\n"
            "Call at most one tool per step and explain briefly why you chose it before calling it.")


def step(client: OpenAI, enabled, history, question):
    return client.chat.completions.create(model="gpt-4o", messages=[
        {"role": "system", "content": system_prompt(enabled)}, *history,
        {"role": "user", "content": question}])
