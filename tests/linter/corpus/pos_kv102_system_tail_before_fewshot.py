# expect: KV102
from datetime import datetime
from openai import OpenAI

FEW_SHOT = [
    {"role": "user", "content": "Where is my parcel? I ordered it last week and nothing came."},
    {"role": "assistant", "content": "Could you give me the order number so I can check for you?"},
]

def ask(client: OpenAI, q):
    system = "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates." + f"\nNow: {datetime.now()}"
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": system}, *FEW_SHOT, {"role": "user", "content": q}])
