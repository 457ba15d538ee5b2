# expect: none
import json
from openai import OpenAI

SCHEMA = json.dumps({"type": "object", "properties": {"answer": {"type": "string"}}})

def ask(client: OpenAI, q):
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "Reply as JSON: " + SCHEMA + "\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates."},
        {"role": "user", "content": q}])
