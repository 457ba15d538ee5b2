# expect: none
from openai import OpenAI

def ask(client: OpenAI, user_id, q):
    return client.chat.completions.create(model="m", user=user_id, messages=[
        {"role": "system", "content": "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates."},
        {"role": "user", "content": f"[customer {user_id}] {q}"}])
