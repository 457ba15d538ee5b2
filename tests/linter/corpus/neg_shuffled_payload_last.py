# expect: none
import json
import random
from openai import OpenAI

def rank(client: OpenAI, items):
    random.shuffle(items)
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates."},
        {"role": "user", "content": "Rank these: " + json.dumps(items)}])
