# expect: KV101
import time
from openai import OpenAI

SYSTEM = "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates."
client = OpenAI()

def ask(q):
    prompt = "ts=" + str(time.time()) + "\n" + SYSTEM
    return client.chat.completions.create(model="m", messages=[{"role": "system", "content": prompt},
                                                               {"role": "user", "content": q}])
