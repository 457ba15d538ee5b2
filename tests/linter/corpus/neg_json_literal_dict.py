# expect: none
import json
from openai import OpenAI

SCHEMA = json.dumps({"type": "object", "properties": {"answer": {"type": "string"}}})

def ask(client: OpenAI, q):
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "Reply as JSON: " + SCHEMA + "\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."},
        {"role": "user", "content": q}])
