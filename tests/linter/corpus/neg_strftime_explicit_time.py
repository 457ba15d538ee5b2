# expect: none
import time
from openai import OpenAI

RELEASE = (2024, 5, 1, 0, 0, 0, 0, 0, 0)

def ask(client: OpenAI, q):
    stamp = time.strftime("%Y-%m-%d", RELEASE)
    return client.chat.completions.create(model="m", messages=[
        {"role": "system", "content": f"Policy version {stamp}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket."},
        {"role": "user", "content": q}])
