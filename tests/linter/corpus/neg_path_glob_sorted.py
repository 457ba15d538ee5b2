# expect: none
from pathlib import Path
from openai import OpenAI

def ask(client: OpenAI, question):
    context = "\n".join(p.read_text() for p in sorted(Path("kb").glob("*.md")))
    return client.chat.completions.create(model="m", messages=[
        {"role": "user", "content": f"Documents:\n{context}\n\nQuestion: {question}"}])
