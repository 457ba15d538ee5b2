# expect: KV301
# args: --extend-select KV301
from openai import OpenAI

client = OpenAI()

def ask(q):
    return client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": q}])
