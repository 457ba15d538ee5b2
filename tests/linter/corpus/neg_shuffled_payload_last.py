# expect: none
import json
import random
from openai import OpenAI

def rank(client: OpenAI, items):
    random.shuffle(items)
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."},
        {"role": "user", "content": "Rank these: " + json.dumps(items)}])
