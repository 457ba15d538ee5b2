# expect: none
from openai import OpenAI

def ask(client: OpenAI, question):
    return client.chat.completions.create(model="m", messages=[
        {"role": "user", "content": f"{question}\n\nAnswer briefly."}])
