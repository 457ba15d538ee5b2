# expect: none
from datetime import datetime
from openai import OpenAI

def ask(client: OpenAI, user_id, q):
    system = "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates." + f"\nUser: {user_id}. Time: {datetime.now()}."
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": system}, {"role": "user", "content": q}])
