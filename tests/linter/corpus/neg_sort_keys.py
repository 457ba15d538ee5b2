# expect: none
import json
from openai import OpenAI

def ask(client: OpenAI, tools, q):
    system = "Tools:\n" + json.dumps(tools, sort_keys=True) + "\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": system}, {"role": "user", "content": q}])
