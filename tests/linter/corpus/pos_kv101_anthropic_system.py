# expect: KV101
import anthropic
from datetime import datetime

client = anthropic.Anthropic()

def ask(q):
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=512,
        system=f"The current date and time is {datetime.now()}. You are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.",
        messages=[{"role": "user", "content": q}])
