# expect: KV104
import anthropic
from datetime import datetime

client = anthropic.Anthropic()

def ask(q):
    return client.messages.create(model="claude", max_tokens=256,
        system=[{"type": "text", "text": f"Now: {datetime.now()}\nYou are a meticulous support assistant for Acme. Answer in three sentences, cite the policy section, and never invent order numbers or delivery dates. Refunds follow section 4 of the returns policy, shipping questions follow section 7, and anything about accounts, billing or legal matters goes to a human agent with a one-line summary of the ticket.",
                 "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": q}])
