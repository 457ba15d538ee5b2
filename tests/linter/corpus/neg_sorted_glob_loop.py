# expect: none
import glob
from openai import OpenAI

def ask(client: OpenAI, question):
    parts = []
    for path in sorted(glob.glob("kb/*.md")):
        with open(path) as f:
            parts.append(f.read())
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "\n".join(parts)},
        {"role": "user", "content": question}])
