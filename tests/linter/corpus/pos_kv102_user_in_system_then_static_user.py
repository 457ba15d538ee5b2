# expect: KV102
from openai import OpenAI

def ask(client: OpenAI, customer_id, q):
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Customer: " + customer_id},
        {"role": "user", "content": "Here is our returns policy: items may be returned within thirty days of delivery if unused."},
        {"role": "user", "content": q}])
