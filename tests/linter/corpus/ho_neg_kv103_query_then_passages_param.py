# expect: none
from openai import OpenAI


def answer(client: OpenAI, query: str, passages: list[str]) -> str:
    joined = "\n---\n".join(passages)
    user = "User question:\n" + query + "\n\nRelevant passages:\n" + joined
    out = client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": "Answer strictly from the passages."},
        {"role": "user", "content": user}])
    return out.choices[0].message.content
