# expect: KV101
import time
from openai import OpenAI

SYSTEM = "You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."
client = OpenAI()

def ask(q):
    prompt = "ts=" + str(time.time()) + "\n" + SYSTEM
    return client.chat.completions.create(model="m", messages=[{"role": "system", "content": prompt},
                                                               {"role": "user", "content": q}])
