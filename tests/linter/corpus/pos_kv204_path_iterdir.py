# expect: KV204
from pathlib import Path
from openai import OpenAI

def ask(client: OpenAI, question):
    context = "\n".join(p.read_text() for p in Path("kb").iterdir())
    return client.chat.completions.create(model="m", messages=[
        {"role": "user", "content": f"Documents:\n{context}\n\nQuestion: {question}"}])
